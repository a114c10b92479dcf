"""ragen-deepcoder: what a candidate sends cannot stall the checker, and control flow cannot pass an assert.

* The checker decodes the candidate's values outside the sandbox. A set of ints that all hash alike (multiples of
  2**61 - 1) cost its hash table O(n^2): forged onto the result or call-reply channel, 40,000-100,000 of them kept one
  submission busy until the 43 s safety kill, and it lost all its tests. The decoder now has an element budget, the
  test's deadline, and refuses more than ``MAX_SAME_HASH`` different values of one hash before building any set or
  dict (also in lists, so the test code's own ``set(f(x))`` stays linear).
* A candidate raising ``StopIteration`` ended ``map``/``filter``/``zip`` quietly in the checker's test code:
  ``assert all(map(f, xs))`` passed. Such exceptions now come back as RuntimeError (as PEP 479 does for generators).
"""

import json
import time

import pytest
from ragen_deepcoder import harness
from ragen_deepcoder import sandbox as sb

import ragen

M = 2**61 - 1  #: ints that differ by a multiple of this hash alike
PYTHON = sb.default_python()
BWRAP_PROBLEM = sb.sandbox_problem(PYTHON)


def needs_bwrap(fn):
    """Sandbox tests: marked ``bwrap``, skipped with the reason where bubblewrap cannot run."""
    skip = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
    return pytest.mark.bwrap(skip(fn))


def wire(value):
    return json.loads(json.dumps(harness._encode(value)))


def colliding(n):
    return [i * M for i in range(n)]


# ---- the decoder -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tag", ["set", "frozenset", "dict", "list", "tuple"])
def test_values_of_one_hash_are_refused_in_linear_time(tag):
    """20,000 colliding ints cost the old decoder (set, dict) or the test code (list, tuple) seconds: now a ValueError
    within milliseconds."""
    items = colliding(20_000)
    assert len({hash(x) for x in items}) == 1
    data = {"t": "dict", "v": [[x, 0] for x in items]} if tag == "dict" else (
        items if tag == "list" else {"t": tag, "v": items})
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="of one hash"):
        harness._decode(data)
    assert time.perf_counter() - t0 < 1.0


def test_crafted_tuple_hashes_are_caught_too():
    """Tuples hash from their items' hashes: tuples of colliding ints collide (whatever else they hold)."""
    data = {"t": "set", "v": [{"t": "tuple", "v": [x, "a"]} for x in colliding(1_000)]}
    with pytest.raises(ValueError, match="of one hash"):
        harness._decode(data)


def test_plain_values_still_decode():
    """Duplicates are one value (a list of 100,000 zeros is fine), a few collisions are normal (-1 and -2 hash
    alike), and the usual wire table round-trips."""
    assert harness._decode(wire([0] * 100_000)) == [0] * 100_000
    assert harness._decode(wire({-1, -2, M, 2 * M})) == {-1, -2, M, 2 * M}
    same = colliding(harness.MAX_SAME_HASH)
    assert harness._decode(wire(set(same))) == set(same)
    value = [1, 2.5, "s", None, True, (1, [2]), {1: "a", "k": (2,)}, {3}, frozenset({4}), b"\x00", 1 + 2j,
             float("nan"), float("inf"), 10**40, [float("nan")] * 50]
    got = harness._decode(wire(value))
    assert repr(got) == repr(value)
    assert harness._decode(wire(list(range(200_000)))) == list(range(200_000))


def test_element_budget_and_deadline():
    with pytest.raises(ValueError, match="too large"):
        harness._decode([0] * (harness.MAX_ELEMENTS + 1))
    with pytest.raises(ValueError, match="too large"):
        harness._decode([[0] * 10] * 10, budget=50)
    assert harness._decode([[0] * 10] * 10, budget=200) == [[0] * 10] * 10
    with pytest.raises(ValueError, match="too long"):
        harness._decode(list(range(5_000)), deadline=time.monotonic() - 1)


def test_control_flow_exceptions_do_not_cross_as_themselves():
    for name in ("StopIteration", "StopAsyncIteration"):
        exc = harness._remote_exception({"exc": name, "error": f"{name}: "})
        assert type(exc) is RuntimeError and name in str(exc)
    for name, cls in (("ValueError", ValueError), ("KeyError", KeyError), ("SystemExit", RuntimeError),
                      ("GeneratorExit", RuntimeError), ("KeyboardInterrupt", RuntimeError), ("nonsense", RuntimeError)):
        assert type(harness._remote_exception({"exc": name, "error": "x"})) is cls


# ---- through the sandbox ---------------------------------------------------------------------------------------------
FORGER = """
import os, json
M = 2**61 - 1
VALUE = {{"t": "set", "v": [i * M for i in range({n})]}}
def send(lines):
    data = "".join(json.dumps(x) + "\\n" for x in lines).encode()
    for fd in range(3, 64):
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass
def f(x):
    if {functional}:
        send([{{"status": "ok", "value": VALUE}}])  # the result pipe of a functional test
    else:
        send([{{"i": i, "call": None, "status": "ok", "value": VALUE}} for i in range(8)])  # a call reply
    os._exit(0)
"""


@pytest.mark.parametrize("kind, n", [("functional", 40_000), ("assert", 100_000)])
@needs_bwrap
def test_a_forged_colliding_set_does_not_stall_the_run(kind, n):
    """7 tests of 4 s: before, the checker hashed the forged set until the safety kill (43 s) and every test was
    lost. Now each test fails at once with the value refused, and the run ends in seconds."""
    run = sb.BwrapRunner(python=PYTHON, limits=sb.Limits(timeout_s=4.0))
    if kind == "functional":
        tests = [{"kind": "functional", "fn_name": "f", "args": [k]} for k in range(7)]
    else:
        tests = [{"kind": "assert", "code": f"assert f({k}) == {{1, 2}}", "prelude": ""} for k in range(7)]
    t0 = time.monotonic()
    res = run.run(FORGER.format(n=n, functional=kind == "functional"), tests)
    elapsed = time.monotonic() - t0
    print(f"{kind}: {n} colliding ints forged, run {elapsed:.1f} s")
    assert res.error is None and len(res.results) == 7
    assert all(r["status"] == "error" and "of one hash" in r["error"] for r in res.results), res.results
    assert elapsed < 25.0  # about 1-6 s here; the safety kill is at 43 s


STOP_TESTS = [
    "assert all(map(f, [1, 2, 3]))",
    "assert not any(map(f, [1, 2, 3]))",
    "assert list(filter(f, [1, 2, 3])) == []",
    "assert [p for p in zip(map(f, [1, 2]), [3, 4])] == []",
    "assert sum(map(f, [1, 2, 3])) == 0",
    "assert next(map(f, [1]), 'none') == 'none'",
]


@pytest.mark.parametrize("exc", ["StopIteration", "StopAsyncIteration"])
@needs_bwrap
def test_control_flow_exceptions_from_the_candidate_never_pass_an_assert(exc):
    run = sb.BwrapRunner(python=PYTHON, limits=sb.Limits(timeout_s=4.0))
    tests = [{"kind": "assert", "code": code, "prelude": ""} for code in STOP_TESTS]
    res = run.run(f"def f(x):\n    raise {exc}\n", tests)
    assert [r["status"] for r in res.results] == ["error"] * len(STOP_TESTS), res.results
    assert all(f"raised {exc}" in r["error"] for r in res.results)
    # a candidate that answers passes the same tests, and other exceptions keep their class for the test code
    honest = "def f(x):\n    return x > 0 if x < 10 else 0\n"
    expected = [True, False, False, False, False, False]  # f(1..3) is True: all/any/filter/zip/sum/next see it
    assert [r["status"] == "ok" for r in run.run(honest, tests).results] == expected
    caught = [{"kind": "assert", "prelude": "",
               "code": "try:\n    f(1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no error')"}]
    assert run.run("def f(x):\n    raise ValueError('bad')\n", caught).results[0]["status"] == "ok"


@needs_bwrap
def test_stop_iteration_does_not_pass_a_jsonl_problem(tmp_path):
    """Through the env: a JSONL problem tested by `assert all(map(...))`; raising StopIteration scores 0."""
    record = {"task_id": "t/positive", "prompt": "Write is_pos(x): True when x > 0.", "entry_point": "is_pos",
              "reference_solution": "def is_pos(x):\n    return x > 0\n",
              "tests": [{"type": "assert", "code": "assert all(map(is_pos, [1, 2, 3]))"},
                        {"type": "assert", "code": "assert not any(map(is_pos, [-1, 0]))"}]}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(record) + "\n")
    env = ragen.make_env("deepcoder-jsonl", path=str(path), val_size=0)
    try:
        env.reset(seed=0)
        _, reward, *_ = env.step("def is_pos(x):\n    raise StopIteration\n")
        assert reward == 0.0
        env.reset(seed=0)
        assert env.step(record["reference_solution"])[1] == 1.0
    finally:
        env.close()

