"""Env instances as ``ragen serve-env`` holds them: in this process, or in worker processes.

A *host* hands out env instances for episodes (``acquire``) and takes them back (``release``: kept idle for the next
episode, or closed). Each instance answers the episode operations of the protocol (``reset``, ``step``, ``validate``,
``split``, ``expert``) with JSON-ready dicts and turns every failure into a ``RequestError`` (a 4xx).

* ``LocalHost``: instances in this process. An env declared concurrency-safe (``Env.concurrency`` "thread" or
  "process") is called from the server's threads at once; any other under one lock (the in-process fallback).
* ``WorkerHost``: instances in ``workers`` worker processes, for envs not declared concurrency-safe ("none"). Each
  worker calls one env at a time (module-level state stays safe), the workers run side by side, and a new episode
  goes to the least busy worker: one slow step stalls only the episodes of its own worker, not every client.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import structlog

from ragen.contract.env import Env, EpisodeWeight, Expert
from ragen.errors import ConfigError, RagenError

log = structlog.get_logger("ragen")

#: seconds a worker process may take to start and build its first env
WORKER_START_S = 300.0


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
        return {"obs": jsonable(obs), "info": jsonable(info), "task_id": jsonable(self.env.task_id)}

    def step(self, action: str) -> dict:
        obs, reward, terminated, truncated, info = self._call(lambda: self.env.step(action))
        return {"obs": jsonable(obs), "reward": jsonable(float(reward)), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": jsonable(info)}

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
                "potential": None if phi is None else jsonable(float(phi))}

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - one env failing to close must not keep the others open
            pass


class LocalHost:
    """Env instances in this process, an idle pool of at most ``max_idle`` between episodes."""

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


# ---- worker processes ----------------------------------------------------------------------------------------------
class EnvFactory:
    """``make_env(name, **options)`` as a picklable callable (a worker process builds its envs with it)."""

    def __init__(self, name: str, options: dict):
        self.name, self.options = name, dict(options)

    def __call__(self) -> Env:
        from ragen.plugins.components import make_env

        return make_env(self.name, **self.options)


def _worker_main(conn: Any, factory: Callable[[], Env]) -> None:
    """A worker process: env instances by slot number, one call at a time, until the pipe closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which closes the pipes
    try:
        probe = factory()
        conn.send(("ok", env_info(probe)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as the first answer
        conn.send(("error", 400, "config", f"{type(exc).__name__}: {exc}" if not isinstance(exc, RagenError) else str(exc)))
        return
    spare, slots = [probe], {}
    try:
        while True:
            try:
                op, slot, args = conn.recv()
            except (EOFError, OSError):
                break
            try:
                if op == "new":
                    slots[slot] = LocalEnv(spare.pop() if spare else factory())
                    answer = None
                elif op == "close":
                    env = slots.pop(slot, None)
                    if env is not None:
                        env.close()
                    answer = None
                else:
                    env = slots.get(slot)
                    if env is None:
                        raise RequestError(404, "not_found", f"no env in slot {slot} of this worker")
                    answer = getattr(env, op)(*args)
                conn.send(("ok", answer))
            except Exception as exc:  # noqa: BLE001 - the parent answers the client with it
                err = request_error(exc)
                conn.send(("error", err.status, err.kind, str(err)))
    finally:
        for env in [*slots.values(), *(LocalEnv(e) for e in spare)]:
            env.close()


class Worker:
    """One worker process and its pipe; requests to it are serialised (it calls one env at a time)."""

    def __init__(self, factory: Callable[[], Env]):
        ctx = multiprocessing.get_context("spawn")  # a fork of a threaded server may deadlock
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, factory), daemon=True, name="ragen-env-worker")
        self.proc.start()
        child.close()
        self._lock, self._count_lock = threading.Lock(), threading.Lock()
        self.inflight = 0  #: requests sent or waiting to be sent (read for placement)
        self.open = 0  #: instances handed out for episodes
        self.idle: list[WorkerEnv] = []
        self.dead = False
        self.info: dict | None = None
        self._slots = itertools.count()

    def ready(self) -> dict:
        """Wait for the worker's first env; its ``/info``. A worker that cannot build the env is a config error."""
        try:
            if not self.conn.poll(WORKER_START_S):
                raise ConfigError(f"env worker process {self.proc.pid}: no env within {WORKER_START_S:g} s")
            answer = self.conn.recv()
        except (EOFError, OSError):  # it died, or the server closed while it started
            raise ConfigError(f"env worker process {self.proc.pid} died at start (exit code {self.proc.exitcode})") from None
        if answer[0] != "ok":
            raise ConfigError(answer[3])
        self.info = answer[1]
        return self.info

    def _count(self, delta: int) -> None:
        with self._count_lock:
            self.inflight += delta

    def request(self, op: str, slot: int, args: tuple = ()) -> Any:
        self._count(1)
        try:
            with self._lock:
                if self.dead:
                    raise RequestError(422, "env", f"env worker process {self.proc.pid} died")
                try:
                    self.conn.send((op, slot, args))
                    answer = self.conn.recv()
                except (EOFError, OSError, BrokenPipeError):
                    self.dead = True
                    raise RequestError(422, "env", f"env worker process {self.proc.pid} died "
                                                   f"(exit code {self.proc.exitcode})") from None
        finally:
            self._count(-1)
        if answer[0] != "ok":
            raise RequestError(answer[1], answer[2], answer[3])
        return answer[1]

    def new_env(self) -> WorkerEnv:
        slot = next(self._slots)
        self.request("new", slot)
        return WorkerEnv(self, slot)

    def close(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError):
            self.conn.close()
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)


class WorkerEnv:
    """An env instance living in a worker process: the operations of ``LocalEnv``, over the worker's pipe."""

    def __init__(self, worker: Worker, slot: int):
        self.worker, self.slot = worker, slot
        self.closed = False
        self.idle_since = time.monotonic()

    def reset(self, seed: int, options: dict) -> dict:
        return self.worker.request("reset", self.slot, (seed, dict(options)))

    def step(self, action: str) -> dict:
        return self.worker.request("step", self.slot, (action,))

    def validate(self, action: str) -> dict:
        return self.worker.request("validate", self.slot, (action,))

    def split(self, answer: str) -> dict:
        return self.worker.request("split", self.slot, (answer,))

    def expert(self, k: int) -> dict:
        return self.worker.request("expert", self.slot, (k,))

    def judge(self) -> dict:
        return self.worker.request("judge", self.slot)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(RequestError):
                self.worker.request("close", self.slot)


class WorkerHost:
    """Env instances in ``workers`` worker processes; a new episode goes to the least busy one.

    Busy means requests in flight first, then open episodes: a client stuck in a slow step keeps its worker busy, so
    the next episodes go elsewhere. ``max_instances`` bounds open plus idle instances (an idle one is closed to make
    room); a dead worker is replaced when the next episode is placed."""

    def __init__(self, factory: Callable[[], Env], workers: int, *, max_idle: int = 64, max_instances: int | None = None):
        self._factory, self.max_idle = factory, int(max_idle)
        self.max_instances = max_instances
        self._lock = threading.Lock()
        self._closed = False
        starting = [Worker(factory) for _ in range(max(1, int(workers)))]  # they start side by side
        try:
            self.info = starting[0].ready()  # serving starts with the first; the others join when ready
        except BaseException:
            for w in starting:
                w.close()
            raise
        self.workers, self._starting = [starting[0]], starting[1:]
        self._all_ready = threading.Event()
        threading.Thread(target=self._join, args=(starting[1:],), name="ragen-env-workers", daemon=True).start()

    def _join(self, starting: list[Worker]) -> None:
        for w in starting:
            try:
                w.ready()
            except ConfigError as exc:
                if not self._closed:
                    log.warning("env_worker_failed", error=str(exc))
                w.close()
                with self._lock:
                    self._starting.remove(w)
                continue
            with self._lock:
                self._starting.remove(w)
                if self._closed:
                    w.close()
                    continue
                self.workers.append(w)
        self._all_ready.set()

    def wait_ready(self, timeout_s: float = WORKER_START_S) -> int:
        """Wait until every worker has started (or failed to); the number serving."""
        self._all_ready.wait(timeout_s)
        return len(self.workers)

    def _replace_dead(self) -> None:
        for i, w in enumerate(self.workers):
            if w.dead or not w.proc.is_alive():
                w.close()
                fresh = Worker(self._factory)
                try:
                    fresh.ready()
                except ConfigError as exc:
                    fresh.close()
                    raise RequestError(422, "env", f"cannot restart an env worker process: {exc}") from None
                self.workers[i] = fresh

    def acquire(self) -> WorkerEnv:
        with self._lock:
            if any(w.dead or not w.proc.is_alive() for w in self.workers):
                self._replace_dead()
            worker = min(self.workers, key=lambda w: (w.inflight, w.open, not w.idle))
            worker.open += 1
            if worker.idle:
                return worker.idle.pop()
            evict = None
            if self.max_instances is not None and self.instances() > self.max_instances:  # the new one counted
                idle = [e for w in self.workers for e in w.idle]
                if idle:
                    evict = min(idle, key=lambda e: e.idle_since)
                    evict.worker.idle.remove(evict)
        if evict is not None:
            evict.close()
        try:
            return worker.new_env()
        except RequestError:
            with self._lock:
                worker.open -= 1
            raise

    def release(self, env: WorkerEnv, keep: bool = True) -> None:
        worker = env.worker
        with self._lock:
            worker.open -= 1
            if keep and not env.closed and not worker.dead and len(worker.idle) < self.max_idle // len(self.workers) + 1:
                env.idle_since = time.monotonic()
                worker.idle.append(env)
                return
        env.close()

    def instances(self) -> int:
        """Open plus idle instances (caller holds the lock or accepts a racy count)."""
        return sum(w.open + len(w.idle) for w in self.workers)

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(w.idle) for w in self.workers)

    def close_idle(self, older_than_s: float = 0.0) -> int:
        now = time.monotonic()
        with self._lock:
            old = [e for w in self.workers for e in w.idle if now - e.idle_since >= older_than_s]
            for e in old:
                e.worker.idle.remove(e)
        for e in old:
            e.close()
        return len(old)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self.workers) + list(self._starting)
        for w in workers:  # every pipe first: the workers wind down side by side
            w.dead = True
            with contextlib.suppress(OSError):
                w.conn.close()
        for w in workers:
            w.close()
