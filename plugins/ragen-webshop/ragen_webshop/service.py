"""Lifecycle of shop servers started by envs: one subprocess per catalogue per process, reference-counted.

``acquire(spec)`` starts ``python -m ragen_webshop_server`` on a free loopback port the first time a catalogue is
asked for (readiness: ``GET /health`` answers 200 within the timeout) and hands out the same server to every later
env with an equal spec; ``release`` stops it when the last env lets go (SIGTERM, then SIGKILL). The server also
exits when its stdin closes, so a killed trainer never leaves one behind, and an ``atexit`` hook stops whatever is
still running at interpreter exit.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import attrs
import requests
from ragen_webshop_server.catalogue import CatalogueSpec

from ragen import ConfigError

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
#: import name -> pip name of what the server process needs
SERVER_DEPENDENCIES = {"flask": "flask", "werkzeug": "werkzeug", "jinja2": "jinja2", "bm25s": "bm25s",
                       "rapidfuzz": "rapidfuzz", "numpy": "numpy"}


@attrs.define(eq=False)
class ShopServer:
    """A running shop server subprocess and the envs holding it."""

    key: str
    proc: subprocess.Popen
    port: int
    workdir: Path
    owner_pid: int
    refs: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None


_servers: dict[str, ShopServer] = {}
_lock = threading.Lock()


def _log_tail(workdir: Path, limit: int = 2000) -> str:
    try:
        return (workdir / "server.log").read_text(errors="replace")[-limit:].strip()
    except OSError:
        return ""


def check_dependencies() -> None:
    """Fail with the pip command to run when a package the server imports is missing."""
    missing = [pip for mod, pip in SERVER_DEPENDENCIES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        raise RuntimeError(f"the WebShop server needs {', '.join(missing)}: pip install {' '.join(missing)} "
                           "(or pip install ragen-webshop, which depends on them)")


def _start(spec: CatalogueSpec, timeout_s: float) -> ShopServer:
    check_dependencies()
    workdir = Path(tempfile.mkdtemp(prefix="ragen-webshop-"))
    port_file = workdir / "port"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - the child writes to it for its whole life
    cmd = [sys.executable, "-m", "ragen_webshop_server", "--host", "127.0.0.1", "--port", "0",
           "--port-file", str(port_file), "--watch-stdin", "--spec", spec.to_json()]
    # a new session: a Ctrl-C in the terminal reaches the trainer, which then stops the server itself
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    log.close()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = _log_tail(workdir)
                errors = [line[len("ERROR: "):] for line in tail.splitlines() if line.startswith("ERROR: ")]
                if errors:  # a catalogue problem, reported by the server with the config key at fault
                    raise ConfigError(errors[-1])
                raise RuntimeError(f"the WebShop server exited with code {proc.returncode}: {tail}")
            if port_file.is_file():
                port = int(port_file.read_text())
                if _healthy(f"http://127.0.0.1:{port}"):
                    return ShopServer(spec.to_json(), proc, port, workdir, os.getpid())
            time.sleep(0.05)
        raise RuntimeError(f"WebShop server not ready within {timeout_s:g} s (startup_timeout_s); log: "
                           f"{_log_tail(workdir)}")
    except BaseException:
        _stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with requests.Session() as s:
            s.trust_env = False  # never route loopback traffic through a configured proxy
            return s.get(f"{url}/health", timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


def _stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    elif proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()


def acquire(spec: CatalogueSpec, timeout_s: float = 30.0) -> ShopServer:
    """The running server for ``spec``, started if needed; each call must be paired with one ``release``."""
    key = spec.to_json()
    with _lock:
        server = _servers.get(key)
        if server is not None and not server.running():  # died under us: replace it
            _servers.pop(key)
            shutil.rmtree(server.workdir, ignore_errors=True)
            server = None
        if server is None:
            server = _servers[key] = _start(spec, timeout_s)
        server.refs += 1
        return server


def release(server: ShopServer) -> None:
    """Drop one reference; the last one stops the process (only in the process that started it)."""
    with _lock:
        server.refs -= 1
        if server.refs > 0:
            return
        if _servers.get(server.key) is server:
            del _servers[server.key]
    if server.owner_pid == os.getpid():
        _stop_process(server.proc)
        shutil.rmtree(server.workdir, ignore_errors=True)


def running_servers() -> list[ShopServer]:
    with _lock:
        return list(_servers.values())


@atexit.register
def stop_all() -> None:
    """Stop every server this process started (interpreter exit)."""
    with _lock:
        servers = [s for s in _servers.values() if s.owner_pid == os.getpid()]
        _servers.clear()
    for server in servers:
        _stop_process(server.proc)
        shutil.rmtree(server.workdir, ignore_errors=True)
