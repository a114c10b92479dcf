"""KV-cache reuse across turns in the HF engine: generate time per turn with every prompt re-encoded vs reused.

The same multi-turn rollout (same seeds, greedy, so both runs sample the same ids) runs twice with `HFEngine`:
`kv_reuse=False` re-encodes each turn's whole prompt (previous ids + new message tokens), `kv_reuse=True` feeds only
the new tokens after the kept keys/values. For the re-encoding run the table also shows a bare forward pass over each
turn's prompts (the prefill that reuse avoids after turn 1).

A second part measures the engine before and after it kept the cache across turns on sampled multi-turn rollouts
(64 trajectories x 5 turns, temperature 1, seeded): generated tokens per second of generate time, interleaved, median
of the repeats, with the sampled ids compared. `--multiturn-only` runs just that part and adds it to the JSON.

    python bench/kv_reuse.py [--model tiny|PATH] [--env frozenlake-slippery] [--groups 4] [--group-size 4] [--repeats 3]
        [--threads 1] [--multiturn-only] [--before 912ee4a]
"""

from __future__ import annotations

import argparse
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
from ragen.rollout import ChatFormat, EnvGroups, HFEngine, RolloutSettings, SamplingParams, run_rollout


class TimedEngine:
    """Wraps HFEngine: per call, the generate time and the time of a bare forward over the same prompts."""

    def __init__(self, engine: HFEngine):
        self.engine, self.rows = engine, []

    @property
    def eos_token_ids(self) -> list[int]:
        return self.engine.eos_token_ids

    @property
    def logprobs_exact(self) -> bool:
        return self.engine.logprobs_exact

    def sync_weights(self, model) -> dict[str, float]:
        return self.engine.sync_weights(model)

    def close(self) -> None:
        self.engine.close()

    def generate_for_envs(self, envs, prompts, params):
        return self.generate(prompts, params)  # timed

    @torch.no_grad()
    def _prefill(self, prompts: list[list[int]]) -> float:
        width = max(map(len, prompts))  # left padding, every prompt re-encoded whole
        ids = torch.tensor([[self.engine.pad_token_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        t = time.perf_counter()
        device = self.engine.device
        self.engine.model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=True)
        return time.perf_counter() - t

    def generate(self, prompts, params):
        t = time.perf_counter()
        out = self.engine.generate(prompts, params)
        gen_s = time.perf_counter() - t
        self.rows.append({
            "turn": len(self.rows) + 1, "batch": len(prompts),
            "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
            "new_tokens_mean": sum(len(g.token_ids) for g in out) / len(out), "generate_s": gen_s,
            "prefill_s": 0.0 if self.engine.kv_reuse else self._prefill(prompts),
        })
        return out


def rollout(model, tok, args, reuse: bool) -> tuple[list[dict], dict, list]:
    engine = TimedEngine(HFEngine(model, tok, kv_reuse=reuse))
    with EnvGroups(args.env, group_size=args.group_size, n_groups=args.groups) as groups:
        res = run_rollout(engine, groups, SamplingParams(temperature=0.0), RolloutSettings(chat_format=ChatFormat(tok)))
    return engine.rows, engine.engine.kv_stats, [t.input_ids for t in res.trajectories]


def old_engine_class(commit: str):
    """``HFEngine`` as it was at ``commit`` (git show), to measure before/after on the same machine and load."""
    import importlib.util
    import subprocess

    src = subprocess.run(["git", "show", f"{commit}:ragen/rollout/hf.py"], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent).stdout
    path = Path(tempfile.mkdtemp(prefix="ragen-old-engine-")) / f"hf_engine_{commit}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.HFEngine


def multiturn(model, tok, args) -> dict:
    """Sampled multi-turn rollouts (temperature 1, seeded) with the engine before it kept the cache across turns
    (``--before``) and now: generated tokens per second of generate time, runs interleaved, median of ``--repeats``."""
    engines = {"before": old_engine_class(args.before), "after": HFEngine}
    runs: dict[str, list] = {k: [] for k in engines}
    ids: dict[str, list] = {}
    for r in range(args.repeats):
        for name, cls in engines.items():
            timed = TimedEngine(cls(model, tok))
            t = time.perf_counter()
            with EnvGroups(args.env, group_size=args.mt_group_size, n_groups=args.mt_groups) as groups:
                sampling = SamplingParams(temperature=1.0, seed=1000 + r, max_new_tokens=args.mt_new_tokens)
                res = run_rollout(timed, groups, sampling, RolloutSettings(chat_format=ChatFormat(tok)))
            wall = time.perf_counter() - t
            gen_s = sum(row["generate_s"] for row in timed.rows)
            new = sum(row["new_tokens_mean"] * row["batch"] for row in timed.rows)
            runs[name].append({"generate_s": gen_s, "rollout_s": wall, "new_tokens": new, "tok_per_s": new / gen_s,
                               "turns": max(len(t.turns) for t in res.trajectories), "load_1m": os.getloadavg()[0]})
            ids.setdefault(name, []).append([t.input_ids for t in res.trajectories])
            print(f"multi-turn {name} repeat {r + 1}: {new / gen_s:.0f} tok/s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    med = {k: statistics.median(x["tok_per_s"] for x in v) for k, v in runs.items()}
    same = all(a == b for a, b in zip(ids["before"], ids["after"]))
    print(f"multi-turn {args.mt_groups * args.mt_group_size} {args.env} trajectories x up to 5 turns, "
          f"<= {args.mt_new_tokens} new tokens a turn: before {med['before']:.0f} tok/s, "
          f"after {med['after']:.0f} tok/s "
          f"({med['after'] / med['before']:.2f}x); same sampled ids: {same}")
    return {"before_commit": args.before, "trajectories": args.mt_groups * args.mt_group_size, "runs": runs,
            "median_tok_per_s": med, "speedup": med["after"] / med["before"], "same_sampled_ids": same,
            "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--env", default="frozenlake-slippery")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="Rollouts per setting; the fastest is reported.")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "kv_reuse.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--multiturn-only", action="store_true", help="Only the before/after multi-turn rollouts.")
    ap.add_argument("--before", default="912ee4a",
                    help="Commit whose HFEngine is 'before' (the last one before the cache was kept across turns).")
    ap.add_argument("--mt-groups", type=int, default=16)
    ap.add_argument("--mt-group-size", type=int, default=4)
    ap.add_argument("--mt-new-tokens", type=int, default=48)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model, tempfile.mkdtemp(prefix="ragen-kv-"), [args.env])
    if args.multiturn_only:
        old = json.loads(args.out.read_text()) if args.out.is_file() else {}
        old["multiturn"] = {"date": date.today().isoformat(), "model": args.model, **multiturn(model, tok, args)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(old, indent=2))
        print(f"wrote {args.out}")
        return
    best: dict[bool, tuple] = {}
    for _ in range(args.repeats):
        for reuse in (False, True):  # interleaved, so load changes hit both
            run = rollout(model, tok, args, reuse)
            if reuse not in best or sum(r["generate_s"] for r in run[0]) < sum(r["generate_s"] for r in best[reuse][0]):
                best[reuse] = run
    (plain, _, ids_plain), (reused, stats, ids_reused) = best[False], best[True]
    same = ids_plain == ids_reused
    print(f"{'turn':>4}{'batch':>7}{'prompt tok':>12}{'new tok':>9}{'re-encode s':>13}{'(prefill s)':>13}"
          f"{'reuse s':>10}{'saved':>8}")
    for a, b in zip(plain, reused):
        print(f"{a['turn']:>4}{a['batch']:>7}{a['prompt_tokens_mean']:>12.0f}{a['new_tokens_mean']:>9.1f}"
              f"{a['generate_s']:>13.3f}{a['prefill_s']:>13.3f}{b['generate_s']:>10.3f}"
              f"{100 * (1 - b['generate_s'] / a['generate_s']):>7.1f}%")
    t_plain, t_reuse = sum(r["generate_s"] for r in plain), sum(r["generate_s"] for r in reused)
    frac = stats["reused_tokens"] / max(stats["prompt_tokens"], 1)
    print(f"generate time: re-encode {t_plain:.3f} s, reuse {t_reuse:.3f} s "
          f"({100 * (1 - t_reuse / t_plain):.1f}% saved); {100 * frac:.0f}% of prompt tokens came from the cache; "
          f"same sampled ids: {same}")
    result = {"benchmark": "kv_reuse", "date": date.today().isoformat(), "model": args.model, "env": args.env,
              "machine": f"{platform.machine()} cpus={os.cpu_count()}", "episodes": args.groups * args.group_size,
              "reencode": plain, "reuse": reused, "generate_s_reencode": t_plain, "generate_s_reuse": t_reuse,
              "saved_fraction": 1 - t_reuse / t_plain, "reused_prompt_token_fraction": frac, "same_sampled_ids": same,
              "multiturn": multiturn(model, tok, args)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
