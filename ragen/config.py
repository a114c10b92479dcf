"""The run configuration: one frozen attrs tree, loaded from YAML/TOML and ``section.key=value`` overrides.

Structuring goes through one cattrs converter that rejects unknown keys; every error is a ``ConfigError``
naming the key path (``trainer.steps: expected int, got 'x'``) and, for unknown keys, a did-you-mean.
"""

from __future__ import annotations

import math
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
import yaml

from ragen.algorithm import AlgorithmPreset
from ragen.env import option
from ragen.errors import ConfigError, did_you_mean

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True)


def structure(cls: type[T], data: Any, path: str = "") -> T:
    """Structure ``data`` into ``cls``; errors become one ``ConfigError`` naming every bad key path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    try:
        obj = converter.structure(data, cls)
    except ConfigError as exc:
        raise ConfigError(f"{path}.{exc}" if path else str(exc)) from None
    except cattrs.BaseValidationError as exc:
        inner = _config_error(exc)  # a validator of the class itself said what is wrong: keep its words
        if inner is not None:
            raise ConfigError(f"{path}.{inner}" if path else str(inner)) from None
        own = _own_words(exc)
        if own is not None:  # a plugin config's validator (attrs or __attrs_post_init__): its message, not "invalid value"
            section = ".".join(filter(None, [path, own[0]]))
            raise ConfigError(f"{section or 'config'}: {own[1]}") from None
        raise ConfigError("; ".join(_messages(exc, cls, path, data))) from None
    except (TypeError, ValueError) as exc:  # validators of attrs classes
        raise ConfigError(f"{path or 'config'}: {exc}") from None
    check_values(obj, path)
    return obj


def _config_error(exc: BaseException, prefix: str = "") -> ConfigError | None:
    """The first ConfigError a section's own validator raised, its key prefixed with the section path that cattrs
    noted on the way up (``trainer.zero_stage: ...``)."""
    if isinstance(exc, ConfigError) or _validator_error(exc):
        return ConfigError(prefix + str(exc)) if prefix else ConfigError(str(exc))
    for sub in getattr(exc, "exceptions", ()):
        names = [note.name for note in getattr(sub, "__notes__", ()) if isinstance(getattr(note, "name", None), str)]
        found = _config_error(sub, prefix + "".join(f"{n}." for n in names[:1]))
        if found is not None:
            return found
    return None


def _own_words(exc: BaseException, section: str = "") -> tuple[str, str] | None:
    """(section path, message) of a ValueError/TypeError a config class's own ``__init__`` raised (attrs validators,
    ``__attrs_post_init__``): cattrs attaches no attribute note to those, unlike a field it could not structure."""
    if type(exc) in (ValueError, TypeError) and not getattr(exc, "__notes__", None):
        return section, str(exc)
    for sub in getattr(exc, "exceptions", ()):
        names = [note.name for note in getattr(sub, "__notes__", ()) if isinstance(getattr(note, "name", None), str)]
        found = _own_words(sub, ".".join(filter(None, [section, *names[:1]])))
        if found is not None:
            return found
    return None


def _validator_error(exc: BaseException) -> bool:
    """An attrs validator's ``ValueError("key: must be ..., got ...")`` (algorithm presets word theirs this way)."""
    return type(exc) is ValueError and bool(re.match(r"\w+: ", str(exc)))


_AT = re.compile(r"^(?P<msg>.*) @ \$(?P<path>.*)$")
_EXTRA = re.compile(r"extra fields found \((?P<keys>[^)]*)\)")


def _messages(exc: cattrs.BaseValidationError, cls: type, path: str, data: dict) -> list[str]:
    out = []
    for line in cattrs.transform_error(exc, path="$", format_exception=_format_exception):
        m = _AT.match(line)
        msg, where = (m["msg"], m["path"]) if m else (line, "")
        where = (path + where) if path else where.lstrip(".")
        extra = _EXTRA.search(msg)
        if extra:
            owner = _class_at(cls, where[len(path):].lstrip(".") if path else where)
            known = [f.name for f in attrs.fields(owner)] if owner is not None and attrs.has(owner) else []
            for key in (k.strip() for k in extra["keys"].split(",")):
                full = f"{where}.{key}" if where else key
                out.append(f"{full}: unknown key{did_you_mean(key, known)}")
            continue
        msg = msg.replace("invalid value for type, expected", "expected")
        found, value = _value_at(data, where[len(path):].lstrip(".") if path else where)
        out.append(f"{where or 'config'}: {msg}" + (f", got {value!r}" if found else ""))
    return out


def _value_at(data: Any, dotted: str) -> tuple[bool, Any]:
    for part in filter(None, dotted.split(".")):
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def _class_at(cls: type, dotted: str) -> type | None:
    for part in filter(None, dotted.split(".")):
        if not attrs.has(cls):
            return None
        fields = {f.name: f for f in attrs.fields(attrs.resolve_types(cls))}
        if part not in fields:
            return None
        cls = fields[part].type
    return cls


def _format_exception(exc: BaseException, type_: Any) -> str:
    return str(exc) if isinstance(exc, BadValue) else cattrs.v.format_exception(exc, type_)


# ---- strict scalars: YAML's `maybe` is not a bool, 1.9 is not an int, nan is not a learning rate ------------------
class BadValue(ValueError):
    """A scalar of the wrong kind; the message says what was expected (the key and value are added around it)."""


def _int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue("expected int")
    return value


def _float(value: Any, _: type) -> float:
    if isinstance(value, str):  # YAML reads 1e-5 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            raise BadValue("expected float") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue("expected float")
    if not math.isfinite(value):
        raise BadValue("expected float (finite)")
    return float(value)


def _bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise BadValue("expected bool")
    return value


def _str(value: Any, _: type) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):  # a bare 2024 may name a run
        raise BadValue("expected str")
    return str(value)


def _tuple(value: Any, type_: Any) -> tuple:
    """A list for a tuple field: a string or a mapping would become a tuple of its characters or keys."""
    if not isinstance(value, (list, tuple)):
        raise BadValue("expected a list")
    args = typing.get_args(type_)
    if not args:
        return tuple(value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(converter.structure(v, args[0]) for v in value)
    if len(value) != len(args):
        raise BadValue(f"expected a list of {len(args)}")
    return tuple(converter.structure(v, t) for v, t in zip(value, args))


for _type, _hook in ((int, _int), (float, _float), (bool, _bool), (str, _str)):
    converter.register_structure_hook(_type, _hook)
converter.register_structure_hook_func(lambda t: t is tuple or typing.get_origin(t) is tuple, _tuple)


@attrs.frozen
class Range:
    """The values a numeric field allows: an interval (``lo``/``hi``, open or closed, None = unbounded) plus
    special values outside it (``also``, e.g. 0 = off, -1 = all)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    also: tuple = ()

    def __contains__(self, value: float) -> bool:
        if value in self.also:
            return True
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            text = f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        elif self.lo is not None:
            text = f"{'>' if self.lo_open else '>='} {self.lo:g}"
        else:
            text = f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return " or ".join([*(f"{v:g}" for v in self.also), text])


POSITIVE = Range(0, lo_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_1 = Range(1)
FRACTION = Range(0, 1, lo_open=True)  # (0, 1]
PROBABILITY = Range(0, 1)  # [0, 1]
SEED = Range(0, 2**32 - 1)  # numpy's seed range


# ----------------------------------------------------------------------------------------------------------
# The RunConfig tree. Every field has a default and a doc string (a meta-test checks this).
# ----------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ModelConfig:
    """Which policy model to train."""

    name: str = option("small", "'small' (built-in, offline, warm-started by default), 'tiny' (built-in, for tests), 'smollm2' "
                                 "(optional extra), a Hugging Face id or a local path.")
    dtype: str = option("auto", "'auto' = fp32 on CPU, bf16 on GPU; or 'float32' / 'bfloat16'.")
    lora_rank: int = option(0, "LoRA rank through peft (0 = full fine-tuning; RAGEN's LoRA setting: 64).")
    lora_alpha: int = option(64, "LoRA alpha (RAGEN: 64, equal to the rank).")
    lora_dropout: float = option(0.0, "LoRA dropout (0 keeps rollout and training log-probs identical).")
    lora_target: str = option("all-linear", "Modules that get adapters: 'all-linear' (RAGEN) or comma-separated module names.")
    attn_implementation: str = option("auto", "'auto' = sdpa (flash-attention-2 on CUDA when installed); or 'eager', 'sdpa', "
                                      "'flash_attention_2'.")


@attrs.frozen(kw_only=True)
class EnvEntry:
    """One env of a run's `env.train` or `env.val` list, with its own options and parser (docs/multi-env.md)."""

    name: str = option("", "A registered env variant (see `ragen envs`).")
    options: dict[str, Any] = option(factory=dict, doc="Overrides of this variant's config fields (its budget included).")
    weight: float = option(1.0, "Train: this env's share of rollout.n_groups (largest remainder; every env needs >= 1 "
                                "group). Ignored in env.val.")
    n_groups: int = option(0, "Train: groups per step (all train entries or none set it; then rollout.n_groups is their "
                              "sum). Val: validation groups; 0 = rollout.n_val_groups.")
    parser: str = option("", "The registered action parser for this env; '' = rollout.parser.")


@attrs.frozen(kw_only=True)
class EnvSection:
    """Which environment to train on: one variant (`name`, `options`), or lists of them (`train`, `val`)."""

    name: str = option("sokoban", "A registered env variant (see `ragen envs`); unused when env.train is given.")
    options: dict[str, Any] = option(
        factory=dict, doc="Overrides of the variant's config fields, e.g. {max_turns: 3}; checked by the env's config class."
    )
    train: tuple[EnvEntry, ...] = option((), "Several training envs in one run: [{name, options, weight | n_groups, "
                                             "parser}, ...]; empty = the single env of name/options.", converter=tuple)
    val: tuple[EnvEntry, ...] = option((), "Validation envs ([{name, options, n_groups, parser}, ...]); empty = the "
                                           "training envs.", converter=tuple)


@attrs.frozen(kw_only=True)
class AlgoSection:
    """Which algorithm preset to use, and overrides of its settings."""

    name: str = option("grpo", "A registered algorithm preset (see `ragen algos`): ppo, grpo, starpo-s, ...")
    options: dict[str, Any] = option(factory=dict, doc="Overrides of the preset's settings (estimator, filter, clip ratios, KL, ...; the fields are listed in docs/algorithms.md).")


@attrs.frozen(kw_only=True)
class RolloutSection:
    """How trajectories are sampled. Defaults are sized for a CPU run; configs/ragen.yaml has RAGEN's."""

    n_groups: int = option(4, "Env groups per step; all members of a group share one seed (RAGEN env_groups: 8).")
    group_size: int = option(8, "Members per group (RAGEN: 16); GRPO's statistics and the filters work per group (8: a "
                                "warm-started built-in model succeeds in some members of most groups).")
    n_val_groups: int = option(64, "Validation groups, seeds 123.. , one member each (RAGEN: 512; 64 gives a success rate "
                                   "a standard error of 4-6 points).")
    temperature: float = option(0.7, "Training sampling temperature (RAGEN: 1.0, in configs/ragen.yaml). At 1.0 the "
                                     "warm-started built-in model broke the format in 19-22% of sokoban turns (long-tail "
                                     "tokens inside its reasoning); at 0.7 in 2% (docs/models.md).")
    top_p: float = option(1.0, "Training nucleus sampling (RAGEN: 1.0 = off).")
    val_temperature: float = option(0.5, "Validation sampling temperature (RAGEN: 0.5).")
    max_model_len: int = option(3600, "Context cap in tokens; an episode that would exceed it ends truncated (RAGEN: 3600).")
    response_length: int = option(0, "Generation cap per turn in tokens; 0 = the env's own response_length.")
    parser: str = option("think-answer", "The registered action parser applied to responses (`ragen run --parser`).")
    parser_options: dict[str, Any] = option(factory=dict, doc="Options of rollout.parser, checked by its config class "
                                            "(e.g. {enable_think: false}; `ragen plugins` lists parsers).")
    engine: str = option("hf", "Rollout engine: 'hf' (transformers); 'vllm' when installed.")
    max_batch: int = option(64, "Most sequences generated in one engine call (memory bound).")
    env_workers: int = option(1, "Threads (and, for envs declaring concurrency='process', worker processes) stepping envs "
                              "declared concurrency-safe; 1 = one env at a time. Trajectories do not depend on it.")
    overlap_chunks: int = option(1, "Generate each round in this many chunks of whole groups and step a chunk's envs while "
                                 "the next chunk generates (1 = off; >1 changes the sampling seeds of the chunks).")
    compat: str = option("", "'ragen' reproduces RAGEN's prompt quirks (episode budget in the action line, raw reward sums).")
    vllm_memory_fraction: float = option(0.5, "vLLM: fraction of device memory (on CPU: of RAM) for its weights and KV cache; the trainer shares the device.")
    vllm_kv_cache_gb: float = option(0.0, "vLLM: KV cache size in GiB (0 = from vllm_memory_fraction; on CPU VLLM_CPU_KVCACHE_SPACE overrides it).")
    vllm_enforce_eager: bool = option(True, "vLLM: no torch.compile / CUDA graphs (starts in seconds; false speeds up long GPU runs).")
    sync_check_tol: float = option(0.0, "vLLM: largest abs(trainer - vLLM) log-prob difference on the probe sequence accepted after each weight sync, else the run stops (0 = 1e-4 in fp32, 0.25 in bf16/fp16).")
    max_context_window: int = option(0, "Past turns the model sees in each prompt (0 = all). With k, turn t's prompt is the "
                                         "system prompt, turns t-k..t-1 and turn t's user text; the trained row packs each "
                                         "turn with its own prompt (docs/history-window.md).")
    tis_cap: float = option(0.0, "Truncated importance sampling: each token's policy-gradient term times min(exp(old_logp - rollout_logp), cap); 0 = off (try 2 with vLLM).")


@attrs.frozen(kw_only=True)
class TrainerSection:
    """How the policy is updated. Defaults are sized for a CPU run with the tiny model."""

    steps: int = option(10, "Training steps (RAGEN total_training_steps: 200; 10 keeps a CPU smoke run short).")
    seed: int = option(0, "Seed of model init, sampling and shuffling.")
    device: str = option("auto", "'auto' = cuda if available else cpu.")
    zero_stage: int = option(0, "DeepSpeed ZeRO stage 0-2 (0 is right for one process; 1 shards optimizer state, 2 also "
                             "gradients). Stage 3 (sharded weights) is refused: rollouts and export need whole weights.")
    deepspeed_config: str = option("", "Path to a DeepSpeed JSON merged over ragen's engine config (e.g. offload settings); "
                                   "ragen keeps its batch-size and accumulation keys, which the trainer owns.")
    actor_lr: float | None = option(None, "Actor learning rate; None = 1e-4 for a built-in model (tiny, small: small "
                                          "random-init models need more), else 1e-5 (RAGEN: 1e-6 for 3B models).")
    critic_lr: float = option(1e-4, "Critic learning rate (RAGEN 1e-5).")
    weight_decay: float = option(0.01, "AdamW weight decay (verl default 0.01).")
    grad_clip: float = option(1.0, "Gradient norm clip for actor and critic (RAGEN 1.0).")
    ppo_mini_batch_size: int = option(8, "Trajectories per optimizer step (RAGEN 32); kept rows split into near-equal mini-batches.")
    micro_batch_size: int = option(4, "Trajectories per forward/backward (gradient accumulation inside a mini-batch).")
    micro_batch_tokens: int = option(0, "Token budget per forward/backward: rows sorted by length, each micro-batch as many "
                                     "as fit (rows x longest row <= budget, at least one row); 0 = micro_batch_size rows.")
    threads: int = option(0, "torch intra-op threads in every rank, rollout included (0 = CPU cores / local processes, at "
                          "least 1). More threads than free cores stalls small matmuls on a shared machine.")
    ppo_epochs: int = option(1, "Passes over the kept batch per step (RAGEN 1).")
    logprob_chunk: int = option(256, "Positions per chunk when computing log-probs, so full-vocabulary logits never materialise.")
    value_clip: float = option(0.5, "Critic value clip (RAGEN cliprange_value 0.5).")
    save_freq: int = option(5, "DeepSpeed checkpoint every N steps (RAGEN 100); the final policy is always exported.")
    keep_checkpoints: int = option(2, "Newest DeepSpeed checkpoints kept under checkpoints/ (older ones are deleted after "
                                      "each save, so a long run does not fill the disk); 0 = keep all.")
    test_freq: int = option(5, "Validate every N steps and before training (RAGEN 10); 0 = only before and after.")
    format_penalty: float = option(-1.0, "Added to the trajectory score once per turn with a format violation. RAGEN's -0.1 "
                                   "made a malformed sokoban turn (-0.1) score above a valid 2-action one (-0.2) and RL learned "
                                   "to break the format (docs/models.md); -0.1 stays in configs/ragen.yaml.")
    max_steps_wall_s: float = option(0.0, "Stop after this many seconds of training (0 = no limit); the run still checkpoints and exports.")
    max_skipped_updates: int = option(5, "Stop the run (checkpoint, export, one-line error) after this many consecutive "
                                      "updates skipped for a non-finite loss or gradient.")

    def __attrs_post_init__(self) -> None:
        if self.threads < 0:
            raise ConfigError(f"threads: must be >= 0 (0 = CPU cores / local processes), got {self.threads}")
        if self.micro_batch_tokens < 0:
            raise ConfigError(f"micro_batch_tokens: must be >= 0 (0 = micro_batch_size rows), got {self.micro_batch_tokens}")
        if self.zero_stage not in (0, 1, 2):
            raise ConfigError(f"zero_stage: must be 0, 1 or 2, got {self.zero_stage} (stage 3 shards the weights, which the "
                              "HF rollout engine and the export read whole; shard optimizer state and gradients with 2)")


@attrs.frozen(kw_only=True)
class WarmstartSection:
    """Expert warm start: supervised fine-tuning on expert demonstrations before RL (ragen/warmstart.py)."""

    mode: str = option("auto", "'auto' warm-starts a freshly initialised built-in model (tiny, small) and never a real one; "
                               "'always' (`--warmstart`); 'never' (`--no-warmstart`).")
    cache: bool = option(True, "Reuse a warm-started model cached under ~/.cache/ragen/warmstart (or $RAGEN_CACHE_DIR), "
                               "keyed by env, model, warm-start settings, parser and plugin versions; store new ones there.")
    seed: int = option(0, "Seed of the demos' noise and the SFT shuffles; separate from trainer.seed so runs with "
                          "different RL seeds share one warm start.")
    episodes: int = option(256, "Expert episodes to generate (seeds from 900000, disjoint from train and val).")
    noise: float = option(0.0, "Probability of replacing an expert action with a random valid one.")
    epochs: int = option(4, "Passes over the demonstrations (4: > 90% valid format on frozenlake and sokoban, docs/models.md).")
    lr: float = option(2e-3, "Peak SFT learning rate (5% warm-up, then linear decay to 10%); built-in models start random.")
    batch_size: int = option(4, "Demonstrations per optimizer step (small batches: more updates for the same CPU time).")
    prompt_loss_weight: float | None = option(None, "Loss weight of the prompt and env tokens beside the sampled ones; None "
                                                    "= 1.0 for a built-in model (a random model must learn to read the "
                                                    "state from the prompts: docs/models.md), 0.0 for a real model.")


@attrs.frozen(kw_only=True)
class EarlyStopSection:
    """RAGEN's early-stopping rules (algorithms.md §8), each switchable; every stop is logged with its reason and a
    final checkpoint is written."""

    enabled: bool = option(True, "Master switch (RAGEN: on). Smoke runs may turn it off.")
    empty_stop_steps: int = option(5, "Stop after this many consecutive steps whose filter kept nothing (0 disables).")
    rv_baseline_steps: int = option(10, "Steps whose pre-filter in-group reward std form the collapse baseline (0 disables).")
    rv_patience: int = option(10, "Stop when this many consecutive steps after the baseline are all below rv_ratio x baseline.")
    rv_ratio: float = option(0.1, "Fraction of the baseline reward std counted as collapsed (RAGEN 0.1).")
    val_min_success: float = option(0.01, "A validation with some variant's success below this counts as low (RAGEN 0.01).")
    val_patience: int = option(5, "Stop after this many consecutive low validations (0 disables).")


SCHEMES = ("first_turn", "trajectory")


@attrs.frozen(kw_only=True)
class CollapseSection:
    """RAGEN-V2 collapse diagnostics: MI and conditional entropy of the reasoning given the prompt (algorithms.md §9)."""

    enabled: bool = option(True, "Compute the collapse metrics (needs <think> reasoning and context_mode=full).")
    compute_freq: int = option(5, "Compute at step 1 and every N steps, on the batch before filtering (RAGEN: 5).")
    num_samples: int = option(16, "(x, z) pairs drawn per scheme; the trajectory scheme scores num_samples² rows (RAGEN: "
                                  "64, in configs/ragen.yaml; 16 keeps a CPU step from being dominated by 4,096 scored rows).")
    micro_batch_size: int = option(128, "Cross-scoring rows per forward pass.")
    schemes: tuple[str, ...] = option(SCHEMES, "Sampling schemes to run: 'first_turn' (columns = env groups) and/or "
                                               "'trajectory' (any turn; each pair its own column).", converter=tuple)
    h_threshold: float | None = option(None, "With i_threshold: log collapse/regime (0 diverse, 1 compressed, 2 template "
                                             "collapse, 3 low-entropy collapse); H(Z|X) below this is 'low'.")
    i_threshold: float | None = option(None, "With h_threshold: MI below this is 'low' for collapse/regime.")

    def __attrs_post_init__(self) -> None:
        for key in ("compute_freq", "micro_batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1, got {getattr(self, key)}")
        if self.num_samples < 2:
            raise ConfigError(f"num_samples: must be >= 2 (MI needs two prompts), got {self.num_samples}")
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad or len(set(self.schemes)) != len(self.schemes):
            raise ConfigError(f"schemes: expected distinct names from {', '.join(SCHEMES)}, got {list(self.schemes)}")


@attrs.frozen(kw_only=True)
class LoggingSection:
    """Where results go."""

    run_dir: str = option("runs", "Parent folder of run folders.")
    name: str = option("", "Run folder name; empty = '<env>-<algo>-<timestamp>'.")
    wandb: bool = option(False, "Log to Weights & Biases (imported only then; WANDB_MODE=offline works).")
    wandb_project: str = option("ragen", "Weights & Biases project.")
    save_trajectories: int = option(8, "Trajectories per step written to trajectories.jsonl (0 = none, -1 = all).")
    progress: bool = option(True, "Show a progress bar over steps.")
    report_every: int = option(0, "Rewrite report.html in the run folder every N steps and at the end (`ragen report`; "
                                  "0 = never).")

    def __attrs_post_init__(self) -> None:
        if self.report_every < 0:
            raise ConfigError(f"report_every: must be >= 0 (0 = never), got {self.report_every}")


@attrs.frozen(kw_only=True)
class RunConfig:
    """Everything a run needs; `ragen run` writes the resolved tree into the run folder."""

    model: ModelConfig = option(factory=ModelConfig, doc="The policy model.")
    env: EnvSection = option(factory=EnvSection, doc="The environment.")
    algo: AlgoSection = option(factory=AlgoSection, doc="The algorithm preset.")
    rollout: RolloutSection = option(factory=RolloutSection, doc="Rollout sampling.")
    trainer: TrainerSection = option(factory=TrainerSection, doc="Updates and checkpoints.")
    warmstart: WarmstartSection = option(factory=WarmstartSection, doc="Expert warm start (`ragen sft`, `ragen run --warmstart`).")
    early_stop: EarlyStopSection = option(factory=EarlyStopSection, doc="Early-stopping rules (RAGEN's, on by default).")
    collapse: CollapseSection = option(factory=CollapseSection, doc="RAGEN-V2 collapse diagnostics (MI of reasoning vs prompt).")
    logging: LoggingSection = option(factory=LoggingSection, doc="Outputs.")


# ---- ranges and choices, checked by structure() after every load (the meta-test demands one for every number) ----
RANGES: dict[type, dict[str, Range]] = {
    ModelConfig: {"lora_rank": NON_NEGATIVE, "lora_alpha": AT_LEAST_1, "lora_dropout": Range(0, 1, hi_open=True)},
    RolloutSection: {
        "n_groups": AT_LEAST_1, "group_size": AT_LEAST_1, "n_val_groups": AT_LEAST_1, "temperature": POSITIVE,
        "top_p": FRACTION, "val_temperature": NON_NEGATIVE, "max_model_len": AT_LEAST_1, "response_length": NON_NEGATIVE,
        "max_batch": AT_LEAST_1, "env_workers": AT_LEAST_1, "overlap_chunks": AT_LEAST_1, "vllm_memory_fraction": FRACTION, "vllm_kv_cache_gb": NON_NEGATIVE,
        "sync_check_tol": NON_NEGATIVE, "tis_cap": NON_NEGATIVE, "max_context_window": NON_NEGATIVE,
    },
    EnvEntry: {"weight": POSITIVE, "n_groups": NON_NEGATIVE},
    TrainerSection: {
        "steps": AT_LEAST_1, "seed": SEED, "zero_stage": Range(0, 2), "actor_lr": POSITIVE, "critic_lr": POSITIVE,
        "weight_decay": NON_NEGATIVE, "grad_clip": NON_NEGATIVE, "ppo_mini_batch_size": AT_LEAST_1,
        "micro_batch_size": AT_LEAST_1, "micro_batch_tokens": NON_NEGATIVE, "threads": NON_NEGATIVE,
        "ppo_epochs": AT_LEAST_1, "logprob_chunk": AT_LEAST_1, "value_clip": POSITIVE, "save_freq": NON_NEGATIVE,
        "keep_checkpoints": NON_NEGATIVE,
        "test_freq": NON_NEGATIVE, "format_penalty": Range(hi=0), "max_steps_wall_s": NON_NEGATIVE,
        "max_skipped_updates": AT_LEAST_1,
    },
    WarmstartSection: {"seed": SEED, "episodes": AT_LEAST_1, "noise": PROBABILITY, "epochs": AT_LEAST_1, "lr": POSITIVE,
                       "batch_size": AT_LEAST_1, "prompt_loss_weight": NON_NEGATIVE},
    EarlyStopSection: {"empty_stop_steps": NON_NEGATIVE, "rv_baseline_steps": NON_NEGATIVE, "rv_patience": AT_LEAST_1,
                       "rv_ratio": PROBABILITY, "val_min_success": PROBABILITY, "val_patience": NON_NEGATIVE},
    CollapseSection: {"compute_freq": AT_LEAST_1, "num_samples": Range(2), "micro_batch_size": AT_LEAST_1,
                      "h_threshold": NON_NEGATIVE, "i_threshold": NON_NEGATIVE},
    LoggingSection: {"save_trajectories": Range(0, also=(-1,)), "report_every": NON_NEGATIVE},
    AlgorithmPreset: {"clip_ratio_low": Range(0, 1, lo_open=True, hi_open=True), "clip_ratio_high": POSITIVE,
                      "clip_ratio_c": Range(1, lo_open=True), "log_ratio_clamp": POSITIVE, "entropy_coef": NON_NEGATIVE,
                      "kl_coef": NON_NEGATIVE, "kl_reward_coef": NON_NEGATIVE, "kl_target": POSITIVE,
                      "kl_horizon": AT_LEAST_1},
}

#: string fields with a closed set of values (a pattern for trainer.device)
CHOICES: dict[type, dict[str, tuple[str, ...] | re.Pattern]] = {
    ModelConfig: {"dtype": ("auto", "float32", "bfloat16", "float16"),
                  "attn_implementation": ("auto", "eager", "sdpa", "flash_attention_2")},
    RolloutSection: {"engine": ("hf", "vllm", "expert"), "compat": ("", "ragen")},
    TrainerSection: {"device": re.compile(r"auto|cpu|mps|cuda(:\d+)?")},
    WarmstartSection: {"mode": ("auto", "always", "never")},
}


def check_values(obj: Any, path: str = "") -> None:
    """Raise a one-line ``ConfigError`` (full key, value, what is allowed) for the first value of an attrs config tree
    outside its field's range or choices."""
    if not attrs.has(type(obj)):
        return
    ranges, choices = RANGES.get(type(obj), {}), CHOICES.get(type(obj), {})
    for f in attrs.fields(type(obj)):
        value, key = getattr(obj, f.name), f"{path}.{f.name}" if path else f.name
        if attrs.has(type(value)):
            check_values(value, key)
        elif isinstance(value, tuple) and value and all(attrs.has(type(v)) for v in value):  # env.train / env.val
            for i, item in enumerate(value):
                check_values(item, f"{key}[{i}]")
        elif value is not None and f.name in ranges and value not in ranges[f.name]:
            raise ConfigError(f"{key}: must be {ranges[f.name]}, got {value!r}")
        elif f.name in choices and not _allowed(value, choices[f.name]):
            allowed = choices[f.name]
            shown = allowed.pattern if isinstance(allowed, re.Pattern) else ", ".join(map(repr, allowed))
            raise ConfigError(f"{key}: expected one of {shown}, got {value!r}")


def _allowed(value: str, allowed: tuple[str, ...] | re.Pattern) -> bool:
    return bool(allowed.fullmatch(value)) if isinstance(allowed, re.Pattern) else value in allowed


def read_file(path: str | Path) -> dict:
    """Read a YAML or TOML config file into a dict."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}); give a YAML or TOML file") from None
    if "\0" in text:
        raise ConfigError(f"config file {str(path)!r} is binary (it holds NUL bytes); give a YAML or TOML file")
    kind = path.suffix.lstrip(".") or "YAML"
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid {kind}: {_one_line(exc)}") from None
    except RecursionError:  # the YAML parser recurses per nesting level
        raise ConfigError(f"config file {str(path)!r}: nested more than Python's recursion limit allows") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r}: expected a mapping at the top level")
    _check_depth(data, f"config file {str(path)!r}")
    return data


MAX_DEPTH = 32  # a run config nests 3-4 levels; env options a few more


def _check_depth(data: Any, where: str) -> None:
    """Refuse absurd nesting up front (iteratively), before the recursive merge and structuring see it."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``section.key=value`` overrides (values parsed as YAML: ``8``, ``true``, ``[8, 8]``)."""
    data = _deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected section.key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        except RecursionError:
            raise ConfigError(f"override {key.strip()}: value nested more than Python's recursion limit allows") from None
        _check_depth(value, f"override {key.strip()}")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part} is not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, base: dict | None = None) -> RunConfig:
    """Build a ``RunConfig`` from ``base`` < file < overrides."""
    data = _deepcopy(base or {})
    if path is not None:
        data = _merge(data, read_file(path))
    data = apply_overrides(data, list(overrides or []))
    return structure(RunConfig, data)


def to_dict(cfg: Any) -> dict:
    return converter.unstructure(cfg)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _deepcopy(d: dict) -> dict:
    return {k: _deepcopy(v) if isinstance(v, dict) else v for k, v in d.items()}


def describe(cls: type = RunConfig, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(key path, default, doc) of every leaf field of a config tree."""
    out = []
    for f in attrs.fields(attrs.resolve_types(cls)):
        path = f"{prefix}{f.name}"
        if isinstance(f.type, type) and attrs.has(f.type):
            out += describe(f.type, path + ".")
        else:
            default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[attr-defined]
            out.append((path, default, f.metadata.get("doc", "")))
    return out


def config_markdown() -> str:
    """docs/config.md, generated: `python -m ragen.config > docs/config.md`."""
    lines = [
        "# Run configuration",
        "",
        "Generated by `python -m ragen.config > docs/config.md` (a test checks it is current).",
        "Set values in a YAML/TOML file (`ragen run --config FILE`) or as `section.key=value` arguments.",
        "",
        "| key | default | meaning |",
        "|---|---|---|",
    ]
    for path, default, doc in describe():
        lines.append(f"| `{path}` | `{default!r}` | {doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(config_markdown(), end="")
