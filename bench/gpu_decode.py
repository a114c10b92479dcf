"""HF engine decode paths side by side: generated tok/s of ``decode='plain'`` vs ``'static'`` (static KV cache; on
CUDA transformers compiles the decoding step with CUDA graphs) vs ``'static-eager'``, and whether they sample the
same ids under the same seed.

The workload is the rollout of ``bench/gpu_throughput.py`` without the env and the trainer: ``--groups`` x
``--group-size`` rows in one engine call (members of a group share their first prompt, so the shared prefill is used),
``--turns`` turns of ``--new-tokens`` tokens each, every later turn's prompt extending the previous one (so the
cross-turn KV reuse is used). A random model rarely samples its EOS, so this is mostly a fixed-length batch decode.

Each path first runs one untimed round (``warmup_s``: for 'static' on CUDA this is where compilation happens), then
``--repeats`` timed rounds with the seeds of the reference path; tok/s = generated tokens / wall time of the timed
rounds. ``ids_identical`` compares each path's sampled ids with the plain path's (exact in float32; in bf16 the
compiled kernels round differently, so ids may part after some tokens).

    # the GPU check (0.49 B random Qwen2, the shape of docs/gpu.md, bf16):
    python bench/gpu_decode.py --model qwen05 --dtype bfloat16 --out bench/results/gpu_decode.json
    # a CPU smoke with the built-in models:
    OMP_NUM_THREADS=1 python bench/gpu_decode.py --model tiny --groups 2 --group-size 4 --new-tokens 32 \
        --out /tmp/d.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results"
#: the 0.49 B shape of bench/gpu_throughput.py (docs/gpu.md's baseline: 1,500 generated tok/s on an H100, bf16)
SHAPES = {
    "tiny": {},
    "small": {"hidden_size": 256, "num_layers": 2, "num_heads": 4, "num_kv_heads": 1, "intermediate_size": 512},
    "qwen05": {"hidden_size": 1024, "num_layers": 28, "num_heads": 16, "num_kv_heads": 2, "intermediate_size": 4864},
}


def build(path: Path, shape: dict, dtype: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragen.models.builtin import build_tiny_model

    build_tiny_model(path, ["sokoban"], corpus_seeds=20, **shape)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
    return model, AutoTokenizer.from_pretrained(path)


def workload(vocab: int, groups: int, group_size: int, prompt_len: int, seed: int) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(groups):
        n = prompt_len + int(torch.randint(-prompt_len // 8, prompt_len // 8 + 1, (1,), generator=g))
        prompt = torch.randint(5, vocab - 1, (max(2, n),), generator=g).tolist()
        rows += [list(prompt) for _ in range(group_size)]
    return rows


def play(engine, prompts, args, seed: int):
    """One rollout round: ``--turns`` calls; returns (generated tokens, seconds, sampled ids of every call)."""
    import torch

    from ragen.rollout.engine import SamplingParams

    cuda = engine.device.type == "cuda"
    tokens, ids = 0, []
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for turn in range(args.turns):
        params = SamplingParams(temperature=args.temperature, max_new_tokens=args.new_tokens, seed=seed * 100 + turn)
        gens = engine.generate(prompts, params)
        tokens += sum(len(g.token_ids) for g in gens)
        ids.append([g.token_ids for g in gens])
        prompts = [p + g.token_ids + [7] * args.message_tokens for p, g in zip(prompts, gens)]
    if cuda:
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - t0, ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="qwen05")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    ap.add_argument("--paths", nargs="+", default=["plain", "static", "static-eager"])
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=240)
    ap.add_argument("--message-tokens", type=int, default=40, help="tokens appended to each row between turns")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--compile-on-cpu", action="store_true",
                    help="'static' compiles its step on any device (transformers' _compile_all_devices; inductor)")
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_decode.json")
    args = ap.parse_args()
    import torch

    from ragen.rollout.hf import HFEngine

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor() or "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = build(Path(tmp) / args.model, SHAPES[args.model], args.dtype, device)
    n_params = sum(p.numel() for p in model.parameters())
    prompts = workload(len(tok), args.groups, args.group_size, args.prompt_len, seed=0)
    print(f"{args.model}: {n_params / 1e6:.1f} M parameters, {args.dtype}, {device} ({name}), {len(prompts)} rows, "
          f"threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}", flush=True)
    results, reference = {}, None
    for path in args.paths:
        compile_config = None
        if args.compile_on_cpu and path == "static":
            from transformers import CompileConfig

            compile_config = CompileConfig(mode=None)  # reduce-overhead means CUDA graphs: none on a CPU
            compile_config._compile_all_devices = True
        engine = HFEngine(model, tok, max_batch=len(prompts), decode=path, compile_config=compile_config)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        _, warm_s, _ = play(engine, prompts, args, seed=999)  # compiles (static on CUDA) and sizes the buffers
        tokens = seconds = 0
        ids = []
        for r in range(args.repeats):
            engine.sync_weights(model)  # as after an update: no cached keys reused from the previous round
            n, s, got = play(engine, prompts, args, seed=r)
            tokens, seconds, ids = tokens + n, seconds + s, ids + got
        if reference is None:
            reference = ids
        same = [a == b for call_a, call_b in zip(reference, ids) for a, b in zip(call_a, call_b)]
        first_diff = [next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                      for call_a, call_b in zip(reference, ids) for a, b in zip(call_a, call_b) if a != b]
        results[path] = {"tok_s": tokens / seconds, "tokens": tokens, "seconds": seconds, "warmup_s": warm_s,
                         "ids_identical": sum(same) / len(same),
                         "first_difference_median": sorted(first_diff)[len(first_diff) // 2] if first_diff else None,
                         "compiled_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs}
        print(
            f"{path:>12}: {results[path]['tok_s']:9.0f} tok/s ({tokens} tokens in {seconds:.2f} s; warm-up "
            f"{warm_s:.1f} s), rows identical to {args.paths[0]}: {100 * results[path]['ids_identical']:.0f}%",
            flush=True,
        )
    base = results[args.paths[0]]["tok_s"]
    for r in results.values():
        r["speedup"] = r["tok_s"] / base
    out = {"benchmark": "gpu_decode", "date": date.today().isoformat(), "device": name, "torch": torch.__version__,
           "transformers": __import__("transformers").__version__, "params": n_params, "model": args.model,
           "shape": SHAPES[args.model], "load": os.getloadavg()[0], "threads": torch.get_num_threads(),
           "settings": {k: v for k, v in vars(args).items() if k != "out"}, "paths": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
