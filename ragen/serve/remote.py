"""The ``remote`` env: an env served by ``ragen serve-env`` (or living in a worker process), used like a local one.

``RemoteEnv`` mirrors what the core reads from an env (instructions, action names and separator, symbol legend,
the episode budget, the expert) from the server's ``/info`` and forwards reset/step/close to it; the core's
bookkeeping (``Env.reset``/``step``) still runs locally, so ``ragen run`` and ``ragen check-env`` treat it as any
env. The budget is the served env's (set it with ``serve-env -o``): prompt and episode must agree with the server.
A lost connection or an env failing on the server raises ``RemoteEnvError``: the rollout drops that episode and
counts it in ``failed_envs``. Every answer is bounded (at most ``MAX_HEADER_BYTES`` of status line and headers and
``MAX_ANSWER_BYTES`` of body, the whole answer within ``timeout_s``, JSON nested at most ``MAX_JSON_DEPTH`` levels)
and checked against its declared type before use: flags are booleans, rewards finite numbers within
``MAX_ABS_REWARD``, texts within ``max_observation_chars``; a server's error message is clipped and stripped of
control characters.
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
import time
from typing import Any, Protocol
from urllib.parse import urlparse

import attrs

from ragen.config.bounded import BoundedReadError, clip, parse_json, read_stream
from ragen.config.fields import AT_LEAST_1
from ragen.contract.env import Env, EnvConfig, Expert, TextSpace, option
from ragen.contract.hookspecs import hookimpl
from ragen.errors import ConfigError, RemoteEnvError
from ragen.serve.net import (
    MAX_ABS_REWARD,
    MAX_ACTION_CHARS,
    MAX_ACTION_NAME_CHARS,
    MAX_ACTION_NAMES,
    MAX_ANSWER_BYTES,
    MAX_OBSERVATION_CHARS,
    TOKEN_ENV,
    CappedResponse,
    HeadTooLarge,
    Watchdog,
    is_loopback,
    redact_url,
)

#: this process's id for the server's per-client cap (``X-Ragen-Client``): every remote env of a trainer is one client
CLIENT_ID = f"{os.getpid()}-{secrets.token_hex(4)}"
BUDGET_KEYS = ("max_turns", "max_actions_per_turn", "max_actions_per_episode", "max_tokens", "response_length")


@attrs.frozen(kw_only=True)
class RemoteConfig(EnvConfig):
    """Where the served env is; its budget fields are replaced by the served env's when the env connects."""

    url: str = option("", "Base URL of a `ragen serve-env` server, e.g. http://127.0.0.1:8765 (printed by serve-env).")
    token: str = option("", f"Shared token the server was started with (--token); empty: ${TOKEN_ENV} or none.")
    timeout_s: float = option(60.0, "Seconds for each request's whole answer (status line, headers and body); a "
                                    "server slower than that fails the episode.",
                              validator=attrs.validators.gt(0))
    max_observation_chars: int = option(MAX_OBSERVATION_CHARS,
                                        "Characters of one observation (and of the instructions) accepted from the "
                                        "server; a longer one fails the episode instead of filling the prompt.",
                                        validator=attrs.validators.ge(1))
    max_connections: int = option(8, "Connections to the server at most, shared by every remote env of this process "
                                  "with the same url and token (more requests at once wait for a free one).",
                                  range=AT_LEAST_1)
    allow_unreachable: bool = option(True, "The served env checks its own budget; the client takes it as is.")


class Transport(Protocol):
    """``call(method, path, body) -> JSON``; raises ``RemoteEnvError`` (lost, env failed) or ``ConfigError``."""

    where: str

    def call(self, method: str, path: str, body: dict | None = None) -> Any: ...

    def close(self) -> None: ...


def raise_for(where: str, status: int, payload: Any) -> None:
    """Map a refused request to the error a local env would have raised."""
    if status < 400:
        return
    message = clip(payload.get("error", payload) if isinstance(payload, dict) else payload)
    if not message:  # an empty body or error: say so, never "answered 502: " with nothing after it
        message = ("no error message (an empty body)" if payload in ("", None)
                   else f"no error message ({clip(repr(payload), 200)})")
    kind = payload.get("kind") if isinstance(payload, dict) else None
    if status == 401:
        raise ConfigError(f"env.options.token: the env server at {where} refused the token ({message})")
    if kind == "config":
        raise ConfigError(f"{where}: {message}")
    raise RemoteEnvError(f"env server {where} answered {status}: {message}")


class _SharedPool:
    """One ``requests`` adapter (a keep-alive connection pool) per server, shared by every transport to it."""

    def __init__(self, adapter: Any):
        self.adapter, self.users = adapter, 0


_POOLS: dict[tuple, _SharedPool] = {}
_POOLS_LOCK = threading.Lock()


class _Exchange(threading.local):
    """The request this thread is making: its watchdog (the deadline of the whole answer) and why its head was
    refused. The pool's connections attach their socket to it (``_deadline_adapter``)."""

    watchdog: Watchdog | None = None
    refused: str | None = None


_EXCHANGE = _Exchange()


@functools.cache
def _deadline_adapter() -> type:
    """``requests``' adapter whose connections put the whole answer (status line, headers and body) under the
    current exchange's deadline and read at most ``MAX_HEADER_BYTES`` of head: ``requests``' own ``timeout`` is per
    socket read, so a server sending one byte of its headers a second held the client forever."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def watched(base: type) -> type:
        class Watched(base):
            response_class = CappedResponse

            def _attach(self) -> None:
                if _EXCHANGE.watchdog is not None and self.sock is not None:
                    _EXCHANGE.watchdog.attach(self.sock)

            def connect(self) -> None:
                super().connect()
                self._attach()

            def request(self, *args: Any, **kwargs: Any) -> None:
                self._attach()  # a kept-alive connection: connect() does not run again
                super().request(*args, **kwargs)

            def getresponse(self) -> Any:
                try:
                    return super().getresponse()
                except HeadTooLarge as exc:
                    _EXCHANGE.refused = str(exc)
                    raise

        return Watched

    class Pool(HTTPConnectionPool):
        ConnectionCls = watched(HTTPConnection)

    class HttpsPool(HTTPSConnectionPool):
        ConnectionCls = watched(HTTPSConnection)

    classes = {"http": Pool, "https": HttpsPool}

    class DeadlineAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = classes

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            manager.pool_classes_by_scheme = classes
            return manager

    return DeadlineAdapter


def _acquire_pool(key: tuple, max_connections: int) -> Any:
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            # block: a request beyond max_connections waits for a free connection instead of opening one more
            pool = _POOLS[key] = _SharedPool(_deadline_adapter()(pool_connections=1, pool_maxsize=max_connections,
                                                                 pool_block=True, max_retries=0))
        pool.users += 1
        return pool.adapter


def _release_pool(key: tuple) -> None:
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            return
        pool.users -= 1
        if pool.users > 0:
            return
        del _POOLS[key]
    pool.adapter.close()  # the last env to this server is closed: so are its connections


class HttpTransport:
    """JSON over HTTP. Every transport of this process to one server (same URL, token and ``max_connections``)
    shares one keep-alive pool of at most ``max_connections`` connections: a rollout of 256 remote envs opens a
    handful of connections, not 256 (waitress stops accepting at 100). The pool closes with its last transport."""

    def __init__(self, url: str, token: str = "", timeout_s: float = 60.0, max_connections: int = 8):
        import requests

        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"env.options.url: expected http://HOST:PORT, got {redact_url(url)!r}")
        self.where, self.base, self.timeout = redact_url(url), url.rstrip("/"), float(timeout_s)
        self._requests = requests
        token = token or os.environ.get(TOKEN_ENV, "")
        self._key = (parsed.scheme, parsed.netloc.lower(), token, int(max_connections))
        adapter = _acquire_pool(self._key, int(max_connections))
        self.session = requests.Session()
        self.session.adapters.clear()  # this session's own adapters would each open their own connections
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.trust_env = not is_loopback(parsed.hostname or "")  # never proxy loopback traffic
        self.session.headers["X-Ragen-Client"] = CLIENT_ID
        self.session.headers["Accept-Encoding"] = "identity"  # the size cap counts the bytes that are parsed
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._closed = False

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        if self._closed:
            raise RemoteEnvError(f"env server {self.where}: this env is closed")
        source = f"env server {self.where} ({method} {path})"
        late = f"{source}: the answer did not arrive whole before its deadline ({self.timeout:g} s)"
        # one deadline for the whole answer, from the moment a connection is ours (waiting for a free one of the
        # pool is not the server's delay): the socket is shut at it, whatever the per-read time-out
        watchdog = _EXCHANGE.watchdog = Watchdog(self.timeout, start=False)
        _EXCHANGE.refused = None
        try:
            try:
                resp = self.session.request(method, self.base + path, json=body, timeout=self.timeout, stream=True)
            except self._requests.Timeout:
                raise RemoteEnvError(late if watchdog.fired else
                                     f"lost the env server at {self.where}: no answer within {self.timeout:g} s"
                                     ) from None
            except self._requests.RequestException as exc:  # refused, reset, DNS: the server is gone
                if _EXCHANGE.refused:
                    raise RemoteEnvError(f"{source}: {_EXCHANGE.refused}") from None
                if watchdog.fired:
                    raise RemoteEnvError(late) from None
                raise RemoteEnvError(f"lost the env server at {self.where}: {type(exc).__name__}") from None
            payload = self._bounded_body(resp, source, watchdog, late)
        finally:
            watchdog.cancel()
            _EXCHANGE.watchdog = None
        raise_for(self.where, resp.status_code, payload)
        if not isinstance(payload, dict):
            raise RemoteEnvError(f"env server {self.where} answered {resp.status_code} without a JSON object")
        return payload

    def _bounded_body(self, resp: Any, source: str, watchdog: Watchdog, late: str) -> Any:
        """The answer's body as JSON: at most ``MAX_ANSWER_BYTES``, whole by the deadline the status line and
        headers were read under; an error answer that is no JSON reads as its clipped text."""
        deadline = watchdog.deadline if watchdog.deadline is not None else time.monotonic() + self.timeout
        try:
            with resp:
                raw = read_stream(lambda n: resp.raw.read1(n, decode_content=False), source=source,
                                  max_bytes=MAX_ANSWER_BYTES, deadline=deadline)
        except BoundedReadError as exc:
            raise RemoteEnvError(late if watchdog.fired else str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - urllib3's read errors: reset, time-out mid-body
            if watchdog.fired:
                raise RemoteEnvError(late) from None
            raise RemoteEnvError(f"lost the env server at {self.where}: {type(exc).__name__}") from None
        try:
            return parse_json(raw, source=source, max_bytes=MAX_ANSWER_BYTES)
        except BoundedReadError as exc:
            if resp.status_code >= 400:
                return clip(raw[:1000].decode("utf-8", "replace"), 200)
            raise RemoteEnvError(str(exc)) from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.session.adapters.clear()  # the shared adapter is closed by its last user, not by Session.close
            self.session.close()
            _release_pool(self._key)


class RemoteExpert(Expert):
    """The served env's expert, asked for the current episode's state."""

    def next_actions(self, env: Env, k: int) -> list[str]:
        return list(_names(env.expert_call(k).get("actions"), "expert actions", env.transport.where,
                           MAX_ACTION_CHARS, env.config.max_observation_chars))

    def rationale(self, env: Env) -> str:
        return _text(env.expert_call(1).get("rationale"), env.config.max_observation_chars, "a rationale",
                     env.transport.where)

    def optimal_actions(self, env: Env) -> set[str] | None:
        if not env.served.get("has_judge"):
            return None
        best = env.judge_call().get("optimal_actions")
        return None if best is None else set(_names(best, "optimal actions", env.transport.where,
                                                    MAX_ACTION_CHARS, env.config.max_observation_chars))


# ---- what the server sends, checked against its declared type before it is used ------------------------------
def _flag(value: Any, name: str, where: str) -> bool:
    """A JSON boolean; ``"no"``, ``0`` or a missing flag is refused, never read by truthiness."""
    if not isinstance(value, bool):
        raise RemoteEnvError(f"env server {where} sent {name}={clip(repr(value), 60)}, not a boolean")
    return value


def _number(value: Any, name: str, where: str) -> float:
    """A real number (not a bool) of at most ``MAX_ABS_REWARD`` in absolute value; None is NaN ("none")."""
    if value is None:
        return float("nan")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RemoteEnvError(f"env server {where} sent a {name} that is not a number ({type(value).__name__})")
    if not abs(value) <= MAX_ABS_REWARD:  # an integer compares exactly (4,000 digits included); NaN, inf: False
        shown = clip(repr(value), 40) if isinstance(value, float) else f"an integer of {len(str(abs(value)))} digits"
        raise RemoteEnvError(f"env server {where} sent a {name} of {shown}, beyond +-{MAX_ABS_REWARD:g}")
    return float(value)


def _text(value: Any, limit: int, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise RemoteEnvError(f"env server {where} sent {what} that is not a string ({type(value).__name__})")
    if len(value) > limit:
        raise RemoteEnvError(f"env server {where} sent {what} of {len(value)} characters, over "
                             f"env.options.max_observation_chars={limit}")
    return value


def _names(value: Any, what: str, where: str, count: int = MAX_ACTION_NAMES,
           chars: int = MAX_ACTION_NAME_CHARS) -> list[str]:
    """A list of at most ``count`` strings of at most ``chars`` characters each (the env's action names: 1,000 of
    200; a split answer or the expert's actions: as many and as long as an action may be)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RemoteEnvError(f"env server {where} sent {what} that are not a list of strings")
    if len(value) > count or any(len(v) > chars for v in value):
        raise RemoteEnvError(f"env server {where} sent over {count} {what} or one over {chars} characters")
    return value


def _object(value: Any, what: str, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RemoteEnvError(f"env server {where} sent {what} that is not an object ({type(value).__name__})")
    return value


class RemoteEnv(Env):
    """An env served over HTTP by `ragen serve-env` (env.options.url=...)."""

    config_cls = RemoteConfig
    name = "remote"
    concurrency = "thread"  # every call waits on a socket or a pipe

    def __init__(self, config: RemoteConfig | None = None, render_mode: str | None = "ansi",
                 transport: Transport | None = None):
        super().__init__(config, render_mode)
        cfg = self.config
        if transport is None:
            if not cfg.url:
                raise ConfigError("env.options.url: the remote env needs the URL that `ragen serve-env NAME` printed")
            transport = HttpTransport(cfg.url, cfg.token, cfg.timeout_s, cfg.max_connections)
        self.transport = transport
        self._episode: str | None = None
        self._answers: dict[tuple[str, str], Any] = {}
        try:
            info = transport.call("GET", "/info")
            self._mirror(info)
        except RemoteEnvError as exc:
            transport.close()
            raise ConfigError(f"env.options.url: cannot use the env server ({exc})") from None

    def _mirror(self, info: dict) -> None:
        where, limit = self.transport.where, self.config.max_observation_chars
        self.served = info
        self.instructions = _text(info.get("instructions", ""), limit, "instructions", where)
        space = _object(info.get("action_space"), "an action space", where)
        names = space.get("action_names")
        self.action_names = None if names is None else _names(names, "action names", where)
        sep = space.get("separator")
        self.action_separator = None if sep is None else _text(sep, MAX_ACTION_NAME_CHARS, "a separator", where)
        max_length = space.get("max_length")
        if max_length is not None and not (isinstance(max_length, int) and not isinstance(max_length, bool)
                                           and 1 <= max_length <= 10 * MAX_OBSERVATION_CHARS):
            raise RemoteEnvError(f"env server {where} sent an action max_length of {clip(repr(max_length), 40)}")
        self.action_space = TextSpace(max_length=int(max_length or 200))
        legend = info.get("symbol_legend")
        if legend is not None:
            legend = {_text(k, MAX_ACTION_NAME_CHARS, "a legend symbol", where):
                      _text(v, limit, "a legend entry", where)
                      for k, v in _object(legend, "a symbol legend", where).items()}
        self.symbol_legend = legend
        self.deterministic = _flag(info.get("deterministic", True), "deterministic", where)
        self.procedural = _flag(info.get("procedural", True), "procedural", where)
        failure = _number(info.get("failure_reward"), "failure_reward", where)
        self.failure_reward = 0.0 if failure != failure else failure
        self.expert = RemoteExpert() if info.get("has_expert") is True else None
        budget = {k: _object(info.get("config"), "a config", where).get(k) for k in BUDGET_KEYS}
        if not all(isinstance(v, int) and v >= 1 for v in budget.values()):
            raise ConfigError(f"env.options.url: {self.transport.where} is not a ragen env server (no episode budget)")
        self.config = attrs.evolve(self.config, **budget)

    # ---- the contract ------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self._drop_episode()
        self._answers.clear()
        body = {"seed": seed, "options": {"split": self.split, "rollout_index": self.rollout_index, **options}}
        data = self.transport.call("POST", "/episodes", body)
        where, limit = self.transport.where, self.config.max_observation_chars
        episode = _text(data.get("episode"), 64, "an episode id", where)
        task_id = data.get("task_id")
        self._episode = episode
        self.task_id = None if task_id is None else _text(task_id, 1000, "a task id", where)
        info = {k: v for k, v in _object(data.get("info"), "an info", where).items()
                if k not in ("task_id", "seed", "split")}
        return _text(data.get("obs"), limit, "an observation", where), info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self._answers.clear()
        data = self._episode_call("step", {"action": action})
        where = self.transport.where
        return (_text(data.get("obs"), self.config.max_observation_chars, "an observation", where),
                _number(data.get("reward"), "reward", where), _flag(data.get("terminated"), "terminated", where),
                _flag(data.get("truncated"), "truncated", where), dict(_object(data.get("info"), "an info", where)))

    def validate_action(self, text: str) -> bool:
        if not self.served.get("custom_validate") or self._episode is None:
            return super().validate_action(text)
        return _flag(self._cached("validate", "action", text).get("valid"), "valid", self.transport.where)

    def split_actions(self, answer: str) -> list[str]:
        if not self.served.get("custom_split") or self._episode is None:
            return super().split_actions(answer)
        return list(_names(self._cached("split", "answer", answer).get("actions"), "actions", self.transport.where,
                           MAX_ACTION_CHARS, MAX_ACTION_CHARS))

    def expert_call(self, k: int) -> dict:
        return self._episode_call("expert", {"k": int(k)})

    def judge_call(self) -> dict:
        """The served state's optimal actions and potential, asked once per state (the rollout asks for both)."""
        return self._cached("judge")

    def potential(self) -> float | None:
        if not self.served.get("has_potential") or self._episode is None:
            return None
        phi = self.judge_call().get("potential")
        return None if phi is None else _number(phi, "potential", self.transport.where)

    def _cached(self, op: str, key: str = "", text: str = "") -> dict:
        """Episode.step_turn asks about each piece more than once per turn: one request per distinct question of the
        current state (``key``: the body's field for ``text``; none for a question about the state itself)."""
        if (op, text) not in self._answers:
            self._answers[(op, text)] = self._episode_call(op, {key: text} if key else {})
        return self._answers[(op, text)]

    def _episode_call(self, op: str, body: dict) -> dict:
        if self._episode is None:
            raise RuntimeError(f"{self.name}: call reset() before {op}")
        return self.transport.call("POST", f"/episodes/{self._episode}/{op}", body)

    def _drop_episode(self) -> None:
        if self._episode is not None:
            eid, self._episode = self._episode, None
            try:
                self.transport.call("DELETE", f"/episodes/{eid}")
            except RemoteEnvError:
                pass  # gone already: the server reaps what it cannot close

    def _close(self) -> None:
        try:
            self._drop_episode()
        finally:
            self.transport.close()


@hookimpl
def register_envs(register):
    """The core's own env: registered by the plugin loader as a default plugin (``DEFAULT_PLUGINS``)."""
    register("remote", RemoteEnv, config=RemoteConfig,
             description="An env served by `ragen serve-env` elsewhere (env.options.url=http://HOST:PORT)")
