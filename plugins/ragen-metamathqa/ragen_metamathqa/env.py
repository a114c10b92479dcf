"""The MetaMathQA environment: answer a math question in up to ``max_attempts`` tries (RAGEN MetamathQA, spec §7).

The whole answer is one action (``action_separator = None``). A correct answer at attempt k (0-based) earns
``2**-k`` (1, 0.5, 0.25) and ends the episode; a wrong one earns 0 and the next observation says
``Incorrect. Please think again.``; an empty (or overlong) answer is invalid, earns 0 and uses an attempt.
**FIX**: RAGEN allows one action per episode, so its retry rewards never happen; here the budget validator requires
``max_turns`` and ``max_actions_per_episode`` to cover every attempt.
"""

from __future__ import annotations

from typing import Any

import attrs

from ragen import ConfigError, Env, EnvConfig, Expert, option
from ragen_metamathqa.generator import FAMILIES
from ragen_metamathqa.grading import AnswerGrader
from ragen_metamathqa.sources import HF_FILE, HF_REPO, Task, make_source
from ragen_metamathqa.symbolic import BACKENDS

SOURCES = ("procedural", "gsm8k", "jsonl", "hf")
CORRECT = "Correct!"
INCORRECT = "Incorrect. Please think again."
NO_ATTEMPTS_LEFT = "Incorrect. No attempts left."


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class MetaMathQAConfig(EnvConfig):
    """MetaMathQA settings: the question source, attempts, and how answers are checked."""

    source: str = option("procedural", "Question source: 'procedural' (offline generator), 'gsm8k' (a folder with "
                         "train.jsonl and test.jsonl), 'jsonl' (one JSONL/JSON file) or 'hf' (meta-math/MetaMathQA).")
    path: str | None = option(None, "gsm8k: the folder (required); jsonl: the file (required); hf: optional local "
                              "copy of the dataset file (skips the Hub).")
    question_field: str = option("question", "Record field holding the question (jsonl, hf).")
    answer_field: str = option("answer", "Record field holding the answer or solution; the gold is extracted after "
                               "'The answer is:', '#### ', the last \\boxed{}, else the whole field (jsonl, hf).")
    val_size: int | None = option(None, "Held-out val items; None = min(500, 10%) (spec 1.5). gsm8k: taken from "
                                  "test.jsonl, the rest of it is test.")
    test_size: int | None = option(None, "Held-out test items of a single-file source; None = as many as val.")
    max_items: int | None = option(None, "Read only the first N records of each file (None = all).")
    hf_repo: str = option(HF_REPO, "Hugging Face dataset repo of source 'hf'.")
    hf_file: str = option(HF_FILE, "File of that repo: a JSON array of {query, response, ...} records.")
    hf_revision: str | None = option(None, "Revision (branch, tag or commit) of the HF dataset; None = main.")
    steps: int | None = option(
        None, "procedural: arithmetic steps per problem, 1-4; None = drawn from 1-4 per problem."
    )
    families: Any = option((), "procedural: template families to draw from (empty = all: "
                                       + ", ".join(FAMILIES) + ").", converter=_tuple_of_str)
    max_attempts: int = option(3, "Attempts per episode; a correct answer at attempt k (0-based) earns 2**-k "
                               "(RAGEN: 1 in practice, since its budget allows one action).")
    max_answer_chars: int = option(300, "Longer answers are invalid (not checked): only the final answer belongs "
                                   "in <answer>.")
    symbolic: bool = option(True, "Run the symbolic check (math-verify or sympy in worker processes) when the "
                            "answers are not both plain numbers; False = numeric and string checks only.")
    symbolic_backend: str = option("auto", "'math_verify', 'sympy', or 'auto' (math-verify when installed).")
    check_timeout_s: float = option(5.0, "Seconds one symbolic check may take; then it stops and the answer counts "
                                    "as wrong (info.check_timeout). Only an answer numerically equal to the gold "
                                    "gets this long: see check_quick_s.")
    check_quick_s: float | None = option(None, "Seconds a symbolic check has to read both answers and compare them "
                                         "by value at two points; an answer of another value is wrong at once, one "
                                         "that cannot be told by value is checked in full within this time, and "
                                         "only a numerically equal one gets check_timeout_s. None = a tenth of "
                                         "check_timeout_s.")
    check_budget_s: float | None = option(None, "Seconds all the symbolic checks of one episode may take together; "
                                          "past it the episode's answers count as wrong (info.check_timeout), so "
                                          "one client of a served env cannot hold the shared workers. None = "
                                          "twice check_timeout_s.")
    check_workers: int = option(2, "Symbolic worker processes shared by every env of this process.")

    def __attrs_post_init__(self) -> None:
        self._check_source()
        if self.steps is not None and self.steps not in (1, 2, 3, 4):
            raise ConfigError(f"steps: must be 1, 2, 3, 4 or None, got {self.steps}")
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise ConfigError(f"families: unknown {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
        for key in ("val_size", "test_size", "max_items"):
            value = getattr(self, key)
            if value is not None and value < (1 if key == "max_items" else 0):
                raise ConfigError(f"{key}: must be >= {1 if key == 'max_items' else 0} or None, got {value}")
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts: must be >= 1, got {self.max_attempts}")
        if self.max_actions_per_turn != 1:
            raise ConfigError(
                f"max_actions_per_turn: must be 1 (the whole answer is one attempt), got {self.max_actions_per_turn}"
            )
        if self.max_answer_chars < 1 or self.check_timeout_s <= 0 or self.check_workers < 1:
            raise ConfigError("max_answer_chars, check_timeout_s, check_workers: must be positive")
        for key in ("check_quick_s", "check_budget_s"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise ConfigError(f"{key}: must be > 0 or None, got {value}")
        if self.check_quick_s is not None and self.check_quick_s > self.check_timeout_s:
            raise ConfigError(f"check_quick_s: must be at most check_timeout_s ({self.check_timeout_s:g}), got "
                              f"{self.check_quick_s:g}")
        if self.symbolic_backend not in BACKENDS:
            raise ConfigError(f"symbolic_backend: expected one of {', '.join(BACKENDS)}, got {self.symbolic_backend!r}")
        super().__attrs_post_init__()

    def _check_source(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.source == "gsm8k" and not self.path:
            raise ConfigError("path: source 'gsm8k' needs path=FOLDER, a folder holding GSM8K's train.jsonl and "
                              "test.jsonl (e.g. path=../shared/data/gsm8k)")
        if self.source == "jsonl" and not self.path:
            raise ConfigError("path: source 'jsonl' needs path=FILE, a JSONL (or JSON array) file of records with "
                              f"{self.question_field!r} and {self.answer_field!r} fields")

    def check_budget(self) -> None:
        """FIX (spec §7): every attempt must be reachable, not just the first (RAGEN's 1-action budget)."""
        have = min(self.max_actions_per_episode, self.max_turns * self.max_actions_per_turn)
        if have < self.max_attempts and not self.allow_unreachable:
            raise ConfigError(
                f"max_turns/max_actions_per_episode: max_attempts={self.max_attempts} needs max_turns >= "
                f"{self.max_attempts} and max_actions_per_episode >= {self.max_attempts} so every retry is reachable, "
                f"but the budget allows {have}; raise the budget, lower max_attempts, or set allow_unreachable=true"
            )


class GoldExpert(Expert):
    """Knows the answer: submits the gold string; its rationale is the worked solution when one is short enough."""

    def next_actions(self, env: MetaMathQAEnv, k: int) -> list[str]:
        if k < 1 or env.task is None or env.finished:
            return []
        return [env.task.gold]

    def rationale(self, env: MetaMathQAEnv) -> str:
        if env.task is None:
            return ""
        short = f"The answer is {env.task.gold}."
        worked = env.task.solution
        if not worked:
            return short
        text = worked if worked.rstrip().endswith(short) else f"{worked} {short}"
        # a demo longer than the prompt's word hint would teach overlong answers (and be cut at response_length)
        return text if len(text.split()) <= env.config.max_tokens else short


class MetaMathQAEnv(Env):
    """Answer a math word problem; several attempts, each correct one worth half the previous."""

    config_cls = MetaMathQAConfig
    reset_options = ("task_index",)
    name = "metamathqa"
    action_separator = None  # the whole answer is one action
    config: MetaMathQAConfig

    def __init__(self, config: MetaMathQAConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        self.procedural = cfg.source == "procedural"  # data-backed sources may repeat questions across seeds
        self.source = make_source(cfg)  # loads (or fetches) data now: a missing file fails at construction
        self.grader = AnswerGrader(cfg.symbolic, cfg.symbolic_backend, cfg.check_timeout_s, cfg.check_workers,
                                   quick_s=cfg.check_quick_s, budget_s=cfg.check_budget_s)
        self.instructions = self._instructions(cfg)
        self.expert = GoldExpert()
        self.task: Task | None = None
        self.attempts = 0
        self.solved = False

    @staticmethod
    def _instructions(cfg: MetaMathQAConfig) -> str:
        n = cfg.max_attempts
        text = ("You are solving math problems. Work out the answer, then put only the final answer in <answer> "
                "</answer>: a number or a simplified expression, without units or words, e.g. <answer>72</answer>.")
        if n == 1:
            return text + " You have 1 attempt; a correct answer earns 1."
        worth = ", ".join(f"{2.0 ** -k:g}" for k in range(n))
        return (text + f' If the reply is "{INCORRECT}", reconsider and answer again. You have {n} attempts; a '
                f"correct answer earns {worth} at attempt 1 to {n}.")

    @property
    def finished(self) -> bool:
        return self.solved or self.attempts >= self.config.max_attempts

    # ---- the contract -------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        task_index = options.pop("task_index", None)
        self.task = self.source.task(seed, self.split, task_index)
        self.task_id = self.task.task_id
        self.attempts, self.solved = 0, False
        self.grader.start_episode()
        return self.task.question, {}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        k = self.attempts
        self.attempts += 1
        info: dict[str, Any] = {"attempt": self.attempts, "check_timeout": False}
        if not action or len(action) > self.config.max_answer_chars:
            why = "empty" if not action else f"longer than {self.config.max_answer_chars} characters"
            obs = f"Invalid answer ({why}). " + self._wrong_text()[len("Incorrect. "):]
            info.update(success=False, action_is_valid=False, action_is_effective=True)
            return obs, 0.0, *self._out_of_attempts(), info
        grade = self.grader.grade(self.task.gold, action)
        self.solved = grade.correct
        info.update(success=grade.correct, action_is_valid=True, action_is_effective=True,
                    check_timeout=grade.timed_out)
        if grade.correct:
            return CORRECT, 2.0**-k, True, False, info
        return self._wrong_text(), 0.0, *self._out_of_attempts(), info

    def _out_of_attempts(self) -> tuple[bool, bool]:
        """(terminated, truncated) after a wrong or invalid attempt: truncated when the attempts are used up (spec
        §7), except with a single attempt, where the one answer is the whole task (terminated, spec §1.1)."""
        if not self.finished:
            return False, False
        return (True, False) if self.config.max_attempts == 1 else (False, True)

    def _wrong_text(self) -> str:
        return NO_ATTEMPTS_LEFT if self.finished else INCORRECT

    def _close(self) -> None:
        self.grader.close()
