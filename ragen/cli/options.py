"""Options and arguments several commands share, and the parsing of their ``KEY=VALUE`` items."""

from __future__ import annotations

from pathlib import Path

import click


def parser_options(command):
    """``--parser NAME`` and ``--parser-option KEY=VALUE`` (repeatable), as ``ragen run`` has them in the config."""
    command = click.option("--parser-option", "parser_options", multiple=True, metavar="KEY=VALUE",
                           help="Option of the parser (its config field), e.g. enable_think=false.")(command)
    return click.option("--parser", "parser_name", default="auto", show_default=True,
                        help="Registered action parser that reads the responses (see `ragen plugins`); 'auto' = the "
                             "parser a ragen-trained model folder records, else rollout.parser's default for the "
                             "model.")(command)


def resolved_parser(name: str, items: tuple[str, ...], model: str = "") -> tuple[str, tuple[str, ...]]:
    """``--parser auto``: the parser (and options, unless given) recorded in the model folder by the run or warm start
    that trained it, else ``rollout.parser``'s default for the model; any other name is kept."""
    if name != "auto":
        return name, items
    from ragen.config.schema import default_parser
    from ragen.models.load import trained_parser

    recorded = trained_parser(model) if model else None
    if recorded is None:
        return default_parser(model), items
    return recorded[0], items or tuple(f"{k}={v}" for k, v in recorded[1].items())


def checked_parser(name: str, items: tuple[str, ...]) -> dict:
    """The parser's options, with the parser built once so a wrong name or option fails before anything loads."""
    from ragen.plugins.components import make_component

    options = key_values(items)
    make_component("parser", name, **options)
    return options


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="YAML or TOML config file."
)


env_option = click.option("--env", "env_name", help="Env variant (env.name).")


model_option = click.option(
    "--model", "model_name", help="tiny, smollm2, gemma3, a Hugging Face id or a local path (model.name)."
)


runs_argument = click.argument(
    "runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)


def fresh_dir(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... if it exists: a default output folder never overwrites an earlier
    one."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def key_values(items: tuple[str, ...]) -> dict:
    from ragen.config import apply_overrides

    return apply_overrides({}, list(items))
