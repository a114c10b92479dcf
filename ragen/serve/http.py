"""ragen's protocol over HTTP (``ragen serve-env``): a plain WSGI app over an ``EpisodeTable``, served by waitress,
and the token rules of every ``serve-env`` (both protocols)."""

from __future__ import annotations

import hmac
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from ragen.config.bounded import BoundedReadError, parse_json
from ragen.contract.env import EpisodeWeight
from ragen.errors import ConfigError, RagenError
from ragen.serve.hosts import EnvFactory, RequestError, json_safe, weight_of
from ragen.serve.net import TOKEN_ENV, is_loopback
from ragen.serve.table import DEFAULT_WORKERS, EpisodeTable, client_cap, one_line

log = structlog.get_logger("ragen")

MAX_BODY = 1 << 20  #: bytes; a larger request body is refused with 413
#: seconds a connection has to send one whole request (headers and body) once it starts one, or from when it opens;
#: slower (a half-sent request, a trickle) is closed, so idle sockets cannot hold the server's connection slots
REQUEST_DEADLINE_S = 10.0
#: open connections at most (waitress's connection_limit); half-sent ones are closed at REQUEST_DEADLINE_S
CONNECTION_LIMIT = 1000


def wsgi_app(table: EpisodeTable, token: str | None = None) -> Callable:
    """The WSGI application over ``table``; ``token`` (when set) is required as ``Authorization: Bearer``.

    A client, for the per-client cap, is the peer's address: something the client cannot choose by a header (the
    ``X-Ragen-Client`` id the ``remote`` env sends names nothing the server trusts; with one shared token, the token
    names no client either)."""
    expected = f"Bearer {token}".encode() if token else None

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/")
        try:
            if expected is not None and path.strip("/") != "health":
                given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
                if not hmac.compare_digest(given, expected):
                    raise RequestError(401, "auth", "missing or wrong token (Authorization: Bearer ...)")
            client = environ.get("REMOTE_ADDR", "")
            status, payload = table.dispatch(method, path, _read_json(environ), client=client)
            data = json.dumps(json_safe(payload), allow_nan=False).encode()
        except RequestError as exc:
            status, data = exc.status, _error_json(exc.kind, one_line(str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug of the server: one logged line and a JSON 500, no traceback
            log.error("env_server_error", path=path, error=f"{type(exc).__name__}: {exc}")
            status, data = 500, _error_json("internal", f"internal error: {type(exc).__name__}")
        start_response(f"{status} {_REASONS.get(status, 'Error')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return app


def _error_json(kind: str, message: str) -> bytes:
    return json.dumps({"error": message, "kind": kind}).encode()


_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 422: "Unprocessable Entity",
            429: "Too Many Requests", 500: "Internal Server Error"}


def _read_json(environ: dict) -> Any:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise RequestError(400, "request", "bad Content-Length") from None
    if length > MAX_BODY:
        raise RequestError(413, "request", f"body over {MAX_BODY} bytes")
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    if not raw.strip():
        return None
    try:  # the bounded reader: not UTF-8, not JSON, NaN, an integer of > 4,300 digits, nested past 64 levels
        return parse_json(raw, source="the body", max_bytes=MAX_BODY)
    except BoundedReadError as exc:
        raise RequestError(400, "request", f"the body is not JSON: {str(exc)[:200]}") from None


def token_from_environment(token_flag: str | None) -> str | None:
    """The token a server requires, from ``$RAGEN_ENV_TOKEN`` only (a command-line token is visible to every user in
    ``ps``, so ``token_flag`` is refused when given); set but empty is refused, never read as "no token"."""
    if token_flag is not None:
        raise RagenError(f"--token: a token on the command line is visible to every user in `ps`; "
                         f"put it in ${TOKEN_ENV} instead")
    token = os.environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        raise RagenError(f"${TOKEN_ENV} is set but empty; set a token "
                         f"(e.g. `export {TOKEN_ENV}=$(openssl rand -hex 16)`) or unset it")
    return token


def check_token(token: str | None, *, name: str, host: str, weight: EpisodeWeight,
                insecure: bool = False) -> str | None:
    """The token to require, or None; refuses an empty token, and no token where one is needed (``insecure``: allowed,
    with a warning): on a host other than loopback, or for an env whose episodes hold a process."""
    if token is not None:
        if not token.strip():
            raise ConfigError(f"token: empty; set a non-empty token "
                              f"(e.g. `export {TOKEN_ENV}=$(openssl rand -hex 16)`)")
        if token != token.strip() or not (token.isascii() and token.isprintable()):
            raise ConfigError("token: use printable ASCII without spaces around it (it travels in an HTTP header)")
        return token
    needs = ([f"it listens on {host} (beyond this machine)"] if not is_loopback(host) else []) + (
        [f"each episode of {name} holds a process (episode_weight)"] if weight.processes > 0 else [])
    if not needs:
        return None
    if not insecure:
        raise ConfigError(f"serving {name} needs a token: {', and '.join(needs)}; set ${TOKEN_ENV} "
                          "(clients send the same), or pass --insecure to serve without one")
    log.warning("env_server_insecure", env=name, reason=", and ".join(needs),
                note="no token: anyone who reaches the port can run episodes")
    return None


def make_server(name: str, options: dict, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                insecure: bool = False, threads: int = 16, workers: int = DEFAULT_WORKERS,
                episode_timeout_s: float | None = None, max_episodes: int = 1024,
                max_client_episodes: int | None = None,
                min_free_mb: float | None = None, connection_limit: int = CONNECTION_LIMIT,
                request_deadline_s: float = REQUEST_DEADLINE_S) -> Any:
    """A waitress server (not yet running) serving env ``name``; ``server.table`` is its ``EpisodeTable``.

    The env is built once here (its options checked, its ``episode_weight`` read) before anything else starts;
    ``check_token`` then decides whether a token is required. ``workers``: processes for an env not declared
    concurrency-safe; ``max_client_episodes`` None: ``client_cap``; the other caps: ``EpisodeTable``.
    ``request_deadline_s``: a connection that does not send a whole request within it is closed (``_Channel``)."""
    import waitress

    factory = EnvFactory(name, options)
    try:
        probe = factory()  # wrong options fail here, before anything listens
    except RagenError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin failing to build its env: one line, no traceback
        raise ConfigError(f"{name}: cannot build the env: {type(exc).__name__}: {exc}") from None
    try:
        token = check_token(token, name=name, host=host, weight=weight_of(type(probe)), insecure=insecure)
    except ConfigError:
        probe.close()
        raise
    weight = weight_of(type(probe))
    table = EpisodeTable(factory, probe=probe, episode_timeout_s=episode_timeout_s, max_episodes=max_episodes,
                         max_client_episodes=client_cap(weight, max_episodes) if max_client_episodes is None
                         else max_client_episodes, min_free_mb=min_free_mb, workers=workers)
    try:
        server = waitress.create_server(wsgi_app(table, token), host=host, port=port, threads=threads,
                                        max_request_body_size=MAX_BODY, channel_timeout=max(60.0, table.timeout_s),
                                        connection_limit=connection_limit, ident="ragen-env", expose_tracebacks=False,
                                        asyncore_use_poll=True)  # poll: more than select's 1,024 descriptors
    except OSError as exc:
        table.close()
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port}: {exc}") from None
    bound_requests(server, request_deadline_s)
    server.table = table
    _start_reaper(table)
    return server


def _deadline_channel(base: type, deadline_s: float) -> type:
    """waitress's channel with a deadline for each request: waitress closes only *idle* connections
    (``channel_timeout``, reset by every byte), so a client sending half a request, or one byte every few seconds,
    held a connection slot for ever and ~100 of them denied service to everyone. This channel is closed when a
    request (or a new connection's first request) is not whole within ``deadline_s``."""

    class Channel(base):
        def __init__(self, *args: Any, **kw: Any):
            super().__init__(*args, **kw)
            self.request_started: float | None = time.monotonic()  # a new connection owes its first request

        def received(self, data: bytes) -> bool:
            if self.request_started is None:
                self.request_started = time.monotonic()
            done = super().received(data)
            if self.request is None:  # every request received so far is whole: the next one starts its own clock
                self.request_started = None
            return done

        def readable(self) -> bool:  # asked on every turn of waitress's loop (at least once a second)
            started = self.request_started
            if started is not None and not self.requests and time.monotonic() - started > deadline_s:
                self.will_close = True  # handle_write closes it on this turn
                return False
            return super().readable()

    return Channel


def bound_requests(server: Any, deadline_s: float) -> None:
    """Give every listening socket of a waitress ``server`` the per-request deadline (``_deadline_channel``)."""
    from waitress.server import BaseWSGIServer

    listeners = [server] if isinstance(server, BaseWSGIServer) else [
        s for s in getattr(server, "map", {}).values() if isinstance(s, BaseWSGIServer)]
    for listener in listeners:
        listener.channel_class = _deadline_channel(type(listener).channel_class, float(deadline_s))


def _start_reaper(table: EpisodeTable) -> None:
    """A daemon thread that closes abandoned episodes even when no request comes; it ends with the table."""
    def loop() -> None:
        while not table.closed.wait(max(0.5, min(60.0, table.timeout_s / 4))):
            table.reap()

    threading.Thread(target=loop, name="ragen-env-reaper", daemon=True).start()
