"""A third-party plugin: one env, `tiny-coin`, guess the side of a seeded coin."""

import numpy as np

from ragen import Env, EnvConfig, Expert, hookimpl


class CoinExpert(Expert):
    def next_actions(self, env, k):
        return [env.side]


class CoinEnv(Env):
    """Guess the side of a coin whose side is shown; one action per episode."""

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Heads", "Tails"]
        self.instructions = "Say which side the coin shows."
        self.expert = CoinExpert()

    def _reset(self, seed, options):
        self.side = ["Heads", "Tails"][int(np.random.default_rng(seed).integers(2))]
        self.task_id = f"tiny-coin/s{seed}"
        return f"The coin shows {self.side}.", {}

    def _step(self, action):
        ok = self.canonical_action(action)
        win = ok == self.side
        return (
            "done",
            float(win),
            ok is not None,
            False,
            {"success": win, "action_is_valid": ok is not None, "action_is_effective": ok is not None},
        )


@hookimpl
def register_envs(register):
    register("tiny-coin", CoinEnv, config=EnvConfig)
