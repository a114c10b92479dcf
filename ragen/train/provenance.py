"""What a run folder records so the run can be repeated: the fully resolved config and the versions it ran with.

``config.yaml`` is the run config with every component written out: the env's, the parser's and the algorithm
preset's fields in full, and the preset's estimator, filters and shapers with all their options. It loads as an
ordinary config (``ragen run --config RUN/config.yaml``), so a preset or plugin whose defaults changed since cannot
change the rerun. ``run.json`` names the versions: ragen and every plugin distribution, the git commit of a checkout,
python, torch, transformers, deepspeed, the device and the seed.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ragen.config import RunConfig, converter, to_dict
from ragen.plugins.components import component_config, preset_with
from ragen.plugins.loader import distribution_version, get_registry
from ragen.train.runlog import redact_command

#: libraries whose versions change what a run computes
LIBRARIES = ("torch", "transformers", "deepspeed", "accelerate", "peft", "numpy", "vllm")


def resolved_options(kind: str, name: str, options: dict | None = None, path: str | None = None) -> dict:
    """Every option of component ``name`` of ``kind`` as the run uses it: registered defaults, then ``options``
    (unknown or bad ones are a ``ConfigError`` naming ``path``, the config key they came from)."""
    config = component_config(get_registry(kind).get(name), dict(options or {}), path=path or name)
    return {} if config is None else converter.unstructure(config)


def resolved_preset(cfg: RunConfig) -> dict:
    """``algo.options`` written out: every preset field, with the estimator's, filters' and shapers' full options."""
    preset = preset_with(get_registry("algorithm").get(cfg.algo.name).factory, cfg.algo.options)
    data = converter.unstructure(preset)
    key = "algo.options."
    data["estimator_options"] = resolved_options("estimator", preset.estimator, preset.estimator_options,
                                                 key + "estimator_options")
    data["filter_options"] = resolved_options("filter", preset.filter, preset.filter_options, key + "filter_options")
    if preset.pre_filter:
        data["pre_filter_options"] = resolved_options("filter", preset.pre_filter, preset.pre_filter_options,
                                                      key + "pre_filter_options")
    data["shaper_options"] = {name: resolved_options("shaper", name, preset.shaper_options.get(name),
                                                     f"{key}shaper_options.{name}") for name in preset.shapers}
    return data


def resolved_config(cfg: RunConfig) -> dict:
    """The run config as ``config.yaml`` holds it: loadable by ``load_config``, every component's options in full."""
    data = to_dict(cfg)
    data["algo"]["options"] = resolved_preset(cfg)
    data["rollout"]["parser_options"] = resolved_options("parser", cfg.rollout.parser, cfg.rollout.parser_options,
                                                         "rollout.parser_options")
    if not cfg.env.train:  # with env.train, env.name is unused (docs/multi-env.md): its plugin need not be installed
        data["env"]["options"] = resolved_options("env", cfg.env.name, cfg.env.options, "env.options")
    for section in ("train", "val"):  # multi-env runs list their envs, each with its own options and parser
        for i, entry in enumerate(data["env"].get(section) or ()):
            entry["options"] = resolved_options("env", entry["name"], entry.get("options"),
                                                f"env.{section}[{i}].options")
    return data


def run_info(cfg: RunConfig, device: Any) -> dict:
    """``run.json``: what the run ran with, besides its config."""
    from ragen.plugins.loader import broken_plugins, clashes, loaded_plugins

    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "ragen": distribution_version("ragen"),
        "git_commit": git_commit(),
        "plugins": {p.dist: p.version for p in loaded_plugins()},
        "components": _component_dists(cfg),
        "broken_plugins": {b.dist: b.error for b in broken_plugins()},
        "clashes": [f"{c.kind} {c.name!r}: {c.kept} (used), {c.refused} (refused)" for c in clashes()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": {name: v for name in LIBRARIES if (v := distribution_version(name)) is not None},
        "device": _device_name(device),
        "seed": cfg.trainer.seed,
        "command": redact_command(sys.argv),  # a token given on the command line is no secret in the record
    }


def _component_dists(cfg: RunConfig) -> dict:
    """kind:name -> the distribution (and its version) that provided each component the run uses."""
    preset = preset_with(get_registry("algorithm").get(cfg.algo.name).factory, cfg.algo.options)
    used = [("env", cfg.env.name), ("algorithm", cfg.algo.name), ("parser", cfg.rollout.parser),
            ("estimator", preset.estimator), ("filter", preset.filter),
            *([("filter", preset.pre_filter)] if preset.pre_filter else []), *(("shaper", s) for s in preset.shapers)]
    out = {}
    for kind, name in used:
        dist = get_registry(kind).get(name).dist
        out[f"{kind}:{name}"] = f"{dist} {distribution_version(dist) or '?'}"
    return out


def git_commit() -> str | None:
    """The commit of the checkout ragen runs from (with ``+dirty`` when it has uncommitted changes); None when ragen is
    not a git checkout (an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _device_name(device: Any) -> str:
    text = str(device)
    if text.startswith("cuda"):
        import torch

        return f"{text} ({torch.cuda.get_device_name(torch.device(text))})"
    return f"{text} ({platform.processor() or platform.machine()})"
