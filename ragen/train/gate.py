"""The success gate (docs/algorithms.md, "The step cost cannot be farmed"): groups in which no member succeeded are
left out of the update before the rollout filters see them.

Why: on Sokoban every action costs -0.1, so the members of a group that all failed differ only by how many actions
they took. A group-relative estimator (GRPO divides by that tiny within-group std) or a filter that ranks groups by
reward spread (StarPO-S) turns that spread into a full-size "act less" signal in most groups, and RL learned to stop
moving. Inside a group with a success the step cost still ranks the members (fewer moves to solve is better).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ragen.contract.algorithm import AlgorithmPreset


def compares_within_groups(preset: AlgorithmPreset) -> bool:
    """Whether the preset's update turns a within-group reward spread into signal: a group baseline (no critic) or a
    rollout filter ranking groups. A critic with batch whitening alone sees the step cost at its real scale next to the
    +10 of a solve, as the per-action reward it is, so ``auto`` leaves plain PPO/GAE alone."""
    return not preset.use_critic or bool(preset.filter not in ("", "none") or preset.pre_filter)


def gated_envs(preset: AlgorithmPreset, env_classes: Mapping[str, type]) -> frozenset[str]:
    """The training env names (``Trajectory.env_name``) whose all-fail groups the gate leaves out."""
    if preset.success_gate == "never":
        return frozenset()
    if preset.success_gate == "always":
        return frozenset(env_classes)
    if not compares_within_groups(preset):
        return frozenset()
    return frozenset(name for name, cls in env_classes.items() if getattr(cls, "step_cost", 0.0))


def make_gate(preset: AlgorithmPreset, env_classes: Mapping[str, type]):
    """``gate(trajectories) -> group ids to leave out``, or None when no training env is gated."""
    envs = gated_envs(preset, env_classes)
    return (lambda trajs: no_success_groups(trajs, envs)) if envs else None


def no_success_groups(trajs: Iterable, envs: frozenset[str]) -> set[int]:
    """Group ids of the gated envs' groups in which no member succeeded."""
    succeeded: dict[int, bool] = {}
    for t in trajs:
        if t.env_name in envs:
            succeeded[t.group_id] = succeeded.get(t.group_id, False) or bool(t.success)
    return {g for g, ok in succeeded.items() if not ok}
