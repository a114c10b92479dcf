"""From the model's answer to the program the sandbox runs, and from the sandbox's outputs to pass/fail.

Everything here is text processing: the trainer never parses, compiles or executes model code.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any

from ragen_deepcoder.problems import Problem

_FENCE = re.compile(r"```[ \t]*([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_TAGS = {"python", "py", "python3", "py3", ""}


def extract_code(answer: str) -> str:
    """The code in an answer (spec §8 FIX): with Markdown fences, the first block tagged ``python``/``py`` or untagged,
    else the first block; an unclosed last fence runs to the end; without fences, the whole answer."""
    blocks = [(m.group(1).strip().lower(), m.group(2)) for m in _FENCE.finditer(answer)]
    if not blocks:
        return answer.strip("\n")
    python = [body for tag, body in blocks if (tag.split()[0] if tag else "") in _PY_TAGS]
    return (python[0] if python else blocks[0][1]).strip("\n")


def assemble(problem: Problem, code: str) -> str:
    """The program to run: the problem's prelude (HumanEval imports and helpers), then the code; a bare method
    (``def …``) for a ``class Solution`` starter is indented into that class (RAGEN's rule)."""
    starter = problem.starter_code
    if "class Solution" in starter and "class Solution" not in code and code.lstrip().startswith("def "):
        lines = starter.splitlines()
        head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("class Solution"))
        code = "\n".join(lines[: head + 1]) + "\n" + textwrap.indent(textwrap.dedent(code), "    ")
    return f"{problem.prelude}\n\n{code}\n" if problem.prelude else f"{code}\n"


def sandbox_tests(problem: Problem) -> list[dict[str, Any]]:
    """What the checker gets (harness.py): stdio inputs and functional arguments, which it passes into the sandbox,
    and assert code with the problem's prelude, which it runs itself outside the sandbox (the candidate's functions
    become remote calls). Expected outputs of stdio/functional tests stay in the trainer."""
    out = []
    for t in problem.tests:
        if t["type"] == "stdio":
            item = {"kind": "stdio", "input": t["input"]}
        elif t["type"] == "functional":
            item = {"kind": "functional", "fn_name": t["fn_name"], "args": t["args"]}
        else:
            item = {"kind": "assert", "code": t["code"], "prelude": problem.prelude}
        if problem.time_limit_s:
            item["timeout_s"] = problem.time_limit_s
        out.append(item)
    return out


# ---- comparison ---------------------------------------------------------------------------------------------------
def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _token_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)


def stdout_matches(got: str, expected: str) -> bool:
    """Lines right-stripped with trailing blank lines dropped; else whitespace tokens, floats within 1e-6 relative."""
    if _lines(got) == _lines(expected):
        return True
    a, b = got.split(), expected.split()
    return len(a) == len(b) and all(_token_equal(x, y) for x, y in zip(a, b, strict=True))


def json_normal(value: Any) -> Any:
    """Tuples -> lists, recursively (what the harness does to return values)."""
    if isinstance(value, (list, tuple)):
        return [json_normal(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_normal(v) for k, v in value.items()}
    return value


def value_matches(got: Any, test: dict[str, Any]) -> bool:
    """A functional test passes when the JSON-normalized return value equals ``expected`` (or an ``accept`` value)."""
    got = json_normal(got)
    candidates = [test["expected"], *test.get("accept", [])]
    return any(got == json_normal(c) for c in candidates)


def grade(problem: Problem, results: list[dict[str, Any]]) -> list[bool]:
    """Pass/fail per test; a test without a result (the run was cut short) failed."""
    passed = []
    for i, test in enumerate(problem.tests):
        r = results[i] if i < len(results) else {"status": "missing"}
        if r.get("status") != "ok":
            passed.append(False)
        elif test["type"] == "stdio":
            passed.append(stdout_matches(str(r.get("stdout", "")), test["output"]))
        elif test["type"] == "functional":
            passed.append(value_matches(r.get("value"), test))
        else:
            passed.append(True)
    return passed


def describe_failure(problem: Problem, results: list[dict[str, Any]], passed: list[bool], limit: int = 300) -> str:
    """One line about the first failed test, for the observation."""
    for i, ok in enumerate(passed):
        if ok:
            continue
        r = results[i] if i < len(results) else {}
        test = problem.tests[i]
        if r.get("status") == "ok" and test["type"] == "stdio":
            msg = f"wrong output: expected {test['output'][:80]!r}, got {str(r.get('stdout', ''))[:80]!r}"
        elif r.get("status") == "ok" and test["type"] == "functional":
            msg = f"wrong return value: expected {str(test['expected'])[:80]}, got {str(r.get('value'))[:80]}"
        else:
            msg = f"{r.get('status', 'not run')}: {r.get('error') or ''}".rstrip(": ")
        return f"test {i + 1}: {msg}"[:limit]
    return ""
