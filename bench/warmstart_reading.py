"""Does the warm start read the board? One warm start per call, then greedy play on held-out levels.

The warm start is ragen's own (``expert_demos`` + ``sft`` with the prompt in the loss, the ``TorchOptimizer`` a run
uses; docs/models.md); its knobs are the arguments: model size (``deep`` = a 4-layer 256-wide Qwen2 for the depth
experiment), parser (answer-only or think-answer), demos, epochs, the init/shuffle seed and a history window. Then the
model plays the validation levels (seeds 123..) greedily through the real rollout loop and the row reports success,
``optimal_action_rate`` beside its chance level on the same states and the distinct first answers: a policy that
ignores the state sits at chance with few distinct first answers.

    python bench/warmstart_reading.py --env frozenlake --parser answer --epochs 12 --seed 2 [--save DIR] [--seen 128]
    python bench/warmstart_reading.py --env sokoban --load DIR --seen 128     # a saved warm start, no training
    python bench/warmstart_reading.py --env sokoban --epochs 24 --prompt compact   # the compact prompt frame

``--seen N`` also plays the first N demonstration levels (seeds 900000.., the levels the warm start was trained on)
and adds ``seen_*`` keys: a model that memorised its demos is far better there than on the held-out levels; one
that under-fits is as poor on both (docs/models.md, "Under-fitting, not memorising").

Each call appends one JSON row to ``bench/results/warmstart_reading.jsonl`` and prints it as a table row; the table
in docs/models.md ("Answer-only by default for `small`") is those rows. ``--save DIR`` keeps the model (a plain
Hugging Face folder, with its parser and prompt style recorded, that `ragen run --model DIR` trains further).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from datetime import date
from pathlib import Path

import torch

from ragen.config import load_config
from ragen.config.schema import PROMPTS
from ragen.envs.resolved import DEMO_SEED_BASE, VAL_SEED_BASE, SeedRule
from ragen.models import builtin
from ragen.models.load import load_model_and_tokenizer, save_parser
from ragen.plugins.components import make_component, parser_thinks
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.expert import ExpertEngine
from ragen.rollout.hf import HFEngine
from ragen.warmstart.sft import TorchOptimizer, sft
from ragen.warmstart.sft import prompt_weight as resolved_prompt_weight

#: the depth experiment's model: `small` with 4 layers
builtin.BUILTIN_MODELS.setdefault("deep", {**builtin.BUILTIN_MODELS["small"], "num_layers": 4})
KEYS = ("success", "optimal_action_rate", "optimal_action_chance", "distinct_first_answers")


def play(engine, tokenizer_fmt, env: str, levels: int, settings: dict, seed_base: int, split: str):
    groups = EnvGroups([GroupSpec(env, levels, {})], group_size=1, split=split, seeds=SeedRule(seed_base))
    try:
        return run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=0),
                           RolloutSettings(chat_format=tokenizer_fmt, max_model_len=3600, format_penalty=-1.0,
                                           **settings))
    finally:
        groups.close()


def _peak_rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="frozenlake")
    ap.add_argument("--model", default="small",
                    help=f"a built-in model ({', '.join(sorted(builtin.BUILTIN_MODELS))}) or any `model.name` a run "
                         "takes (smollm2, a GGUF file, a local Hugging Face folder)")
    ap.add_argument("--parser", default="answer")
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="init and shuffle seed")
    ap.add_argument("--prompt", default="full", choices=PROMPTS, help="rollout.prompt of demos and play")
    ap.add_argument("--window", type=int, default=0, help="rollout.max_context_window of demos and play (0 = all)")
    ap.add_argument("--levels", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="SFT batch (the warm start's default: 4)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak SFT learning rate (the warm start's default: 2e-3)")
    ap.add_argument("--prompt-weight", type=float, default=None,
                    help="loss weight of prompt and env tokens (default: 1.0 for a built-in model, 0.0 for a real one, "
                         "as warmstart.prompt_loss_weight=None resolves)")
    ap.add_argument("--save", type=Path)
    ap.add_argument("--load", type=Path, help="Evaluate this saved warm start (a --save folder or a cache entry) "
                    "instead of training one; --epochs, --episodes and --seed then only describe it in the row")
    ap.add_argument("--seen", type=int, default=0, help="Also play this many of the demos' own levels (0 = none)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/warmstart_reading.jsonl"))
    a = ap.parse_args()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"warmstart-reading-{os.getpid()}"
    torch.manual_seed(a.seed)
    given = [] if a.prompt_weight is None else [f"warmstart.prompt_loss_weight={a.prompt_weight}"]
    prompt_weight = resolved_prompt_weight(load_config(overrides=[f"model.name={a.model}", *given]))
    t0 = time.perf_counter()
    model, tok = load_model_and_tokenizer(str(a.load or a.model), work, [a.env], dtype="float32", device="cpu")
    fmt = ChatFormat(tok, enable_think=parser_thinks(a.parser))
    window = {"max_context_window": a.window} if a.window else {}
    window["prompt"] = a.prompt
    if not a.load:
        demos = play(ExpertEngine(tok, fmt.eos_id, fmt.enable_think, seed=0), fmt, a.env, a.episodes, window,
                     DEMO_SEED_BASE, "train")
        updates = a.epochs * max(1, round(len(demos.trajectories) / a.batch))
        opt = TorchOptimizer(model, lr=a.lr, weight_decay=0.01, grad_clip=1.0, total_steps=updates)
        sft(opt, tok, demos.trajectories, epochs=a.epochs, batch_size=a.batch, micro_batch_size=a.batch, seed=a.seed,
            prompt_weight=prompt_weight)
    t_sft = time.perf_counter() - t0
    rss_sft = _peak_rss_mb()
    model.eval()
    settings = {**window, "parser": make_component("parser", a.parser)}
    engine = HFEngine(model, tok)
    res = play(engine, fmt, a.env, a.levels, settings, VAL_SEED_BASE, "val")
    seen = {}
    if a.seen:  # the demos' own levels: the same seeds and split the demonstrations were played on
        played = play(engine, fmt, a.env, a.seen, settings, DEMO_SEED_BASE, "train")
        seen = {f"seen_{k}": played.metrics.get(k) for k in KEYS} | {"seen_levels": a.seen}
    row = {"date": str(date.today()), "env": a.env, "model": a.model, "parser": a.parser, "episodes": a.episodes,
           "epochs": a.epochs, "seed": a.seed, "window": a.window, "prompt": a.prompt, "batch": a.batch, "lr": a.lr,
           "levels": a.levels, "warm_start_s": round(t_sft),
           "prompt_weight": prompt_weight, "peak_rss_mb_after_sft": rss_sft, "peak_rss_mb": _peak_rss_mb(),
           "load_average": round(os.getloadavg()[0], 2), **{k: res.metrics.get(k) for k in KEYS}, **seen}
    if a.load:
        row |= {"loaded": str(a.load), "warm_start_s": None}
    print("| env | model | parser | prompt | epochs | seed | greedy success | optimal / chance | first answers "
          "| warm start s |")
    print(f"| {a.env} | {a.model} | {a.parser} | {a.prompt} | {a.epochs} | {a.seed} | {100 * row['success']:.1f}% | "
          f"{100 * (row['optimal_action_rate'] or 0):.1f}% / {100 * (row['optimal_action_chance'] or 0):.1f}% | "
          f"{row['distinct_first_answers']} | {row['warm_start_s']} |")
    if seen:
        print(f"seen (the demos' first {a.seen} levels): greedy success {100 * (seen['seen_success'] or 0):.1f}%, "
              f"optimal / chance {100 * (seen['seen_optimal_action_rate'] or 0):.1f}% / "
              f"{100 * (seen['seen_optimal_action_chance'] or 0):.1f}%")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    if a.save:
        model.save_pretrained(a.save)
        tok.save_pretrained(a.save)
        save_parser(a.save, a.parser, prompt=a.prompt, window=a.window)


if __name__ == "__main__":
    main()
