"""Concurrent env stepping (``rollout.env_workers``): a thread pool for envs declared safe, worker processes for
envs that need them.

An env class declares ``concurrency`` (``ragen.contract.env.Env``): "none" envs are stepped one at a time in the calling
thread, exactly as before; "thread" envs (they wait on a sandbox subprocess, a socket, a served env) have their
turns applied in a thread pool; "process" envs live in ``env_workers`` worker processes
(``ragen.serve.table.ProcessEnvPool``: the worker pool and protocol of ``serve-env``) and are driven from the same
thread pool, each worker stepping one env at a time.

Results do not depend on the pool: each job touches only its own episode (its env, its context, its record), the
caller collects the outcomes in slot order, and envs seed their own RNGs per episode (never a shared global one),
so ``env_workers=1`` and ``env_workers=8`` give identical trajectories (tests/rollout/test_stepping.py).

``submit`` returns at once, so the caller can generate for other groups while these turns run (the first step of
async rollout, docs/async-rollout.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ragen.contract.env import Env
from ragen.errors import ConfigError
from ragen.serve.table import ProcessEnvPool

CONCURRENCY = ("none", "thread", "process")


def concurrency_of(env_or_cls: Any) -> str:
    """The declared concurrency of an env (instance or class); unknown values are a config error of the plugin."""
    value = getattr(env_or_cls, "concurrency", "none")
    if value not in CONCURRENCY:
        name = getattr(env_or_cls, "name", env_or_cls)
        raise ConfigError(f"{name}: concurrency must be one of {', '.join(CONCURRENCY)}, got {value!r}")
    return value


def _done(value: Any = None, exc: BaseException | None = None) -> Future:
    fut: Future = Future()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
    return fut


class EnvStepper:
    """Runs one job per episode: in a thread pool when the env allows it and ``workers`` > 1, else inline."""

    def __init__(self, workers: int = 1):
        if workers < 1:
            raise ConfigError(f"rollout.env_workers: must be >= 1, got {workers}")
        self.workers = int(workers)
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, env: Env, job: Callable[[], Any]) -> Future:
        """Start ``job`` (one turn of the episode on ``env``); inline for "none" envs or one worker."""
        if self.workers == 1 or concurrency_of(env) == "none":
            try:
                return _done(job())
            except Exception as exc:  # the caller reads it from the future, as from a pooled job
                return _done(exc=exc)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ragen-env")
        return self._pool.submit(job)

    def map(self, envs: Sequence[Env], jobs: Sequence[Callable[[], Any]]) -> list[Future]:
        """Start every job, return their futures in input order (wait with ``f.exception()`` / ``f.result()``)."""
        return [self.submit(env, job) for env, job in zip(envs, jobs, strict=True)]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


# ---- "process" envs: in worker processes (ragen.serve's worker pool), driven through the remote env ------------
class PooledFactory:
    """The rollout's env factory: envs declaring "process" are built in worker processes when ``workers`` > 1,
    every other env by ``factory`` in this process."""

    def __init__(self, factory: Callable[[str, dict], Env], workers: int):
        self.factory, self.workers = factory, int(workers)
        self._pools: dict[str, ProcessEnvPool] = {}

    def __call__(self, name: str, options: dict) -> Env:
        if self.workers > 1 and concurrency_of(_env_class(name)) == "process":
            key = f"{name}|{sorted(options.items())!r}"
            if key not in self._pools:
                self._pools[key] = ProcessEnvPool(name, _Build(self.factory, name, dict(options)), self.workers)
            return self._pools[key].make()
        return self.factory(name, options)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


class _Build:
    """A picklable ``factory(name, options)`` call for the worker process."""

    def __init__(self, factory: Callable[[str, dict], Env], name: str, options: dict):
        self.factory, self.name, self.options = factory, name, options

    def __call__(self) -> Env:
        return self.factory(self.name, dict(self.options))


def _env_class(name: str) -> Any:
    from ragen.plugins.loader import get_registry

    try:
        return get_registry("env").get(name).factory
    except Exception:  # an unregistered name (a test factory): built in-process
        return None


def run_job(job: Callable[[], Any]) -> BaseException | None:
    """Run one turn inline; the exception it raised, or None."""
    try:
        job()
    except Exception as exc:  # the caller drops this episode and counts it
        return exc
    return None


def group_chunks(members: Sequence[Any], n: int) -> list[list[Any]]:
    """``members`` (slot order, ``.slot.group_id``) in at most ``n`` consecutive chunks of whole groups."""
    groups: list[list[Any]] = []
    for m in members:
        if groups and groups[-1][0].slot.group_id == m.slot.group_id:
            groups[-1].append(m)
        else:
            groups.append([m])
    if n <= 1 or len(groups) <= 1:
        return [list(members)] if members else []
    n = min(n, len(groups))
    bounds = [round(i * len(groups) / n) for i in range(n + 1)]
    return [[m for g in groups[bounds[i]:bounds[i + 1]] for m in g] for i in range(n)]
