"""``Trajectory`` and ``TurnRecord`` live in ``ragen.trajectory`` (public, importable without torch: ``from ragen import
Trajectory``); this name stays for the rollout modules and older imports."""

from ragen.trajectory import TRUNCATION_REASONS, Trajectory, TurnRecord

__all__ = ["TRUNCATION_REASONS", "Trajectory", "TurnRecord"]
