"""The listing commands answer without the training stack: ``ragen --help``, ``ragen plugins``, ``ragen envs`` and
``ragen plugins --json`` import no torch, transformers or deepspeed (importing torch alone takes seconds, and every
plugin is loaded to list its names), and the slow-import notice never reaches ``--json`` output."""

import json
import os
import subprocess
import sys

import pytest

#: the modules a listing must not import (their import time would dominate the answer)
HEAVY = ("torch", "transformers", "deepspeed")

#: runs the CLI as ``python -m ragen`` does, then prints, on the last line of stderr, the heavy modules it imported
WRAPPER = """
import atexit, json, runpy, sys
heavy = {heavy!r}
def report():
    sys.stderr.write("\\nHEAVY " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)) + "\\n")
atexit.register(report)
sys.argv = ["ragen", *sys.argv[1:]]
runpy.run_module("ragen", run_name="__main__")
""".format(heavy=HEAVY)


def listing(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [("--help",), ("plugins",), ("plugins", "--json"), ("envs",)])
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
