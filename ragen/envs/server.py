"""Serving a registered env over HTTP (``ragen serve-env``): an episode table behind a WSGI app on waitress.

``EpisodeTable`` owns the env instances and answers ``(method, path, body) -> (status, json)``; the WSGI app and
the process workers of ``ragen.rollout.stepping`` both dispatch into it, so the wire protocol is one piece of code.
Every episode has an id; an episode nobody touched for ``episode_timeout_s`` is closed (its env goes back to the
idle pool). Env classes not declared concurrency-safe (``Env.concurrency == "none"``) are stepped under one lock.
Bad requests get a 4xx with ``{"error": ..., "kind": ...}``; an env raising gets 422, never a 5xx.

Protocol (JSON bodies; ``Authorization: Bearer TOKEN`` on everything but ``/health`` when a token is set):
``GET /health``, ``GET /info`` (action space, budget, instructions, system prompt), ``POST /episodes``
``{seed, options}`` -> ``{episode, obs, info}``, ``POST /episodes/ID/step`` ``{action}``, ``POST /episodes/ID/validate``
``{action}``, ``POST /episodes/ID/split`` ``{answer}``, ``POST /episodes/ID/expert`` ``{k}``, ``DELETE /episodes/ID``.
"""

from __future__ import annotations

import hmac
import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import structlog

from ragen.contract.env import Env
from ragen.errors import ConfigError, RagenError

log = structlog.get_logger("ragen")

MAX_BODY = 1 << 20  #: bytes; a larger request body is refused with 413
MAX_ACTION_CHARS = 100_000


class RequestError(Exception):
    """A request the table refuses: its HTTP status, kind and message become the JSON error."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind = status, kind


def jsonable(value: Any) -> Any:
    """Env infos hold numpy scalars, tuples, NaN...: JSON that every client can read (non-finite floats -> None)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def env_info(env: Env) -> dict[str, Any]:
    """What a client needs to mirror ``env``: action space, budget, prompt text, flags."""
    from ragen.envs.prompt import system_prompt

    cls = type(env)
    return jsonable({
        "name": env.name,
        "instructions": env.instructions,
        "system_prompt": system_prompt(env),
        "action_space": {"type": "text", "max_length": getattr(env.action_space, "max_length", None),
                         "action_names": env.action_names, "separator": env.action_separator},
        "symbol_legend": env.symbol_legend,
        "config": attrs.asdict(env.config),
        "deterministic": bool(env.deterministic),
        "procedural": bool(env.procedural),
        "failure_reward": float(getattr(env, "failure_reward", 0.0)),
        "has_expert": env.expert is not None,
        # the client runs the base-class versions itself; overridden ones are asked for over the wire
        "custom_validate": cls.validate_action is not Env.validate_action,
        "custom_split": cls.split_actions is not Env.split_actions,
    })


@attrs.define(eq=False)
class _Episode:
    env: Env
    lock: threading.Lock = attrs.Factory(threading.Lock)
    last_used: float = attrs.Factory(time.monotonic)


class EpisodeTable:
    """The served env's episodes: ids, per-episode locks, idle env pool, abandoned-episode reaping."""

    def __init__(self, factory: Callable[[], Env], *, episode_timeout_s: float = 600.0, max_episodes: int = 1024,
                 max_idle_envs: int = 64):
        self._factory = factory
        self.timeout_s, self.max_episodes, self.max_idle = float(episode_timeout_s), int(max_episodes), int(max_idle_envs)
        self._episodes: dict[str, _Episode] = {}
        self._idle: list[Env] = []
        self._lock = threading.Lock()
        probe = factory()  # fails here, before serving, when the env or its options are wrong
        self.info = env_info(probe)
        concurrent = getattr(type(probe), "concurrency", "none") != "none"
        self._env_lock: threading.Lock | None = None if concurrent else threading.Lock()
        self._idle.append(probe)
        self.reaped = 0

    # ---- episodes ----------------------------------------------------------------------------------------------
    def _new_env(self) -> Env:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._factory()

    def _retire(self, env: Env) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle and not env.closed:
                self._idle.append(env)
                return
        env.close()

    def reap(self) -> int:
        """Close episodes idle for longer than the time-out (a client that died mid-episode); returns how many."""
        now = time.monotonic()
        with self._lock:
            old = [k for k, e in self._episodes.items() if now - e.last_used > self.timeout_s and not e.lock.locked()]
            dropped = [self._episodes.pop(k) for k in old]
        for ep in dropped:
            self._retire(ep.env)
        if dropped:
            self.reaped += len(dropped)
            log.info("env_episodes_reaped", count=len(dropped), timeout_s=self.timeout_s)
        return len(dropped)

    def _get(self, eid: str) -> _Episode:
        with self._lock:
            ep = self._episodes.get(eid)
        if ep is None:
            raise RequestError(404, "not_found", f"no episode {eid!r} (closed, or abandoned for over {self.timeout_s:g} s)")
        ep.last_used = time.monotonic()
        return ep

    def _call(self, ep: _Episode, fn: Callable[[], Any]) -> Any:
        with ep.lock:
            try:
                if self._env_lock is None:
                    return fn()
                with self._env_lock:
                    return fn()
            except RequestError:
                raise
            except (ConfigError, RagenError) as exc:
                raise RequestError(400, "config", str(exc)) from None
            except RuntimeError as exc:
                raise RequestError(409, "state", str(exc)) from None
            except Exception as exc:  # the env itself failed: the client drops this episode
                raise RequestError(422, "env", f"{type(exc).__name__}: {exc}") from None
            finally:
                ep.last_used = time.monotonic()

    def close(self) -> None:
        with self._lock:
            envs = [e.env for e in self._episodes.values()] + self._idle
            self._episodes.clear()
            self._idle = []
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: PERF203 - one env failing to close must not keep the others open
                pass

    # ---- the protocol ------------------------------------------------------------------------------------------
    def dispatch(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """Answer one request; every refusal is a ``RequestError`` turned into its status and JSON error."""
        try:
            return self._route(method, [p for p in path.split("/") if p], body)
        except RequestError as exc:
            return exc.status, {"error": str(exc), "kind": exc.kind}

    def _route(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        if parts == ["health"]:
            return _only(method, "GET"), {"ok": True, "episodes": len(self._episodes)}
        if parts == ["info"]:
            return _only(method, "GET"), self.info
        if parts == ["episodes"]:
            _only(method, "POST")
            return 201, self._reset(_object(body))
        if len(parts) == 2 and parts[0] == "episodes":
            _only(method, "DELETE")
            return 200, self._close(parts[1])
        if len(parts) == 3 and parts[0] == "episodes" and parts[2] in _EPISODE_OPS:
            _only(method, "POST")
            ep = self._get(parts[1])
            return 200, _EPISODE_OPS[parts[2]](self, ep, _object(body))
        raise RequestError(404, "not_found", f"no such endpoint /{'/'.join(parts)}")

    def _reset(self, body: dict) -> dict:
        seed = body.get("seed")
        if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63):
            raise RequestError(400, "request", f"seed: expected an integer >= 0, got {seed!r}")
        options = body.get("options", {})
        if not isinstance(options, dict):
            raise RequestError(400, "request", f"options: expected an object, got {type(options).__name__}")
        self.reap()
        with self._lock:
            if len(self._episodes) >= self.max_episodes:
                raise RequestError(429, "busy", f"{self.max_episodes} episodes are open (max_episodes); close some")
        ep = _Episode(self._new_env())
        try:
            obs, info = self._call(ep, lambda: ep.env.reset(seed=seed, options=dict(options)))
        except RequestError:
            self._retire(ep.env)
            raise
        eid = secrets.token_hex(8)
        with self._lock:
            self._episodes[eid] = ep
        return {"episode": eid, "obs": obs, "info": jsonable(info), "task_id": ep.env.task_id}

    def _step(self, ep: _Episode, body: dict) -> dict:
        action = _text(body, "action")
        obs, reward, terminated, truncated, info = self._call(ep, lambda: ep.env.step(action))
        return {"obs": obs, "reward": jsonable(float(reward)), "terminated": terminated, "truncated": truncated,
                "info": jsonable(info)}

    def _validate(self, ep: _Episode, body: dict) -> dict:
        action = _text(body, "action")
        return {"valid": bool(self._call(ep, lambda: ep.env.validate_action(action)))}

    def _split(self, ep: _Episode, body: dict) -> dict:
        answer = _text(body, "answer")
        return {"actions": [str(a) for a in self._call(ep, lambda: ep.env.split_actions(answer))]}

    def _expert(self, ep: _Episode, body: dict) -> dict:
        k = body.get("k", 1)
        if not (isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= 1000):
            raise RequestError(400, "request", f"k: expected an integer 0..1000, got {k!r}")
        if ep.env.expert is None:
            raise RequestError(404, "not_found", f"env {ep.env.name!r} has no expert")
        expert = ep.env.expert
        actions, rationale = self._call(ep, lambda: (expert.next_actions(ep.env, k), expert.rationale(ep.env)))
        return {"actions": [str(a) for a in actions], "rationale": str(rationale)}

    def _close(self, eid: str) -> dict:
        with self._lock:
            ep = self._episodes.pop(eid, None)
        if ep is None:
            raise RequestError(404, "not_found", f"no episode {eid!r}")
        with ep.lock:
            self._retire(ep.env)
        return {"closed": eid}


_EPISODE_OPS: dict[str, Callable[[EpisodeTable, _Episode, dict], dict]] = {
    "step": EpisodeTable._step,
    "validate": EpisodeTable._validate,
    "split": EpisodeTable._split,
    "expert": EpisodeTable._expert,
}


def _only(method: str, allowed: str) -> int:
    if method != allowed:
        raise RequestError(405, "method", f"method {method} not allowed here; use {allowed}")
    return 200


def _object(body: Any) -> dict:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise RequestError(400, "request", f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _text(body: dict, key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise RequestError(400, "request", f"{key}: expected a string, got {type(value).__name__}")
    if len(value) > MAX_ACTION_CHARS:
        raise RequestError(413, "request", f"{key}: longer than {MAX_ACTION_CHARS} characters")
    return value


# ---- WSGI ---------------------------------------------------------------------------------------------------------
def wsgi_app(table: EpisodeTable, token: str | None = None) -> Callable:
    """The WSGI application over ``table``; ``token`` (when set) is required as ``Authorization: Bearer``."""
    expected = f"Bearer {token}".encode() if token else None

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/")
        try:
            if expected is not None and path.strip("/") != "health":
                given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
                if not hmac.compare_digest(given, expected):
                    raise RequestError(401, "auth", "missing or wrong token (Authorization: Bearer ...)")
            status, payload = table.dispatch(method, path, _read_json(environ))
        except RequestError as exc:
            status, payload = exc.status, {"error": str(exc), "kind": exc.kind}
        data = json.dumps(payload, allow_nan=False).encode()
        start_response(f"{status} {_REASONS.get(status, 'OK')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return app


_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 422: "Unprocessable Entity",
            429: "Too Many Requests"}


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
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RequestError(400, "request", f"the body is not JSON: {exc}") from None


def make_server(name: str, options: dict, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                threads: int = 16, episode_timeout_s: float = 600.0, max_episodes: int = 1024,
                connection_limit: int = 100) -> Any:
    """A waitress server (not yet running) serving env ``name``; ``server.table`` is its ``EpisodeTable``."""
    import waitress

    from ragen.plugins.components import make_env

    table = EpisodeTable(lambda: make_env(name, **options), episode_timeout_s=episode_timeout_s,
                         max_episodes=max_episodes)
    try:
        server = waitress.create_server(wsgi_app(table, token), host=host, port=port, threads=threads,
                                        max_request_body_size=MAX_BODY, channel_timeout=max(60, episode_timeout_s),
                                        connection_limit=connection_limit,
                                        ident="ragen-env", expose_tracebacks=False)
    except OSError as exc:
        table.close()
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port}: {exc}") from None
    server.table = table
    _start_reaper(table)
    return server


def _start_reaper(table: EpisodeTable) -> None:
    """A daemon thread that closes abandoned episodes even when no request comes."""
    def loop() -> None:
        while True:
            time.sleep(max(0.5, min(60.0, table.timeout_s / 4)))
            table.reap()

    threading.Thread(target=loop, name="ragen-env-reaper", daemon=True).start()
