"""The RAGEN prompt frame (spec 1.3): system text, per-turn user text, reward messages.

Two styles (``rollout.prompt``): ``full`` is RAGEN's frame, written for instruction-tuned models; ``compact`` keeps
only what changes between turns and levels (the state, the actions left, the reward) and the action list. A model
trained from scratch on the demos (the built-in ones) cannot read instructions: to it the fixed text is noise that
costs about half the tokens of every warm-start and RL update (docs/models.md, "A compact prompt").
"""

from __future__ import annotations

from ragen.contract.env import Env

WARNING = "No valid action provided previously. Environment state remains the same. Please try again.\n"


def system_prompt(env: Env, compat: str | None = None, style: str = "full") -> str:
    """System message built from the env's live config (legend, actions, per-turn action limit); ``compact``: the
    actions and the per-turn limit alone."""
    cfg = env.config
    if style == "compact":
        text = "Actions: " + ", ".join(env.action_names) if env.action_names else "Answer in <answer> </answer>."
        n = cfg.max_actions_per_turn
        return text + (f'\nUp to {n} actions per turn, separated by " || "' if n > 1 else "")
    text = "You're a helpful assistant. " + env.instructions
    if env.symbol_legend:
        text += "\nThe meaning of each symbol in the state is:\n" + ", ".join(
            f"{s}: {m}" for s, m in env.symbol_legend.items()
        )
    if env.action_names:
        text += "\nYour available actions are:\n" + ", ".join(env.action_names)
    n = cfg.max_actions_per_episode if compat == "ragen" else cfg.max_actions_per_turn
    if n > 1 or compat == "ragen":
        text += f'\nYou can make up to {n} actions, separated by the action separator " || "\n'
    return text


def turn_text(turn: int, obs: str, actions_left: int, max_tokens: int, warning: bool = False, enable_think: bool = True,
              style: str = "full") -> str:
    """User text of turn ``turn`` (1-based); ``compact`` drops the format reminder."""
    if style == "compact":
        return f"\nTurn {turn}:\nState:\n{obs}\n{WARNING if warning else ''}You have {actions_left} actions left.\n"
    fmt = (
        "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
        if enable_think
        else "<answer> [your answer] </answer>"
    )
    return (
        f"\nTurn {turn}:\nState:\n{obs}\n{WARNING if warning else ''}You have {actions_left} actions left. "
        f"Always output: {fmt} with no extra text. Strictly follow this format. "
        f"Max response length: {max_tokens} words (tokens).\n"
    )


def format_reward(r: float, compat: str | None = None) -> str:
    """The turn reward as shown to the model: rounded to 4 decimals, shortest repr (RAGEN prints raw sums)."""
    if compat == "ragen":
        return repr(float(r))
    value = round(float(r), 4)
    return repr(value + 0.0)  # + 0.0 turns -0.0 into 0.0


def reward_text(r: float, compat: str | None = None) -> str:
    return f"Reward:\n{format_reward(r, compat)}\n"
