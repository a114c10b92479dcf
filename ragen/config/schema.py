"""The run configuration: one frozen attrs tree (``RunConfig``) of sections, every field with a doc and a default."""

from __future__ import annotations

import re
from typing import Any

import attrs

from ragen.config.fields import AT_LEAST_1, FRACTION, NON_NEGATIVE, POSITIVE, PROBABILITY, SEED, Range, option
from ragen.errors import ConfigError

#: the prompt frame's styles (ragen/envs/prompt.py)
PROMPTS = ("full", "compact")

# ----------------------------------------------------------------------------------------------------------
# The RunConfig tree. Every field has a default and a doc string (a meta-test checks this).
# ----------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ModelConfig:
    """Which policy model to train."""

    name: str = option(
        "small",
        "'small' (built-in, offline, warm-started by default), 'tiny' (built-in, for tests), 'smollm2' or "
        "'gemma3' (optional extras), a Hugging Face id or a local path.",
    )
    dtype: str = option(
        "auto",
        "'auto' = fp32 on CPU, bf16 on GPU; or 'float32' / 'bfloat16'.",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    lora_rank: int = option(
        0, "LoRA rank through peft (0 = full fine-tuning; RAGEN's LoRA setting: 64).", range=NON_NEGATIVE
    )
    lora_alpha: int = option(64, "LoRA alpha (RAGEN: 64, equal to the rank).", range=AT_LEAST_1)
    lora_dropout: float = option(
        0.0, "LoRA dropout (0 keeps rollout and training log-probs identical).", range=Range(0, 1, hi_open=True)
    )
    lora_target: str = option(
        "all-linear", "Modules that get adapters: 'all-linear' (RAGEN) or comma-separated module names."
    )
    attn_implementation: str = option(
        "auto",
        "'auto' = sdpa (flash-attention-2 on CUDA when installed); or 'eager', 'sdpa', 'flash_attention_2'.",
        choices=("auto", "eager", "sdpa", "flash_attention_2"),
    )


@attrs.frozen(kw_only=True)
class EnvEntry:
    """One env of a run's `env.train` or `env.val` list, with its own options and parser (docs/multi-env.md)."""

    name: str = option("", "A registered env variant (see `ragen envs`).")
    options: dict[str, Any] = option(
        factory=dict, doc="Overrides of this variant's config fields (its budget included)."
    )
    weight: float = option(1.0, "Train: this env's share of rollout.n_groups (largest remainder; every env needs >= 1 "
                                "group). Ignored in env.val.", range=POSITIVE)
    n_groups: int = option(
        0,
        "Train: groups per step (all train entries or none set it; then rollout.n_groups is their "
        "sum). Val: validation groups; 0 = rollout.n_val_groups.",
        range=NON_NEGATIVE,
    )
    parser: str = option("", "The registered action parser for this env; '' = rollout.parser.")


@attrs.frozen(kw_only=True)
class EnvSection:
    """Which environment to train on: one variant (`name`, `options`), or lists of them (`train`, `val`)."""

    name: str = option("sokoban", "A registered env variant (see `ragen envs`); unused when env.train is given.")
    options: dict[str, Any] = option(
        factory=dict,
        doc="Overrides of the variant's config fields, e.g. {max_turns: 3}; checked by the env's config class.",
    )
    train: tuple[EnvEntry, ...] = option((), "Several training envs in one run: [{name, options, weight | n_groups, "
                                             "parser}, ...]; empty = the single env of name/options.", converter=tuple)
    val: tuple[EnvEntry, ...] = option((), "Validation envs ([{name, options, n_groups, parser}, ...]); empty = the "
                                           "training envs.", converter=tuple)


@attrs.frozen(kw_only=True)
class AlgoSection:
    """Which algorithm preset to use, and overrides of its settings."""

    name: str = option("grpo", "A registered algorithm preset (see `ragen algos`): ppo, grpo, starpo-s, ...")
    options: dict[str, Any] = option(
        factory=dict,
        doc=(
            "Overrides of the preset's settings (estimator, filter, clip ratios, KL, ...; the fields are listed in "
            "docs/algorithms.md)."
        ),
    )


@attrs.frozen(kw_only=True)
class RolloutSection:
    """How trajectories are sampled. Defaults are sized for a CPU run; configs/ragen.yaml has RAGEN's."""

    n_groups: int = option(
        4, "Env groups per step; all members of a group share one seed (RAGEN env_groups: 8).", range=AT_LEAST_1
    )
    group_size: int = option(
        8,
        "Members per group (RAGEN: 16); GRPO's statistics and the filters work per group (8: a "
        "warm-started built-in model succeeds in some members of most groups).",
        range=AT_LEAST_1,
    )
    n_val_groups: int = option(
        64,
        "Validation groups, seeds 123.. , one member each (RAGEN: 512; 64 gives a success rate "
        "a standard error of 4-6 points). A short run (trainer.short_run_steps) plays none.",
        range=AT_LEAST_1,
    )
    temperature: float = option(
        0.7,
        "Training sampling temperature (RAGEN: 1.0, in configs/ragen.yaml). At 1.0 the "
        "warm-started built-in model broke the format in 19-22% of sokoban turns (long-tail "
        "tokens inside its reasoning); at 0.7 in 2% (docs/models.md).",
        range=POSITIVE,
    )
    top_p: float = option(1.0, "Training nucleus sampling (RAGEN: 1.0 = off).", range=FRACTION)
    train_levels: int = option(
        0,
        "Distinct training levels (0 = a new level for every group of every step, RAGEN's "
        "way). k > 0 cycles through k fixed levels; 1 pins every group to one level: the "
        "overfitting check that shows the RL loop learns (CI's learning gate).",
        range=NON_NEGATIVE,
    )
    val_temperature: float = option(0.5, "Validation sampling temperature (RAGEN: 0.5).", range=NON_NEGATIVE)
    n_paired_levels: int = option(
        256,
        "Levels (per validation env; the validation seeds 123..) played greedily, one "
        "episode each, before RL and after it, compared level by level: the summary's paired "
        "change, SE and z (docs/running.md). Two T 0.5 validations of one model on 128 levels "
        "disagreed on 21-33 of them; greedy and paired, 256 levels resolve a few points. "
        "0 = off. The intermediate validations stay at val_temperature. A short run "
        "(trainer.short_run_steps) plays none.",
        range=Range(0, 9877, why="the validation seeds 123.. must stay below the training seeds, which start at 10000"),
    )
    max_model_len: int = option(
        3600, "Context cap in tokens; an episode that would exceed it ends truncated (RAGEN: 3600).", range=AT_LEAST_1
    )
    response_length: int = option(
        0, "Generation cap per turn in tokens; 0 = the env's own response_length.", range=NON_NEGATIVE
    )
    parser: str = option(
        "auto",
        "The registered action parser applied to responses (`ragen run --parser`). 'auto' = "
        "the parser (and options) a ragen-trained model folder records, else 'answer' (no "
        "<think>) for the built-in `small` model: its warm start plays better "
        "greedy (frozenlake 14-38% vs 11%, sokoban 20% vs 5%) at a fraction of the tokens, and is "
        "the only format measured to read the board at all (docs/models.md); 'think-answer' for "
        "every other model (`tiny` exercises the full format in tests; real models reason).",
    )
    parser_options: dict[str, Any] = option(factory=dict, doc="Options of rollout.parser, checked by its config class "
                                            "(e.g. {enable_think: false}; `ragen plugins` lists parsers).")
    engine: str = option(
        "hf", "Rollout engine: 'hf' (transformers); 'vllm' when installed.", choices=("hf", "vllm", "expert")
    )
    max_batch: int = option(64, "Most sequences generated in one engine call (memory bound).", range=AT_LEAST_1)
    env_workers: int = option(
        1,
        "Threads (and, for envs declaring concurrency='process', worker processes) stepping envs "
        "declared concurrency-safe; 1 = one env at a time. Trajectories do not depend on it.",
        range=AT_LEAST_1,
    )
    overlap_chunks: int = option(
        1,
        "Generate each round in this many chunks of whole groups and step a chunk's envs while "
        "the next chunk generates (1 = off; >1 changes the sampling seeds of the chunks).",
        range=AT_LEAST_1,
    )
    prompt: str = option(
        "auto",
        "The prompt frame: 'full' (RAGEN's: instructions, symbol legend, a format reminder every "
        "turn) or 'compact' (the actions, then per turn the state and the actions left: about "
        "half the tokens of a sokoban demo). 'auto' = the style a ragen-trained model folder "
        "records, else compact for the built-in `small` model (trained from scratch on demos, it "
        "cannot read instructions: docs/models.md, \"A compact prompt\"), else full.",
        choices=("auto", *PROMPTS),
    )
    compat: str = option(
        "",
        "'ragen' reproduces RAGEN's prompt quirks (episode budget in the action line, raw reward sums).",
        choices=("", "ragen"),
    )
    vllm_memory_fraction: float = option(
        0.5,
        "vLLM: fraction of device memory (on CPU: of RAM) for its weights and KV cache; the trainer shares the device.",
        range=FRACTION,
    )
    vllm_kv_cache_gb: float = option(
        0.0,
        "vLLM: KV cache size in GiB (0 = from vllm_memory_fraction; on CPU VLLM_CPU_KVCACHE_SPACE overrides it).",
        range=NON_NEGATIVE,
    )
    vllm_enforce_eager: bool = option(
        True, "vLLM: no torch.compile / CUDA graphs (starts in seconds; false speeds up long GPU runs)."
    )
    sync_check_tol: float = option(
        0.0,
        "vLLM: largest abs(trainer - vLLM) log-prob difference on the probe sequence accepted after each weight sync, "
        "else the run stops (0 = 1e-4 in fp32, 0.25 in bf16/fp16).",
        range=NON_NEGATIVE,
    )
    max_context_window: int = option(
        0,
        "Past turns the model sees in each prompt (0 = all). With k, turn t's prompt is the "
        "system prompt, turns t-k..t-1 and turn t's user text; the trained row packs each "
        "turn with its own prompt (docs/history-window.md).",
        range=NON_NEGATIVE,
    )
    tis_cap: float = option(
        0.0,
        "Truncated importance sampling: each token's policy-gradient term times min(exp(old_logp - rollout_logp), "
        "cap); 0 = off (try 2 with vLLM).",
        range=NON_NEGATIVE,
    )
    decode: str = option(
        "plain",
        "HF engine decode path: 'plain' (growing cache, eager); 'static' (static KV cache; on CUDA "
        "the decoding step is torch.compile'd with CUDA graphs, first calls compile); 'static-eager' (static "
        "cache, never compiled). Same sampled ids under a seed (docs/gpu.md).",
        choices=("plain", "static", "static-eager"),
    )


@attrs.frozen(kw_only=True)
class TrainerSection:
    """How the policy is updated. Defaults are sized for a CPU run with the tiny model."""

    steps: int = option(
        60,
        "Training steps (RAGEN total_training_steps: 200). 60: the main job (`ragen run --env sokoban "
        "--algo grpo`) gains on held-out levels in about 2 min of RL on 2 cores, where 10 steps moved "
        "nothing (docs/benchmarks.md, \"The main job\").",
        range=AT_LEAST_1,
    )
    seed: int = option(0, "Seed of model init, sampling and shuffling.", range=SEED)
    device: str = option(
        "auto", "'auto' = cuda if available else cpu.", choices=re.compile(r"auto|cpu|mps|cuda(:\d+)?")
    )
    zero_stage: int = option(
        0,
        "DeepSpeed ZeRO stage 0-2 (0 is right for one process; 1 shards optimizer state, 2 also "
        "gradients). Stage 3 (sharded weights) is refused: rollouts and export need whole weights.",
        range=Range(
            0,
            2,
            text="0, 1 or 2",
            why=(
                "stage 3 shards the weights, which the HF rollout engine and the export read whole; shard optimizer "
                "state and gradients with 2"
            ),
        ),
    )
    deepspeed_config: str = option(
        "",
        "Path to a DeepSpeed JSON merged over ragen's engine config (e.g. offload settings); "
        "ragen keeps its batch-size and accumulation keys, which the trainer owns.",
    )
    actor_lr: float | None = option(
        None,
        "Actor learning rate; None = 1e-4 for a built-in model (tiny, small: small "
        "random-init models need more), else 1e-5 (RAGEN: 1e-6 for 3B models).",
        range=POSITIVE,
    )
    critic_lr: float = option(1e-4, "Critic learning rate (RAGEN 1e-5).", range=POSITIVE)
    weight_decay: float = option(0.01, "AdamW weight decay (verl default 0.01).", range=NON_NEGATIVE)
    grad_clip: float = option(1.0, "Gradient norm clip for actor and critic (RAGEN 1.0).", range=NON_NEGATIVE)
    ppo_mini_batch_size: int = option(
        8, "Trajectories per optimizer step (RAGEN 32); kept rows split into near-equal mini-batches.", range=AT_LEAST_1
    )
    micro_batch_size: int = option(
        4, "Trajectories per forward/backward (gradient accumulation inside a mini-batch).", range=AT_LEAST_1
    )
    micro_batch_tokens: int = option(
        0,
        "Token budget per forward/backward: rows sorted by length, each micro-batch as many "
        "as fit (rows x longest row <= budget, at least one row); 0 = micro_batch_size rows.",
        range=NON_NEGATIVE,
    )
    threads: int = option(
        0,
        "torch intra-op threads in every rank, rollout included (0 = CPU cores / local processes, at "
        "least 1). More threads than free cores stalls small matmuls on a shared machine.",
        range=NON_NEGATIVE,
    )
    ppo_epochs: int = option(1, "Passes over the kept batch per step (RAGEN 1).", range=AT_LEAST_1)
    logprob_chunk: int = option(
        256,
        "Positions per chunk when computing log-probs, so full-vocabulary logits never materialise.",
        range=AT_LEAST_1,
    )
    value_clip: float = option(0.5, "Critic value clip (RAGEN cliprange_value 0.5).", range=POSITIVE)
    save_freq: int = option(
        5, "DeepSpeed checkpoint every N steps (RAGEN 100); the final policy is always exported.", range=NON_NEGATIVE
    )
    keep_checkpoints: int = option(
        2,
        "Newest DeepSpeed checkpoints kept under checkpoints/ (older ones are deleted after "
        "each save, so a long run does not fill the disk); 0 = keep all.",
        range=NON_NEGATIVE,
    )
    test_freq: int = option(
        5, "Validate every N steps and before training (RAGEN 10); 0 = only before and after.", range=NON_NEGATIVE
    )
    short_run_steps: int = option(
        10,
        "A run of fewer steps is a short run (a smoke test, a first try): it plays no validation and no greedy pass "
        "before or after RL, so a 3-step run spends its time in its steps, not in evaluation episodes that would "
        "measure nothing a few steps could change (config.yaml records rollout.n_paired_levels 0; the summary says "
        "so). From this many steps on, the validations and the greedy passes are played at their sizes: the main "
        "job (60 steps) keeps its 64 validation levels and 256 greedy levels. 0 = always played.",
        range=NON_NEGATIVE,
    )
    format_penalty: float = option(
        -1.0,
        "Added to the trajectory score once per turn with a format violation. RAGEN's -0.1 "
        "made a malformed sokoban turn (-0.1) score above a valid 2-action one (-0.2) and RL learned "
        "to break the format (docs/models.md); -0.1 stays in configs/ragen.yaml.",
        range=Range(hi=0),
    )
    max_steps_wall_s: float = option(
        0.0,
        "Stop after this many seconds of training (0 = no limit); the run still checkpoints and exports.",
        range=NON_NEGATIVE,
    )
    max_skipped_updates: int = option(
        5,
        "Stop the run (checkpoint, export, one-line error) after this many consecutive "
        "updates skipped for a non-finite loss or gradient.",
        range=AT_LEAST_1,
    )


@attrs.frozen(kw_only=True)
class WarmstartSection:
    """Expert warm start: supervised fine-tuning on expert demonstrations before RL (ragen/warmstart/cache.py)."""

    mode: str = option(
        "auto",
        "'auto' warm-starts a freshly initialised built-in model (tiny, small) and never a real one; "
        "'always' (`--warmstart`); 'never' (`--no-warmstart`).",
        choices=("auto", "always", "never"),
    )
    cache: bool = option(
        True,
        "Reuse a warm-started model cached under ~/.cache/ragen/warmstart (or $RAGEN_CACHE_DIR), "
        "keyed by env, model, warm-start settings, parser and plugin versions; store new ones there.",
    )
    seed: int = option(0, "Seed of the demos' noise and the SFT shuffles; separate from trainer.seed so runs with "
                          "different RL seeds share one warm start.", range=SEED)
    episodes: int | None = option(
        None,
        "Expert episodes to generate (seeds from 900000, disjoint from train and val); None = 256 for any model "
        "(ragen/warmstart/defaults.py).",
        range=AT_LEAST_1,
    )
    noise: float = option(0.0, "Probability of replacing an expert action with a random valid one.", range=PROBABILITY)
    epochs: int | None = option(
        None,
        "Passes over the demonstrations; None = 24 for a built-in model (the `small` model reads the board at 24 "
        "and not at 4 or 12 on sokoban; 5.5 min for sokoban with the compact prompt on 2 cores, once, then cached: "
        "docs/models.md, \"A compact prompt\"), 3 for a real one (SmolLM2 reads the FrozenLake board after 3 "
        "passes at 2e-4, not after 2 at 5e-5: ragen/warmstart/defaults.py).",
        range=AT_LEAST_1,
    )
    lr: float | None = option(
        None,
        "Peak SFT learning rate (5% warm-up, then linear decay to 10%); None = 2e-3 for a built-in model (it "
        "starts random), 2e-4 for a real one (a fine-tuning rate; at 5e-5 SmolLM2 learnt the format but not the "
        "board).",
        range=POSITIVE,
    )
    batch_size: int = option(
        4, "Demonstrations per optimizer step (small batches: more updates for the same CPU time).", range=AT_LEAST_1
    )
    prompt_loss_weight: float | None = option(
        None,
        "Loss weight of the prompt and env tokens beside the sampled ones; None "
        "= 1.0 for a built-in model (a random model must learn to read the "
        "state from the prompts: docs/models.md), 0.0 for a real model.",
        range=NON_NEGATIVE,
    )


@attrs.frozen(kw_only=True)
class EarlyStopSection:
    """RAGEN's early-stopping rules (algorithms.md §8), each switchable; every stop is logged with its reason and a
    final checkpoint is written."""

    enabled: bool = option(True, "Master switch (RAGEN: on). Smoke runs may turn it off.")
    empty_stop_steps: int = option(
        5, "Stop after this many consecutive steps whose filter kept nothing (0 disables).", range=NON_NEGATIVE
    )
    rv_baseline_steps: int = option(
        10, "Steps whose pre-filter in-group reward std form the collapse baseline (0 disables).", range=NON_NEGATIVE
    )
    rv_patience: int = option(
        10,
        "Stop when this many consecutive steps after the baseline are all below rv_ratio x baseline.",
        range=AT_LEAST_1,
    )
    rv_ratio: float = option(
        0.1, "Fraction of the baseline reward std counted as collapsed (RAGEN 0.1).", range=PROBABILITY
    )
    val_min_success: float = option(
        0.01, "A validation with some variant's success below this counts as low (RAGEN 0.01).", range=PROBABILITY
    )
    val_patience: int = option(5, "Stop after this many consecutive low validations (0 disables).", range=NON_NEGATIVE)


SCHEMES = ("first_turn", "trajectory")


@attrs.frozen(kw_only=True)
class CollapseSection:
    """RAGEN-V2 collapse diagnostics: MI and conditional entropy of the reasoning given the prompt (algorithms.md
    §9)."""

    enabled: bool = option(True, "Compute the collapse metrics (needs <think> reasoning and context_mode=full).")
    compute_freq: int = option(
        10,
        "Compute at step 1 and every N steps, on the batch before filtering (RAGEN: 5, in "
        "configs/ragen.yaml; 10: 7 times in the default 60-step run, twice in a 10-step one, "
        "where they took about 5.5% of the RL CPU time: docs/performance.md; the default "
        "`small` run answers without <think> and computes none).",
        range=AT_LEAST_1,
    )
    num_samples: int = option(
        16,
        "(x, z) pairs drawn per scheme; the trajectory scheme scores num_samples² rows (RAGEN: "
        "64, in configs/ragen.yaml; 16 keeps a CPU step from being dominated by 4,096 scored rows).",
        range=Range(2),
    )
    micro_batch_size: int = option(128, "Cross-scoring rows per forward pass.", range=AT_LEAST_1)
    schemes: tuple[str, ...] = option(
        SCHEMES,
        "Sampling schemes to run: 'first_turn' (columns = env groups) and/or "
        "'trajectory' (any turn; each pair its own column).",
        converter=tuple,
        choices=SCHEMES,
    )
    h_threshold: float | None = option(
        None,
        "With i_threshold: log collapse/regime (0 diverse, 1 compressed, 2 template "
        "collapse, 3 low-entropy collapse); H(Z|X) below this is 'low'.",
        range=NON_NEGATIVE,
    )
    i_threshold: float | None = option(
        None, "With h_threshold: MI below this is 'low' for collapse/regime.", range=NON_NEGATIVE
    )


def _run_name(_inst: Any, attribute: attrs.Attribute, value: str) -> None:
    """A run folder's name stays inside ``run_dir``: one path component a filesystem accepts."""
    if not value:
        return
    problem = ("holds a path separator" if "/" in value or "\\" in value else
               "is '.' or '..'" if value in (".", "..") else
               "holds a control character" if any(ord(c) < 32 or ord(c) == 127 for c in value) else
               f"is {len(value)} characters long (at most 200)" if len(value) > 200 else "")
    if problem:
        raise ConfigError(f"{attribute.name}: a run folder name must be one path component; {value[:40]!r} {problem}")


@attrs.frozen(kw_only=True)
class LoggingSection:
    """Where results go."""

    run_dir: str = option("runs", "Parent folder of run folders.")
    name: str = option("", "Run folder name, one path component under run_dir (no '/', '..', control characters; "
                           "at most 200 characters); empty = '<env>-<algo>-<timestamp>'.", validator=_run_name)
    wandb: bool = option(False, "Log to Weights & Biases (imported only then; WANDB_MODE=offline works).")
    wandb_project: str = option("ragen", "Weights & Biases project.")
    save_trajectories: int = option(
        8, "Trajectories per step written to trajectories.jsonl (0 = none, -1 = all).", range=Range(0, also=(-1,))
    )
    progress: bool = option(True, "Show a progress bar over steps.")
    report_every: int = option(0, "Rewrite report.html in the run folder every N steps and at the end (`ragen report`; "
                                  "0 = never).", range=NON_NEGATIVE)


@attrs.frozen(kw_only=True)
class RunConfig:
    """Everything a run needs; `ragen run` writes the resolved tree into the run folder."""

    model: ModelConfig = option(factory=ModelConfig, doc="The policy model.")
    env: EnvSection = option(factory=EnvSection, doc="The environment.")
    algo: AlgoSection = option(factory=AlgoSection, doc="The algorithm preset.")
    rollout: RolloutSection = option(factory=RolloutSection, doc="Rollout sampling.")
    trainer: TrainerSection = option(factory=TrainerSection, doc="Updates and checkpoints.")
    warmstart: WarmstartSection = option(
        factory=WarmstartSection, doc="Expert warm start (`ragen sft`, `ragen run --warmstart`)."
    )
    early_stop: EarlyStopSection = option(
        factory=EarlyStopSection, doc="Early-stopping rules (RAGEN's, on by default)."
    )
    collapse: CollapseSection = option(
        factory=CollapseSection, doc="RAGEN-V2 collapse diagnostics (MI of reasoning vs prompt)."
    )
    logging: LoggingSection = option(factory=LoggingSection, doc="Outputs.")

    def __attrs_post_init__(self) -> None:
        # 'auto' is resolved once, here, so every reader (rollout, warm start, cache key, config.yaml) sees one name
        # a ragen-trained model folder says how it was trained to read and answer; a run from it keeps that
        r, name = self.rollout, self.model.name
        record = model_record(name) if "auto" in (r.parser, r.prompt) else {}
        if r.parser == "auto":
            if isinstance(record.get("parser"), str):
                options = r.parser_options or dict(record.get("parser_options") or {})
                r = attrs.evolve(r, parser=record["parser"], parser_options=options)
            else:
                r = attrs.evolve(r, parser=default_parser(name))
        if r.prompt == "auto":
            r = attrs.evolve(r, prompt=default_prompt(name, record))
        object.__setattr__(self, "rollout", r)


#: the built-in model whose default parser is answer-only (its warm start reads the state; docs/models.md)
ANSWER_ONLY_MODELS = ("small",)


def default_parser(model_name: str) -> str:
    """What ``rollout.parser='auto'`` means for ``model_name``."""
    return "answer" if model_name in ANSWER_ONLY_MODELS else "think-answer"


#: written beside an exported or warm-started model (``ragen.models.load.save_parser``): its parser, the parser's
#: options and its prompt style
MODEL_RECORD = "ragen-parser.json"


#: bytes of a model record: a few options; anything larger is no record ragen wrote
MAX_MODEL_RECORD_BYTES = 1 << 20


def model_record(model_name: str) -> dict:
    """What a ragen-trained local model folder records (``parser``, ``parser_options``, ``prompt``), else {} (a
    built-in or hub model). A malformed record is ignored: it is a hint, and explicit settings win over it. A record
    that is no regular file (a link to ``/dev/zero``, a FIFO), leads out of the folder or is over
    ``MAX_MODEL_RECORD_BYTES`` is refused with one line (``ragen.config.bounded``), never read until memory runs out."""
    from pathlib import Path

    from ragen.config.bounded import BoundedReadError, parse_json, read_file

    if not model_name:
        return {}
    folder = Path(model_name).expanduser()
    path = folder / MODEL_RECORD
    if not (path.exists() or path.is_symlink()):
        return {}
    try:
        raw = read_file(path, source=f"model.name: {MODEL_RECORD} of {str(folder)!r}",
                        max_bytes=MAX_MODEL_RECORD_BYTES, inside=folder)
    except FileNotFoundError:
        return {}
    try:
        data = parse_json(raw, source=str(path), max_bytes=MAX_MODEL_RECORD_BYTES)
    except BoundedReadError:
        return {}
    return data if isinstance(data, dict) else {}


#: the built-in models whose default prompt is the compact frame (measured: docs/models.md, "A compact prompt")
COMPACT_PROMPT_MODELS = ("small",)


def recorded_prompt(record: dict) -> str | None:
    """The prompt style a model record (``model_record``) holds: a record from before styles existed means the full
    frame; None without a record or with an unknown style."""
    style = record.get("prompt", "full") if record else None
    return style if style in PROMPTS else None


def recorded_window(record: dict) -> int | None:
    """The history window (``rollout.max_context_window``) a model record holds: 0 (all turns) for a record from
    before windows were recorded; None without a record or with a value that is no non-negative integer."""
    if not record:
        return None
    window = record.get("window", 0)
    return window if isinstance(window, int) and not isinstance(window, bool) and window >= 0 else None


def default_prompt(model_name: str, record: dict | None = None) -> str:
    """What ``rollout.prompt='auto'`` (and ``ragen eval --prompt auto``) means for ``model_name``: the style its
    folder records (``record``, read when not given), else compact for the built-in models in COMPACT_PROMPT_MODELS,
    else full."""
    style = recorded_prompt(model_record(model_name) if record is None else record)
    return style or ("compact" if model_name in COMPACT_PROMPT_MODELS else "full")
