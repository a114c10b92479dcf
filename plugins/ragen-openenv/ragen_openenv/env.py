"""The ``openenv`` env: an OpenEnv environment server, played over its WebSocket protocol.

OpenEnv (Meta + Hugging Face) serves an env as a FastAPI app: ``GET /schema`` (JSON schemas of the action, the
observation and the state), ``GET /metadata`` (name, description), ``GET /health`` and the WebSocket ``/ws``, where one
connection is one session with its own env instance. Messages are JSON text frames: the client sends
``{"type": "reset", "data": {seed, ...}}``, ``{"type": "step", "data": ACTION}``, ``{"type": "state"}`` and
``{"type": "close"}``; the server answers ``{"type": "observation", "data": {observation, reward, done, metadata}}``,
``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {message, code}}`` (``CAPACITY_REACHED`` when the
server's session cap is reached, ``EXECUTION_ERROR`` when the env raised...). HTTP ``POST /reset`` and ``/step`` are
stateless (a fresh env per request), so episodes run over ``/ws`` only.

This module speaks that protocol with ``websockets`` alone. What OpenEnv does not standardise is an option:
which action field carries the model's text and which observation field is the text the model sees (defaults read
from ``/schema``), the instructions (default: the reset observation's ``instructions`` field, else ``/metadata``'s
description), the action names, the success key and the episode budget. OpenEnv has one ``done`` flag: it is
``terminated`` unless the observation has its own ``terminated``/``truncated`` booleans (ragen's OpenEnv server sends
them). A lost connection, a silent server or an error frame raises ``OpenEnvError``: the rollout drops that episode
and counts it in ``rollout/failed_envs``, as for any env failure.

Nothing the server sends is trusted (docs/security.md): ``/schema`` and ``/metadata`` are read within ``timeout_s``
for the whole answer and at most ``MAX_ANSWER_BYTES``, a frame is at most that size and nested at most
``MAX_JSON_DEPTH`` levels, and each answer is checked against its declared type before use (``done`` and the info
flags are booleans, a reward a finite number within ``MAX_ABS_REWARD``, texts within ``max_observation_chars``,
action names bounded); a server's error message is clipped and stripped of control characters before it is logged.

Sessions: an instance holds one session while its episode is open, from ``reset`` to the episode's end, whoever ends it
(the server's ``done``, or ragen's budget through ``end_episode``), so a pool of instances holds no more sessions than
it has episodes open. A server at its cap (``CAPACITY_REACHED``, which carries ``max_sessions``) is waited for, within
``timeout_s``, while this process holds none of its sessions; while it holds some, the reset raises ``EnvBusy`` at once
and the rollout starts that episode when one of its own ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any
from urllib.parse import urlparse, urlunparse

import attrs

from ragen import TOKEN_ENV, ConfigError, Env, EnvConfig, EnvError, option
from ragen.config.bounded import BoundedReadError, clip, parse_json
from ragen.errors import EnvBusy
from ragen.serve.net import (
    MAX_ABS_REWARD,
    MAX_ACTION_NAME_CHARS,
    MAX_ACTION_NAMES,
    MAX_ANSWER_BYTES,
    MAX_OBSERVATION_CHARS,
    get_bounded,
    is_loopback,
    redact_url,
)

#: field names preferred when a schema has several text fields (first match wins)
ACTION_FIELDS = ("action", "message", "text", "command", "content", "code", "answer")
OBSERVATION_FIELDS = ("text", "observation", "prompt", "message", "content", "output", "state", "stdout")
#: the observation keys that carry the prompt of the episode (sent at reset by ragen's OpenEnv server)
PROMPT_KEYS = ("instructions", "action_names", "action_separator", "symbol_legend")
#: error codes after which the server closes the connection (OpenEnv's WSErrorCode)
FATAL_CODES = ("CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR")


class OpenEnvError(EnvError, RuntimeError):
    """The OpenEnv server was lost, stayed silent, refused the session or answered an error: the rollout drops the
    episode and counts it (``rollout/failed_envs``, and ``failed/<code>`` by the error frame's code)."""

    def __init__(self, message: str, code: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code, self.details = code, dict(details or {})


class OpenEnvBusy(OpenEnvError, EnvBusy):
    """The server is at its session cap and this process holds some of its sessions: the rollout waits for one of
    its own episodes to end before it starts this one."""


class ServerSessions:
    """The sessions this process holds on one OpenEnv server (every ``openenv`` instance with that URL), and the
    server's cap as its last ``CAPACITY_REACHED`` gave it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = 0
        self.cap: int | None = None

    def opened(self) -> None:
        with self.lock:
            self.held += 1

    def closed(self) -> None:
        with self.lock:
            self.held = max(self.held - 1, 0)


_SERVERS: dict[str, ServerSessions] = {}
_SERVERS_LOCK = threading.Lock()


def server_sessions(ws_url: str) -> ServerSessions:
    """The one ``ServerSessions`` of this process for ``ws_url``."""
    with _SERVERS_LOCK:
        return _SERVERS.setdefault(ws_url, ServerSessions())


def _names(value: Any) -> tuple[str, ...]:
    """``action_names`` as given: a comma-separated string or a YAML list."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, (list, tuple)):
        return tuple(str(p).strip() for p in value if str(p).strip())
    raise ConfigError(f"action_names: expected a comma-separated string or a list, got {value!r}")


@attrs.frozen(kw_only=True)
class OpenEnvConfig(EnvConfig):
    """Where the OpenEnv server is and how its actions and observations map onto ragen's text."""

    url: str = option("", "Base URL of the OpenEnv server, e.g. http://127.0.0.1:8000 (ws:// and https:// work too).")
    token: str = option("", f"Sent as `Authorization: Bearer TOKEN` on every request; empty: ${TOKEN_ENV} or none.")
    action_field: str = option("", "Action field that carries the model's text; empty: the one string field of the "
                                   "action schema (GET /schema), or the first of action, message, text, command...")
    observation_field: str = option("", "Observation field shown to the model; empty: the one string field of the "
                                        "observation schema, or the first of text, observation, prompt, message...")
    instructions: str = option("", "Task text of the system prompt; empty: the reset observation's `instructions` "
                                   "field when the server sends one, else the server's /metadata description.")
    action_names: Any = option("", "Valid actions, comma-separated or a list (a case-insensitive match is enforced and "
                                   "listed in the prompt); empty: the reset observation's `action_names`, else free "
                                   "text.",
                               converter=_names)
    action_separator: str = option("auto", "Separator between several actions in one answer; 'auto': the reset "
                                           "observation's `action_separator` when sent, else '||'; 'none': one per "
                                           "turn.")
    success_key: str = option("success", "Observation field (or metadata key) that is true when the episode is won; "
                                         "absent: never a success.")
    procedural: bool = option(False, "Different seeds give different initial observations (check-env then demands it).")
    pass_split: bool = option(True, "Send ragen's split and rollout_index with each reset (envs that do not take them "
                                    "never see them: OpenEnv passes only the arguments reset() declares).")
    timeout_s: float = option(60.0, "Seconds to connect, for each whole answer (/schema, a frame), and to wait for a "
                                    "server full of other clients' sessions; a server slower (or full) for longer "
                                    "fails the episode.",
                              validator=attrs.validators.gt(0))
    max_observation_chars: int = option(MAX_OBSERVATION_CHARS,
                                        "Characters of one observation (and of the instructions) accepted from the "
                                        "server; a longer one fails the episode instead of filling the prompt.",
                                        validator=attrs.validators.ge(1))
    allow_unreachable: bool = option(True, "The served env's own rules decide what is solvable; any budget is "
                                           "accepted.")


def endpoints(url: str) -> tuple[str, str]:
    """``(http_base, ws_url)`` of a server given as http(s):// or ws(s)://, path prefix kept."""
    parsed = urlparse(url.strip())
    schemes = {"http": ("http", "ws"), "https": ("https", "wss"), "ws": ("http", "ws"), "wss": ("https", "wss")}
    if parsed.scheme not in schemes or not parsed.netloc:
        raise ConfigError(f"env.options.url: expected http://HOST:PORT (or https, ws, wss), got {redact_url(url)!r}")
    http, ws = schemes[parsed.scheme]
    path = parsed.path.rstrip("/")
    if path.endswith("/ws"):
        path = path[:-3]
    netloc = parsed.netloc.rpartition("@")[2]  # credentials travel as the token, never in a URL that gets printed
    return (urlunparse((http, netloc, path, "", "", "")),
            urlunparse((ws, netloc, path + "/ws", "", "", "")))


def _is_text(prop: Any) -> bool:
    if not isinstance(prop, dict):
        return False
    if prop.get("type") == "string":
        return True
    return any(isinstance(p, dict) and p.get("type") == "string" for p in prop.get("anyOf", ()))


def pick_field(schema: dict, preferred: tuple[str, ...], what: str) -> str:
    """The property of ``schema`` that carries text: the only string one (required ones first), else a preferred
    name."""
    props = schema.get("properties") or {}
    skip = {"metadata", "reward", "done"}
    texts = [k for k, v in props.items() if k not in skip and _is_text(v)]
    required = [k for k in texts if k in (schema.get("required") or ())]
    for group in (required, texts):
        if len(group) == 1:
            return group[0]
    for name in preferred:
        if name in texts:
            return name
    option_name = f"{what}_field"
    if not texts:
        raise ConfigError(f"env.options.{option_name}: the server's {what} schema has no string field "
                          f"(fields: {', '.join(props) or 'none'}); name the field that carries the text")
    raise ConfigError(f"env.options.{option_name}: the server's {what} schema has several string fields "
                      f"({', '.join(texts)}); name the one that carries the text")


class Connection:
    """One OpenEnv session: a WebSocket to ``/ws`` sending one message and reading its answer at a time."""

    def __init__(self, ws_url: str, token: str, timeout_s: float):
        from websockets.sync.client import connect

        self.where = ws_url
        self.timeout = timeout_s
        kwargs: dict[str, Any] = {"open_timeout": timeout_s, "max_size": MAX_ANSWER_BYTES,
                                  "additional_headers": {"Authorization": f"Bearer {token}"} if token else None}
        if is_loopback(urlparse(ws_url).hostname or ""):
            kwargs["proxy"] = None  # never send loopback traffic through a proxy from the environment
        self._stack = contextlib.ExitStack()  # the connection is a context manager held across calls (websockets)
        try:
            self.ws = self._stack.enter_context(connect(ws_url, **kwargs))
        except Exception as exc:  # refused, DNS, handshake rejected (a wrong token: 401/403), time-out
            raise OpenEnvError(f"cannot open an OpenEnv session at {ws_url}: {_why(exc)}") from None

    def call(self, message: dict) -> dict:
        """Send ``message``; return the answer's ``data``. Raises ``OpenEnvError`` (error frame, lost, silent)."""
        from websockets.exceptions import ConnectionClosed

        try:
            try:
                self.ws.send(json.dumps(message))
            except ConnectionClosed:
                pass  # a refused session sends its error frame and closes: read the frame below
            raw = self.ws.recv(timeout=self.timeout)
        except TimeoutError:
            self.close()
            raise OpenEnvError(f"lost the OpenEnv server at {self.where}: no answer within {self.timeout:g} s"
                               ) from None
        except Exception as exc:  # ConnectionClosed, OSError
            self.close()
            raise OpenEnvError(f"lost the OpenEnv server at {self.where}: {_why(exc)}") from None
        try:
            answer = parse_json(raw if isinstance(raw, (str, bytes)) else b"", source=f"a frame from {self.where}",
                                max_bytes=MAX_ANSWER_BYTES)
        except BoundedReadError as exc:
            self.close()
            raise OpenEnvError(f"OpenEnv server {self.where} answered a frame that is not bounded JSON ({exc})"
                               ) from None
        if not isinstance(answer, dict):
            raise OpenEnvError(f"OpenEnv server {self.where} answered {type(answer).__name__}, not an object")
        data = answer.get("data")
        if answer.get("type") == "error":
            fields = data if isinstance(data, dict) else {}
            code = clip(fields.get("code") or "UNKNOWN", 40)
            if code in FATAL_CODES:
                self.close()
            message = clip(fields.get("message") or "")
            missing = [f"a {key}" for key in ("code", "message") if not fields.get(key)]
            if missing:  # say what came, never "UNKNOWN: " with nothing after it
                message = (f"{message}; " if message else "") + (
                    f"an error frame without {' or '.join(missing)}: "
                    f"{clip(json.dumps(answer, ensure_ascii=False, default=str), 200)}")
            raise OpenEnvError(f"OpenEnv server {self.where} answered {code}: {message}", code=code, details=fields)
        if not isinstance(data, dict):
            raise OpenEnvError(f"OpenEnv server {self.where} answered a {answer.get('type')!r} frame without data")
        return data

    def close(self, polite: bool = False) -> None:
        ws, self.ws = getattr(self, "ws", None), None
        if ws is None:
            return
        try:
            if polite:
                ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - gone already
            pass
        try:
            self._stack.close()
        except Exception:  # noqa: BLE001 - gone already
            pass


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {clip(text)}" if text else type(exc).__name__


def get_json(base: str, path: str, token: str, timeout_s: float) -> Any:
    """``GET base+path`` as JSON, bounded (``ragen.serve.net.get_bounded``: ``timeout_s`` for the whole answer, at
    most ``MAX_ANSWER_BYTES``); raises ``ConfigError`` naming the URL and what went wrong."""
    url = base + path
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        status, data = get_bounded(url, headers=headers, timeout_s=timeout_s, source=f"GET {url}",
                                   use_proxy=not is_loopback(urlparse(base).hostname or ""))
    except BoundedReadError as exc:
        raise ConfigError(f"env.options.url: cannot use the OpenEnv server ({exc})") from None
    if status >= 400:
        hint = " (env.options.token)" if status in (401, 403) else ""
        raise ConfigError(f"env.options.url: GET {url} answered {status}{hint}")
    return data


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# ---- what the server sends, checked against its declared type before it is used ------------------------------
# (self-contained: each takes the value and the server's address and returns the checked value or raises)
def _shown(value: Any) -> str:
    return clip(repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a huge integer", 60)


def _reward(value: Any, where: str = "the OpenEnv server") -> float:
    """OpenEnv rewards are optional: no reward is 0.0; otherwise a real number (not a bool) of at most
    ``MAX_ABS_REWARD`` in absolute value."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OpenEnvError(f"{where} sent a reward that is not a number: {_shown(value)}")
    if not abs(value) <= MAX_ABS_REWARD:  # an integer compares exactly; NaN and infinities compare False
        raise OpenEnvError(f"{where} sent a reward of {_shown(value)}, beyond +-{MAX_ABS_REWARD:g}")
    return float(value)


def _flag(value: Any, name: str, where: str, default: bool | None = None) -> bool | None:
    """A boolean field: absent is ``default``; anything but a JSON boolean (``"no"``, ``0``) is refused, never
    read by truthiness."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise OpenEnvError(f"{where} sent {name}={_shown(value)}, not a boolean")
    return value


def _bounded_text(value: Any, limit: int, what: str, where: str) -> str:
    """``value`` as the model's text, at most ``limit`` characters (``max_observation_chars``)."""
    text = _text(value)
    if len(text) > limit:
        raise OpenEnvError(f"{where} sent {what} of {len(text)} characters, over "
                           f"env.options.max_observation_chars={limit}")
    return text


def _sent_names(value: Any, where: str) -> tuple[str, ...]:
    """Action names the server sends: at most ``MAX_ACTION_NAMES``, each at most ``MAX_ACTION_NAME_CHARS``."""
    if value is None or value == "" or value == []:
        return ()
    if isinstance(value, str) and len(value) > MAX_ACTION_NAMES * (MAX_ACTION_NAME_CHARS + 1):
        raise OpenEnvError(f"{where} sent action_names of {len(value)} characters; refused")
    if not isinstance(value, (str, list)):
        raise OpenEnvError(f"{where} sent action_names that are neither a list nor a string: {_shown(value)}")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise OpenEnvError(f"{where} sent action_names that are not all strings")
    names = _names(value[: MAX_ACTION_NAMES + 1] if isinstance(value, list) else value)
    if len(names) > MAX_ACTION_NAMES or any(len(n) > MAX_ACTION_NAME_CHARS for n in names):
        raise OpenEnvError(f"{where} sent over {MAX_ACTION_NAMES} action names or one over "
                           f"{MAX_ACTION_NAME_CHARS} characters; refused")
    return names


class OpenEnvEnv(Env):
    """Any OpenEnv environment server, over its WebSocket protocol (env.options.url=...)."""

    config_cls = OpenEnvConfig
    name = "openenv"
    concurrency = "thread"  # every call waits on a socket
    deterministic = False  # nothing says an OpenEnv env is; the checker then does not demand expert wins

    def __init__(self, config: OpenEnvConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        if not cfg.url:
            raise ConfigError("env.options.url: the openenv env needs the URL of an OpenEnv server (http://HOST:PORT)")
        self.http_base, self.ws_url = endpoints(cfg.url)
        self.token = cfg.token or os.environ.get(TOKEN_ENV, "")
        schema = get_json(self.http_base, "/schema", self.token, cfg.timeout_s)
        if not (isinstance(schema, dict) and isinstance(schema.get("action"), dict)
                and isinstance(schema.get("observation"), dict)):
            raise ConfigError(f"env.options.url: {self.http_base}/schema is not an OpenEnv schema "
                              "(no action/observation)")
        self.schema = schema
        self.action_field = cfg.action_field or pick_field(schema["action"], ACTION_FIELDS, "action")
        self.observation_field = cfg.observation_field or pick_field(schema["observation"], OBSERVATION_FIELDS,
                                                                     "observation")
        others = [k for k in schema["action"].get("required") or () if k != self.action_field]
        if others:
            raise ConfigError(f"env.options.action_field: the server's actions also require {', '.join(others)}; "
                              f"ragen sends one text field ({self.action_field})")
        self.description = ""
        if not cfg.instructions:
            try:
                meta = get_json(self.http_base, "/metadata", self.token, cfg.timeout_s)
                description = meta.get("description") if isinstance(meta, dict) else None
                self.description = description if isinstance(description, str) else ""
            except ConfigError:
                self.description = ""  # /metadata is optional in OpenEnv; instructions stay empty
            if len(self.description) > cfg.max_observation_chars:
                raise ConfigError(f"env.options.url: {self.http_base}/metadata sent a description of "
                                  f"{len(self.description)} characters, over env.options.max_observation_chars="
                                  f"{cfg.max_observation_chars}; set env.options.instructions")
        self.procedural = bool(cfg.procedural)
        self._conn: Connection | None = None
        self._sessions = server_sessions(self.ws_url)
        self._holding = False  # this instance's session is counted in self._sessions.held
        self._apply_prompt({})

    # ---- the prompt: options first, then what the server sends at reset, then defaults -------------------------
    def _apply_prompt(self, sent: dict) -> None:
        cfg = self.config
        sent_instructions = sent.get("instructions")
        if isinstance(sent_instructions, str):
            _bounded_text(sent_instructions, cfg.max_observation_chars, "instructions", self.ws_url)
        self.instructions = cfg.instructions or (sent_instructions if isinstance(sent_instructions, str)
                                                 else self.description)
        names = cfg.action_names or _sent_names(sent.get("action_names"), self.ws_url)
        self.action_names = list(names) or None
        sep = cfg.action_separator.strip()
        if sep.lower() == "auto":
            sent_sep = sent.get("action_separator", "||")
            fits = isinstance(sent_sep, str) and 0 < len(sent_sep) <= MAX_ACTION_NAME_CHARS
            self.action_separator = sent_sep if fits else None
        else:
            self.action_separator = None if sep.lower() in ("none", "") else sep
        legend = sent.get("symbol_legend")
        if isinstance(legend, dict) and legend:
            _bounded_text(legend, cfg.max_observation_chars, "a symbol legend", self.ws_url)
        self.symbol_legend = ({str(k): str(v) for k, v in legend.items()} if isinstance(legend, dict) and legend
                              else None)

    # ---- the contract ------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self._drop()
        data: dict[str, Any] = {"seed": seed}
        if self.config.pass_split:
            data.update(split=self.split, rollout_index=self.rollout_index)
        data.update(options)
        try:
            answer = self._open_session(data)
            obs, metadata = self._parts(answer)
            text = self._obs_text(obs)
        except BaseException:
            self._drop()  # a failed reset holds no session
            raise
        self._apply_prompt({k: obs[k] for k in PROMPT_KEYS if k in obs})
        task_id = metadata.get("task_id", obs.get("task_id"))
        self.task_id = clip(task_id, 200) if task_id is not None else f"openenv/s{seed}"
        info = {k: v for k, v in metadata.items() if k not in ("task_id", "seed", "split")}
        return text, info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._conn is None or self._conn.ws is None:
            raise OpenEnvError(f"the OpenEnv session at {self.ws_url} is gone; the episode cannot go on")
        answer = self._conn.call({"type": "step", "data": {self.action_field: action}})
        obs, metadata = self._parts(answer)
        where = f"OpenEnv server {self.ws_url}"
        done = _flag(answer.get("done"), "done", where, default=False)
        terminated = _flag(obs.get("terminated"), "terminated", where)
        truncated = _flag(obs.get("truncated"), "truncated", where)
        if terminated is not None and truncated is not None:
            done = done or terminated or truncated
        else:
            terminated, truncated = done, False
        info = dict(metadata)
        key = self.config.success_key
        won = obs.get(key, metadata.get(key, False)) if key else False
        info["success"] = _flag(won, key or "success", where, default=False)
        info["action_is_valid"] = _flag(metadata.get("action_is_valid"), "action_is_valid", where, default=True)
        info["action_is_effective"] = _flag(metadata.get("action_is_effective"), "action_is_effective", where,
                                            default=True)
        text, reward = self._obs_text(obs), _reward(answer.get("reward"), where)
        if terminated or truncated:
            self._drop()  # the episode is over: free the server's session slot now, not at the next reset
        return text, reward, bool(terminated), bool(truncated), info

    def _parts(self, answer: dict) -> tuple[dict, dict]:
        obs = answer.get("observation")
        if not isinstance(obs, dict):
            raise OpenEnvError(f"OpenEnv server {self.ws_url} sent an observation that is not an object")
        metadata = answer.get("metadata") or obs.get("metadata") or {}
        return obs, dict(metadata) if isinstance(metadata, dict) else {}

    def _obs_text(self, obs: dict) -> str:
        if self.observation_field not in obs:
            raise OpenEnvError(f"the observation has no field {self.observation_field!r} "
                               f"(fields: {clip(', '.join(obs))}); set env.options.observation_field")
        return _bounded_text(obs[self.observation_field], self.config.max_observation_chars, "an observation",
                             f"OpenEnv server {self.ws_url}")

    def state(self) -> dict:
        """The server's ``state`` of the current session (OpenEnv's State: episode_id, step_count, env fields)."""
        if self._conn is None or self._conn.ws is None:
            raise RuntimeError(f"{self.name}: no open session (before reset, or the episode is over)")
        return self._conn.call({"type": "state"})

    def _open_session(self, data: dict) -> dict:
        """Open a session and reset it; the reset's answer. A server at its cap is retried until ``timeout_s`` has
        passed while this process holds none of its sessions (someone else's episodes, or ours still closing); while
        it holds some, ``OpenEnvBusy`` is raised at once: waiting here would wait for episodes that this process
        itself must play on."""
        cfg = self.config
        deadline, delay = time.monotonic() + cfg.timeout_s, 0.05
        while True:
            self._conn = Connection(self.ws_url, self.token, cfg.timeout_s)
            try:
                answer = self._conn.call({"type": "reset", "data": data})
            except OpenEnvError as exc:
                if exc.code != "CAPACITY_REACHED":
                    raise
                self._drop()
                cap = exc.details.get("max_sessions")
                if isinstance(cap, int) and not isinstance(cap, bool):
                    self._sessions.cap = cap
                held, cap_text = self._sessions.held, f" (cap {self._sessions.cap})" if self._sessions.cap else ""
                if held:
                    raise OpenEnvBusy(f"{exc}{cap_text}; {held} of its sessions are this process's episodes",
                                      code=exc.code, details=exc.details) from None
                if time.monotonic() + delay > deadline:
                    raise OpenEnvError(f"{exc}{cap_text}; still full after {cfg.timeout_s:g} s (env.options.timeout_s)",
                                       code=exc.code, details=exc.details) from None
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
                continue
            self._holding = True
            self._sessions.opened()
            return answer

    def end_episode(self) -> None:
        """ragen ended the episode (its budget, the context cap, a failure): free the server's session now."""
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if self._holding:
            self._holding = False
            self._sessions.closed()
        if conn is not None:
            conn.close(polite=True)

    def _close(self) -> None:
        self._drop()

