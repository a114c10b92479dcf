"""The RAGEN prompt frame (spec 1.3): system text, per-turn user text, reward messages."""

from __future__ import annotations

from ragen.contract.env import Env

WARNING = "No valid action provided previously. Environment state remains the same. Please try again.\n"


def system_prompt(env: Env, compat: str | None = None) -> str:
    """System message built from the env's live config (legend, actions, per-turn action limit)."""
    cfg = env.config
    text = "You're a helpful assistant. " + env.instructions
    if env.symbol_legend:
        text += "\nThe meaning of each symbol in the state is:\n" + ", ".join(f"{s}: {m}" for s, m in env.symbol_legend.items())
    if env.action_names:
        text += "\nYour available actions are:\n" + ", ".join(env.action_names)
    n = cfg.max_actions_per_episode if compat == "ragen" else cfg.max_actions_per_turn
    if n > 1 or compat == "ragen":
        text += f'\nYou can make up to {n} actions, separated by the action separator " || "\n'
    return text


def turn_text(turn: int, obs: str, actions_left: int, max_tokens: int, warning: bool = False, enable_think: bool = True) -> str:
    """User text of turn ``turn`` (1-based)."""
    fmt = "<think> [Your thoughts] </think> <answer> [your answer] </answer>" if enable_think else "<answer> [your answer] </answer>"
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
