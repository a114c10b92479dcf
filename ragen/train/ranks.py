"""What data parallelism changes in a step (docs/scaling.md): every rank sees the global batch, trains its own
groups, and checks that the replicas stay identical."""

from __future__ import annotations

from ragen.models import distributed as dp
from ragen.rollout.runner import RolloutResult, rollout_metrics


def gather(result: RolloutResult, world: int) -> RolloutResult:
    """The global batch on every rank: all ranks' trajectories in (group, member) order, metrics recomputed."""
    if world == 1:
        return result
    parts = dp.all_gather_objects((result.trajectories, result.failed_envs, result.failure_reasons))
    trajs = sorted((t for ts, _, _ in parts for t in ts), key=lambda t: (t.group_id, t.rollout_index))
    failed = sum(f for _, f, _ in parts)
    reasons: dict[str, int] = {}
    for _, _, theirs in parts:
        for reason, count in theirs.items():
            reasons[reason] = reasons.get(reason, 0) + count
    out = RolloutResult(trajs, failed_envs=failed, errors=list(result.errors), failure_reasons=reasons)
    out.metrics = rollout_metrics(trajs, failed_envs=failed, failure_reasons=reasons)
    return out


def own_rows(kept: list, scores: list[float], trajs: list, rank: int, world: int) -> tuple[list, list[float], bool]:
    """This rank's kept trajectories and scores (its groups: group_id mod world), and whether there are none: then it
    trains one of its trajectories (``trajs``: the whole batch) with score 0, to be masked out (no gradient, no
    statistic), so that it still joins every collective of the update."""
    mine = [i for i, t in enumerate(kept) if t.group_id % world == rank]
    if mine:
        return [kept[i] for i in mine], [scores[i] for i in mine], False
    own = [t for t in trajs if t.group_id % world == rank]
    return [own[0] if own else trajs[0]], [0.0], True


def replica_diff(module) -> float:
    """Largest difference between ranks of per-tensor weight sums (0 when the replicas are identical)."""
    sums = [float(p.detach().double().sum()) for p in module.parameters()]
    allr = dp.all_gather_objects(sums)
    return max(abs(a - b) for other in allr[1:] for a, b in zip(allr[0], other)) if len(allr) > 1 else 0.0
