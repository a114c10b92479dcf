"""The listing commands answer without the training stack: ``ragen --help``, ``ragen plugins``, ``ragen envs`` and
their ``--json`` forms import no torch, transformers or deepspeed (importing torch alone takes seconds, and every
plugin is loaded to list its names), nor what only a run, a served env or an expert uses (``NOT_LISTED``), and the
slow-import notice never reaches ``--json`` output."""

import json
import os
import subprocess
import sys

import pytest

#: the modules a listing must not import (their import time would dominate the answer)
HEAVY = ("torch", "transformers", "deepspeed")
#: what a listing used to import and reads nothing of (a tenth of its time together): the console log (structlog,
#: with rich and asyncio under it), the run config's schema and file loading (yaml), searchqa's retrieval server and
#: index (http.server, bm25s, PyStemmer), webshop's solver (rapidfuzz), lean's Lean 4 backends
NOT_LISTED = ("structlog", "yaml", "ragen.config.schema", "ragen.config.load", "http.server", "bm25s", "Stemmer",
              "ragen_searchqa.server", "rapidfuzz", "ragen_webshop.solver", "ragen_lean.lean4")

#: runs the CLI as ``python -m ragen`` does, then prints, on the last line of stderr, the modules of ``HEAVY`` and
#: ``NOT_LISTED`` it imported (a name and everything under it)
WRAPPER = """
import atexit, json, runpy, sys
names = {names!r}
def report():
    found = sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in names))
    sys.stderr.write("\\nHEAVY " + json.dumps(found) + "\\n")
atexit.register(report)
sys.argv = ["ragen", *sys.argv[1:]]
runpy.run_module("ragen", run_name="__main__")
""".format(names=HEAVY + NOT_LISTED)


def listing(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [("--help",), ("plugins",), ("plugins", "--json"), ("envs",), ("envs", "--json")])
def test_listing_commands_import_no_torch(args):
    res = listing(*args)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip()
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("HEAVY "), res.stderr[-3000:]
    assert json.loads(last.removeprefix("HEAVY ")) == []


def test_the_slow_import_notice_stays_out_of_json():
    """With a zero threshold every plugin import is 'slow': the notice goes to stderr, stdout stays one JSON
    document."""
    res = subprocess.run([sys.executable, "-m", "ragen", "plugins", "--json"], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "RAGEN_SLOW_IMPORT_S": "0"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "still importing plugin" in res.stderr
    assert "still importing" not in res.stdout
    data = json.loads(res.stdout)
    assert any(p["distribution"] == "ragen-algos" for p in data["plugins"])


def test_an_in_process_listing_leaves_the_collector_whole():
    """``ragen`` run as a command freezes a listing's objects for its exit; a caller that goes on running (click's
    CliRunner here) keeps every object collectable."""
    import gc

    from click.testing import CliRunner

    from ragen.cli import cli

    frozen = gc.get_freeze_count()
    res = CliRunner().invoke(cli, ["plugins", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["plugins"]
    assert gc.get_freeze_count() == frozen
