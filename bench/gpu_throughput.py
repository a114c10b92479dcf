"""GPU throughput of a ragen step on a ~0.5B-parameter Qwen2 model with random weights: the GPU check
of a whole step (rollout and update).

Builds a Qwen2-architecture model from a config (no download: 28 layers, hidden 1024, 16 query / 2 KV heads,
MLP 4864, the built-in 1,024-token tokenizer, tied embeddings: about 0.49 B parameters), saves it as a normal HF
folder, then runs the real ``ragen run`` on it (GRPO, bf16, the HF engine) for a few steps and reads the run folder:

- generated tok/s: sampled tokens of a step / its rollout time (the env's time included, tiny for sokoban);
- train tok/s: tokens the update forwards (prompt and response of every row) / its update time (old log-probs in
  bf16 are recomputed, by the reuse rule, plus the policy forward and backward);
- MFU of the update: (2 N for the old-log-prob forward + 6 N for forward and backward) x trained tokens / update
  time / the card's dense bf16 peak (attention FLOPs left out, so this is a lower bound).

A random model never closes its turn, so every turn samples the full response budget: the rollout is a fixed-length
batch decode, which is what this measures.

    python bench/gpu_throughput.py --steps 4 --out bench/results/gpu_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SHAPE = dict(hidden_size=1024, num_layers=28, num_heads=16, num_kv_heads=2, intermediate_size=4864)
#: dense bf16 peak (TFLOP/s) by device-name fragment; SXM figures from NVIDIA's data sheets
PEAKS = {"H200": 989.4, "H100": 989.4, "A100": 312.0}


def build_model(path: Path) -> int:
    from transformers import AutoModelForCausalLM

    from ragen.models.builtin import build_tiny_model

    build_tiny_model(path, ["sokoban"], corpus_seeds=20, **SHAPE)
    (path / "RAGEN_TINY").unlink(missing_ok=True)  # a plain local model folder, not a built-in one
    model = AutoModelForCausalLM.from_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def run(model: Path, root: Path, args) -> Path:
    name = "gpu-throughput"
    cmd = [sys.executable, "-m", "ragen", "run", "--env", "sokoban", "--algo", "grpo", "--model", str(model),
           "--no-warmstart", f"trainer.steps={args.steps}", "trainer.test_freq=0", "trainer.save_freq=0",
           f"rollout.n_groups={args.groups}", f"rollout.group_size={args.group_size}", "rollout.n_val_groups=8",
           "rollout.n_paired_levels=0",  # throughput only: no greedy before/after pass
           f"rollout.response_length={args.response_length}", f"env.options.max_turns={args.turns}",
           f"trainer.ppo_mini_batch_size={args.groups * args.group_size}", f"trainer.micro_batch_size={args.micro}",
           f"rollout.max_batch={args.groups * args.group_size}",
           "collapse.enabled=false", "early_stop.enabled=false", "logging.progress=false",
           "logging.save_trajectories=-1", f"logging.run_dir={root}", f"logging.name={name}", *args.override]
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return root / name


def measure(run_dir: Path, n_params: int, peak: float | None) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "timing/rollout_s" in r][1:]  # the first step pays CUDA/allocator warm-up
    trajs: dict[int, list] = {}
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():
        t = json.loads(line)
        trajs.setdefault(t["step"], []).append(t)
    per = []
    for r in steps:
        ts = trajs.get(r["step"], [])
        sampled = sum(sum(t["loss_mask"]) for t in ts)
        trained = sum(len(t["input_ids"]) for t in ts)
        flops = 8 * n_params * trained
        per.append({"step": r["step"], "rollout_s": r["timing/rollout_s"], "update_s": r["timing/update_s"],
                    "generated_tokens": sampled, "trained_tokens": trained,
                    "gen_tok_s": sampled / r["timing/rollout_s"], "train_tok_s": trained / r["timing/update_s"],
                    "mfu": None if peak is None else flops / r["timing/update_s"] / (peak * 1e12)})
    med = lambda k: sorted(p[k] for p in per)[len(per) // 2] if per and per[0][k] is not None else None  # noqa: E731
    return {"steps": per, "median": {k: med(k) for k in ("gen_tok_s", "train_tok_s", "mfu", "rollout_s", "update_s")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--response-length", type=int, default=256)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--override", nargs="*", default=[])
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_throughput.json")
    args = ap.parse_args()
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    peak = next((v for k, v in PEAKS.items() if k in name), None)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        n_params = build_model(Path(tmp) / "qwen2-0.5b-random")
        print(f"model: {n_params / 1e9:.3f} B parameters, built in {time.perf_counter() - t0:.0f} s", flush=True)
        res = measure(run(Path(tmp) / "qwen2-0.5b-random", Path(tmp) / "runs", args), n_params, peak)
    out = {"benchmark": "gpu_throughput", "date": date.today().isoformat(), "device": name, "peak_tflops_bf16": peak,
           "torch": torch.__version__, "params": n_params, "shape": SHAPE, "engine": "hf", "dtype": "bfloat16",
           "settings": {k: v for k, v in vars(args).items() if k != "out"}, **res}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str))
    m = res["median"]
    mfu = "-" if m["mfu"] is None else f"{100 * m['mfu']:.1f}%"
    print("| device | params | gen tok/s | train tok/s | update MFU |\n|---|---|---|---|---|")
    print(f"| {name} | {n_params / 1e9:.2f} B | {m['gen_tok_s']:.0f} | {m['train_tok_s']:.0f} | {mfu} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
