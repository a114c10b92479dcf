"""Synthetic rollouts for component checks: ``Trajectory`` objects shaped like the rollout's (prompt, sampled turns
separated by env replies, a ``TurnRecord`` per turn), and the ``ShapeInput``, ``AdvantageInput`` (through the trainer's
own ``collate``) and ``FilterInput`` the trainer would build from them. Everything is a function of a seed.

torch is imported by ``advantage_input`` only, so importing this module (and ``ragen.testing``) stays light.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from ragen.contract.algorithm import FilterInput, ShapeInput
from ragen.contract.trajectory import Trajectory, TurnRecord

#: the batches every component check runs on: name -> sample_trajectories keywords
SCENARIOS: dict[str, dict] = {
    "4 groups of 4": {"groups": (4, 4, 4, 4)},
    "one group of 5": {"groups": (5,)},
    "groups of one (failed envs)": {"groups": (1, 1, 1)},
    "uneven groups, rows shuffled": {"groups": (3, 1, 2, 4), "shuffle": True},
    "equal scores in every group": {"groups": (3, 3), "equal_scores": True},
}


def scenarios(seed: int = 0) -> dict[str, list[Trajectory]]:
    """Each of ``SCENARIOS`` as trajectories drawn from ``seed``."""
    return {name: sample_trajectories(seed + i, **kw) for i, (name, kw) in enumerate(SCENARIOS.items())}


def sample_trajectories(seed: int = 0, groups: Sequence[int] = (4, 4), *, shuffle: bool = False,
                        equal_scores: bool = False, env_names: Sequence[str] = ("env-a", "env-b")) -> list[Trajectory]:
    """Trajectories of ``len(groups)`` env groups of the given sizes, with arbitrary (non-contiguous) group ids, 1-3
    turns each, rewards, format failures and successes drawn from ``seed``. Rows come in (group, member) order, as
    the trainer sees them, or shuffled. ``equal_scores``: every member of a group scores the same."""
    rng = random.Random(seed)
    ids = rng.sample(range(1, 100), len(groups))
    out: list[Trajectory] = []
    for g, size in zip(ids, groups, strict=True):
        env = env_names[len(out) % len(env_names)]
        template = rng.random()
        for r in range(size):
            out.append(_trajectory(random.Random(template if equal_scores else rng.random()), env, g, r,
                                   random.Random(rng.random())))
    if shuffle:
        rng.shuffle(out)
    return out


def _trajectory(outcome: random.Random, env: str, group: int, member: int, tokens: random.Random) -> Trajectory:
    """One episode: ``outcome`` draws the turns' rewards and format (equal for equal seeds), ``tokens`` the lengths."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    segments: list[tuple[str, int, int]] = []
    turns: list[TurnRecord] = []

    def add(kind: str, n: int, sampled: bool) -> tuple[int, int]:
        start = len(ids)
        ids.extend(tokens.randrange(5, 500) for _ in range(n))
        mask.extend([int(sampled)] * n)
        logprobs.extend(-tokens.random() * 3 if sampled else 0.0 for _ in range(n))
        segments.append((kind, start, len(ids)))
        return start, len(ids)

    add("prompt", tokens.randint(3, 8), False)
    phi = -3.0  # Env.potential() at the turn boundaries, as the core records it: a well-formed turn gets one closer
    for t in range(outcome.randint(1, 3)):
        if t:
            add("delta", tokens.randint(2, 5), False)
        span = add("response", tokens.randint(1, 6), True)
        ok = outcome.random() < 0.75
        reward = outcome.choice((0.0, 0.0, 1.0, -0.1, 0.5)) if ok else 0.0
        turns.append(TurnRecord(response_text="<think>...</think><answer>Up</answer>" if ok else "Up",
                                answer="Up" if ok else None, executed=["Up"] if ok else [], invalid=[], reward=reward,
                                penalty=0.0 if ok else -0.1, format_ok=ok, info={"success": 0.0, "potential_start": phi,
                                                                               "potential_end": phi + float(ok)},
                                truncated_response=False, span=span))
        phi += float(ok)
    success = outcome.random() < 0.3
    return Trajectory(env_name=env, seed=1000 + group, group_id=group, rollout_index=member, split="train",
                      policy_version=0, input_ids=ids, loss_mask=mask, rollout_logprobs=logprobs, segments=segments,
                      turns=turns, reward=sum(t.reward for t in turns), penalty=sum(t.penalty for t in turns),
                      success=success, task_id=f"{env}/s{1000 + group}")


def shape_input(trajs: Sequence[Trajectory], scores: Sequence[float] | None = None) -> ShapeInput:
    """What the trainer hands the first shaper: the raw scores of the kept trajectories."""
    return ShapeInput(scores=[t.score for t in trajs] if scores is None else list(scores),
                      group_ids=[t.group_id for t in trajs], env_names=[t.env_name for t in trajs],
                      trajectories=list(trajs), turn_scores=[[x.reward + x.penalty for x in t.turns] for t in trajs])


def filter_input(trajs: Sequence[Trajectory], *, entropies: bool = False, seed: int = 0) -> FilterInput:
    """What the trainer hands a rollout filter; ``entropies`` (drawn from ``seed``) when the filter asks for them."""
    rng = random.Random(seed)
    return FilterInput(raw_rewards=[t.score for t in trajs], group_ids=[t.group_id for t in trajs],
                       successes=[t.success for t in trajs], lengths=[t.response_length for t in trajs],
                       entropies=[rng.uniform(0.1, 3.0) for _ in trajs] if entropies else None)


def advantage_input(trajs: Sequence[Trajectory], *, placement: str = "trajectory", critic: bool = True,
                    kl: bool = False, dummy: bool = False, seed: int = 0):
    """The ``AdvantageInput`` the trainer builds: the trajectories collated by ``ragen.train.batch.collate`` with
    ``placement`` (``trajectory`` or ``turn``), critic values on every position (``critic``), a KL-in-reward part
    (``kl``), or the loss mask zeroed after collation (``dummy``: a data-parallel rank with no kept group trains one
    masked-out row)."""
    import torch

    from ragen.contract.algorithm import AdvantageInput
    from ragen.train.batch import collate

    batch = collate(list(trajs), 0, [t.score for t in trajs], placement=placement)
    if dummy:
        batch.loss_mask.zero_()
    gen = torch.Generator().manual_seed(seed)
    kl_rewards = None
    token_rewards = batch.token_rewards
    if kl:
        kl_rewards = -0.01 * torch.rand(token_rewards.shape, generator=gen) * batch.loss_mask
        token_rewards = token_rewards + kl_rewards
    values = torch.randn(token_rewards.shape, generator=gen) * 0.5 if critic else None
    return AdvantageInput(token_rewards=token_rewards, mask=batch.loss_mask, scores=batch.scores,
                          group_ids=batch.group_ids, values=values, turn_ids=batch.turn_ids,
                          turn_scores=batch.turn_scores, kl_rewards=kl_rewards)


def reordered(inp, order: Sequence[int]):
    """``inp`` (a ShapeInput, FilterInput or AdvantageInput) with its trajectories (rows) in ``order``."""
    changes = {}
    for field in attrs.fields(type(inp)):
        value = getattr(inp, field.name)
        if value is None or isinstance(value, (dict, int, float)) or (isinstance(value, Sequence) and not value):
            continue  # None, the component's own metrics dict, a batch-wide number (n_groups), or an empty field
        if callable(value):  # a batch-wide function (all_reduce_sum)
            continue
        if hasattr(value, "shape"):  # a tensor: rows are trajectories
            import torch

            changes[field.name] = value[torch.as_tensor(list(order), dtype=torch.long)]
        else:
            changes[field.name] = [value[i] for i in order]
    return attrs.evolve(inp, **changes)
