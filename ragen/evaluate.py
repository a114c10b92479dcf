"""``ragen eval``: a model on the fixed validation seeds: success rate, mean reward, pass@k, trajectories JSONL."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ragen.components import make_component
from ragen.distributed import pick_device
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, HFEngine, SamplingParams, run_rollout
from ragen.rollout.runner import _parser_thinks


def evaluate(env_name: str, model: str, *, k: int = 1, n_groups: int = 64, temperature: float = 0.5, seed: int = 0,
             out: Path | None = None, options: dict | None = None, parser: str = "think-answer",
             max_model_len: int = 3600, device: str = "auto", work_dir: Path = Path("runs/eval-models")) -> dict:
    """Play ``n_groups`` validation seeds (123, 124, ...) with ``k`` samples each; returns the metrics."""
    from ragen.models import load_model_and_tokenizer

    dev = pick_device(device)
    policy, tokenizer = load_model_and_tokenizer(model, work_dir, [env_name], dtype="auto", device=str(dev))
    engine = HFEngine(policy, tokenizer)
    fmt = ChatFormat(tokenizer, enable_think=_parser_thinks(parser))
    groups = EnvGroups([GroupSpec(env_name, n_groups, dict(options or {}))], group_size=k, split="val")
    groups.seed_of = lambda step, g: 123 + g  # type: ignore[method-assign]  # validation seeds, k members each
    try:
        res = run_rollout(engine, tokenizer, groups, SamplingParams(temperature=temperature, seed=seed),
                          parser=make_component("parser", parser), max_model_len=max_model_len, chat_format=fmt)
    finally:
        groups.close()
    by_group: dict[int, list[bool]] = defaultdict(list)
    for t in res.trajectories:
        by_group[t.group_id].append(t.success)
    metrics = {
        "env": env_name,
        "model": model,
        "k": k,
        "seeds": n_groups,
        "success_rate": res.metrics["success"],
        "reward_mean": res.metrics["score"],
        "valid_format_rate": res.metrics["valid_format_rate"],
        f"pass@{k}": sum(any(v) for v in by_group.values()) / max(len(by_group), 1),
        "failed_envs": res.failed_envs,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "trajectories.jsonl", "w") as f:
            for t in res.trajectories:
                f.write(t.to_json() + "\n")
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        from ragen.report import build_report  # the trajectory viewer of `ragen report`, for these trajectories

        build_report([out], out / "report.html", decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False))
    return metrics
