"""Talking to a retrieval server, and starting the shared one the envs of a process use.

``RetrieverClient`` speaks the server's HTTP API (stdlib ``urllib``; safe to share between threads).

``acquire_server(key, corpus)`` returns a ``ServerLease`` on a server subprocess (``python -m
ragen_searchqa.server``) bound to 127.0.0.1 on a free port. Servers are shared per process and reference-counted:
envs with the same corpus ``key`` get the same server; the last ``release()`` stops it (stdin closed, then SIGTERM,
then SIGKILL) and removes its temporary folder. A subprocess keeps a crash in the server away from the trainer; it
watches its stdin, so it also stops if this process dies without releasing it. A server that died is restarted on
the next ``lease.ensure_running()``.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ragen import RagenError


class RetrieverError(RagenError):
    """The retrieval server could not be reached, or answered with an error."""


class RetrieverClient:
    """``POST /retrieve`` and ``GET /health`` of a retrieval server at ``url``."""

    def __init__(self, url: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _request(self, path: str, payload: dict | None = None, timeout: float | None = None) -> dict:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method="GET" if data is None else "POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read().decode("utf-8")).get("error", "")
            except (ValueError, AttributeError):
                why = ""
            raise RetrieverError(f"retrieval server {self.url}{path}: HTTP {exc.code} {why}".rstrip()) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RetrieverError(f"retrieval server {self.url}{path} unreachable: {reason}") from None

    def health(self, timeout: float | None = None) -> dict:
        return self._request("/health", timeout=timeout)

    def retrieve(self, query: str, top_k: int = 5) -> list[dict]:
        """The server's results for ``query``: dicts with ``id``, ``content`` and ``score``, best first."""
        out = self._request("/retrieve", {"query": query, "top_k": top_k})
        results = out.get("results") if isinstance(out, dict) else None
        if not isinstance(results, list):
            raise RetrieverError(f"retrieval server {self.url}/retrieve: no 'results' list in the answer")
        return results


# ---- the shared, reference-counted server subprocesses ----------------------------------------------------------
class _Server:
    """One server subprocess and the folder holding its corpus and log."""

    def __init__(self, key: str, write_corpus: Callable[[Path], Path], title_weight: float, start_timeout: float):
        self.key, self.refs = key, 0
        self.title_weight, self.start_timeout = title_weight, start_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="ragen-searchqa-"))
        try:
            self.corpus = write_corpus(self.workdir)
            self._start()
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    def _start(self) -> None:
        log = open(self.workdir / "server.log", "ab")  # noqa: SIM115 (the child holds it; closed below)
        cmd = [
            sys.executable,
            "-m",
            "ragen_searchqa.server",
            "--corpus",
            str(self.corpus),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--title-weight",
            str(self.title_weight),
            "--watch-stdin",
            "--owned-dir",
            str(self.workdir),
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        try:
            ready = self._read_ready_line()
            self.url = ready["url"]
            self.pid = self.proc.pid
            self._wait_healthy()
        except BaseException:
            self._stop_process()
            raise

    def _fail(self, why: str) -> RetrieverError:
        tail = (self.workdir / "server.log").read_text(errors="replace").strip().splitlines()[-3:]
        return RetrieverError(
            f"retrieval server for {self.key}: {why}" + (f" (log: {' | '.join(tail)})" if tail else "")
        )

    def _read_ready_line(self) -> dict:
        deadline = time.monotonic() + self.start_timeout
        fd, pending = self.proc.stdout.fileno(), b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=0.2):
                    chunk = os.read(fd, 65536)  # raw reads: a buffered readline could hide a second line
                    if not chunk:
                        break  # EOF: the process exited
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        try:
                            msg = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(msg, dict) and msg.get("event") == "ready":
                            return msg
                elif self.proc.poll() is not None:
                    break
        if self.proc.poll() is not None:
            raise self._fail(f"the server process exited with code {self.proc.wait()}")
        raise self._fail(f"not ready within {self.start_timeout:g} s (server_start_timeout)")

    def _wait_healthy(self) -> None:
        client, deadline = RetrieverClient(self.url), time.monotonic() + self.start_timeout
        while True:
            try:
                if client.health(timeout=2.0).get("status") == "ok":
                    return
            except RetrieverError:
                pass
            if time.monotonic() > deadline:
                raise self._fail(f"GET {self.url}/health did not answer 200 within {self.start_timeout:g} s")
            time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def restart(self) -> None:
        self._stop_process()
        self._start()

    def _stop_process(self) -> None:
        proc = self.proc
        try:
            proc.stdin.write(b"stop\n")  # "stop", then EOF: shut down, the folder is ours to delete
            proc.stdin.flush()
        except OSError:
            pass  # already dead
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        try:
            self._stop_process()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


_LOCK = threading.Lock()
_SERVERS: dict[str, _Server] = {}
_OWNER_PID = os.getpid()


class ServerLease:
    """One env's reference to a shared server; ``release()`` is idempotent."""

    def __init__(self, server: _Server):
        self._server: _Server | None = server

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the server lease was released")
        return self._server.url

    @property
    def pid(self) -> int:
        return self._server.pid if self._server else -1

    def ensure_running(self) -> bool:
        """Restart the server if its process died; True when it was restarted."""
        with _LOCK:
            if self._server is None or self._server.alive:
                return False
            self._server.restart()
            return True

    def release(self) -> None:
        with _LOCK:
            server, self._server = self._server, None
            if server is None:
                return
            server.refs -= 1
            if server.refs > 0:
                return
            del _SERVERS[server.key]
        server.stop()  # outside the lock: stopping waits for the process


def acquire_server(key: str, write_corpus: Callable[[Path], Path], *, title_weight: float = 1.0,
                   start_timeout: float = 30.0) -> ServerLease:
    """A lease on the server for corpus ``key``, starting it if none runs. ``write_corpus(folder)`` writes the
    corpus JSONL (or returns an existing file) and is called only when a server is started."""
    full_key = f"{key}|title_weight={title_weight:g}"
    with _LOCK:  # held while starting: a second env with the same corpus waits for this server, not a duplicate
        server = _SERVERS.get(full_key)
        if server is None:
            server = _Server(full_key, write_corpus, title_weight, start_timeout)
            _SERVERS[full_key] = server
        server.refs += 1
        return ServerLease(server)


def running_servers() -> dict[str, tuple[str, int, int]]:
    """``key -> (url, pid, references)`` of the servers this process runs (tests, diagnostics)."""
    with _LOCK:
        return {k: (s.url, s.pid, s.refs) for k, s in _SERVERS.items()}


@atexit.register
def _stop_all() -> None:
    """Stop servers whose envs were never closed; a forked child leaves its parent's servers alone."""
    if os.getpid() != _OWNER_PID:
        return
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.stop()
