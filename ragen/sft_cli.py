"""``ragen sft``: build the policy, generate expert demos, fine-tune, export a plain HF model folder."""

from __future__ import annotations

import json
from pathlib import Path

from ragen.config import RunConfig
from ragen.runlog import configure_logging
from ragen.sft import warm_start_model


def run_sft(cfg: RunConfig, out: Path | None = None) -> tuple[Path, dict]:
    """Fine-tune ``cfg.model`` on expert demos of ``cfg.env`` (``warmstart.*`` settings); the model goes to
    ``OUT/final`` and the untrained starting point stays in ``OUT/model-source`` for comparisons."""
    from ragen.models import resolve_model

    configure_logging()
    out = Path(out or Path(cfg.logging.run_dir) / f"sft-{cfg.env.name}")
    source = resolve_model(cfg.model.name, out / "model-source", [cfg.env.name])
    final = out / "final"
    metrics = warm_start_model(cfg, final, model_name=source.path if source.kind == "tiny" else cfg.model.name)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return final, metrics
