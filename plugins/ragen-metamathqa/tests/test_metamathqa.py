"""ragen-metamathqa: generator, gold extraction, answer checking (numeric, symbolic, timeouts), sources, the env
contract, the reward table with reachable retries, and a two-step training run (spec §7)."""

import ast
import json
import os
import re
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from gymnasium.utils import env_checker as gym_checker
from ragen_metamathqa import generator, grading
from ragen_metamathqa.answers import extract_gold, normalize_string, numbers_equal, parse_number, solution_text
from ragen_metamathqa.env import INCORRECT, NO_ATTEMPTS_LEFT
from ragen_metamathqa.grading import AnswerGrader, absurd_reason
from ragen_metamathqa.sources import DatasetUnavailable, load_file, partition
from ragen_metamathqa.symbolic import latex_to_sympy_text, math_verify_equal, sympy_equal

import ragen
from ragen.envs.episode import Episode
from ragen.testing import check_env, ragen_cmd, run_two_steps

SHARED = Path(__file__).resolve().parents[4] / "shared"  # the data folder beside this repository
GSM8K = SHARED / "data" / "gsm8k"
needs_gsm8k = pytest.mark.skipif(not (GSM8K / "test.jsonl").is_file(), reason=f"GSM8K copy not found at {GSM8K}")
OFFLINE_VARIANTS = ["metamathqa", "metamathqa-single"]
NO_SPEC_WARNING = "ignore:.*alternative render modes:UserWarning"


@pytest.fixture(scope="module")
def grader():
    g = AnswerGrader(timeout_s=5.0, workers=1)
    yield g
    g.close()


# ==== registration and config =======================================================================================
def test_variants_registered_with_reachable_retries():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    for name in ("metamathqa", "metamathqa-gsm8k", "metamathqa-hf", "metamathqa-single"):
        assert listed.get(name) == "ragen-metamathqa", name
    env = ragen.make_env("metamathqa")
    cfg = env.config
    assert (cfg.source, cfg.max_attempts, cfg.max_turns, cfg.max_actions_per_turn, cfg.max_actions_per_episode,
            cfg.max_tokens) == ("procedural", 3, 3, 1, 3, 100)
    assert env.action_separator is None and env.action_names is None and env.symbol_legend is None
    env.close()
    single = ragen.make_env("metamathqa-single")
    assert (single.config.max_attempts, single.config.max_turns, single.config.max_actions_per_episode) == (1, 1, 1)
    single.close()
    fields = ragen.env_config_fields("metamathqa-hf")
    assert fields["source"][0] == "hf" and fields["max_tokens"][0] == 200
    assert (fields["question_field"][0], fields["answer_field"][0]) == ("query", "response")


@pytest.mark.parametrize("options", [{"max_turns": 2}, {"max_actions_per_episode": 2}, {"max_attempts": 4}])
def test_budget_validator_rejects_unreachable_retries(options):
    with pytest.raises(ragen.ConfigError, match="max_attempts"):
        ragen.make_env("metamathqa", **options)
    ragen.make_env("metamathqa", allow_unreachable=True, **options).close()


def test_budget_validator_accepts_matching_budgets():
    ragen.make_env("metamathqa", max_attempts=2, max_turns=2, max_actions_per_episode=2).close()
    ragen.make_env("metamathqa", max_attempts=5, max_turns=5, max_actions_per_episode=5).close()


@pytest.mark.parametrize(
    "options, key",
    [
        ({"source": "web"}, "source"),
        ({"steps": 5}, "steps"),
        ({"families": ["change", "nope"]}, "families"),
        ({"max_actions_per_turn": 2}, "max_actions_per_turn"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"symbolic_backend": "maple"}, "symbolic_backend"),
        ({"source": "jsonl"}, "path"),
        ({"val_size": -1}, "val_size"),
    ],
)
def test_bad_config_is_a_config_error_naming_the_key(options, key):
    with pytest.raises(ragen.ConfigError, match=key):
        ragen.make_env("metamathqa", **options)


def test_gsm8k_variant_requires_a_path():
    with pytest.raises(ragen.ConfigError, match=r"path=FOLDER"):
        ragen.make_env("metamathqa-gsm8k")
    with pytest.raises(ragen.ConfigError, match="not a folder"):
        ragen.make_env("metamathqa-gsm8k", path="/nonexistent/gsm8k")


def test_families_option_accepts_a_comma_list():
    env = ragen.make_env("metamathqa", families="ages, rectangle", steps=2)
    assert env.config.families == ("ages", "rectangle")
    for seed in range(20):
        _, info = env.reset(seed=seed)
        assert re.match(r"metamathqa/procedural/(ages|rectangle)/2step/train/s\d+$", info["task_id"])
    env.close()


# ==== the procedural generator ======================================================================================
def _eval(expr: str) -> Fraction:
    """Independent exact evaluation of a generator expression (numbers, + - * /, parentheses only)."""

    def go(node):
        if isinstance(node, ast.Expression):
            return go(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.BinOp):
            a, b = go(node.left), go(node.right)
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            if isinstance(node.op, ast.Div):
                return a / b
            return ops[type(node.op)]
        raise AssertionError(f"unexpected node {ast.dump(node)}")

    return go(ast.parse(expr, mode="eval"))


_LINE = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$|^(\d+)% of (\d+) = (\d+)$")


def _line_ok(line: str) -> bool:
    m = _LINE.match(line)
    assert m, line
    if m.group(5):
        return Fraction(int(m.group(6)) * int(m.group(5)), 100) == int(m.group(7))
    a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
    value = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: Fraction(a, b)}[op]()
    return value == c


def test_generator_problems_are_exact_and_self_consistent():
    for family in generator.FAMILIES:
        for steps in generator.STEPS:
            for seed in range(60):
                p = generator.draw(generator._rng("test", family, steps, seed), family, steps)
                assert isinstance(p.answer, int) and 0 <= p.answer <= generator.MAX_ANSWER, p
                assert len(p.lines) == steps == p.steps, p
                assert _eval(p.expression) == p.answer, p
                assert all(_line_ok(line) for line in p.lines), p
                assert p.lines[-1].endswith(f"= {p.answer}"), p
                # every number the solution uses is stated in the question (or is 2 or 100: doubling, halving, %)
                stated = {int(n) for n in re.findall(r"\d+", p.question)}
                used = {int(n) for n in re.findall(r"\d+", p.expression)}
                assert used <= stated | generator.IMPLICIT_CONSTANTS, (p.question, p.expression)
                assert p.question.endswith("?") and "{" not in p.question, p.question


def test_generator_is_seeded_varied_and_multi_step():
    problems = [generator.generate(seed) for seed in range(300)]
    assert problems == [generator.generate(seed) for seed in range(300)]
    assert len({p.question for p in problems}) >= 295
    assert {p.family for p in problems} == set(generator.FAMILIES) and len(generator.FAMILIES) >= 8
    assert {p.steps for p in problems} == {1, 2, 3, 4}
    # at least two phrasings of the same family
    starts = {p.question.split()[0] for p in problems if p.family == "change"}
    assert "At" in starts and len(starts) > 2
    fixed = [generator.generate(seed, steps=3) for seed in range(50)]
    assert all(p.steps == 3 and len(p.lines) == 3 for p in fixed)


def test_generator_splits_are_disjoint():
    train = {generator.generate(s, "train").question for s in range(1500)}
    val = {generator.generate(s, "val").question for s in range(150)}
    test = {generator.generate(s, "test").question for s in range(150)}
    assert not (train & val) and not (train & test) and not (val & test)
    assert all(generator.split_of(q) == "val" for q in val)


def test_env_obs_is_a_function_of_config_seed_and_split():
    a, b = ragen.make_env("metamathqa"), ragen.make_env("metamathqa")
    for seed in (0, 1, 10000, 123):
        oa, ia = a.reset(seed=seed)
        ob, ib = b.reset(seed=seed, options={"rollout_index": 3})
        assert (oa, ia["task_id"]) == (ob, ib["task_id"])
        ov, iv = a.reset(seed=seed, options={"split": "val"})
        assert ov != oa and iv["task_id"].endswith(f"/val/s{seed}")
    assert len({a.reset(seed=s)[0] for s in range(10)}) == 10
    two = ragen.make_env("metamathqa", steps=2)
    assert two.reset(seed=0)[0] != a.reset(seed=0)[0] or a.task.solution.count("=") == 2
    for env in (a, b, two):
        env.close()


# ==== gold extraction and numeric reading ===========================================================================
@pytest.mark.parametrize(
    "text, gold",
    [
        ("Janet sells 9 eggs.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18", "18"),
        ("So the total is 1,000 dollars.\n#### 1,000", "1000"),
        ("We get $x=\\frac{1}{2}$.\nThe answer is: \\frac{1}{2}", "\\frac{1}{2}"),
        ("The answer is: 5\nThe answer is: 7", "7"),
        ("so $\\boxed{12}$ apples.\nThe answer is: 12", "12"),
        ("Thus the result is $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt{3}}{2}"),
        ("First $\\boxed{1}$ then $\\boxed{2}$", "2"),
        ("  42  ", "42"),
        ("broken \\boxed{12", "broken \\boxed{12"),
    ],
)
def test_extract_gold(text, gold):
    assert extract_gold(text) == gold


def test_solution_text_drops_annotations_and_final_marker():
    text = "He buys 2*3=<<2*3=6>>6 pens\nThen 6+1=<<6+1=7>>7\n#### 7"
    assert solution_text(text) == "He buys 2*3=6 pens. Then 6+1=7."
    assert solution_text("Some words.\nThe answer is: 3") == "Some words."


@pytest.mark.parametrize(
    "text, value",
    [
        ("72", 72), ("72.0", 72), ("\\boxed{72}", 72), ("$72", 72), ("\\$72", 72), ("72.", 72), ("1,000", 1000),
        ("1,234,567.5", Fraction(2469135, 2)), ("1/2", Fraction(1, 2)), ("\\frac{1}{2}", Fraction(1, 2)),
        ("\\dfrac{3}{4}", Fraction(3, 4)), ("-\\frac{1}{2}", Fraction(-1, 2)), ("\\frac12", Fraction(1, 2)),
        ("50%", 50), ("\u22123", -3), ("-0.25", Fraction(-1, 4)), (".5", Fraction(1, 2)), ("\\boxed{\\boxed{7}}", 7),
    ],
)
def test_parse_number_accepts(text, value):
    parsed = parse_number(text)
    assert parsed is not None and parsed[0] == value


@pytest.mark.parametrize("text", ["1,2", "12,34", "1/0", "x", "", "1e5", "2+2", "72 dollars", "9" * 200, "(1, 2)",
                                  "\\frac{1}{0}", "1 000"])
def test_parse_number_rejects(text):
    assert parse_number(text) is None


def test_numbers_equal_exact_and_relative():
    assert numbers_equal(parse_number("0.5"), parse_number("1/2"))
    assert not numbers_equal(parse_number("1000000"), parse_number("1000001"))
    assert numbers_equal(parse_number("1/3"), parse_number("0.3333333"))  # a rounded decimal: relative 1e-6
    assert not numbers_equal(parse_number("1/3"), parse_number("0.333"))
    assert not numbers_equal(parse_number("1/3"), parse_number("1/3000"))


def test_normalize_string():
    assert normalize_string("\\boxed{ \\left( A \\right) }.") == normalize_string("(a)")
    assert normalize_string("$Yes$.") == "yes"


# ==== answer checking ===============================================================================================
@pytest.mark.parametrize(
    "gold, pred, method",
    [
        ("72", "72", "numeric"), ("72", "72.0", "numeric"), ("72", "\\boxed{72}", "numeric"), ("72", "$72", "numeric"),
        ("1000", "1,000", "numeric"), ("0.5", "1/2", "numeric"), ("1/2", "0.5", "numeric"),
        ("0.5", "\\frac{1}{2}", "numeric"), ("\\frac{1}{2}", "0.5", "numeric"), ("18", "18.", "numeric"),
        ("x+1", "1+x", "symbolic"), ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2", "symbolic"), ("72", "70 + 2", "symbolic"),
        ("\\pi", "\\pi", "string"), ("(A)", " (a) ", "string"),
    ],
)
def test_grade_equal_answers(grader, gold, pred, method):
    grade = grader.grade(gold, pred)
    assert grade.correct and grade.method == method and not grade.timed_out


@pytest.mark.parametrize(
    "gold, pred",
    [("72", "73"), ("72", "72.5"), ("72", "hello"), ("1000", "1,0000"), ("12", "1,2"), ("0.5", "\\frac{1}{3}"),
     ("x+1", "x+2"), ("\\frac{1}{2}", "1/3"), ("72", "72!")],
)
def test_grade_unequal_answers(grader, gold, pred):
    assert not grader.grade(gold, pred).correct


def test_sympy_backend_in_process():
    assert sympy_equal("x+1", "1+x") and sympy_equal("\\frac{1}{2}", "0.5") and sympy_equal("2\\sqrt{2}", "\\sqrt{8}")
    assert sympy_equal("\\boxed{\\frac{\\pi}{2}}", "pi/2")
    assert not sympy_equal("2", "3") and not sympy_equal("x", "hello world")


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "x.__class__", "a.b", "open(1)", "\\unknown{1}",
                                  "lambda: 1", "(1).real"])
def test_sympy_reading_rejects_code(text):
    assert latex_to_sympy_text(text) is None
    assert not sympy_equal("1", text)


def test_math_verify_backend_in_process():
    pytest.importorskip("math_verify")
    assert math_verify_equal("\\frac{1}{2}", "0.5") and math_verify_equal("x+1", "1+x")
    assert not math_verify_equal("72", "hello") and not math_verify_equal("2", "3")


def test_sympy_backend_through_a_worker():
    g = AnswerGrader(backend="sympy", workers=1)
    try:
        assert g.backend == "sympy"
        assert g.grade("x^2-1", "(x-1)(x+1)").correct and not g.grade("x^2", "2x").correct
    finally:
        g.close()


def wait_for_idle_workers(pool, n, limit_s=180.0):
    """The pool's idle worker pids once it has ``n`` (a warm pool starts its standby in the background)."""
    deadline = time.monotonic() + limit_s
    while len(pool.live_workers) < n:
        assert time.monotonic() < deadline, f"the pool never had {n} idle workers"
        time.sleep(0.05)
    return pool.live_workers


def test_symbolic_timeout_in_a_thread_kills_and_replaces_the_worker():
    g = AnswerGrader(timeout_s=1.0, workers=1)
    try:
        assert g.grade("x+1", "1+x").correct  # worker started (its start-up is not part of the check's time)
        before = wait_for_idle_workers(g._pool, 2)  # one worker plus the warm standby
        out = {}

        def run():
            t = time.monotonic()
            # a 369-million-digit power: the grader refuses it (absurd), the pool alone would run it for minutes
            out["slow"] = g._pool.equal("1", "9^{9^{9}}", g.timeout_s)
            out["elapsed"] = time.monotonic() - t
            t = time.monotonic()
            out["after"] = g.grade("2x", "x+x")
            out["after_s"] = time.monotonic() - t

        worker = threading.Thread(target=run)
        worker.start()
        worker.join(120)
        assert not worker.is_alive()
        assert out["slow"] is None
        assert 1.0 <= out["elapsed"] < 10.0, out["elapsed"]
        # the standby took over at once: the next answer did not wait for a start-up
        assert out["after"].correct and not out["after"].timed_out and out["after_s"] < 1.0
        killed = [pid for pid in before if pid not in g._pool.live_workers]
        assert len(killed) == 1 and g._pool.timeouts == 1
        with pytest.raises(ProcessLookupError):
            os.kill(killed[0], 0)
        assert len(wait_for_idle_workers(g._pool, 2)) == 2  # and a new standby started in the background
    finally:
        g.close()


def test_a_worker_that_died_is_replaced_without_losing_the_check():
    g = AnswerGrader(workers=1, backend="sympy")
    try:
        assert g.grade("2x", "x+x").correct
        pid = wait_for_idle_workers(g._pool, 2)[-1]  # the next check takes this one
        os.kill(pid, 9)  # as the OOM killer or the worker's CPU limit would
        grade = g.grade("3x", "x+2x")
        assert grade.correct and not grade.timed_out
        assert pid not in g._pool.live_workers and 1 <= len(g._pool.live_workers) <= 2
    finally:
        g.close()


def test_concurrent_checks_from_many_threads_share_the_pool():
    from concurrent.futures import ThreadPoolExecutor

    g = AnswerGrader(workers=2)
    cases = [(f"{i}x", f"x*{i}", True) for i in range(2, 10)] + [(f"{i}x", f"x+{i}", False) for i in range(2, 10)]
    try:
        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(lambda c: g.grade(c[0], c[1]), cases))
        assert [r.correct for r in results] == [c[2] for c in cases]
        assert all(r.method == "symbolic" and not r.timed_out for r in results)
        assert len(g._pool.live_workers) <= 3  # two workers and the standby
    finally:
        g.close()


def test_timeout_in_a_thread_of_another_process(tmp_path):
    script = (
        "import threading\n"
        "from ragen_metamathqa.grading import AnswerGrader\n"
        "import time\n"
        "g = AnswerGrader(timeout_s=1.0, workers=1)\n"
        "g.grade('x+1', '1+x')\n"
        "while len(g._pool.live_workers) < 2:  # warm: a worker and its standby\n"
        "    time.sleep(0.05)\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.extend([g._pool.equal('1', '9^{9^{9}}', 1.0), "
        "g.grade('1/2', '\\\\frac{2}{4} + 0')]))\n"
        "t.start(); t.join()\n"
        "g.close()\n"
        "print(out[0] is None, out[1].correct)\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("text, absurd", [
    ("9^{9^{9^{9}}}", True), ("9^{9^{9}}", True), ("9^9^9", True), ("9^(9^9)", True), ("2**99999", True),
    ("x^{100000}", True), ("2^{3\\cdot 10^{5}}", True), ("1.5^{20000}", True), ("100000!", True),
    ("x^{x^{x^{x^{x}}}}", True),
    ("2^{10}", False), ("x^2+1", False), ("10^{100}", False), ("2^{10000}", False), ("2^{2^{2^{2}}}", False),
    ("e^{i\\pi}", False), ("20!", False), ("\\frac{1}{2}", False), ("a^{b}", False), ("2^3^2", False),
])
def test_absurd_expressions_are_recognised(text, absurd):
    assert (absurd_reason(text) is not None) == absurd, absurd_reason(text)


def test_absurd_answer_is_answered_wrong_quickly_without_a_solver():
    """A regression: 9^{9^{9^{9}}} cost 3-15.6 s per step (the 5 s check timeout plus a worker restart)."""
    g = AnswerGrader(timeout_s=5.0, workers=7)  # a pool of its own (pools are shared per backend and size)
    try:
        t0 = time.monotonic()
        grades = [g.grade(gold, "9^{9^{9^{9}}}") for gold in ("81", "x+1", "9^{9}")]
        elapsed = time.monotonic() - t0
        assert all(not gr.correct and gr.method == "rejected" and not gr.timed_out for gr in grades)
        assert elapsed < 1.0 and g._pool.timeouts == 0 and g._pool.live_workers == []  # no worker ever ran
    finally:
        g.close()
    env = ragen.make_env("metamathqa")
    try:
        env.reset(seed=5)
        t0 = time.monotonic()
        obs, reward, term, trunc, info = env.step("9^{9^{9^{9}}}")
        assert (obs, reward, info["check_timeout"]) == (INCORRECT, 0.0, False) and time.monotonic() - t0 < 1.0
    finally:
        env.close()


def test_env_reports_check_timeout(monkeypatch):
    monkeypatch.setattr(grading, "absurd_reason", lambda text: None)  # let the absurd answer reach the solver
    env = ragen.make_env("metamathqa", check_timeout_s=1.0)
    try:
        env.reset(seed=5)
        obs, reward, term, trunc, info = env.step("9^{9^{9}}")
        assert (obs, reward, term, info["check_timeout"], info["success"]) == (INCORRECT, 0.0, False, True, False)
        assert env.step(env.task.gold)[1] == 0.5
    finally:
        env.close()


# ==== rewards and attempts ==========================================================================================
def test_wrong_then_right_yields_0_then_half():
    env = ragen.make_env("metamathqa")
    obs0, _ = env.reset(seed=10000)
    gold = env.task.gold
    obs, reward, term, trunc, info = env.step(str(int(gold) + 1))
    assert (obs, reward, term, trunc) == (INCORRECT, 0.0, False, False)
    assert info == {"attempt": 1, "check_timeout": False, "success": False, "action_is_valid": True,
                    "action_is_effective": True}
    obs, reward, term, trunc, info = env.step(gold)
    assert (obs, reward, term, trunc, info["success"], info["attempt"]) == ("Correct!", 0.5, True, False, True, 2)
    with pytest.raises(RuntimeError):
        env.step(gold)
    env.close()


def test_wrong_then_right_through_the_core_episode():
    env = ragen.make_env("metamathqa")
    ep = Episode(env)
    ep.reset(seed=10001)
    first = ep.step_turn("-1")
    second = ep.step_turn(f"\\boxed{{{env.task.gold}}}")
    assert (first.reward, first.penalty, first.done) == (0.0, 0.0, False)
    assert (second.reward, second.done, ep.success, ep.truncated) == (0.5, True, True, False)
    env.close()


@pytest.mark.parametrize("k, want", [(0, 1.0), (1, 0.5), (2, 0.25)])
def test_reward_table(k, want):
    env = ragen.make_env("metamathqa")
    ep = Episode(env)
    ep.reset(seed=77)
    rewards = [ep.step_turn("-1").reward for _ in range(k)] + [ep.step_turn(env.task.gold).reward]
    assert rewards == [0.0] * k + [want] and ep.success and ep.done
    env.close()


def test_all_wrong_truncates_at_max_attempts():
    env = ragen.make_env("metamathqa")
    env.reset(seed=3)
    steps = [env.step("-1") for _ in range(3)]
    assert [s[1] for s in steps] == [0.0, 0.0, 0.0]
    assert [s[3] for s in steps] == [False, False, True] and not any(s[2] for s in steps)
    assert steps[-1][0] == NO_ATTEMPTS_LEFT and steps[-1][4]["attempt"] == 3
    env.close()


def test_single_variant_is_one_attempt():
    env = ragen.make_env("metamathqa-single")
    env.reset(seed=4)
    obs, reward, term, trunc, info = env.step("-1")
    assert (obs, reward, term, trunc, info["success"]) == (
        NO_ATTEMPTS_LEFT,
        0.0,
        True,
        False,
        False,
    )  # the one answer ends the task
    env.reset(seed=4)
    assert env.step(env.task.gold)[1:4] == (1.0, True, False)
    assert "1 attempt" in env.instructions and "again" not in env.instructions
    env.close()


def test_empty_and_overlong_answers_are_invalid_attempts():
    env = ragen.make_env("metamathqa", max_answer_chars=50)
    env.reset(seed=8)
    obs, reward, term, trunc, info = env.step("")
    assert (reward, term, trunc, info["action_is_valid"], info["attempt"]) == (0.0, False, False, False, 1)
    assert obs.startswith("Invalid answer (empty)")
    obs, reward, *_ , info = env.step("7" * 51)
    assert not info["action_is_valid"] and "longer than 50" in obs and info["attempt"] == 2
    assert env.step(env.task.gold)[1] == 0.25
    env.close()


def test_unparsed_or_empty_answer_in_the_core_uses_a_turn_not_an_attempt():
    env = ragen.make_env("metamathqa")
    ep = Episode(env)
    ep.reset(seed=9)
    for answer in (None, "  "):
        res = ep.step_turn(answer)
        assert res.executed == [] and res.penalty == -0.1 and env.attempts == 0
    last = ep.step_turn(env.task.gold)
    assert last.reward == 1.0 and ep.done and ep.turn == 3
    env.close()


def test_instructions_follow_live_config():
    env = ragen.make_env("metamathqa")
    assert env.instructions.startswith("You are solving math problems.")
    assert (
        "<answer>72</answer>" in env.instructions
        and "1, 0.5, 0.25" in env.instructions
        and INCORRECT in env.instructions
    )
    four = ragen.make_env("metamathqa", max_attempts=4, max_turns=4, max_actions_per_episode=4)
    assert "1, 0.5, 0.25, 0.125" in four.instructions and "You have 4 attempts" in four.instructions
    env.close()
    four.close()


# ==== expert ========================================================================================================
@pytest.mark.parametrize("name", OFFLINE_VARIANTS)
def test_expert_solves_its_episodes_first_try(name):
    env = ragen.make_env(name)
    for i in range(40):
        ep = Episode(env)
        ep.reset(seed=10_000 + i, options={"split": ("train", "val", "test")[i % 3]})
        plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
        assert plan == [env.task.gold]
        res = ep.step_turn(plan[0])
        assert res.reward == 1.0 and ep.success and ep.done
        assert env.expert.next_actions(env, 1) == []
        rationale = env.expert.rationale(env)
        assert rationale.endswith(f"The answer is {env.task.gold}.") and len(rationale.split()) <= env.config.max_tokens
    env.close()


# ==== data sources ==================================================================================================
@needs_gsm8k
def test_every_gsm8k_test_answer_parses_and_self_verifies(grader):
    rows = [json.loads(line) for line in (GSM8K / "test.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == 1319
    for row in rows:
        gold = extract_gold(row["answer"])
        assert gold == row["answer"].split("####")[-1].strip().replace(",", "")
        parsed = parse_number(gold)
        assert parsed is not None, gold
        assert grader.grade(gold, gold) .correct
        assert grader.grade(gold, f"\\boxed{{{gold}}}").method == "numeric"
        assert grader.grade(gold, f"\\boxed{{{gold}}}").correct
        value = parsed[0]
        if value.denominator == 1:
            assert grader.grade(gold, f"{int(value):,}").correct and grader.grade(gold, f"{int(value)}.0").correct
        assert not grader.grade(gold, str(value + 1)).correct


@needs_gsm8k
def test_gsm8k_source_splits():
    env = ragen.make_env("metamathqa-gsm8k", path=str(GSM8K))
    data = env.source
    assert len(data.splits["train"]) == 7473 and data.skipped == 0
    val, test = data.splits["val"], data.splits["test"]
    assert len(val) == 131 and len(val) + len(test) == 1319  # min(500, 10 %) of test.jsonl is val
    assert not {it.row for it in val} & {it.row for it in test}
    assert [it.row for it in test] == sorted(it.row for it in test)  # file order
    obs, info = env.reset(seed=10000 + 7473)  # index = seed mod |train|
    assert obs == data.splits["train"][10000 % 7473].question
    assert info["task_id"] == f"metamathqa/gsm8k/train/{10000 % 7473}"
    obs, info = env.reset(seed=0, options={"split": "test", "task_index": 5})
    assert obs == test[5].question and info["task_id"] == f"metamathqa/gsm8k/test/{test[5].row}"
    with pytest.raises(ragen.ConfigError, match="task_index"):
        env.reset(seed=0, options={"task_index": 10**6})
    env.close()
    other = ragen.make_env("metamathqa-gsm8k", path=str(GSM8K), val_size=50)
    assert len(other.source.splits["val"]) == 50 and other.source is not data
    again = ragen.make_env("metamathqa-gsm8k", path=str(GSM8K))
    assert again.source is data  # loaded once per process
    other.close()
    again.close()


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_source_with_own_fields(tmp_path):
    rows = [{"problem": f"What is {i} + {i}?", "solution": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(40)]
    rows[3] = {"problem": "What is half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$."}
    rows[4] = {"problem": "Pick", "solution": "The answer is: 1,500"}
    rows.append({"problem": "no answer field"})
    rows.append({"solution": "#### 3"})
    path = _write_jsonl(tmp_path / "mine.jsonl", rows)
    env = ragen.make_env("metamathqa", source="jsonl", path=str(path), question_field="problem",
                         answer_field="solution", val_size=5, test_size=3)
    splits = env.source.splits
    assert (len(splits["train"]), len(splits["val"]), len(splits["test"]), env.source.skipped) == (32, 5, 3, 2)
    rows_seen = [it.row for s in splits.values() for it in s]
    assert sorted(rows_seen) == list(range(40))
    golds = {it.row: it.gold for s in splits.values() for it in s}
    assert (golds[0], golds[3], golds[4], golds[39]) == ("0", "\\frac{1}{2}", "1,500", "78")
    assert not env.procedural
    for split in ("train", "val", "test"):
        for seed in range(10):
            env.reset(seed=seed, options={"split": split})
            assert env.step(env.expert.next_actions(env, 1)[0])[1] == 1.0
    env.reset(seed=0, options={"task_index": [it.row for it in splits["train"]].index(4)})
    assert env.step("1500")[1] == 1.0
    env.close()


def test_single_file_partition_is_random0_and_disjoint():
    from ragen_metamathqa.sources import Item

    items = [Item(i, f"q{i}", "a", "1") for i in range(100)]
    parts = partition(items, 10, 10)
    import random

    order = list(range(100))
    random.Random(0).shuffle(order)
    assert [it.row for it in parts["val"]] == sorted(order[:10])
    assert [it.row for it in parts["test"]] == sorted(order[10:20])
    assert len(parts["train"]) == 80


def test_json_array_file_and_bad_files(tmp_path):
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps([{"query": f"q{i}", "response": f"... The answer is: {i}"} for i in range(30)]))
    data = load_file(arr, "query", "response", None, None, None, "hf")
    assert data.label == "hf:arr.json" and len(data.splits["val"]) == 3 and len(data.splits["test"]) == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a", "answer": "1"}\n{oops\n')
    with pytest.raises(ragen.ConfigError, match="line 2"):
        ragen.make_env("metamathqa", source="jsonl", path=str(bad))
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ragen.ConfigError, match="cannot read"):
        load_file(binary, "question", "answer", None, None, None)
    with pytest.raises(ragen.ConfigError, match="val_size/test_size"):
        load_file(arr, "query", "response", 15, 15, None)
    with pytest.raises(ragen.ConfigError, match="question_field"):
        load_file(arr, "question", "answer", None, None, None)


# ==== the Hugging Face source ========================================================================================
def test_hf_offline_without_cache_fails_with_one_clear_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hub")}
    res = subprocess.run(ragen_cmd("play", "metamathqa-hf"), capture_output=True, text=True, timeout=300, env=env,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    msg = lines[0]
    assert msg.startswith("Error: ") and "meta-math/MetaMathQA" in msg and "HF_HUB_OFFLINE" in msg
    assert "hf download meta-math/MetaMathQA MetaMathQA-395K.json --repo-type dataset" in msg and "path=FILE" in msg
    check = subprocess.run(ragen_cmd("check-env", "metamathqa-hf"), capture_output=True, text=True, timeout=300,
                           env=env)
    assert check.returncode == 1 and "HF_HUB_OFFLINE" in check.stdout and "FAIL" in check.stdout


def _hub_cache(root: Path, records) -> Path:
    """The Hugging Face cache layout holding one MetaMathQA-format file (what a past download leaves behind)."""
    commit = "0" * 40
    repo = root / "datasets--meta-math--MetaMathQA"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "MetaMathQA-395K.json").write_text(json.dumps(records))
    return root


METAMATH_RECORDS = [
    {"query": f"What is {i} times 3?", "response": f"We compute {i} * 3 = {3 * i}.\nThe answer is: {3 * i}",
     "type": "GSM_Rephrased", "original_question": "..."} for i in range(36)
] + [{"query": "Simplify 2/4.", "response": "Halve both: $\\frac{1}{2}$.\nThe answer is: \\frac{1}{2}",
      "type": "MATH_AnsAug", "original_question": "..."}]


def test_hf_source_reads_the_hub_cache_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(_hub_cache(tmp_path / "hub", METAMATH_RECORDS)))
    env = ragen.make_env("metamathqa-hf")
    splits = env.source.splits
    assert (len(splits["train"]), len(splits["val"]), len(splits["test"])) == (31, 3, 3)
    assert env.source.label == "hf:MetaMathQA-395K.json"
    golds = {it.row: it.gold for s in splits.values() for it in s}
    assert golds[36] == "\\frac{1}{2}" and golds[5] == "15"
    split = next(s for s, items in splits.items() if any(it.row == 36 for it in items))
    index = [it.row for it in splits[split]].index(36)
    env.reset(seed=0, options={"split": split, "task_index": index})
    assert env.step("0.5")[1] == 1.0  # numeric equality with a LaTeX gold
    env.reset(seed=1)
    assert env.expert.rationale(env).startswith("We compute")
    env.close()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(DatasetUnavailable, match="HF_HUB_OFFLINE"):
        ragen.make_env("metamathqa-hf", hf_file="Other.json")


@pytest.mark.filterwarnings(NO_SPEC_WARNING)
def test_hf_variant_passes_check_env_from_a_cached_copy(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(_hub_cache(tmp_path / "hub", METAMATH_RECORDS)))
    checks = check_env("metamathqa-hf")
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


# ==== the env contract ==============================================================================================
@pytest.mark.filterwarnings(NO_SPEC_WARNING)
@pytest.mark.parametrize("name", OFFLINE_VARIANTS)
def test_ragen_check_env(name):
    checks = check_env(name)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@needs_gsm8k
@pytest.mark.filterwarnings(NO_SPEC_WARNING)
def test_ragen_check_env_gsm8k():
    checks = check_env("metamathqa-gsm8k", path=str(GSM8K))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.filterwarnings(NO_SPEC_WARNING)
@pytest.mark.parametrize("name", OFFLINE_VARIANTS + ["metamathqa-gsm8k"])
def test_gymnasium_check_env(name):
    if name == "metamathqa-gsm8k" and not (GSM8K / "test.jsonl").is_file():
        pytest.skip(f"GSM8K copy not found at {GSM8K}")
    env = ragen.make_env(name, **({"path": str(GSM8K)} if name.endswith("gsm8k") else {}))
    gym_checker.check_env(env, skip_close_check=False)
    env.close()


def test_close_releases_the_shared_worker_pool():
    a, b = ragen.make_env("metamathqa", check_workers=3), ragen.make_env("metamathqa", check_workers=3)
    assert a.grader._pool is b.grader._pool
    pool = a.grader._pool
    a.reset(seed=0)
    a.step("1 + 1")  # a symbolic check starts a worker
    pids = pool.live_workers
    assert pids
    a.close()
    a.close()
    assert pool.live_workers == pids  # b still holds the pool
    b.close()
    assert pool.live_workers == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# ==== training smoke test ===========================================================================================
@pytest.mark.slow
def test_two_step_grpo_run(tmp_path):
    _, rows = run_two_steps("metamathqa", tmp_path)
    steps = [r for r in rows if "rollout/success" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all("rollout/metamathqa/success" in r for r in steps)
