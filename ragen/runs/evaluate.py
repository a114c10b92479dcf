"""``ragen eval``: a model on the fixed validation seeds: success rate, mean reward, pass@k, trajectories JSONL."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ragen.envs.resolved import val_seeds
from ragen.log import progress as progress_bar
from ragen.models.distributed import pick_device
from ragen.plugins.components import make_component, parser_thinks
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, HFEngine, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.runner import rollout_metrics
from ragen.runs.report import STATE_KEYS


def evaluate(env_name: str | Sequence[str], model: str, *, k: int = 1, n_groups: int = 64, temperature: float = 0.5,
             seed: int = 0, out: Path | None = None, options: dict | None = None, parser: str = "think-answer",
             parser_options: dict | None = None, max_model_len: int = 3600, device: str = "auto",
             work_dir: Path = Path("runs/eval-models"), env_options: dict[str, dict] | None = None,
             progress: bool = True, prompt: str = "full", window: int = 0) -> dict:
    """Play ``n_groups`` validation seeds (123, 124, ... for each env) with ``k`` samples each; returns the metrics.

    ``env_name``: one variant, or several played in one rollout; then the metrics hold ``envs`` (one entry
    per variant) and ``overall``. ``options`` apply to every env, ``env_options[name]`` to one (and win).
    ``progress``: a bar of turns played on stderr. ``prompt``: the frame's style (``rollout.prompt``); ``window``: the
    past turns each prompt holds (``rollout.max_context_window``, 0 = all)."""
    from ragen.models.load import load_model_and_tokenizer

    names = [env_name] if isinstance(env_name, str) else list(dict.fromkeys(env_name))
    dev = pick_device(device)
    policy, tokenizer = load_model_and_tokenizer(model, work_dir, names, dtype="auto", device=str(dev))
    engine = HFEngine(policy, tokenizer)
    fmt = ChatFormat(tokenizer, enable_think=parser_thinks(parser, parser_options))
    specs = [GroupSpec(n, n_groups, {**(options or {}), **(env_options or {}).get(n, {})}) for n in names]
    # each env plays seeds 123.. (its groups, laid out env by env), k members per seed
    groups = EnvGroups(specs, group_size=k, split="val", seeds=val_seeds(per_env=n_groups))
    settings = RolloutSettings(parser=make_component("parser", parser, **(parser_options or {})),
                               max_model_len=max_model_len, chat_format=fmt, prompt=prompt,
                               max_context_window=window)
    try:
        with progress_bar(0, 0, progress, desc="eval", unit="turn") as bar:
            res = run_rollout(engine, groups, SamplingParams(temperature=temperature, seed=seed), settings,
                              progress=bar)
    finally:
        groups.close()
    failed = _failed_by_env(res.errors, names)
    if len(names) == 1:
        metrics = {"env": names[0], "model": model, "k": k, "seeds": n_groups,
                   **_summary(res.trajectories, k, res.failed_envs)}
    else:
        metrics = {"envs_evaluated": names, "model": model, "k": k, "seeds": n_groups,
                   "envs": {n: _summary([t for t in res.trajectories if t.env_name == n], k, failed[n]) for n in names},
                   "overall": _summary(res.trajectories, k, res.failed_envs)}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "trajectories.jsonl", "w") as f:
            for t in res.trajectories:
                f.write(t.to_json() + "\n")
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        from ragen.runs.report import build_report  # the trajectory viewer of `ragen report`, for these trajectories

        build_report([out], out / "report.html", decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False))
    return metrics


def _summary(trajs: list, k: int, failed: int) -> dict:
    """Success, mean score, valid format and pass@k of some trajectories (one env's, or all)."""
    m = rollout_metrics(trajs, failed_envs=failed)
    by_group: dict[tuple, list[bool]] = defaultdict(list)
    for t in trajs:
        by_group[(t.env_name, t.group_id)].append(t.success)
    return {"success_rate": m["success"], "reward_mean": m["score"], "valid_format_rate": m["valid_format_rate"],
            f"pass@{k}": sum(any(v) for v in by_group.values()) / max(len(by_group), 1), "failed_envs": failed,
            **{key: m[key] for key in STATE_KEYS if key in m}, "levels": len(by_group)}


def state_line(m: dict) -> str | None:
    """One line saying whether the policy reads its state: its optimal-move rate beside chance on the same states,
    and how many different first answers it gave over the levels; None without those metrics."""
    parts = []
    if "optimal_action_rate" in m:
        parts.append(f"optimal moves {100 * m['optimal_action_rate']:.1f}% (chance on the same states "
                     f"{100 * m['optimal_action_chance']:.1f}%, {int(m['judged_actions'])} actions)")
    if "distinct_first_answers" in m:
        parts.append(f"{int(m['distinct_first_answers'])} distinct first answers over {m.get('levels', '?')} levels")
    return "state dependence: " + "; ".join(parts) if parts else None


def _failed_by_env(errors: list[str], names: list[str]) -> dict[str, int]:
    """Failures per env: each error line starts with its env's name (``run_rollout``)."""
    return {n: sum(e.startswith(f"{n} seed ") for e in errors) for n in names}
