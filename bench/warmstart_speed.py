"""Warm-start updates per second, the padding mask against none: the main job's warm start (built-in `small`,
sokoban, answer-only, compact prompt, batch 4) on the same demonstrations, timed update by update.

Two variants of ``sft``'s forward pass, run in alternation (A B A B ...) in one process so a shared machine's load
hits both alike:

- ``masked``: the rows' 2D padding mask and collate's positions (the warm start before it dropped the mask);
- ``causal``: right-padded rows with no mask (``ragen.warmstart.sft.causal_forward_masks``), SDPA's causal kernel.

Each round trains a fresh copy of the same initial weights for ``--updates`` updates of the same shuffled batches,
so both variants do the same arithmetic but for the mask. Medians of the rounds' updates per wall second and per CPU
second of the process, their ratios, and the load average (``os.getloadavg``) at every round go to ``--out``.

    python bench/warmstart_speed.py [--rounds 3] [--updates 24] [--threads 1] [--out bench/results/warmstart_speed.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

from ragen.models.load import load_model_and_tokenizer
from ragen.rollout import ChatFormat
from ragen.warmstart import sft as sft_module
from ragen.warmstart.sft import TorchOptimizer, expert_demos


def masked(batch) -> dict:
    """The forward pass before: the padding mask and collate's positions."""
    return {"attention_mask": batch.attention_mask, "position_ids": batch.position_ids}


VARIANTS = {"masked": masked, "causal": sft_module.causal_forward_masks}


def timed(model, tok, demos, variant: str, updates: int, batch: int, seed: int) -> tuple[float, float]:
    """Updates per second of ``updates`` SFT updates on a fresh copy of ``model``: per wall second and per second of
    this process's CPU time (with one thread, the second is what a loaded machine disturbs least)."""
    sft_module.forward_masks = VARIANTS[variant]  # the bench's switch between the two forward passes
    try:
        m = copy.deepcopy(model)
        opt = TorchOptimizer(m, lr=2e-3, weight_decay=0.01, grad_clip=1.0, total_steps=updates)
        t0, c0 = time.perf_counter(), time.process_time()
        out = sft_module.sft(opt, tok, demos[: updates * batch], epochs=1, batch_size=batch, micro_batch_size=batch,
                             seed=seed, prompt_weight=1.0)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        sft_module.forward_masks = VARIANTS["masked"]
    return out["sft/updates"] / elapsed, out["sft/updates"] / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="sokoban")
    ap.add_argument("--model", default="small")
    ap.add_argument("--prompt", default="compact")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--updates", type=int, default=24)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench/results/warmstart_speed.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    work = Path(tempfile.mkdtemp(prefix="warmstart-speed-"))
    model, tok = load_model_and_tokenizer(a.model, work, [a.env], dtype="float32", device="cpu")
    fmt = ChatFormat(tok, enable_think=False)
    demos = expert_demos(tok, fmt, a.env, {}, a.updates * a.batch, 0.0, 0, 3600, prompt=a.prompt).trajectories
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu_rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    loads = []
    for r in range(a.rounds):
        for v in VARIANTS:
            loads.append(round(os.getloadavg()[0], 2))
            wall, cpu = timed(model, tok, demos, v, a.updates, a.batch, seed=r)
            rates[v].append(wall)
            cpu_rates[v].append(cpu)
            print(f"round {r} {v}: {wall:.3f} updates/s, {cpu:.3f} per CPU s (load {loads[-1]})", flush=True)
    med = {v: statistics.median(x) for v, x in rates.items()}
    cpu_med = {v: statistics.median(x) for v, x in cpu_rates.items()}
    row = {"date": str(date.today()), "env": a.env, "model": a.model, "prompt": a.prompt, "batch": a.batch,
           "updates": a.updates, "threads": a.threads, "rounds": a.rounds,
           "cpu": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "tokens_per_row": statistics.mean(len(t.input_ids) for t in demos),
           "updates_per_s": rates, "median_updates_per_s": med, "load_average": loads,
           "time_ratio_causal_over_masked": med["masked"] / med["causal"],
           "updates_per_cpu_s": cpu_rates, "median_updates_per_cpu_s": cpu_med,
           "cpu_time_ratio_causal_over_masked": cpu_med["masked"] / cpu_med["causal"]}
    print(json.dumps({k: row[k] for k in ("median_updates_per_s", "time_ratio_causal_over_masked",
                                          "median_updates_per_cpu_s", "cpu_time_ratio_causal_over_masked")}))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
