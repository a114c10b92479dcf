"""``ragen sft``: build the policy, generate expert demos, fine-tune, export a plain HF model folder."""

from __future__ import annotations

import json
from pathlib import Path

from ragen.config import RunConfig
from ragen.envs.resolved import ResolvedRun, as_resolved
from ragen.errors import Interrupted
from ragen.log import configure_logging
from ragen.train import interrupt
from ragen.warmstart.sft import warm_start_model


def run_sft(run: ResolvedRun | RunConfig, out: Path | None = None) -> tuple[Path, dict]:
    """Fine-tune ``cfg.model`` on expert demos of ``cfg.env`` (``warmstart.*`` settings); the model goes to
    ``OUT/final`` and the untrained starting point stays in ``OUT/model-source`` for comparisons. ``run``: the
    resolved run (a ``RunConfig`` is resolved here)."""
    from ragen.models.load import resolve_model

    configure_logging()
    run = as_resolved(run)
    cfg = run.cfg
    out = Path(out or Path(cfg.logging.run_dir) / f"sft-{cfg.env.name}")
    source = resolve_model(cfg.model.name, out / "model-source", [cfg.env.name])
    final = out / "final"
    with interrupt.GracefulInterrupt("the current SFT update"):
        metrics = warm_start_model(run, final, model_name=source.path if source.kind == "tiny" else cfg.model.name,
                                   stop=interrupt.requested)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if metrics.get("sft/interrupted"):
        raise Interrupted(f"interrupted after {metrics['sft/updates']} SFT updates; the model so far is in {final}; "
                          f"continue fine-tuning it with `ragen sft --env {cfg.env.name} --model {final} --out OTHER`")
    return final, metrics
