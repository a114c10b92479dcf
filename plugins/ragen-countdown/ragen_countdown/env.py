"""The Countdown env (environments.md §5): reach the target with every given number once, single turn.

Observation ``Target: {target}, nums: {nums}``; the whole answer is one action (``action_separator = None``), checked
by the AST whitelist of ``ragen_countdown.verify`` (never ``eval``); reward 1 / 0.1 / 0 (RAGEN); ``terminated``
after the answer. Instances come from the seeded generator (``source="generated"``) or from Countdown files
(``source="file"``); the expert is the exhaustive solver.
"""

from __future__ import annotations

from typing import Any

import attrs

from ragen import ConfigError, Env, EnvConfig, Expert, option
from ragen_countdown import data as datamod
from ragen_countdown.generator import generate
from ragen_countdown.solver import MAX_NUMS, find_tree, steps
from ragen_countdown.verify import Verdict, check_answer

SOURCES = ("generated", "file")


def _paths(value: Any) -> tuple[str, ...]:
    """One path (str/PathLike) or a list of them; None or "" = none."""
    if value is None or value == "":
        return ()
    if isinstance(value, str) or hasattr(value, "__fspath__"):
        return (str(value),)
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class CountdownConfig(EnvConfig):
    """Instance source, generator ranges and file settings of the Countdown env."""

    source: str = option(
        "generated", "'generated' (own seeded generator) or 'file' (rows of data_files).",
        validator=attrs.validators.in_(SOURCES),
    )
    min_nums: int = option(3, "Fewest numbers of a generated instance (the count is uniform in [min_nums, max_nums]).")
    max_nums: int = option(4, f"Most numbers of a generated instance (RAGEN's data: 3 to 4; at most {MAX_NUMS}).")
    min_num: int = option(1, "Smallest number a generated instance can contain.")
    max_num: int = option(99, "Largest number a generated instance can contain.")
    min_target: int = option(1, "Smallest target of a generated instance.")
    max_target: int = option(100, "Largest target of a generated instance.")
    additive_only: bool = option(
        False, "Keep only instances some sum of the numbers with signs +/-1 solves (RAGEN's additive filter); "
        "applies to generated and file instances."
    )
    data_files: Any = option(
        (), "Countdown files for source='file': .jsonl or .parquet (needs pyarrow) with 'target' and 'nums' per row "
        "(Jiayi-Pan/Countdown-Tasks-3to4 layout), or folders of them; one path or a list.",
        converter=_paths,
    )
    val_files: Any = option(
        (), "Optional separate validation files; when empty, data_files is split into train and val (Random(0)).",
        converter=_paths,
    )
    val_size: int | None = option(
        None, "Rows of data_files held out as the val split; None = min(500, 10 %) (ignored with val_files)."
    )
    max_instances: int = option(20_000, "Rows read from the files, first ones first (RAGEN: 20,000).")

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.min_nums <= self.max_nums <= MAX_NUMS:
            raise ConfigError(
                f"min_nums/max_nums: need 1 <= min_nums <= max_nums <= {MAX_NUMS}, got {self.min_nums}, {self.max_nums}"
            )
        if not 0 <= self.min_num <= self.max_num:
            raise ConfigError(f"min_num/max_num: need 0 <= min_num <= max_num, got {self.min_num}, {self.max_num}")
        if self.min_target > self.max_target:
            raise ConfigError(f"min_target/max_target: empty range [{self.min_target}, {self.max_target}]")
        if self.additive_only and self.max_target < 1:
            raise ConfigError("max_target: additive_only needs targets >= 1 (answers cannot start with a minus sign)")
        if self.val_size is not None and self.val_size < 0:
            raise ConfigError(f"val_size: must be >= 0 or None, got {self.val_size}")
        if self.max_instances < 1:
            raise ConfigError(f"max_instances: must be >= 1, got {self.max_instances}")
        if self.source == "file" and not self.data_files:
            raise ConfigError(
                "data_files: source='file' needs Countdown files (e.g. -o data_files=path/to/train.parquet)"
            )
        super().__attrs_post_init__()


class CountdownExpert(Expert):
    """The solver's expression for the current instance (a +/- sum when one exists); ``[]`` once answered."""

    def next_actions(self, env: CountdownEnv, k: int) -> list[str]:
        if env.nums is None or env.answered or k < 1:
            return []
        return [env.expression]

    def rationale(self, env: CountdownEnv) -> str:
        if env.nums is None or env.answered:
            return ""
        head = f"I need {env.target} from {list(env.nums)}, using each number exactly once."
        if not any(ch in env.expression for ch in "*/("):  # the solver's +/- sum
            return f"{head} Adding and subtracting works: {env.expression} = {env.target}."
        tree = find_tree(env.nums, env.target)
        if tree is None:  # pragma: no cover - every served instance was solved
            return head
        return f"{head} " + ", ".join(steps(tree)) + f". So {env.expression} = {env.target}."


class CountdownEnv(Env):
    """Write an arithmetic expression that uses each given number once and equals the target."""

    config_cls = CountdownConfig
    reset_options = ("task_index",)
    action_separator = None  # the whole answer is one expression: `||` is not part of its language
    config: CountdownConfig

    def __init__(self, config: CountdownConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        self.procedural = cfg.source == "generated"
        # files are read, checked and split here, so a bad path or an empty file fails at construction
        self.data = (
            datamod.load(cfg.data_files, cfg.val_files, cfg.max_instances, cfg.additive_only, cfg.val_size)
            if cfg.source == "file" else None
        )
        self.instructions = self._instructions(cfg)
        self.expert = CountdownExpert()
        self.target: int | None = None
        self.nums: tuple[int, ...] | None = None
        self.expression = ""  #: the expert's answer for the current instance
        self.answered = False
        self.verdict: Verdict | None = None

    @staticmethod
    def _instructions(cfg: CountdownConfig) -> str:
        if cfg.source == "generated":
            count = f"{cfg.min_nums}" if cfg.min_nums == cfg.max_nums else f"{cfg.min_nums} to {cfg.max_nums}"
            given = f"You are given a target number and a list of {count} numbers. "
        else:
            given = "You are given a target number and a list of numbers. "
        return (
            "You are solving the Countdown puzzle. " + given
            + "Write one arithmetic expression that uses every number in the list exactly once and equals the target. "
            "You may use +, -, * and / (exact division, fractions allowed in between) and parentheses; no other "
            "numbers, no exponents, no signs in front of numbers, and no '=' in the answer. "
            "Example: for Target: 4, nums: [3, 5, 2] the answer could be "
            "<think> 2 + 5 = 7 and 7 - 3 = 4. </think><answer>2 + 5 - 3</answer>"
        )

    # ---- the contract -----------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        task_index = options.pop("task_index", None)
        cfg = self.config
        info: dict[str, Any] = {}
        if self.data is None:
            inst = generate(seed, min_nums=cfg.min_nums, max_nums=cfg.max_nums, min_num=cfg.min_num,
                            max_num=cfg.max_num, min_target=cfg.min_target, max_target=cfg.max_target,
                            additive_only=cfg.additive_only)
            self.target, self.nums, self.expression = inst.target, inst.nums, inst.solution.expression
            add = "/additive" if cfg.additive_only else ""
            self.task_id = (f"countdown/n{cfg.min_nums}-{cfg.max_nums}/v{cfg.min_num}-{cfg.max_num}"
                            f"/t{cfg.min_target}-{cfg.max_target}{add}/s{seed}")
        else:
            items = self.data.split(self.split)
            if not items:
                raise ConfigError(f"{self.name}: the {self.split} split has no rows (val_size={cfg.val_size})")
            index = (seed if task_index is None else int(task_index)) % len(items)
            item = items[index]
            self.target, self.nums, self.expression = item.target, item.nums, item.expression
            self.task_id = f"countdown/file/{item.source}"
            info["task_index"] = index
        self.answered, self.verdict = False, None
        info["n_nums"] = len(self.nums)
        return self._observation(), info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        verdict = check_answer(action, self.nums, self.target)
        self.answered, self.verdict = True, verdict
        reward = verdict.reward
        obs = f"{self._observation()}\nYour answer: {action[:200]}\n{verdict.message} Your answer gets {reward} points."
        info = {
            "success": verdict.status == "correct",
            "action_is_valid": verdict.parses,
            "action_is_effective": verdict.parses,
            "numbers_match": verdict.status in ("correct", "wrong_value"),
        }
        return obs, reward, True, False, info

    def _observation(self) -> str:
        return f"Target: {self.target}, nums: {list(self.nums)}"

