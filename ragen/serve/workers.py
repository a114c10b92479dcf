"""Env instances in worker processes: the one worker-process pool of ragen (``WorkerHost``).

``ragen serve-env`` keeps an env not declared concurrency-safe ("none") in ``--workers`` processes, and the rollout
keeps its "process" envs (``rollout.env_workers``) in worker processes the same way (``ragen.serve.table.
ProcessEnvPool``). Each worker calls one env at a time (module-level state stays safe), the workers run side by side,
and a new episode goes to the least busy worker: one slow step stalls only the episodes of its own worker. A worker
that dies fails its episodes (a 422) and is replaced when the next episode is placed.

The pipe protocol: the parent sends ``(op, slot, args)`` (``op`` "new", "close" or an operation of
``ragen.serve.hosts.LocalEnv``), the worker answers ``("ok", value)`` or ``("error", status, kind, message)``.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from ragen.contract.env import Env
from ragen.errors import ConfigError, RagenError
from ragen.serve.hosts import LocalEnv, RequestError, env_info, request_error

log = structlog.get_logger("ragen")

#: seconds a worker process may take to start and build its first env
WORKER_START_S = 300.0


def _send(conn: Any, message: tuple) -> bool:
    """Answer the parent; False when it is gone (it closed its end: Ctrl-C while the workers started, or the server
    stopped), which ends the worker quietly instead of with a ``BrokenPipeError`` traceback on the server's terminal."""
    try:
        conn.send(message)
    except (BrokenPipeError, EOFError, OSError):
        return False
    return True


def _worker_main(conn: Any, factory: Callable[[], Env]) -> None:
    """A worker process: env instances by slot number, one call at a time, until the pipe closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which closes the pipes
    try:
        probe = factory()
        info = env_info(probe)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as the first answer
        message = str(exc) if isinstance(exc, RagenError) else f"{type(exc).__name__}: {exc}"
        _send(conn, ("error", 400, "config", message))
        return
    if not _send(conn, ("ok", info)):
        LocalEnv(probe).close()
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
                reply: tuple = ("ok", answer)
            except Exception as exc:  # noqa: BLE001 - the parent answers the client with it
                err = request_error(exc)
                reply = ("error", err.status, err.kind, str(err))
            if not _send(conn, reply):
                break
    finally:
        for env in [*slots.values(), *(LocalEnv(e) for e in spare)]:
            env.close()


@contextlib.contextmanager
def _sigint_ignored():
    """Start a worker with SIGINT ignored from its first instruction: a terminal's Ctrl-C reaches the whole process
    group, and a worker still importing ragen (seconds, before ``_worker_main`` ignores it) printed a
    ``KeyboardInterrupt`` traceback each; the parent stops them by closing their pipes. A spawned interpreter keeps an
    ignored SIGINT ignored. Only the main thread may change a handler: elsewhere nothing changes."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # blocked on this thread as well as ignored: an ignored signal is discarded, so a Ctrl-C landing while a worker
    # starts was lost by the server too, which then served on; blocked here it stays pending (Linux keeps blocked
    # signals even when ignored) and reaches the server's own handler once it is restored and the mask with it. A
    # process-directed Ctrl-C that another thread takes in this window (one that does not block it) is still lost, in
    # theory: the window is one fork and exec, and the kernel gives a process-directed signal to the main thread first
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


class Worker:
    """One worker process and its pipe; requests to it are serialised (it calls one env at a time)."""

    def __init__(self, factory: Callable[[], Env]):
        ctx = multiprocessing.get_context("spawn")  # a fork of a threaded server may deadlock
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, factory), daemon=True, name="ragen-env-worker")
        with _sigint_ignored():
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
            raise ConfigError(f"env worker process {self.proc.pid} died at start (exit code {self.proc.exitcode})"
                              ) from None
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

    def __init__(self, factory: Callable[[], Env], workers: int, *, max_idle: int = 64,
                 max_instances: int | None = None):
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
            room = len(worker.idle) < self.max_idle // len(self.workers) + 1
            if keep and not env.closed and not worker.dead and room:
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
