"""Helpers of the OpenEnv tests (docs/openenv.md): OpenEnv's scaffold env and ragen envs served on loopback.

Both need the `openenv` package (the ragen[openenv] extra, .venv-openenv); callers skip without it."""

import contextlib
import importlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def write_scaffold(directory, name="echo_env"):
    """The files `openenv init NAME` writes into ``directory/NAME`` (the template shipped inside the openenv wheel),
    with its own replacement and copy functions: `init` would also run `uv lock`, which needs the network."""
    from openenv.cli.commands.init import _copy_template_directory, _create_template_replacements

    env_dir = directory / name
    env_dir.mkdir(parents=True)
    _copy_template_directory("openenv.cli.templates.openenv_env", "", env_dir, _create_template_replacements(name),
                             name)
    return env_dir


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def uvicorn_app(directory, app="server.app:app", port=None, args=()):
    """``uvicorn APP --port PORT`` started in ``directory`` (a real uvicorn process, as the docs start it); yields
    the URL once ``/health`` answers."""
    port = port or free_port()
    uvicorn = str(Path(sys.executable).parent / "uvicorn")
    log_path = Path(directory) / f"uvicorn-{port}.log"  # a file, not a pipe: its access log would fill a pipe and block
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([uvicorn, app, "--port", str(port), *args], cwd=directory, stdout=log_file,
                                stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # importing openenv's stack takes minutes on a loaded machine
        while True:
            try:
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url + "/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise AssertionError(f"uvicorn {app} did not start: {log_path.read_text()[-3000:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def served_scaffold(directory, max_sessions=4, name="echo_env"):
    """The env `openenv init NAME` writes (the template shipped inside the openenv wheel: an echo env), generated
    into ``directory`` and served in-process on loopback by OpenEnv's ``create_app``; yields its URL.

    The files come from the template exactly as `openenv init` writes them (its own replacement and copy functions;
    `init` would also run `uv lock`, which needs the network). The template's app.py caps sessions at 1; the app is
    built with the same create_app call and ``max_sessions`` instead, since a rollout plays several episodes at once.
    """
    from openenv.core.env_server.http_server import create_app

    from ragen.serve.openenv import OpenEnvServer

    write_scaffold(directory, name)
    sys.path.insert(0, str(directory))
    try:
        models = importlib.import_module(f"{name}.models")
        server_mod = importlib.import_module(f"{name}.server.{name}_environment")
        prefix = name.removesuffix("_env").title().replace("_", "")
        env_cls = getattr(server_mod, f"{prefix}Environment")
        app = create_app(env_cls, getattr(models, f"{prefix}Action"), getattr(models, f"{prefix}Observation"),
                         env_name=name, max_concurrent_envs=max_sessions)
        server = OpenEnvServer(app).start()
        try:
            yield server.url
        finally:
            server.stop()
    finally:
        sys.path.remove(str(directory))
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]


@contextlib.contextmanager
def served_ragen(name, options=None, **kw):
    """A ragen env served as OpenEnv (ragen.serve.openenv) on a free loopback port; yields the server."""
    from ragen.serve.openenv import make_openenv_server

    server = make_openenv_server(name, options, **kw).start()
    try:
        yield server
    finally:
        server.stop()
