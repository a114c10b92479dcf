"""ragen's protocol over one env (``ragen serve-env``): ``EpisodeTable`` answers ``(method, path, body, client) ->
(status, json)``.

The WSGI app (``ragen.serve.http``) and the rollout's "process" envs (``ProcessEnvPool``, below) both dispatch into
it, so the protocol is one piece of code. Its env instances live in a host: this process for envs declared
concurrency-safe (``ragen.serve.hosts.LocalHost``), worker processes for the others
(``ragen.serve.workers.WorkerHost``), so one slow step does not stall every client. Every episode has an id;
episodes are admitted by what they weigh (the env's ``episode_weight``: a cap on open episodes, a per-client cap,
free memory for envs holding a process) and one nobody touched for the idle time-out is closed. Every refusal and
every env failure is a 4xx with ``{"error": ..., "kind": ...}``.

Protocol (JSON bodies; ``Authorization: Bearer TOKEN`` on everything but ``/health`` when a token is set):
``GET /health``, ``GET /info`` (action space, budget, instructions, system prompt), ``POST /episodes``
``{seed, options}`` -> ``{episode, obs, info}``, ``POST /episodes/ID/step`` ``{action}``, ``POST /episodes/ID/validate``
``{action}``, ``POST /episodes/ID/split`` ``{answer}``, ``POST /episodes/ID/expert`` ``{k}``,
``POST /episodes/ID/judge``, ``DELETE /episodes/ID``.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import structlog

from ragen.contract.env import SPLITS, Env, EpisodeWeight
from ragen.serve.hosts import LocalHost, RequestError, weight_of
from ragen.serve.net import MAX_ACTION_CHARS
from ragen.serve.remote import RemoteConfig, RemoteEnv, raise_for
from ragen.serve.workers import WorkerHost

log = structlog.get_logger("ragen")

#: idle seconds after which an episode is closed: any env, and an env whose episodes hold a process (EpisodeWeight)
EPISODE_TIMEOUT_S, HEAVY_EPISODE_TIMEOUT_S = 600.0, 120.0
#: serve-env's worker processes for an env not declared concurrency-safe
DEFAULT_WORKERS = 4


def available_memory_mb() -> float | None:
    """Memory the host can still give (``MemAvailable``), in MB; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return psutil.virtual_memory().available / 2**20
    except Exception:  # noqa: BLE001 - no way to know: the check is skipped
        return None


def total_memory_mb() -> float | None:
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_reserve_mb() -> float:
    """The memory a heavy env's new episode must leave free: 10 % of the host, at least 1 GiB."""
    return max(1024.0, 0.1 * (total_memory_mb() or 0.0))


def open_cap(weight: EpisodeWeight, max_episodes: int) -> int:
    """Open episodes at most: the server's ``max_episodes``, or the env's declared ``max_open`` if lower."""
    return min(int(max_episodes), weight.max_open or int(max_episodes))


def client_cap(weight: EpisodeWeight, max_episodes: int) -> int:
    """The default per-client cap: every episode for a light env, half of them for a heavy one (another client
    always finds room)."""
    cap = open_cap(weight, max_episodes)
    return max(1, cap // 2) if weight.heavy else cap


@attrs.define(eq=False)
class _Episode:
    env: Any  #: a LocalEnv (ragen.serve.hosts) or a WorkerEnv (ragen.serve.workers)
    client: str = ""
    lock: threading.Lock = attrs.Factory(threading.Lock)
    last_used: float = attrs.Factory(time.monotonic)


class EpisodeTable:
    """The served env's episodes: ids, per-episode locks, admission (caps by weight, memory, client), reaping.

    ``factory`` builds one env. With ``workers`` > 0 an env not declared concurrency-safe lives in that many worker
    processes (``factory`` must then pickle, e.g. ``EnvFactory``); otherwise instances live in this process (one lock
    around a non-concurrent env's calls). ``in_workers`` puts every env in the workers, whatever it declares, and
    builds none in this process (the rollout's "process" envs: ``ProcessEnvPool``). An env's ``episode_weight`` sets
    the defaults: open episodes at most ``min(max_episodes, weight.max_open)``, idle time-out 600 s (120 s for a heavy
    env), and a heavy env's new episode needs ``weight.memory_mb`` available above ``min_free_mb`` (10 % of the host,
    >= 1 GiB; 0 turns the check off). ``max_client_episodes`` (None: no cap of its own) caps the episodes one
    ``client`` of ``dispatch`` holds; ``make_server`` sets it to half of the cap for a heavy env (``client_cap``).
    """

    def __init__(self, factory: Callable[[], Env], *, episode_timeout_s: float | None = None, max_episodes: int = 1024,
                 max_idle_envs: int = 64, max_client_episodes: int | None = None, min_free_mb: float | None = None,
                 workers: int = 0, in_workers: bool = False, memory: Callable[[], float | None] = available_memory_mb,
                 probe: Env | None = None):
        if in_workers and workers > 0:
            self.host: Any = WorkerHost(factory, workers, max_idle=max_idle_envs)
            self.weight = EpisodeWeight(**self.host.info["episode_weight"])  # the first worker's env declares it
            self.max_open = open_cap(self.weight, max_episodes)
            self.host.max_instances = self.max_open if self.weight.heavy else None
        else:
            if probe is None:
                probe = factory()  # fails here, before serving, when the env or its options are wrong
            self.weight = weight_of(type(probe))
            self.max_open = open_cap(self.weight, max_episodes)
            if getattr(type(probe), "concurrency", "none") == "none" and workers > 0:
                probe.close()  # its instances live in the workers
                self.host = WorkerHost(factory, workers, max_idle=max_idle_envs,
                                       max_instances=self.max_open if self.weight.heavy else None)
            else:
                self.host = LocalHost(factory, probe, max_idle=max_idle_envs)
        self.info = self.host.info
        heavy = self.weight.heavy
        self.timeout_s = float(episode_timeout_s if episode_timeout_s is not None
                               else HEAVY_EPISODE_TIMEOUT_S if heavy else EPISODE_TIMEOUT_S)
        self.max_client = int(max_client_episodes) if max_client_episodes is not None else self.max_open
        self.min_free_mb = float(min_free_mb if min_free_mb is not None else default_memory_reserve_mb())
        self._memory = memory
        self._episodes: dict[str, _Episode] = {}
        self._opening: dict[str, int] = {}  #: client -> episodes admitted, not yet reset
        self._lock = threading.Lock()
        self.reaped = 0
        self.closed = threading.Event()

    # ---- episodes ----------------------------------------------------------------------------------------------
    def reap(self) -> int:
        """Close episodes idle for longer than the time-out (a client that died mid-episode) and idle instances
        unused as long; returns how many episodes."""
        now = time.monotonic()
        with self._lock:
            old = [k for k, e in self._episodes.items() if now - e.last_used > self.timeout_s and not e.lock.locked()]
            dropped = [self._episodes.pop(k) for k in old]
            self.reaped += len(dropped)  # counted as they leave the table: another reap() sees them gone and counted
        for ep in dropped:
            self.host.release(ep.env, keep=False)  # abandoned mid-episode: closed, its process (if any) with it
        self.host.close_idle(self.timeout_s)
        if dropped:
            log.info("env_episodes_reaped", count=len(dropped), timeout_s=self.timeout_s)
        return len(dropped)

    def _get(self, eid: str) -> _Episode:
        with self._lock:
            ep = self._episodes.get(eid)
        if ep is None:
            raise RequestError(404, "not_found",
                               f"no episode {eid!r} (closed, or abandoned for over {self.timeout_s:g} s)")
        ep.last_used = time.monotonic()
        return ep

    def _call(self, ep: _Episode, fn: Callable[[], Any]) -> Any:
        with ep.lock:
            try:
                return fn()
            finally:
                ep.last_used = time.monotonic()

    def open_by(self, client: str) -> int:
        """Episodes ``client`` holds open (or is opening)."""
        with self._lock:
            return self._opening.get(client, 0) + sum(e.client == client for e in self._episodes.values())

    def _admit(self, client: str) -> None:
        """Reserve room for one more episode of ``client``, or refuse with 429."""
        with self._lock:
            opening = sum(self._opening.values())
            if len(self._episodes) + opening >= self.max_open:
                cap = "the env's episode_weight.max_open" if self.max_open == self.weight.max_open else "max_episodes"
                raise RequestError(429, "busy", f"{self.max_open} episodes are open ({cap}); close some")
            mine = self._opening.get(client, 0) + sum(e.client == client for e in self._episodes.values())
            if mine >= self.max_client:
                raise RequestError(429, "busy", f"this client holds {mine} open episodes (max_client_episodes "
                                                f"{self.max_client}); close some")
            if self.weight.heavy and self.min_free_mb > 0:
                free = self._memory()
                need = self.weight.memory_mb * (opening + 1)
                if free is not None and free - need < self.min_free_mb:
                    raise RequestError(429, "busy", f"the host has {free:.0f} MB available; a new episode needs "
                                                    f"~{self.weight.memory_mb} MB above the {self.min_free_mb:.0f} MB "
                                                    "reserve (--min-free-memory); close some episodes")
            self._opening[client] = self._opening.get(client, 0) + 1

    def _admitted(self, client: str) -> None:
        with self._lock:
            left = self._opening.get(client, 0) - 1
            if left > 0:
                self._opening[client] = left
            else:
                self._opening.pop(client, None)

    def close(self) -> None:
        self.closed.set()
        with self._lock:
            envs = [e.env for e in self._episodes.values()]
            self._episodes.clear()
        for env in envs:
            env.close()
        self.host.close()

    # ---- the protocol ------------------------------------------------------------------------------------------
    def dispatch(self, method: str, path: str, body: Any, client: str = "") -> tuple[int, Any]:
        """Answer one request of ``client`` (an id for the per-client cap); every refusal is a ``RequestError``
        turned into its status and JSON error."""
        try:
            return self._route(method, [p for p in path.split("/") if p], body, client)
        except RequestError as exc:
            return exc.status, {"error": one_line(str(exc)), "kind": exc.kind}

    def _route(self, method: str, parts: list[str], body: Any, client: str) -> tuple[int, Any]:
        if parts == ["health"]:
            return _only(method, "GET"), {"ok": True, "episodes": len(self._episodes)}
        if parts == ["info"]:
            return _only(method, "GET"), self.info
        if parts == ["episodes"]:
            _only(method, "POST")
            return 201, self._reset(_object(body), client)
        if len(parts) == 2 and parts[0] == "episodes":
            _only(method, "DELETE")
            return 200, self._close(parts[1])
        if len(parts) == 3 and parts[0] == "episodes" and parts[2] in _EPISODE_OPS:
            _only(method, "POST")
            ep = self._get(parts[1])
            return 200, _EPISODE_OPS[parts[2]](self, ep, _object(body))
        raise RequestError(404, "not_found", f"no such endpoint /{'/'.join(parts)}")

    def _reset(self, body: dict, client: str) -> dict:
        seed = body.get("seed")
        if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63):
            raise RequestError(400, "request", f"seed: expected an integer 0 <= seed < 2**63, got {_short(seed)}")
        options = body.get("options", {})
        if not isinstance(options, dict):
            raise RequestError(400, "request", f"options: expected an object, got {type(options).__name__}")
        split = options.get("split", "train")
        if split not in SPLITS:
            raise RequestError(400, "request",
                               f"options.split: expected one of {', '.join(SPLITS)}, got {_short(split)}")
        index = options.get("rollout_index", 0)
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 2**31):
            raise RequestError(400, "request",
                               f"options.rollout_index: expected an integer 0..2**31-1, got {_short(index)}")
        self.reap()
        self._admit(client)
        try:
            ep = _Episode(self.host.acquire(), client)
            try:
                data = self._call(ep, lambda: ep.env.reset(seed, options))
            except RequestError:
                self.host.release(ep.env)
                raise
            eid = secrets.token_hex(8)
            with self._lock:
                self._episodes[eid] = ep
        finally:
            self._admitted(client)
        return {"episode": eid, **data}

    def _step(self, ep: _Episode, body: dict) -> dict:
        action = _text(body, "action")
        return self._call(ep, lambda: ep.env.step(action))

    def _validate(self, ep: _Episode, body: dict) -> dict:
        action = _text(body, "action")
        return self._call(ep, lambda: ep.env.validate(action))

    def _split(self, ep: _Episode, body: dict) -> dict:
        answer = _text(body, "answer")
        return self._call(ep, lambda: ep.env.split(answer))

    def _expert(self, ep: _Episode, body: dict) -> dict:
        k = body.get("k", 1)
        if not (isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= 1000):
            raise RequestError(400, "request", f"k: expected an integer 0..1000, got {_short(k)}")
        if not self.info.get("has_expert"):
            raise RequestError(404, "not_found", f"env {self.info.get('name')!r} has no expert")
        return self._call(ep, lambda: ep.env.expert(k))

    def _judge(self, ep: _Episode, body: dict) -> dict:
        return self._call(ep, lambda: ep.env.judge())

    def _close(self, eid: str) -> dict:
        with self._lock:
            ep = self._episodes.pop(eid, None)
        if ep is None:
            raise RequestError(404, "not_found", f"no episode {eid!r}")
        with ep.lock:
            self.host.release(ep.env)
        return {"closed": eid}


_EPISODE_OPS: dict[str, Callable[[EpisodeTable, _Episode, dict], dict]] = {
    "step": EpisodeTable._step,
    "validate": EpisodeTable._validate,
    "split": EpisodeTable._split,
    "expert": EpisodeTable._expert,
    "judge": EpisodeTable._judge,
}


def one_line(message: str, limit: int = 300) -> str:
    """An error as the client reads it: one line, at most ``limit`` characters (it may echo what the client sent)."""
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any) -> str:
    """A refused value as the error shows it: its repr, cut at 40 characters (a 5,000-digit seed stays one line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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


# ---- the table in this process: the rollout's "process" envs -------------------------------------------------------
class TableTransport:
    """The ``remote`` env's transport into an ``EpisodeTable`` of this process: the protocol without a socket."""

    def __init__(self, table: EpisodeTable, where: str):
        self.table, self.where = table, where

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        status, payload = self.table.dispatch(method, path, body)
        raise_for(self.where, status, payload)
        return payload

    def close(self) -> None:
        """The table is shared by several envs: its ``ProcessEnvPool`` closes it."""


class ProcessEnvPool:
    """One env variant in ``workers`` worker processes for the rollout of this process (envs declaring "process",
    ``rollout.env_workers`` > 1); ``make()`` returns a ``RemoteEnv`` whose episodes go to the least busy worker.

    An env failing, or a worker dying, fails that episode with a ``RemoteEnvError`` (the rollout drops and counts
    it, as for any env); a dead worker is replaced at the next episode."""

    def __init__(self, name: str, factory: Callable[[], Env], workers: int):
        self.name = name
        # one client (this process) and no idle time-out: the rollout closes what it opens; the env's own
        # episode_weight still caps open episodes and asks for free memory
        self.table = EpisodeTable(factory, workers=workers, in_workers=True, episode_timeout_s=float("inf"),
                                  max_episodes=2**31 - 1)
        self.table.host.wait_ready()  # every worker serves from the first round
        self._where = f"the env worker processes of {name}"

    def make(self) -> Env:
        # the env lives in this trainer's own worker processes: its observations are as long as the env makes them
        env = RemoteEnv(RemoteConfig(max_observation_chars=2**62), transport=TableTransport(self.table, self._where))
        env.name = self.name
        return env

    def close(self) -> None:
        self.table.close()
