"""Env instances as a server holds them in this process, and what a client needs to know about an env.

A *host* hands out env instances for episodes (``acquire``) and takes them back (``release``: kept idle for the next
episode, or closed). Each instance answers the episode operations of the protocol (``reset``, ``step``, ``validate``,
``split``, ``expert``, ``judge``) with JSON-ready dicts and turns every failure into a ``RequestError`` (a 4xx).

``LocalHost`` is the env pool of both protocols (ragen's ``EpisodeTable`` and the OpenEnv adapter): instances in this
process, an idle pool between episodes, and one lock around the calls of an env not declared concurrency-safe
(``Env.concurrency`` "none"; "thread" and "process" envs are called from the server's threads at once).
``ragen.serve.workers.WorkerHost`` holds instances in worker processes instead, behind the same interface.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from ragen.contract.env import Env, EpisodeWeight, Expert
from ragen.errors import ConfigError, RagenError


class RequestError(Exception):
    """A request the server refuses: its HTTP status, kind and message become the JSON error."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind = status, kind


def request_error(exc: BaseException) -> RequestError:
    """The 4xx an exception raised by an env call becomes (config 400, state 409, anything else 422)."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, (ConfigError, RagenError)):
        return RequestError(400, "config", str(exc))
    if isinstance(exc, RuntimeError):
        return RequestError(409, "state", str(exc))
    return RequestError(422, "env", f"{type(exc).__name__}: {exc}")  # the env itself failed: the client drops it


def json_safe(value: Any) -> Any:
    """What an env returns (infos hold numpy scalars, tuples, NaN...) as JSON that every client can read: numpy
    scalars as numbers, tuples and sets as lists, non-finite floats as None, anything else unknown as its string."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
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


def weight_of(env_or_cls: Any) -> EpisodeWeight:
    """The declared ``episode_weight`` of an env (instance or class); anything else is the plugin's config error."""
    weight = getattr(env_or_cls, "episode_weight", EpisodeWeight())
    if not isinstance(weight, EpisodeWeight):
        name = getattr(env_or_cls, "name", env_or_cls)
        raise ConfigError(f"{name}: episode_weight must be a ragen.contract.env.EpisodeWeight, got {weight!r}")
    return weight


def env_info(env: Env) -> dict[str, Any]:
    """What a client needs to mirror ``env``: action space, budget, prompt text, flags, what an episode holds."""
    from ragen.envs.prompt import system_prompt

    cls = type(env)
    return json_safe({
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
        # the state diagnostics (docs/report.md, "State dependence"): asked for over the wire where the env has them
        "has_judge": env.expert is not None and type(env.expert).optimal_actions is not Expert.optimal_actions,
        "has_potential": cls.potential is not Env.potential,
        # the client runs the base-class versions itself; overridden ones are asked for over the wire
        "custom_validate": cls.validate_action is not Env.validate_action,
        "custom_split": cls.split_actions is not Env.split_actions,
        "concurrency": getattr(cls, "concurrency", "none"),
        "episode_weight": attrs.asdict(weight_of(cls)),
    })


class LocalEnv:
    """One env instance in this process; every call maps its failure to a ``RequestError``."""

    def __init__(self, env: Env, lock: threading.Lock | None = None):
        self.env, self._lock = env, lock
        self.idle_since = time.monotonic()

    @property
    def closed(self) -> bool:
        return self.env.closed

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            with self._lock if self._lock is not None else contextlib.nullcontext():
                return fn()
        except Exception as exc:  # noqa: BLE001 - every env failure is the client's 4xx, never the server's 5xx
            raise request_error(exc) from None

    def reset(self, seed: int, options: dict) -> dict:
        obs, info = self._call(lambda: self.env.reset(seed=seed, options=dict(options)))
        return {"obs": json_safe(obs), "info": json_safe(info), "task_id": json_safe(self.env.task_id)}

    def step(self, action: str) -> dict:
        obs, reward, terminated, truncated, info = self._call(lambda: self.env.step(action))
        return {"obs": json_safe(obs), "reward": json_safe(float(reward)), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": json_safe(info)}

    def validate(self, action: str) -> dict:
        return {"valid": bool(self._call(lambda: self.env.validate_action(action)))}

    def split(self, answer: str) -> dict:
        return {"actions": [str(a) for a in self._call(lambda: self.env.split_actions(answer))]}

    def expert(self, k: int) -> dict:
        expert = self.env.expert
        if expert is None:
            raise RequestError(404, "not_found", f"env {self.env.name!r} has no expert")
        actions, rationale = self._call(lambda: (expert.next_actions(self.env, k), expert.rationale(self.env)))
        return {"actions": [str(a) for a in actions], "rationale": str(rationale)}

    def judge(self) -> dict:
        """The current state's optimal actions (None: unknown) and potential (None: none), for the client's
        ``optimal_action_rate`` and potential-based credit."""
        expert = self.env.expert
        best, phi = self._call(lambda: (expert.optimal_actions(self.env) if expert is not None else None,
                                        self.env.potential()))
        return {"optimal_actions": None if best is None else sorted(str(a) for a in best),
                "potential": None if phi is None else json_safe(float(phi))}

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - one env failing to close must not keep the others open
            pass


class LocalHost:
    """The env pool: instances in this process, an idle pool of at most ``max_idle`` between episodes, one lock
    around the calls of an env not declared concurrency-safe (shared by all its instances)."""

    def __init__(self, factory: Callable[[], Env], probe: Env, *, max_idle: int = 64):
        self._factory, self.max_idle = factory, int(max_idle)
        concurrent = getattr(type(probe), "concurrency", "none") != "none"
        self._env_lock: threading.Lock | None = None if concurrent else threading.Lock()
        self.info = env_info(probe)
        self._idle = [LocalEnv(probe, self._env_lock)]
        self._lock = threading.Lock()

    def acquire(self) -> LocalEnv:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return LocalEnv(self._factory(), self._env_lock)
        except Exception as exc:  # noqa: BLE001 - a failing factory is this request's 4xx
            raise request_error(exc) from None

    def release(self, env: LocalEnv, keep: bool = True) -> None:
        """Take ``env`` back: idle for the next episode (``keep``, room in the pool), else closed."""
        with self._lock:
            if keep and len(self._idle) < self.max_idle and not env.closed:
                env.idle_since = time.monotonic()
                self._idle.append(env)
                return
        env.close()

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def close_idle(self, older_than_s: float = 0.0) -> int:
        """Close idle instances unused for ``older_than_s`` seconds (0: all of them); returns how many."""
        now = time.monotonic()
        with self._lock:
            old = [e for e in self._idle if now - e.idle_since >= older_than_s]
            self._idle = [e for e in self._idle if e not in old]
        for env in old:
            env.close()
        return len(old)

    def close(self) -> None:
        self.close_idle()


class EnvFactory:
    """``make_env(name, **options)`` as a picklable callable (a worker process builds its envs with it)."""

    def __init__(self, name: str, options: dict):
        self.name, self.options = name, dict(options)

    def __call__(self) -> Env:
        from ragen.plugins.components import make_env

        return make_env(self.name, **self.options)
