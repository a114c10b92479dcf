"""The user cache folder, the cache of the built-in models (``tiny``, ``small``) and that of dequantized GGUF models.

Building a built-in model trains a BPE tokenizer on the envs' text (seconds for sokoban) and initialises its weights
at random; both are deterministic, so every ``ragen run/eval/sft`` of the same model and envs would otherwise redo
the same work. The built folder is stored under ``cache_base()/builtin/<key>``, where the key is a hash of everything
the files depend on: the corpus text itself (so an edited env, its options or its plugin change the key without any
version bump), the model's size and build settings, the tokenizer's fixed settings, ``CACHE_VERSION`` and the
versions of the libraries that write the files. A hit copies the entry into the run folder, which then holds the same
bytes a fresh build would have written.

A GGUF model (``smollm2``, ``gemma3``, a ``.gguf`` path) is dequantized by transformers on every load: for SmolLM2 22
CPU-seconds (its tokenizer 5, its weights 17) against 0.7 s for the same weights and tokenizer saved as a plain
folder. So the first load stores that folder under ``cache_base()/gguf/<key>`` (``gguf_key``: the file's content,
the dtype and the converting libraries' versions) and later loads read it (``models.load.plain_source``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ragen.contract.env import Env
from ragen.log import log
from ragen.plugins.loader import distribution_version

#: bump when the build writes different files for the same inputs in a way the key does not see
CACHE_VERSION = 1
SUBDIR = "builtin"
#: written last into an entry: a folder without it (an interrupted store) is never used
MARKER = ".ragen-builtin-complete"
#: the libraries whose versions change the written files (tokenizer training, the random init, serialisation)
LIBRARIES = ("ragen", "torch", "transformers", "tokenizers", "safetensors")


def cache_base() -> Path:
    """The user's ragen cache folder: ``$RAGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/ragen``, else ``~/.cache/ragen``
    (each cache lives in a subfolder: ``warmstart``, ``builtin``)."""
    return Path(os.environ.get("RAGEN_CACHE_DIR")
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragen")


def key_inputs(name: str, corpus: Sequence[str], env_labels: Sequence[str], build: dict) -> dict:
    """Everything the built files depend on; ``build`` holds the keyword arguments of ``build_from_corpus``."""
    from ragen.models import builtin

    digest = hashlib.sha256()
    for text in corpus:  # length-prefixed: ["ab", "c"] and ["a", "bc"] differ
        raw = text.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return {
        "cache_version": CACHE_VERSION,
        "model": name,
        "build": dict(sorted(build.items())),
        "env_labels": list(env_labels),
        "corpus_sha256": digest.hexdigest(),
        "corpus_texts": len(corpus),
        "cell_tokens": True,
        "cell_pattern": builtin.CELL_PATTERN,
        "special_tokens": list(builtin.SPECIAL_TOKENS),
        "chat_template": builtin.CHATML_TEMPLATE,
        # a checkout on PYTHONPATH has no version: the corpus hash still covers its envs
        "versions": {dist: distribution_version(dist) or "unknown" for dist in LIBRARIES},
    }


def key_of(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:24]


def build_builtin(
    name: str,
    out_dir: str | os.PathLike,
    env_names: Sequence[str | Env] = (),
    *,
    cache: bool = True,
    corpus_seeds: int | None = None,
    **build,
) -> bool:
    """Write the built-in model ``name`` (``build``: its size, as in ``BUILTIN_MODELS``) into ``out_dir``, from the
    cache when it holds an entry for these inputs, else built and then stored; True when it came from the cache."""
    from ragen.models.builtin import CORPUS_SEEDS, build_corpus, build_from_corpus, env_label

    out = Path(out_dir)
    corpus = build_corpus(env_names, seeds=CORPUS_SEEDS if corpus_seeds is None else corpus_seeds)
    labels = [env_label(e) for e in env_names]
    key = key_of(key_inputs(name, corpus, labels, build))
    entry = cache_base() / SUBDIR / key
    hit = cache and (entry / MARKER).is_file()
    log.info("builtin_model_build", model=name, path=str(out), cached=hit, key=key,
             note="copied from the cache" if hit else
             "one-time set-up: training its tokenizer on the envs' text, then a random init (seconds)")
    if not hit:
        if not cache:
            build_from_corpus(out, corpus, labels, **build)
            return False
        _store(entry, lambda tmp: build_from_corpus(tmp, corpus, labels, **build))
        if not (entry / MARKER).is_file():  # could not be stored (a foreign folder in the way): build in place
            build_from_corpus(out, corpus, labels, **build)
            return False
    _copy_entry(entry, out)
    return hit


#: the cache of dequantized GGUF models: subfolder, completion marker, the libraries whose versions change its files
GGUF_SUBDIR = "gguf"
GGUF_MARKER = ".ragen-gguf-complete"
GGUF_LIBRARIES = ("transformers", "gguf", "torch", "tokenizers", "safetensors")


def gguf_key(gguf: Path, dtype: str) -> str:
    """The cache key of ``gguf`` dequantized to ``dtype``: the file's bytes (sha256; 0.1-0.3 s for a 100-250 MB
    file, so a replaced file of the same name is a new key), its name, the dtype and the library versions."""
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        while chunk := f.read(1 << 23):
            digest.update(chunk)
    return key_of({"cache_version": CACHE_VERSION, "kind": "gguf", "file": gguf.name, "sha256": digest.hexdigest(),
                   "dtype": dtype,
                   "versions": {dist: distribution_version(dist) or "unknown" for dist in GGUF_LIBRARIES}})


def cached_gguf(key: str, convert) -> Path | None:
    """The cache entry ``gguf/<key>``, written by ``convert(folder)`` when missing; None when it cannot be stored (a
    read-only cache folder): the caller then loads the GGUF file itself."""
    entry = cache_base() / GGUF_SUBDIR / key
    hit = (entry / GGUF_MARKER).is_file()
    log.info("gguf_model_cache", key=key, path=str(entry), cached=hit,
             note="" if hit else "one-time set-up: dequantizing the GGUF file into a plain model folder")
    if not hit:
        try:
            _store(entry, convert, marker=GGUF_MARKER)
        except OSError as exc:
            log.warning("gguf_model_cache_not_stored", path=str(entry), error=str(exc)[:200])
            return None
    return entry if (entry / GGUF_MARKER).is_file() else None


def _store(entry: Path, build, marker: str = MARKER) -> None:
    """Build into a private folder beside ``entry`` and rename it into place with its marker already written: a
    reader sees a whole entry or none; of two processes storing the same key, the second discards its copy."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.parent / f".{entry.name}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        build(tmp)
        (tmp / marker).write_text("complete\n")
        for _ in range(2):
            try:
                os.rename(tmp, entry)
                return
            except OSError:  # another process stored the same key first (the same bytes): keep theirs
                if (entry / marker).is_file():
                    return
                shutil.rmtree(entry, ignore_errors=True)  # a folder without its marker is never an entry
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_entry(entry: Path, out: Path) -> None:
    """The entry's files (not its marker) into ``out``, as ``build_from_corpus`` would have written them."""
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(entry.iterdir()):
        if f.name == MARKER:
            continue
        if f.is_dir():
            shutil.copytree(f, out / f.name, dirs_exist_ok=True)
        else:
            shutil.copyfile(f, out / f.name)
