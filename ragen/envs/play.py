"""``ragen play``: a person plays an env in the terminal, seeing exactly what the model would see."""

from __future__ import annotations

import click

from ragen.envs.episode import Episode
from ragen.envs.prompt import format_reward, system_prompt, turn_text
from ragen.plugins.components import make_component, make_env


def _read(prompt: str, stdin) -> str | None:
    """One typed line. ``stdin`` is the session's one wrapper: a fresh wrapper per line read ahead and lost the lines
    piped after it."""
    click.echo(prompt, nl=False)
    line = stdin.readline()
    return None if line == "" else line.rstrip("\n")


def answer_of(line: str, parse, prefill: str) -> tuple[str | None, str]:
    """The answer a typed line gives, and how it was read: through the parser (as the rollout calls it, on
    ``prefill + response``) when it matches; a line that does not match and holds a tag counts as a broken format
    (None, like a model's); any other line is taken as the actions themselves."""
    try:
        parsed = parse(prefill + line)
    except Exception as exc:  # noqa: BLE001 - as in a run: a parser that raises reads as a malformed response
        return None, f"parser raised {type(exc).__name__}: {exc}"
    if parsed.matched:
        return parsed.answer, "parsed"
    if "<" in line:
        return None, "no match"
    return line, "actions"


def play_episodes(
    name: str,
    seed: int = 0,
    episodes: int = 1,
    options: dict | None = None,
    parser: str = "think-answer",
    parser_options: dict | None = None,
    format_penalty: float | None = None,
) -> None:
    """Play ``episodes`` episodes of env ``name``; responses go through the registered parser ``parser``; a malformed
    turn costs ``format_penalty`` (None = a run's default, ``trainer.format_penalty``), as it would in a run."""
    from ragen.config import TrainerSection
    from ragen.plugins.components import parser_thinks

    parse = make_component("parser", parser, **(parser_options or {}))
    thinks = parser_thinks(parser, parser_options)
    prefill = "<think>" if thinks else "<answer>"
    env = make_env(name, **(options or {}))
    stdin = click.get_text_stream("stdin")
    try:
        for i in range(episodes):
            penalty = TrainerSection().format_penalty if format_penalty is None else format_penalty
            ep = Episode(env, format_penalty=penalty)
            ep.reset(seed=seed + i)
            click.echo(f"=== {name}, seed {seed + i} ({env.task_id}) ===")
            click.echo(system_prompt(env))
            example = "<think>…</think><answer>…</answer>" if thinks else "<answer>…</answer>"
            click.echo(
                f"(parser {parser}: type actions like `A || B`, a response as the model writes it after the prefilled "
                f"{prefill!r} (e.g. {example}), or `q` to quit)"
            )
            total = 0.0
            while not ep.done:
                click.echo(turn_text(ep.turn + 1, ep.obs, ep.actions_left, env.config.max_tokens,
                                     warning=ep.no_action_last_turn and ep.turn > 0, enable_think=thinks))
                line = _read("> ", stdin)
                if line is None or line.strip() in ("q", "quit", ":q"):
                    click.echo("bye")
                    return
                answer, how = answer_of(line, parse, prefill)
                click.echo(f"{parser}: {how}" + (f" -> {answer!r}" if how == "parsed" else ""))
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
            click.echo(
                f"episode over: success={ep.success} score={format_reward(total)} turns={ep.turn} "
                f"actions={ep.actions_used}"
            )
    finally:
        env.close()
