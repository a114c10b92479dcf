"""``ragen sft``: build the policy, generate expert demos, fine-tune, export a plain HF model folder."""

from __future__ import annotations

from pathlib import Path

from ragen.config import RunConfig
from ragen.distributed import init_distributed, make_engine, pick_device
from ragen.rollout import ChatFormat
from ragen.rollout.runner import _parser_thinks
from ragen.runlog import configure_logging, log
from ragen.sft import expert_demos, sft


def run_sft(cfg: RunConfig, out: Path | None = None) -> tuple[Path, dict]:
    from ragen.models import load_model_and_tokenizer, resolve_dtype

    configure_logging()
    out = Path(out or Path(cfg.logging.run_dir) / f"sft-{cfg.env.name}")
    device = pick_device(cfg.trainer.device)
    dtype = resolve_dtype(cfg.model.dtype, str(device))
    model, tokenizer = load_model_and_tokenizer(cfg.model.name, out / "model-source", [cfg.env.name],
                                                dtype=str(dtype).removeprefix("torch."), device=str(device))
    fmt = ChatFormat(tokenizer, enable_think=_parser_thinks(cfg.rollout.parser))
    w = cfg.warmstart
    demos = expert_demos(tokenizer, fmt, cfg.env.name, dict(cfg.env.options), w.episodes, w.noise, cfg.trainer.seed,
                         cfg.rollout.max_model_len, cfg.trainer.format_penalty)
    init_distributed(device)
    engine = make_engine(model, lr=w.lr, weight_decay=cfg.trainer.weight_decay, grad_clip=cfg.trainer.grad_clip,
                         zero_stage=cfg.trainer.zero_stage, dtype=dtype)
    metrics = sft(engine, tokenizer, demos.trajectories, epochs=w.epochs, batch_size=w.batch_size,
                  micro_batch_size=cfg.trainer.micro_batch_size, seed=cfg.trainer.seed, chunk=cfg.trainer.logprob_chunk,
                  device=device)
    metrics["sft/demo_success"] = demos.metrics["success"]
    metrics["sft/demos"] = len(demos.trajectories)
    final = out / "final"
    engine.module.save_pretrained(final)
    tokenizer.save_pretrained(final)
    log.info("sft_done", model=str(final), **{k.split("/")[-1]: round(float(v), 4) for k, v in metrics.items()})
    return final, metrics
