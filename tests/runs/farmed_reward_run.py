"""`ragen run` with a farmable reward shaper, registered in-process: the real run behind the diagnosis's
``reward-without-success`` test (tests/runs/data/farmed-shaper, docs/notes/2026-11-29-diagnosis-real-runs.md).

The shaper ``action-bonus`` pays ``coef`` for every executed ``action``, whatever the state: a heuristic that does not
depend on solving, so a policy can earn it by repeating that action. Usage (the arguments are `ragen run`'s)::

    python tests/runs/farmed_reward_run.py --env sokoban --algo grpo algo.options.shapers=[action-bonus] ...
"""

from __future__ import annotations

import sys

import attrs

from ragen import ShapeInput, hookimpl, option


@attrs.frozen(kw_only=True)
class ActionBonusConfig:
    """Pay for one action wherever it is played."""

    action: str = option("Up", "The action paid for.")
    coef: float = option(1.0, "Added to the training score per executed action of that kind.")


def make_action_bonus(config: ActionBonusConfig):
    """Each trajectory's score plus ``coef`` per executed ``action``."""

    def shape(inp: ShapeInput) -> list[float]:
        return [s + config.coef * sum(a == config.action for turn in traj.turns for a in turn.executed)
                for s, traj in zip(inp.scores, inp.trajectories, strict=True)]

    return shape


class FarmPlugin:
    @hookimpl
    def register_reward_shapers(self, register):
        register("action-bonus", make_action_bonus, config=ActionBonusConfig)


def main(argv: list[str]) -> None:
    from ragen.cli import main as cli
    from ragen.plugins.loader import register_plugin

    register_plugin(FarmPlugin(), "farm", dist="ragen-farm-test")
    sys.argv = ["ragen", "run", *argv]
    cli()


if __name__ == "__main__":
    main(sys.argv[1:])
