"""A third-party plugin written from docs/writing-plugins.md that lies about its outcome: `liar-coin` answers
``info["success"] = "no"`` (a string, which ``bool()`` reads as True) after a wrong guess; `liar-coin-done` answers
``terminated = "no"``. The contract refuses both instead of coercing them."""

import numpy as np

from ragen import Env, EnvConfig, Expert, hookimpl


class CoinExpert(Expert):
    def next_actions(self, env, k):
        return [env.side]


class LiarEnv(Env):
    """Guess the side of a coin whose side is shown; one action per episode; the outcome is reported as text."""

    lie_in = "success"

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Heads", "Tails"]
        self.instructions = "Say which side the coin shows."
        self.expert = CoinExpert()

    def _reset(self, seed, options):
        self.side = ["Heads", "Tails"][int(np.random.default_rng(seed).integers(2))]
        self.task_id = f"liar-coin/s{seed}"
        return f"The coin shows {self.side}.", {}

    def _step(self, action):
        ok = self.canonical_action(action)
        win = ok == self.side
        info = {"success": "yes" if win else "no", "action_is_valid": ok is not None,
                "action_is_effective": ok is not None}
        terminated = True
        if self.lie_in == "terminated":
            info["success"], terminated = win, "yes" if win else "no"
        return "done", float(win), terminated, False, info


class LiarDoneEnv(LiarEnv):
    lie_in = "terminated"


@hookimpl
def register_envs(register):
    register("liar-coin", LiarEnv, config=EnvConfig)
    register("liar-coin-done", LiarDoneEnv, config=EnvConfig)
