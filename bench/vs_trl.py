"""ragen's StarPO step vs TRL's GRPOTrainer on identical work: same model folder, same prompts, same sizes.

Setup (once): ragen's built-in tiny model for countdown is saved to a folder with its tokenizer, and ragen's rendered
first-turn countdown prompts (the chat template applied, as ragen's rollout renders them) to a JSONL file. Then both
trainers run on that folder with 8 prompts x 8 generations per step, at most 64 new tokens, temperature 1, one
optimizer step per rollout, 8 completions per forward/backward, learning rate 1e-5, TRL's defaults otherwise (no
reference model: beta 0; no old-log-prob pass: one iteration). Each trainer runs in its own process (its own peak
RSS): ragen in this venv, TRL in a throwaway venv (`--trl-python`; build it with
`python -m venv /tmp/trl-venv && /tmp/trl-venv/bin/pip install -c constraints.txt trl`). Runs alternate ragen, TRL,
ragen, TRL for `--rounds` rounds of `--steps` steps; the first step of each run is dropped (start-up, first-call
allocations); per-step numbers are medians over the remaining steps of all rounds. Reported: s/step, generated tok/s
(completion tokens / step time), train tok/s (prompt + completion tokens / step time), CPU s/step (process CPU time,
all threads) and peak RSS, at each thread count in `--threads`.

    python bench/vs_trl.py [--trl-python /tmp/trl-venv/bin/python] [--rounds 3] [--steps 6] [--threads 1,2]

The machine's load average is recorded before and after; on a shared machine the ratios of interleaved runs are
the meaningful numbers, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

GROUPS, GROUP_SIZE, NEW_TOKENS, MICRO, LR = 8, 8, 64, 8, 1e-5
ENV = "countdown"


# ---- setup: the shared model folder and prompts (ragen's venv) ---------------------------------------------------
def prepare(folder: Path, n_prompts: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from engines import first_turn_prompts

    from ragen.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny", folder / "source", [ENV])
    model.save_pretrained(folder / "model")
    tok.save_pretrained(folder / "model")
    with open(folder / "prompts.jsonl", "w") as f:
        for ids in first_turn_prompts(tok, ENV, n_prompts):
            f.write(json.dumps({"prompt": tok.decode(ids), "n_ids": len(ids)}) + "\n")


def _finish(rows: list[dict], out: Path) -> None:
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.write_text(json.dumps({"steps": rows, "peak_rss_mb": rss_mb}))


# ---- ragen (this venv) ------------------------------------------------------------------------------------------
def run_ragen(folder: Path, threads: int, steps: int, out: Path) -> None:
    from ragen.config import load_config
    from ragen.train.trainer import Trainer

    run_dir = Path(tempfile.mkdtemp(prefix="vs-trl-ragen-"))
    cfg = load_config(overrides=[
        f"env.name={ENV}", f"model.name={folder / 'model'}", f"rollout.n_groups={GROUPS}",
        f"rollout.group_size={GROUP_SIZE}", f"rollout.response_length={NEW_TOKENS}", "algo.name=grpo",
        f"trainer.ppo_mini_batch_size={GROUPS * GROUP_SIZE}", f"trainer.micro_batch_size={MICRO}",
        f"trainer.actor_lr={LR}", f"trainer.threads={threads}", "logging.progress=false", "logging.save_trajectories=0",
        f"logging.run_dir={run_dir}", "logging.name=run"])
    trainer = Trainer(cfg, run_dir / "run")
    seen: dict = {}
    real = trainer._rollout.train_batch

    def counting(*args, **kwargs):
        seen["result"] = real(*args, **kwargs)
        return seen["result"]

    trainer._rollout.train_batch = counting
    rows = []
    try:
        for _ in range(steps):
            t, c = time.perf_counter(), time.process_time()
            trainer.step()
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            trajs = seen["result"].trajectories
            gen = sum(sum(tr.loss_mask) for tr in trajs)
            rows.append(
                {"wall_s": wall, "cpu_s": cpu, "gen_tokens": gen, "tokens": sum(len(tr.input_ids) for tr in trajs)}
            )
    finally:
        trainer.close()
    _finish(rows, out)


# ---- TRL (the throwaway venv: only trl, transformers, datasets, torch are imported) ------------------------------
def run_trl(folder: Path, threads: int, steps: int, out: Path) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(threads)
    prompts = [json.loads(line)["prompt"] for line in (folder / "prompts.jsonl").read_text().splitlines()]
    counts: list[int] = []

    def reward(completions, completion_ids=None, **_):  # countdown's format check; the reward value costs nothing
        counts.extend(len(c) for c in completion_ids or [])
        return [float("<answer>" in c) for c in completions]

    tok = AutoTokenizer.from_pretrained(folder / "model")
    model = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32)
    rows: list[dict] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t, self.c, self.n = time.perf_counter(), time.process_time(), len(counts)

        def on_step_end(self, args, state, control, **kw):
            gen = sum(counts[self.n:])
            rows.append({"wall_s": time.perf_counter() - self.t, "cpu_s": time.process_time() - self.c,
                         "gen_tokens": gen, "tokens": gen + self.prompt_tokens(len(counts) - self.n)})

        @staticmethod
        def prompt_tokens(n_completions: int) -> int:
            return n_completions * mean_prompt

    mean_prompt = round(
        statistics.mean(json.loads(line)["n_ids"] for line in (folder / "prompts.jsonl").read_text().splitlines())
    )
    args = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="vs-trl-trl-"), per_device_train_batch_size=MICRO,
                      gradient_accumulation_steps=GROUPS * GROUP_SIZE // MICRO, num_generations=GROUP_SIZE,
                      max_completion_length=NEW_TOKENS, temperature=1.0, learning_rate=LR, max_steps=steps,
                      logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0,
                      dataloader_num_workers=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), callbacks=[Timer()])
    trainer.train()
    _finish(rows, out)


# ---- the comparison ---------------------------------------------------------------------------------------------
def child(kind: str, python: str, folder: Path, threads: int, steps: int) -> dict:
    out = folder / f"{kind}-{threads}-{time.time_ns()}.json"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [python, __file__, "--child", kind, "--folder", str(folder), "--threads", str(threads), "--steps", str(steps),
           "--child-out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} run failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def summarise(runs: list[dict]) -> dict:
    steps = [s for run in runs for s in run["steps"][1:]]  # the first step of each run is dropped
    med = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731
    return {"s_per_step": med("wall_s"), "cpu_s_per_step": med("cpu_s"),
            "gen_tok_per_s": statistics.median(s["gen_tokens"] / s["wall_s"] for s in steps),
            "train_tok_per_s": statistics.median(s["tokens"] / s["wall_s"] for s in steps),
            "peak_rss_mb": statistics.median(run["peak_rss_mb"] for run in runs), "steps_measured": len(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trl-python", default="/tmp/trl-venv/bin/python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "vs_trl.json")
    ap.add_argument("--child", choices=["ragen", "trl"])
    ap.add_argument("--folder", type=Path)
    ap.add_argument("--child-out", type=Path)
    args = ap.parse_args()
    if args.child:
        (run_ragen if args.child == "ragen" else run_trl)(args.folder, int(args.threads), args.steps, args.child_out)
        return

    folder = Path(tempfile.mkdtemp(prefix="vs-trl-"))
    prepare(folder, GROUPS * (args.steps + 2))
    trl_version = subprocess.run([args.trl_python, "-c", "import trl; print(trl.__version__)"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    load_before = os.getloadavg()
    result = {
        "benchmark": "vs_trl",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()} cpus={os.cpu_count()}",
        "trl": trl_version,
        "env": ENV,
        "prompts_x_generations": [GROUPS, GROUP_SIZE],
        "max_new_tokens": NEW_TOKENS,
        "rounds": args.rounds,
        "steps_per_run": args.steps,
        "load_avg_before": load_before,
        "threads": {},
    }
    for threads in (int(t) for t in args.threads.split(",")):
        runs: dict[str, list] = {"ragen": [], "trl": []}
        for r in range(args.rounds):  # interleaved A B A B: load changes hit both
            runs["ragen"].append(child("ragen", sys.executable, folder, threads, args.steps))
            runs["trl"].append(child("trl", args.trl_python, folder, threads, args.steps))
            print(f"threads={threads} round {r + 1}/{args.rounds} done (load {os.getloadavg()[0]:.1f})", flush=True)
        a, b = summarise(runs["ragen"]), summarise(runs["trl"])
        result["threads"][str(threads)] = {
            "ragen": a,
            "trl": b,
            "ratio_ragen_over_trl": {k: a[k] / b[k] for k in a if b[k]},
            "raw": runs,
        }
    result["load_avg_after"] = os.getloadavg()
    print(
        f"\nragen vs TRL {trl_version} GRPOTrainer: {GROUPS} prompts x {GROUP_SIZE} generations, <= {NEW_TOKENS} new "
        f"tokens, one optimizer step per rollout; medians over {args.rounds} interleaved rounds x "
        f"{args.steps - 1} steps"
    )
    print(
        f"load average before {load_before[0]:.1f}, after {result['load_avg_after'][0]:.1f} "
        "(a loaded machine: compare ratios)"
    )
    cols = [("s_per_step", "s/step"), ("gen_tok_per_s", "gen tok/s"), ("train_tok_per_s", "train tok/s"),
            ("cpu_s_per_step", "CPU s/step"), ("peak_rss_mb", "peak RSS MB")]
    print(f"{'threads':>7} {'':>13}" + "".join(f"{name:>13}" for _, name in cols))
    for threads, res in result["threads"].items():
        for who in ("ragen", "trl", "ratio_ragen_over_trl"):
            label = "ragen / TRL" if who.startswith("ratio") else who
            print(f"{threads:>7} {label:>13}" + "".join(f"{res[who][k]:>13.3f}" for k, _ in cols))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
