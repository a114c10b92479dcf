"""The core's own test settings. What a plugin's tests need (contract checks, the two-step training run, the
``fresh_plugins`` fixture) is in ``ragen.testing``, which ragen installs as a pytest plugin."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# tests never read or fill the user's warm-start cache (~/.cache/ragen); a test that wants one sets its own
os.environ.setdefault("RAGEN_CACHE_DIR", os.path.join(__import__("tempfile").mkdtemp(prefix="ragen-test-cache-")))

# the "still importing plugin ... after N s" notice is for users; on a loaded CI machine it would land in the stderr
# that tests compare line by line (tests/plugins/test_loader.py sets its own threshold to test the notice)
os.environ.setdefault("RAGEN_SLOW_IMPORT_S", "300")

from ragen.testing import TINY, ragen_cmd, run_two_steps  # noqa: E402, F401  (the core's tests import them from here)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


# --------------------------------------------------------------------------------------------------------------
# running the suite on several workers (pytest-xdist; addopts in pyproject.toml): `-n 0` runs it in one process
# --------------------------------------------------------------------------------------------------------------

#: at most this many workers for `-n auto`: each holds torch and starts `ragen run` subprocesses of its own, and the
#: timing-sensitive tests (interrupts, deadlines) were written for a machine that is not oversubscribed many times
MAX_WORKERS = 4

#: modules whose tests take minutes (measured with --durations, docs/notes/2026-11-28-test-suite-speed.md): they go
#: to the workers first
LONG_FIRST = ("tests/runs/test_learning_gates.py",)
#: pytest-timeout's limit (seconds) for their tests, fixture included, unless a test sets its own: the gates' shared
#: run takes about 15.5 min on 2 idle cores beside the other worker (933 s on a fresh clone, 2026-11-29), and the 900 s
#: of pyproject.toml would end it before its own subprocess timeout (2,100 s) could say what was slow
LONG_TIMEOUT_S = 2400


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core this process may use, at most ``MAX_WORKERS``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS))


def _shares_a_fixture(item) -> bool:
    """Whether the test uses a module-, class- or package-scoped fixture (a module's shared run, a built model)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and str(d[-1].scope) in ("module", "class", "package") for d in defs)


def _module_ranks(items) -> dict[str, int]:
    """Per module: 0 for ``LONG_FIRST``, 1 when a test is marked slow, 2 when one shares a fixture, 3 otherwise."""
    ranks: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if any(path.endswith(name) for name in LONG_FIRST):
            rank = 0
        elif item.get_closest_marker("slow") is not None:
            rank = 1
        else:
            rank = 2 if _shares_a_fixture(item) else 3
        ranks[path] = min(rank, ranks.get(path, 3))
    return ranks


def pytest_collection_modifyitems(config, items):
    """On xdist's workers (``--dist loadfile``: a module's tests run on one worker, so its module-scoped fixtures are
    built once), the modules most likely to be long come first, so the run does not end with one worker on a long
    module while the other idles; a stable sort keeps each module's own order (the scheduler keeps this order with
    ``--no-loadscope-reorder``). One process (``-n 0``) keeps the files' order, as a reader expects. The tests of
    ``LONG_FIRST`` get ``LONG_TIMEOUT_S``, in either mode."""
    ranks = _module_ranks(items)
    for item in items:
        if ranks[item.nodeid.split("::", 1)[0]] == 0 and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
    if hasattr(config, "workerinput"):  # set on xdist's workers, whose collection the scheduler hands out
        items.sort(key=lambda item: ranks[item.nodeid.split("::", 1)[0]])
