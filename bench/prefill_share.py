"""What KV-cache reuse across turns could save: the prompt re-encoding (prefill) share of each turn's generate time.

The HF engine re-encodes each turn's whole prompt (previous ids + the new message tokens). This runs a real multi-turn
rollout with `HFEngine` and, for every turn's batch, also times a forward pass over exactly that batch's prompts
(left-padded as the engine does). Prefill of turns after the first is the most that carrying caches over turns could
save; the table compares it with the generate time (prefill + decode).

    python bench/prefill_share.py [--model tiny|PATH] [--env frozenlake] [--groups 4] [--group-size 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

from ragen.models import load_model_and_tokenizer
from ragen.rollout import ChatFormat, EnvGroups, HFEngine, SamplingParams, run_rollout


class TimedEngine:
    """Wraps HFEngine: per call, the generate time and the time of a bare forward over the same prompts."""

    def __init__(self, engine: HFEngine):
        self.engine, self.rows = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    @torch.no_grad()
    def _prefill(self, prompts: list[list[int]]) -> float:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.engine.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        t = time.perf_counter()
        self.engine.model(input_ids=ids.to(self.engine.device), attention_mask=mask.to(self.engine.device), use_cache=True)
        return time.perf_counter() - t

    def generate(self, prompts, params):
        t = time.perf_counter()
        out = self.engine.generate(prompts, params)
        gen_s = time.perf_counter() - t
        self.rows.append({
            "turn": len(self.rows) + 1, "batch": len(prompts), "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
            "new_tokens_mean": sum(len(g.token_ids) for g in out) / len(out), "generate_s": gen_s,
            "prefill_s": self._prefill(prompts),
        })
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--env", default="frozenlake")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "prefill_share.json")
    args = ap.parse_args()

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model, tempfile.mkdtemp(prefix="ragen-prefill-"), [args.env])
    engine = TimedEngine(HFEngine(model, tok))
    with EnvGroups(args.env, group_size=args.group_size, n_groups=args.groups) as groups:
        run_rollout(engine, tok, groups, SamplingParams(seed=0), chat_format=ChatFormat(tok))
    rows = engine.rows
    print(f"{'turn':>4}{'batch':>7}{'prompt tok':>12}{'new tok':>9}{'generate s':>12}{'prefill s':>11}{'prefill %':>11}")
    for r in rows:
        print(f"{r['turn']:>4}{r['batch']:>7}{r['prompt_tokens_mean']:>12.0f}{r['new_tokens_mean']:>9.1f}"
              f"{r['generate_s']:>12.3f}{r['prefill_s']:>11.3f}{100 * r['prefill_s'] / r['generate_s']:>10.1f}%")
    total = sum(r["generate_s"] for r in rows)
    saveable = sum(r["prefill_s"] for r in rows[1:])
    print(f"re-encoding after turn 1: {saveable:.3f} s of {total:.3f} s generate time "
          f"({100 * saveable / total:.1f}%): the upper bound on what KV-cache reuse across turns saves here")
    result = {"benchmark": "prefill_share", "date": date.today().isoformat(), "model": args.model, "env": args.env,
              "machine": f"{platform.machine()} cpus={os.cpu_count()}", "rows": rows, "generate_s": total,
              "reencode_after_turn1_s": saveable, "saveable_fraction": saveable / total}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
