"""``ragen play``: a person plays an env in the terminal, seeing exactly what the model would see."""

from __future__ import annotations

import click

from ragen.components import make_env
from ragen.episode import Episode
from ragen.parsing import parse_response
from ragen.prompt import format_reward, system_prompt, turn_text


def _read(prompt: str) -> str | None:
    click.echo(prompt, nl=False)
    line = click.get_text_stream("stdin").readline()
    return None if line == "" else line.rstrip("\n")


def play_episodes(name: str, seed: int = 0, episodes: int = 1, options: dict | None = None) -> None:
    env = make_env(name, **(options or {}))
    try:
        for i in range(episodes):
            ep = Episode(env)
            ep.reset(seed=seed + i)
            click.echo(f"=== {name}, seed {seed + i} ({env.task_id}) ===")
            click.echo(system_prompt(env))
            click.echo("(type actions like `A || B`, a full <think>…</think><answer>…</answer> response, or `q` to quit)")
            total = 0.0
            while not ep.done:
                click.echo(turn_text(ep.turn + 1, ep.obs, ep.actions_left, env.config.max_tokens, warning=ep.no_action_last_turn and ep.turn > 0))
                line = _read("> ")
                if line is None or line.strip() in ("q", "quit", ":q"):
                    click.echo("bye")
                    return
                if "<answer>" in line:
                    parsed = parse_response(line)
                    answer = parsed.answer if parsed.matched else None
                else:
                    answer = line
                res = ep.step_turn(answer)
                total += res.reward + res.penalty
                info = {k: v for k, v in res.info.items() if isinstance(v, (bool, int, float, str))}
                click.echo(
                    f"executed: {', '.join(res.executed) or '-'}"
                    + (f" | invalid: {', '.join(res.invalid)}" if res.invalid else "")
                    + f" | reward: {format_reward(res.reward)}"
                    + (f" | format penalty: {res.penalty}" if res.penalty else "")
                    + f" | info: {info}"
                )
            click.echo(ep.obs)
            click.echo(f"episode over: success={ep.success} score={format_reward(total)} turns={ep.turn} actions={ep.actions_used}")
    finally:
        env.close()
