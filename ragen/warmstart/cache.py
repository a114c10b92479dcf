"""Warm start by default, and its cache.

A freshly initialised built-in model (``tiny``, ``small``) cannot write a well-formed answer, so RL on it has nothing
to reinforce. ``ragen run`` therefore first fine-tunes it on the env's (noisy) expert demonstrations
(``warmstart.mode=auto``, the default); a real model (SmolLM2, a path, a hub id) is warm-started only when asked
(``--warmstart`` / ``warmstart.mode=always``), never silently.

The fine-tuned model is cached in a user folder (``$RAGEN_CACHE_DIR`` or ``$XDG_CACHE_HOME/ragen`` or
``~/.cache/ragen``, then ``warmstart/<key>``), keyed by everything that changes it: the env variant, its options and
its plugin's version, the model section, the warm-start settings, the parser and the context cap.
A second identical run copies the cached model into its run folder and starts RL at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from ragen.config import RunConfig, to_dict
from ragen.envs.resolved import ResolvedRun, as_resolved
from ragen.log import log
from ragen.models.cache import cache_base
from ragen.plugins.loader import distribution_version
from ragen.warmstart.defaults import settings

#: what a key holds for a distribution that is not installed (a checkout on PYTHONPATH): the key's input since the
#: first cache entries, so such a checkout finds the entries it made before
NO_VERSION = "unknown"

#: bump when the warm-start procedure changes what it produces for the same inputs
CACHE_VERSION = 1
RUN_SUBDIR = Path("model-source") / "warmstart"
INFO_FILE = "warmstart.json"


def applies(cfg: RunConfig, flag: bool | None = None) -> bool:
    """Whether this run warm-starts: the CLI flag wins, then ``warmstart.mode``; 'auto' = only built-in models."""
    from ragen.models.builtin import BUILTIN_MODELS

    if flag is not None:
        return flag
    mode = cfg.warmstart.mode
    return mode == "always" or (mode == "auto" and cfg.model.name in BUILTIN_MODELS)


def cache_root() -> Path:
    return cache_base() / "warmstart"


def key_inputs(run: ResolvedRun | RunConfig) -> dict:
    """Everything the warm-started weights depend on (and nothing else: not the algorithm, not the RL settings)."""
    from ragen.plugins.loader import get_registry
    from ragen.train.provenance import resolved_options

    cfg = run.cfg if isinstance(run, ResolvedRun) else run
    item = get_registry("env").get(cfg.env.name)
    # the resolved values: a built-in model's entry keeps its key from before these had per-model defaults, and a
    # changed default for real models makes new entries rather than reusing ones trained otherwise
    warm = {k: v for k, v in to_dict(settings(cfg)).items() if k not in ("mode", "cache")}
    out = {
        "cache_version": CACHE_VERSION,
        "env": cfg.env.name,
        # a rerun from a run's config.yaml, which lists every option, finds the same entry as the run it copies
        "env_options": resolved_options("env", cfg.env.name, cfg.env.options),
        "env_plugin": [item.dist, distribution_version(item.dist) or NO_VERSION],
        "ragen": distribution_version("ragen") or NO_VERSION,
        "model": to_dict(cfg.model),
        "warmstart": warm,
        "parser": cfg.rollout.parser,
        "parser_options": resolved_options("parser", cfg.rollout.parser, cfg.rollout.parser_options),
        "max_model_len": cfg.rollout.max_model_len,
    }
    if cfg.rollout.prompt != "full":  # the compact frame (a full-frame entry keeps its key from before styles existed)
        out["prompt"] = cfg.rollout.prompt
    if cfg.rollout.max_context_window:  # the demos' history window (an entry without one keeps its key)
        out["window"] = cfg.rollout.max_context_window
    if cfg.env.train or cfg.env.val:  # env lists; the one-env form keeps its keys, so its cache entries
        out["env_lists"] = _env_lists_key(as_resolved(run))
    return out


def _env_lists_key(run: ResolvedRun) -> dict:
    """What env lists change in a warm start: the demos' envs and shares (the training plan) and the tokenizer
    corpus of a built-in model (every train and val env)."""
    train = []
    for p in run.train_plan:
        dist = run.envs[p.name].dist
        train.append([p.name, p.options, p.n_groups, p.parser, dist, distribution_version(dist) or NO_VERSION])
    return {"train": train, "corpus": list(run.env_names)}


def cache_key(run: ResolvedRun | RunConfig) -> str:
    blob = json.dumps(key_inputs(run), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def prepare(run: ResolvedRun | RunConfig, run_dir: Path) -> tuple[Path, dict]:
    """The warm-started model for this run, copied into ``run_dir/model-source/warmstart``; ``(path, metrics)``.

    Taken from the cache when an entry with this run's key exists (and ``warmstart.cache`` is on), else trained and
    then stored. The metrics are those of the fine-tune that produced the weights, plus ``warmstart/cached``.
    """
    run = as_resolved(run)
    cfg, key = run.cfg, cache_key(run)
    dest = Path(run_dir) / RUN_SUBDIR
    entry = cache_root() / key
    cached = cfg.warmstart.cache and (entry / INFO_FILE).is_file()
    if cached:
        log.info("warmstart_cached", key=key, path=str(entry), note="reusing the cached warm-started model")
    else:
        w = settings(cfg)
        log.info("warmstart_started", key=key, env=run.label, episodes=w.episodes, epochs=w.epochs, lr=w.lr,
                 note="one-time: fine-tunes the model on expert demos, then caches it")
        built = _train(run, dest.parent / "warmstart-build")
        if cfg.warmstart.cache:
            _store(built, entry)
            log.info("warmstart_saved", key=key, path=str(entry))
        else:
            entry = built
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(entry, dest)
    if not cfg.warmstart.cache:
        shutil.rmtree(entry)
    info = json.loads((dest / INFO_FILE).read_text())
    return dest, {**info["metrics"], "warmstart/cached": float(cached)}


def _train(run: ResolvedRun, out: Path) -> Path:
    """Fine-tune the run's model on expert demos into ``out`` (a HF model folder plus ``warmstart.json``)."""
    from ragen.warmstart.sft import warm_start_model

    t0 = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    metrics = warm_start_model(run, out)
    metrics["timing/warmstart_s"] = time.perf_counter() - t0
    (out / INFO_FILE).write_text(json.dumps({"key": cache_key(run), "inputs": key_inputs(run), "metrics": metrics},
                                            indent=2, default=str))
    return out


def _store(built: Path, entry: Path) -> None:
    """Move ``built`` to ``entry`` atomically: a concurrent or interrupted run never sees half a cache entry."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.parent / f".{entry.name}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(built, tmp)
    try:
        os.rename(tmp, entry)
    except OSError:  # another run stored the same key first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(built, ignore_errors=True)

