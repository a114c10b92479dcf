"""Does a policy read its state? The state-dependence metrics (docs/report.md) of reference policies, and optionally
of a model, on the validation levels ``ragen eval`` plays (seeds 123.., split val).

Reference policies, played through the real rollout loop (``run_rollout``, the metrics of ``rollout_metrics``):

* ``expert``: the env's expert (every judged action optimal by construction);
* ``random``: a uniformly random action name for each of the turn's ``max_actions_per_turn`` actions;
* ``best-fixed``: the same answer every turn whatever the state, the best of all answers of
  ``max_actions_per_turn`` actions by success (ties: by mean score): what ignoring the state can reach.

``--model PATH`` adds ``ragen eval``'s numbers for a model (the HF engine, ``--temperature``).

    python bench/state_dependence.py --envs sokoban frozenlake [--levels 64] [--model runs/x/final]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
from pathlib import Path

from ragen.envs.resolved import val_seeds
from ragen.models.builtin import train_tokenizer
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.expert import ExpertEngine

KEYS = ("success", "optimal_action_rate", "optimal_action_chance", "judged_actions", "distinct_first_answers")


class PolicyEngine(ExpertEngine):
    """Answers ``policy(env, rng)`` (a list of action names) as ``<answer>A || B</answer>``; rng per (seed, turn)."""

    def __init__(self, policy):
        tok = train_tokenizer(["<think> </think> <answer> </answer> Up Down Left Right || Playing."] * 20, 300)
        self.fmt = ChatFormat(tok)
        super().__init__(tok, self.fmt.eos_id, seed=7)
        self.policy = policy

    def response_text(self, env, rng=None):
        return f"Playing.</think><answer>{' || '.join(self.policy(env, rng or self.rng))}</answer>"


def play(name: str, policy, levels: int) -> dict:
    engine = PolicyEngine(policy)
    with EnvGroups([GroupSpec(name, levels, {})], group_size=1, split="val",
                   seeds=val_seeds(per_env=levels)) as groups:  # ragen eval's levels
        res = run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=0),
                          RolloutSettings(chat_format=engine.fmt, max_model_len=100_000))
    return {k: res.metrics.get(k) for k in KEYS} | {"score": res.metrics["score"]}


def expert(env, rng):
    return env.expert.next_actions(env, env.config.max_actions_per_turn) or [env.action_names[0]]


def uniform(env, rng):
    return [rng.choice(env.action_names) for _ in range(env.config.max_actions_per_turn)]


def best_fixed(name: str, levels: int) -> dict:
    """Every constant answer of max_actions_per_turn actions; the best by (success, score). An env whose action names
    change from level to level (the bandit's arm names: ``action_names`` is None until a reset) gets constant
    positions instead: always the i-th name shown, answered as "#i"."""
    import ragen

    env = ragen.make_env(name)
    k = env.config.max_actions_per_turn
    if env.action_names is not None:
        answers = {" || ".join(a): (lambda e, r, a=a: list(a))
                   for a in itertools.product(env.action_names, repeat=k)}
    else:
        env.reset(seed=123)
        answers = {" || ".join(f"#{i}" for i in pos): (lambda e, r, pos=pos: [e.action_names[i] for i in pos])
                   for pos in itertools.product(range(len(env.action_names)), repeat=k)}
    results = {a: play(name, policy, levels) for a, policy in answers.items()}
    best = max(results, key=lambda a: (results[a]["success"], results[a]["score"]))
    return results[best] | {"answer": best}


def model(name: str, path: str, levels: int, temperature: float) -> dict:
    from ragen.runs.evaluate import evaluate

    m = evaluate(name, path, n_groups=levels, temperature=temperature, progress=False)
    return {"success": m["success_rate"], **{k: m.get(k) for k in KEYS[1:]}, "temperature": temperature}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=["sokoban", "frozenlake"])
    ap.add_argument("--levels", type=int, default=64)
    ap.add_argument("--model", default=None, help="a model folder (or name) to evaluate as ragen eval does")
    ap.add_argument("--temperature", type=float, default=0.5, help="the model's sampling temperature (ragen eval's)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "state_dependence.json")
    args = ap.parse_args()
    random.seed(0)
    table = {}
    for name in args.envs:
        rows = {"expert": play(name, expert, args.levels), "random": play(name, uniform, args.levels),
                "best-fixed": best_fixed(name, args.levels)}
        if args.model:
            rows[f"model {args.model}"] = model(name, args.model, args.levels, args.temperature)
        table[name] = rows
        for policy, m in rows.items():
            cells = "  ".join(f"{k} {m[k]:.3f}" if isinstance(m.get(k), float) else f"{k} -" for k in KEYS)
            print(f"{name:12s} {policy:24s} {cells}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"levels": args.levels, "seeds": f"123..{122 + args.levels} (split val)",
                                    "load_average": os.getloadavg(), "results": table}, indent=2))


if __name__ == "__main__":
    main()
