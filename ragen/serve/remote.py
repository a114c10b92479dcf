"""The ``remote`` env: an env served by ``ragen serve-env`` (or living in a worker process), used like a local one.

``RemoteEnv`` mirrors what the core reads from an env (instructions, action names and separator, symbol legend,
the episode budget, the expert) from the server's ``/info`` and forwards reset/step/close to it; the core's
bookkeeping (``Env.reset``/``step``) still runs locally, so ``ragen run`` and ``ragen check-env`` treat it as any
env. The budget is the served env's (set it with ``serve-env -o``): prompt and episode must agree with the server.
A lost connection or an env failing on the server raises ``RemoteEnvError``: the rollout drops that episode and
counts it in ``failed_envs``.
"""

from __future__ import annotations

import os
import secrets
import threading
from typing import Any, Protocol
from urllib.parse import urlparse

import attrs

from ragen.config.fields import AT_LEAST_1
from ragen.contract.env import Env, EnvConfig, Expert, TextSpace, option
from ragen.contract.hookspecs import hookimpl
from ragen.errors import ConfigError, RemoteEnvError
from ragen.serve.net import TOKEN_ENV, is_loopback

#: this process's id for the server's per-client cap (``X-Ragen-Client``): every remote env of a trainer is one client
CLIENT_ID = f"{os.getpid()}-{secrets.token_hex(4)}"
BUDGET_KEYS = ("max_turns", "max_actions_per_turn", "max_actions_per_episode", "max_tokens", "response_length")


@attrs.frozen(kw_only=True)
class RemoteConfig(EnvConfig):
    """Where the served env is; its budget fields are replaced by the served env's when the env connects."""

    url: str = option("", "Base URL of a `ragen serve-env` server, e.g. http://127.0.0.1:8765 (printed by serve-env).")
    token: str = option("", f"Shared token the server was started with (--token); empty: ${TOKEN_ENV} or none.")
    timeout_s: float = option(60.0, "Seconds per request; a server silent for longer fails the episode.",
                              validator=attrs.validators.gt(0))
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
    message = payload.get("error", payload) if isinstance(payload, dict) else payload
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


def _acquire_pool(key: tuple, max_connections: int) -> Any:
    from requests.adapters import HTTPAdapter

    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            # block: a request beyond max_connections waits for a free connection instead of opening one more
            pool = _POOLS[key] = _SharedPool(HTTPAdapter(pool_connections=1, pool_maxsize=max_connections,
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
            raise ConfigError(f"env.options.url: expected http://HOST:PORT, got {url!r}")
        self.where, self.base, self.timeout = url, url.rstrip("/"), float(timeout_s)
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
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._closed = False

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        if self._closed:
            raise RemoteEnvError(f"env server {self.where}: this env is closed")
        try:
            resp = self.session.request(method, self.base + path, json=body, timeout=self.timeout)
        except self._requests.Timeout:
            raise RemoteEnvError(f"lost the env server at {self.where}: no answer within {self.timeout:g} s") from None
        except self._requests.RequestException as exc:  # refused, reset, DNS: the server is gone
            raise RemoteEnvError(f"lost the env server at {self.where}: {type(exc).__name__}") from None
        try:
            payload = resp.json()
        except ValueError:
            payload = resp.text[:200]
        raise_for(self.where, resp.status_code, payload)
        if not isinstance(payload, dict):
            raise RemoteEnvError(f"env server {self.where} answered {resp.status_code} without a JSON object")
        return payload

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.session.adapters.clear()  # the shared adapter is closed by its last user, not by Session.close
            self.session.close()
            _release_pool(self._key)


class RemoteExpert(Expert):
    """The served env's expert, asked for the current episode's state."""

    def next_actions(self, env: Env, k: int) -> list[str]:
        return list(env.expert_call(k)["actions"])

    def rationale(self, env: Env) -> str:
        return str(env.expert_call(1)["rationale"])

    def optimal_actions(self, env: Env) -> set[str] | None:
        if not env.served.get("has_judge"):
            return None
        best = env.judge_call()["optimal_actions"]
        return None if best is None else set(best)


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
        except RemoteEnvError as exc:
            transport.close()
            raise ConfigError(f"env.options.url: cannot use the env server ({exc})") from None
        self._mirror(info)

    def _mirror(self, info: dict) -> None:
        self.served = info
        self.instructions = str(info.get("instructions", ""))
        space = info.get("action_space") or {}
        self.action_names = space.get("action_names")
        self.action_separator = space.get("separator")
        self.action_space = TextSpace(max_length=int(space.get("max_length") or 200))
        self.symbol_legend = info.get("symbol_legend")
        self.deterministic = bool(info.get("deterministic", True))
        self.procedural = bool(info.get("procedural", True))
        self.failure_reward = float(info.get("failure_reward") or 0.0)
        self.expert = RemoteExpert() if info.get("has_expert") else None
        budget = {k: info.get("config", {}).get(k) for k in BUDGET_KEYS}
        if not all(isinstance(v, int) and v >= 1 for v in budget.values()):
            raise ConfigError(f"env.options.url: {self.transport.where} is not a ragen env server (no episode budget)")
        self.config = attrs.evolve(self.config, **budget)

    # ---- the contract ------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self._drop_episode()
        self._answers.clear()
        body = {"seed": seed, "options": {"split": self.split, "rollout_index": self.rollout_index, **options}}
        data = self.transport.call("POST", "/episodes", body)
        self._episode, self.task_id = data["episode"], data.get("task_id")
        info = {k: v for k, v in (data.get("info") or {}).items() if k not in ("task_id", "seed", "split")}
        return data["obs"], info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self._answers.clear()
        data = self._episode_call("step", {"action": action})
        reward = data.get("reward")
        return (data["obs"], float("nan") if reward is None else float(reward), bool(data["terminated"]),
                bool(data["truncated"]), dict(data.get("info") or {}))

    def validate_action(self, text: str) -> bool:
        if not self.served.get("custom_validate") or self._episode is None:
            return super().validate_action(text)
        return bool(self._cached("validate", "action", text)["valid"])

    def split_actions(self, answer: str) -> list[str]:
        if not self.served.get("custom_split") or self._episode is None:
            return super().split_actions(answer)
        return list(self._cached("split", "answer", answer)["actions"])

    def expert_call(self, k: int) -> dict:
        return self._episode_call("expert", {"k": int(k)})

    def judge_call(self) -> dict:
        """The served state's optimal actions and potential, asked once per state (the rollout asks for both)."""
        return self._cached("judge")

    def potential(self) -> float | None:
        if not self.served.get("has_potential") or self._episode is None:
            return None
        phi = self.judge_call()["potential"]
        return None if phi is None else float(phi)

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
