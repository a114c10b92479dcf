"""Serving a ragen env as an OpenEnv environment (``ragen serve-env NAME --protocol openenv``, or
``python -m ragen.serve.openenv NAME``: the same launch path; docs/openenv.md).

The app is OpenEnv's own: ``openenv.core.env_server.create_app`` over an OpenEnv ``Environment`` that wraps one ragen
env per session, so the HTTP routes (``/health``, ``/metadata``, ``/schema``, stateless
``/reset``/``/step``/``/state``),
the WebSocket ``/ws`` sessions (reset/step/state/close), the session cap (``CAPACITY_REACHED``) and the idle-session
reaper are the reference implementation's. What this module adds is the mapping and ragen's serving defaults:

* ``RagenAction``: ``{"action": TEXT}``, one primitive action as the model writes it (``"Left"``).
* ``RagenObservation`` (step): ``text`` (the env's observation), ``reward`` (the step's env reward), ``done``
  (``terminated or truncated``) plus ragen's own ``terminated``, ``truncated`` and ``success``; ``metadata`` is the
  step's info (``action_is_valid``, ``action_is_effective`` and the env's keys, made JSON: NaN becomes null).
* ``RagenResetObservation`` (reset): the same, with ``reward`` null and the episode's prompt: ``instructions``,
  ``action_names``, ``action_separator``, ``symbol_legend``; ``metadata`` holds the reset info (``task_id``, ``seed``,
  ``split``...). Reset takes ``seed``, and ragen's ``split``, ``rollout_index`` and env options as extra arguments.
* ``RagenState``: ``episode_id``, ``step_count`` and the ragen episode's ``env``, ``task_id``, ``seed``, ``split``,
  ``done``.

Not mapped (they stay on ragen's own protocol, ``ragen serve-env NAME``, the default): the expert, an env's own
``validate_action``/``split_actions``, and the episode budget (the client's: ``env.options.max_turns`` etc.).
Security as ``ragen serve-env``: loopback unless told otherwise, ``--token`` required as ``Authorization: Bearer`` on
everything but ``GET /health`` (HTTP 401; a WebSocket handshake is refused with 403), a cap on open sessions and
sessions idle for ``episode_timeout_s`` closed.

The env instances come from ``ragen.serve.hosts.LocalHost``, the env pool of ragen's own protocol too: the same
lock for envs not declared concurrency-safe, the same 4xx for an env's failures. Without the extra, importing this
module raises one ``ConfigError`` saying how to install it.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.metadata
import json
import socket
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import attrs

from ragen.contract.env import Env
from ragen.errors import ConfigError, RagenError
from ragen.plugins.components import list_envs
from ragen.plugins.loader import distribution_version, get_registry
from ragen.serve.hosts import EnvFactory, LocalEnv, LocalHost, RequestError, json_safe, weight_of
from ragen.serve.http import (
    CONNECTION_LIMIT,
    MAX_BODY,
    REQUEST_DEADLINE_S,
    check_token,
    token_from_environment,
)
from ragen.serve.net import MAX_ACTION_CHARS, MAX_HEADER_BYTES
from ragen.serve.table import client_cap

try:
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
    from pydantic import Field
except ImportError as _exc:  # the optional extra is not installed
    raise ConfigError(f"serving as OpenEnv needs the openenv extra: pip install 'ragen[openenv]' ({_exc})") from None

#: the OpenEnv minor version this adapter was tested with (the `openenv` extra pins it)
TESTED_OPENENV = "0.10"
MAX_IDLE_ENVS = 64
#: bytes of a request's line and headers (uvicorn's h11 ``max_incomplete_event_size``: a larger head is a 400): the
#: cap ragen's clients put on an answer's head, the same on both sides of the wire
MAX_HEAD_BYTES = MAX_HEADER_BYTES


# ---- the wire models -------------------------------------------------------------------------------------------
class RagenAction(Action):
    """One primitive action of a ragen env, as the model writes it."""

    action: str = Field(..., max_length=MAX_ACTION_CHARS,
                        description="One action as the model writes it, e.g. 'Left' (the reset observation lists the "
                                    "env's action_names when it has them); text the env does not know is an invalid "
                                    "no-op action (metadata.action_is_valid false), not an error")


class RagenObservation(Observation):
    """A ragen env's step: its text observation and ragen's episode flags (reward, done, metadata: OpenEnv's)."""

    text: str = Field(default="", description="The env's observation: the state the model sees")
    terminated: bool = Field(default=False, description="The episode reached an end state (done = terminated or "
                                                        "truncated)")
    truncated: bool = Field(default=False, description="The env cut the episode short (its own step limit)")
    success: bool = Field(default=False, description="The episode is won")


class RagenResetObservation(RagenObservation):
    """The first observation of an episode, with the episode's prompt."""

    instructions: str = Field(default="", description="The task, as ragen's system prompt states it")
    action_names: list[str] | None = Field(default=None, description="The valid actions (case-insensitive); null: "
                                                                     "free text")
    action_separator: str | None = Field(default=None, description="Separator between several actions in one answer")
    symbol_legend: dict[str, str] | None = Field(default=None, description="Meaning of the symbols in the text")


class RagenState(State):
    """OpenEnv's state (episode_id, step_count) and the ragen episode's."""

    env: str = Field(default="", description="The ragen env variant served")
    task_id: str | None = Field(default=None, description="The env's task id of this episode")
    seed: int | None = Field(default=None, description="The episode's seed")
    split: str | None = Field(default=None, description="train, val or test")
    done: bool = Field(default=False, description="The episode is over")


# ---- one session ------------------------------------------------------------------------------------------------
@attrs.frozen
class ServedEnv:
    """The ragen env variant behind the app: its name, its OpenEnv metadata and its env pool (``LocalHost``: idle
    instances kept between sessions, one lock around an env not declared concurrency-safe, env failures mapped to
    the 4xx ``ragen serve-env`` gives them)."""

    name: str
    metadata: EnvironmentMetadata
    host: LocalHost

    def close(self) -> None:
        self.host.close()


class RagenEnvironment(Environment[RagenAction, RagenObservation, RagenState]):
    """One OpenEnv session: one ragen env instance (taken from the pool at the first reset, returned at close)."""

    # every session has its own ragen env; envs not declared concurrency-safe are stepped under one lock (LocalHost)
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: ServedEnv):
        super().__init__()
        self._served = served
        self._env: LocalEnv | None = None
        self._state = RagenState(env=served.name)
        self._closed = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> RagenResetObservation:
        if self._closed:
            raise RequestError(409, "state", "this session was closed (idle for longer than the server's episode "
                                             "time-out)")
        if self._env is None:
            self._env = self._served.host.acquire()
        data = self._env.reset(seed, kwargs)
        env = self._env.env
        self._state = RagenState(episode_id=episode_id or _episode_id(), step_count=0, env=self._served.name,
                                 task_id=None if env.task_id is None else str(env.task_id), seed=env.current_seed,
                                 split=env.split, done=False)
        return RagenResetObservation(
            text=data["obs"], reward=None, done=False, metadata=data["info"], instructions=env.instructions,
            action_names=None if env.action_names is None else [str(a) for a in env.action_names],
            action_separator=env.action_separator, symbol_legend=json_safe(env.symbol_legend) or None)

    def step(self, action: RagenAction, timeout_s: float | None = None, **kwargs: Any) -> RagenObservation:
        if self._closed:
            raise RequestError(409, "state", "this session was closed (idle for longer than the server's episode "
                                             "time-out)")
        if self._env is None or self._state.seed is None:
            raise RequestError(409, "state", "no episode: reset first (HTTP /step is stateless in OpenEnv, a fresh env "
                                             "per request; play episodes over the WebSocket /ws)")
        data = self._env.step(action.action)
        self._state.step_count += 1
        self._state.done = data["terminated"] or data["truncated"]
        return RagenObservation(text=data["obs"], reward=data["reward"], done=self._state.done,
                                terminated=data["terminated"], truncated=data["truncated"],
                                success=bool(data["info"].get("success", False)), metadata=data["info"])

    @property
    def state(self) -> RagenState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return self._served.metadata

    def close(self) -> None:
        self._closed = True
        env, self._env = self._env, None
        if env is not None:
            self._served.host.release(env)


def _episode_id() -> str:
    import secrets

    return secrets.token_hex(8)


def _readme(name: str, description: str, env: Env) -> str:
    cfg = env.config
    lines = [f"# {name} (ragen)", "", description, "", "## Instructions", "", env.instructions or "(none)", ""]
    if env.action_names:
        lines += ["## Actions", "", ", ".join(env.action_names), ""]
    keys = ("max_turns", "max_actions_per_turn", "max_actions_per_episode", "max_tokens")
    budget = {k: getattr(cfg, k) for k in keys}
    lines += ["## Episode budget (ragen's, applied by the client)", "",
              ", ".join(f"{k}={v}" for k, v in budget.items()), "",
              "Served by `ragen serve-env --protocol openenv`; the fields are in docs/openenv.md of ragen."]
    return "\n".join(lines)


# ---- token -------------------------------------------------------------------------------------------------------
class TokenGate:
    """ASGI middleware: ``Authorization: Bearer TOKEN`` on every request but ``GET /health`` (HTTP 401; a WebSocket
    handshake without it is closed before acceptance, which the server answers with 403)."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path", "").rstrip("/") != "/health":
            given = next((v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = json.dumps({"detail": "missing or wrong token (Authorization: Bearer ...)"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


#: a refused request body up to this size is read to its end before the 413 (``Bounds._drain``)
DRAIN_BYTES = 8 * MAX_BODY


class Bounds:
    """ASGI middleware, inside ``TokenGate``: a request body over ``max_body`` bytes is a 413 (announced by its
    ``Content-Length`` or streamed), read before the app sees it; a peer address already holding
    ``max_client_sessions`` WebSocket sessions is answered OpenEnv's ``CAPACITY_REACHED`` frame (the ``openenv``
    client waits for room, as for the server's own cap). A client is its peer address: the server's own session
    cap is global, so one client could hold every session; nothing the client sends chooses its identity. A session
    silent for ``idle_s`` no longer counts (OpenEnv's reaper has closed it, though its WebSocket may stay open)."""

    def __init__(self, app: Any, max_body: int, max_client_sessions: int | None, idle_s: float):
        self.app, self.max_body, self.idle_s = app, int(max_body), float(idle_s)
        self.max_client_sessions = max_client_sessions
        self.sessions: dict[str, dict[int, float]] = {}  # peer -> {connection: when it last sent a message}

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: dict, receive: Callable, send: Callable) -> None:
        length = next((v for k, v in scope.get("headers", ()) if k.lower() == b"content-length"), None)
        if length is not None and (not length.strip().isdigit() or int(length) > self.max_body):
            if length.strip().isdigit() and int(length) <= DRAIN_BYTES:
                await self._drain(receive, int(length))
            return await self._too_large(send)
        parts, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the app sees it as it would
                first = message
                break
            parts.append(message.get("body", b""))
            total += len(parts[-1])
            if total > self.max_body:
                if message.get("more_body", False):
                    await self._drain(receive, DRAIN_BYTES - total)
                return await self._too_large(send)
            if not message.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(parts), "more_body": False}
                break
        given = False

        async def replay() -> dict:
            nonlocal given
            if not given:
                given = True
                return first
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _drain(receive: Callable, budget: int) -> None:
        """Read and drop up to ``budget`` more bytes of a refused body: a server that answers and closes while the
        client is still sending resets the connection, and the client loses the 413 it was sent. A larger body is cut
        (the client may see the reset); the request deadline bounds the time."""
        while budget > 0:
            message = await receive()
            if message["type"] != "http.request":
                return
            budget -= len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _too_large(self, send: Callable) -> None:
        body = json.dumps({"detail": f"request body over {self.max_body} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _websocket(self, scope: dict, receive: Callable, send: Callable) -> None:
        if self.max_client_sessions is None:
            return await self.app(scope, receive, send)
        peer = str((scope.get("client") or ("",))[0])
        mine = self.sessions.setdefault(peer, {})
        now = time.monotonic()
        held = sum(1 for last in mine.values() if now - last <= self.idle_s)
        if held >= self.max_client_sessions:
            if (await receive()).get("type") == "websocket.connect":
                await send({"type": "websocket.accept"})
                message = (f"this client ({peer}) holds {held} sessions, its cap (the server's own cap is shared "
                           "by every client)")
                await send({"type": "websocket.send", "text": json.dumps({"type": "error", "data": {
                    "message": message, "code": "CAPACITY_REACHED"}})})
                await send({"type": "websocket.close", "code": 1000})
            return
        key = id(scope)
        mine[key] = now  # one event loop: no lock needed between the check and the count

        async def active() -> dict:
            message = await receive()
            mine[key] = time.monotonic()
            return message

        try:
            await self.app(scope, active, send)
        finally:
            mine.pop(key, None)
            if not mine:
                self.sessions.pop(peer, None)


def deadline_protocol(deadline_s: float = REQUEST_DEADLINE_S, connection_limit: int = CONNECTION_LIMIT) -> type:
    """uvicorn's h11 protocol with waitress's bounds (``ragen serve-env``'s own protocol): a connection that does
    not send a whole request (line, headers and body) within ``deadline_s`` of its first byte, or of opening, is
    closed; uvicorn alone closes only idle keep-alive connections, so a half-sent request, a trickle or a silent
    connection was held for ever. Past ``connection_limit`` open connections (WebSocket sessions included), a new
    one is closed at once. uvicorn's ``limit_concurrency`` is not used: it answers 503 to every request while the
    connections it counts are open, which half-sent requests would make an outage."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineProtocol(H11Protocol):
        _clock: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > connection_limit:
                transport.close()
                return
            self._start_clock()  # a new connection owes its first request

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_clock()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self._start_clock()
            super().data_received(data)
            self._whole_yet()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # a pipelined request already buffered starts its own clock; an idle connection is uvicorn's to close
            # (timeout_keep_alive)
            if self.conn.their_state is not h11.IDLE or self.conn.trailing_data[0]:
                self._start_clock()
            self._whole_yet()

        def _whole_yet(self) -> None:
            if (self.transport.get_protocol() is not self  # upgraded to a WebSocket: its own time-outs apply
                    or self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)):
                self._stop_clock()

        def _start_clock(self) -> None:
            if self._clock is None:
                self._clock = self.loop.call_later(deadline_s, self._too_slow)

        def _stop_clock(self) -> None:
            if self._clock is not None:
                self._clock.cancel()
                self._clock = None

        def _too_slow(self) -> None:
            self._clock = None
            if self.transport.get_protocol() is self and not self.transport.is_closing():
                self.transport.close()

    return DeadlineProtocol


# ---- the app and its server -------------------------------------------------------------------------------------
def make_openenv_app(name: str, options: dict | None = None, *, token: str | None = None, max_sessions: int = 1024,
                     episode_timeout_s: float = 600.0, max_client_sessions: int | None = None) -> Any:
    """OpenEnv's FastAPI app (``create_app``) serving the ragen env ``name`` with ``options``.

    ``max_sessions``: WebSocket sessions open at once (more are refused with ``CAPACITY_REACHED``), and per peer
    address ``max_client_sessions`` (None: ``client_cap``, half of them for a heavy env); a request body is at most
    ``MAX_BODY`` bytes (``Bounds``);
    ``episode_timeout_s``: a session idle for longer is closed; ``token``: required as ``Authorization: Bearer``.
    ``app.state.served`` holds the env pool (``close()`` it when done)."""
    if max_sessions < 1:
        raise ConfigError(f"--max-episodes: must be >= 1, got {max_sessions}")
    if not episode_timeout_s > 0:
        raise ConfigError(f"--episode-timeout: must be > 0, got {episode_timeout_s}")
    _check_version()
    factory = EnvFactory(name, dict(options or {}))
    probe = factory()  # fails here, before serving, when the env or its options are wrong
    description = next((c.description for c in list_envs() if c.name == name), "") or ""
    # "0" where ragen is not installed (a checkout on PYTHONPATH): OpenEnv's metadata needs a version string
    version = distribution_version("ragen") or "0"
    metadata = EnvironmentMetadata(name=name, description=description or probe.instructions or f"ragen env {name}",
                                   readme_content=_readme(name, description, probe), version=version)
    served = ServedEnv(name, metadata, LocalHost(factory, probe, max_idle=MAX_IDLE_ENVS))
    app = create_app(lambda: RagenEnvironment(served), RagenAction, RagenObservation, env_name=name,
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=int(max_sessions),
                                                          session_timeout=float(episode_timeout_s)),
                     state_cls=RagenState, reset_observation_cls=RagenResetObservation)
    from fastapi.responses import JSONResponse

    async def refused(request: Any, exc: RequestError) -> Any:  # HTTP /reset, /step: a 4xx, never a 500
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    app.add_exception_handler(RequestError, refused)
    per_client = max_client_sessions or client_cap(weight_of(type(probe)), max_sessions)
    app.add_middleware(Bounds, max_body=MAX_BODY, idle_s=float(episode_timeout_s),
                       max_client_sessions=per_client if per_client < max_sessions else None)
    if token:  # added last: outermost, so a request without the token is refused before anything is read
        app.add_middleware(TokenGate, token=token)
    app.state.served = served
    return app


def _check_version() -> None:
    try:
        version = importlib.metadata.version("openenv")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (openenv-core?)"
    if not version.startswith(TESTED_OPENENV + "."):
        warnings.warn(f"openenv {version} is installed; ragen's OpenEnv server was tested with {TESTED_OPENENV}.x "
                      f"(pip install 'ragen[openenv]' installs it)", stacklevel=3)


class OpenEnvServer:
    """uvicorn serving ``app`` on a socket bound at construction (``port=0``: a free one; ``url`` has it), bounded
    as ``ragen serve-env``'s own protocol is (``deadline_protocol``): each request whole within ``request_deadline_s``,
    at most ``connection_limit`` connections besides ``max_sessions`` WebSocket sessions, a head of at most
    ``MAX_HEAD_BYTES``, a WebSocket message of at most ``MAX_BODY``."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *,
                 request_deadline_s: float = REQUEST_DEADLINE_S, connection_limit: int = CONNECTION_LIMIT,
                 max_sessions: int = 1024):
        import uvicorn

        self.app, self.host = app, host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as exc:
            self.sock.close()
            raise ConfigError(f"--host/--port: cannot listen on {host}:{port}: {exc}") from None
        self.port = self.sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
            http=deadline_protocol(float(request_deadline_s), int(connection_limit) + int(max_sessions)),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES, ws_max_size=MAX_BODY,
            timeout_keep_alive=5))  # uvicorn's default, stated: idle keep-alive connections close after 5 s
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve until Ctrl-C (uvicorn's signal handling in the main thread) or ``stop()``."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.close()

    def start(self) -> OpenEnvServer:
        """Serve in a daemon thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self.run, name="ragen-openenv-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the OpenEnv server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    def close(self) -> None:
        served = getattr(getattr(self.app, "state", None), "served", None)
        if served is not None:
            served.close()
        try:
            self.sock.close()
        except OSError:
            pass


def make_openenv_server(name: str, options: dict | None = None, *, host: str = "127.0.0.1", port: int = 0,
                        token: str | None = None, max_sessions: int = 1024, episode_timeout_s: float = 600.0,
                        max_client_sessions: int | None = None, request_deadline_s: float = REQUEST_DEADLINE_S,
                        connection_limit: int = CONNECTION_LIMIT) -> OpenEnvServer:
    """An ``OpenEnvServer`` (not yet running) for the ragen env ``name``: ``.url``, then ``.run()`` or ``.start()``."""
    app = make_openenv_app(name, options, token=token, max_sessions=max_sessions, episode_timeout_s=episode_timeout_s,
                           max_client_sessions=max_client_sessions)
    try:
        return OpenEnvServer(app, host=host, port=port, request_deadline_s=request_deadline_s,
                             connection_limit=connection_limit, max_sessions=max_sessions)
    except ConfigError:
        app.state.served.close()
        raise


def serve(name: str, options: dict | None = None, *, host: str = "127.0.0.1", port: int = 8765,
          token: str | None = None, insecure: bool = False, max_episodes: int = 1024,
          episode_timeout_s: float | None = None, echo: Callable[[str], None] = print) -> None:
    """``ragen serve-env NAME --protocol openenv`` (and this module's ``main``): the token rule of ``serve-env``
    (``check_token``: loopback unless told otherwise, a token where one is needed, ``insecure`` to override), the
    session cap and idle time-out by the env's ``episode_weight``; prints the URL and serves until Ctrl-C."""
    # unknown names fail here with a did-you-mean; the weight is the env class's declaration, so no env is built
    # twice (the server's pool builds the first, which checks the options before anything listens)
    weight = weight_of(get_registry("env").get(name).factory)
    token = check_token(token, name=name, host=host, weight=weight, insecure=insecure)
    timeout = episode_timeout_s if episode_timeout_s is not None else (120.0 if weight.processes > 0 else 600.0)
    server = make_openenv_server(name, options, host=host, port=port, token=token,
                                 max_sessions=min(max_episodes, weight.max_open or max_episodes),
                                 episode_timeout_s=timeout)
    echo(f"serving {name} (OpenEnv protocol) on {server.url} (Ctrl-C stops)")
    try:
        server.run()
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> None:
    """``python -m ragen.serve.openenv NAME [-o KEY=VALUE]... [--host H] [--port P] [--insecure]``: ``ragen serve-env
    NAME --protocol openenv``, with the same options and the same token rule (the token comes from $RAGEN_ENV_TOKEN)."""
    import argparse
    import sys

    import yaml

    parser = argparse.ArgumentParser(prog="python -m ragen.serve.openenv", description=main.__doc__)
    parser.add_argument("name")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", default=None, help=argparse.SUPPRESS)  # refused, as by serve-env
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--episode-timeout", type=float, default=None)
    parser.add_argument("--max-episodes", type=int, default=1024)
    args = parser.parse_args(argv)
    options = {}
    for item in args.option:
        key, sep, raw = item.partition("=")
        if not sep:
            parser.error(f"-o {item!r}: expected KEY=VALUE")
        options[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    try:
        serve(args.name, options, host=args.host, port=args.port, token=token_from_environment(args.token),
              insecure=args.insecure, max_episodes=args.max_episodes, episode_timeout_s=args.episode_timeout,
              echo=lambda line: print(line, flush=True))
    except RagenError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
