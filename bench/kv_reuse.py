"""KV-cache reuse across turns in the HF engine: generate time per turn with every prompt re-encoded vs reused.

The same multi-turn rollout (same seeds, greedy, so both runs sample the same ids) runs twice with `HFEngine`:
`kv_reuse=False` re-encodes each turn's whole prompt (previous ids + new message tokens), `kv_reuse=True` feeds only
the new tokens after the kept keys/values. For the re-encoding run the table also shows a bare forward pass over each
turn's prompts (the prefill that reuse avoids after turn 1).

    python bench/kv_reuse.py [--model tiny|PATH] [--env frozenlake-slippery] [--groups 4] [--group-size 4] [--repeats 3]
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
        ids, mask, _ = self.engine._layout(prompts)  # the engine's own left padding (no cache: kv_reuse is off here)
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
            "prefill_s": 0.0 if self.engine.kv_reuse else self._prefill(prompts),
        })
        return out


def rollout(model, tok, args, reuse: bool) -> tuple[list[dict], dict, list]:
    engine = TimedEngine(HFEngine(model, tok, kv_reuse=reuse))
    with EnvGroups(args.env, group_size=args.group_size, n_groups=args.groups) as groups:
        res = run_rollout(engine, tok, groups, SamplingParams(temperature=0.0), chat_format=ChatFormat(tok))
    return engine.rows, engine.engine.kv_stats, [t.input_ids for t in res.trajectories]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--env", default="frozenlake-slippery")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="Rollouts per setting; the fastest is reported.")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "kv_reuse.json")
    args = ap.parse_args()

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model, tempfile.mkdtemp(prefix="ragen-kv-"), [args.env])
    best: dict[bool, tuple] = {}
    for _ in range(args.repeats):
        for reuse in (False, True):  # interleaved, so load changes hit both
            run = rollout(model, tok, args, reuse)
            if reuse not in best or sum(r["generate_s"] for r in run[0]) < sum(r["generate_s"] for r in best[reuse][0]):
                best[reuse] = run
    (plain, _, ids_plain), (reused, stats, ids_reused) = best[False], best[True]
    same = ids_plain == ids_reused
    print(f"{'turn':>4}{'batch':>7}{'prompt tok':>12}{'new tok':>9}{'re-encode s':>13}{'(prefill s)':>13}{'reuse s':>10}{'saved':>8}")
    for a, b in zip(plain, reused):
        print(f"{a['turn']:>4}{a['batch']:>7}{a['prompt_tokens_mean']:>12.0f}{a['new_tokens_mean']:>9.1f}{a['generate_s']:>13.3f}"
              f"{a['prefill_s']:>13.3f}{b['generate_s']:>10.3f}{100 * (1 - b['generate_s'] / a['generate_s']):>7.1f}%")
    t_plain, t_reuse = sum(r["generate_s"] for r in plain), sum(r["generate_s"] for r in reused)
    frac = stats["reused_tokens"] / max(stats["prompt_tokens"], 1)
    print(f"generate time: re-encode {t_plain:.3f} s, reuse {t_reuse:.3f} s ({100 * (1 - t_reuse / t_plain):.1f}% saved); "
          f"{100 * frac:.0f}% of prompt tokens came from the cache; same sampled ids: {same}")
    result = {"benchmark": "kv_reuse", "date": date.today().isoformat(), "model": args.model, "env": args.env,
              "machine": f"{platform.machine()} cpus={os.cpu_count()}", "episodes": args.groups * args.group_size,
              "reencode": plain, "reuse": reused, "generate_s_reencode": t_plain, "generate_s_reuse": t_reuse,
              "saved_fraction": 1 - t_reuse / t_plain, "reused_prompt_token_fraction": frac, "same_sampled_ids": same}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
