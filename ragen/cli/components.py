"""Commands about components: ``plugins``, ``algos``, ``envs``, ``check-env``, ``play``, ``serve-env``, ``new-env``."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import click

from ragen.cli.group import cli, only_printed
from ragen.cli.options import checked_parser, key_values, parser_options, resolved_parser
from ragen.cli.tables import (
    echo_wrapped,
    renamed,
    table,
    tuple_as_list,
    vars_of,
    wide_option,
)
from ragen.errors import RagenError


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@wide_option
def plugins(as_json: bool) -> None:
    """List installed plugins, their versions and components, and broken plugins with their errors."""
    only_printed()
    from ragen.plugins.loader import (
        KINDS,
        broken_plugins,
        clashes,
        get_registry,
        loaded_plugins,
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # broken plugins and name clashes are listed below, not warned about
        broken = broken_plugins()
        clashed = clashes()
        rows = []
        for p in loaded_plugins():
            if any(r["distribution"] == p.dist for r in rows):
                continue  # one row per distribution (the core registers several default plugins)
            comps = {kind: [c.name for c in get_registry(kind) if c.dist == p.dist] for kind in KINDS}
            name = p.dist if p.dist == "ragen" else p.name
            rows.append({"name": name, "distribution": p.dist, "version": p.version,
                         "components": {k: v for k, v in comps.items() if v}})
    if as_json:
        click.echo(json.dumps({"plugins": rows, "broken": [renamed(vars_of(b)) for b in broken],
                               "clashes": [vars_of(c) for c in clashed]}, indent=2))
        return
    table(
        ["distribution", "version", "components"],
        [[r["distribution"], r["version"],
          "; ".join(f"{k}: {', '.join(v)}" for k, v in r["components"].items()) or "-"] for r in rows],
    )
    for b in broken:
        echo_wrapped(f"BROKEN {b.dist} {b.version}: {b.error}")
    for c in clashed:
        echo_wrapped(f"CLASH {c.kind} {c.name!r}: registered by {c.kept!r} (used) and {c.refused!r} (refused)")


def _component_settings(item) -> dict:
    """A registered component's effective options (its defaults applied), JSON-ready."""
    import attrs

    from ragen.plugins.components import component_config

    cfg = component_config(item, {}, path=item.name)
    if cfg is None:
        return {}
    return {f.name: tuple_as_list(getattr(cfg, f.name)) for f in attrs.fields(type(cfg))}


PRESET_COLUMNS = ("estimator", "use_critic", "clip_ratio_low", "clip_ratio_high", "loss_agg_mode", "kl_coef",
                  "kl_reward_coef", "filter", "entropy_coef")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@wide_option
def algos(as_json: bool) -> None:
    """List algorithm presets (--algo) and the estimators, filters and shapers they combine, with their settings."""
    only_printed()
    import attrs

    from ragen.plugins.components import missing_parts
    from ragen.plugins.loader import get_registry

    presets = {c.name: {k: tuple_as_list(v) for k, v in attrs.asdict(c.factory).items()} | {"distribution": c.dist}
               for c in get_registry("algorithm")}
    for c in get_registry("algorithm"):  # resolved when listed: a preset that cannot run says so now
        missing = missing_parts(c.factory)
        if missing:
            click.echo(f"warning: preset {c.name!r} of {c.dist} names components that are not registered: "
                       f"{', '.join(missing)}; `ragen run --algo {c.name}` fails until they are", err=True)
    comps = {kind: {c.name: {"description": c.description, "distribution": c.dist, "settings": _component_settings(c)}
                    for c in get_registry(kind)} for kind in ("estimator", "filter", "shaper")}
    if as_json:
        click.echo(json.dumps({"presets": presets, **{f"{k}s": v for k, v in comps.items()}}, indent=2))
        return
    click.echo("Presets (ragen run --algo NAME; override with algo.options.KEY=VALUE):")
    table(["name", *PRESET_COLUMNS], [[n, *(str(p[k]) for k in PRESET_COLUMNS)] for n, p in presets.items()])
    for n, p in presets.items():
        echo_wrapped(f"  {n}: {p['description']}" + (f" [{p['source']}]" if p["source"] else ""), indent="    ")
    for kind, items in comps.items():
        click.echo(f"\n{kind.capitalize()}s:")
        table(["name", "settings", "description"],
               [[n, ", ".join(f"{k}={v}" for k, v in c["settings"].items()) or "-", c["description"]]
                for n, c in items.items()])


@cli.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@wide_option
def envs(name: str | None, as_json: bool) -> None:
    """List registered environments, or show one env's config fields."""
    only_printed()
    from ragen.plugins.components import env_config_fields
    from ragen.plugins.loader import get_registry

    reg = get_registry("env")
    if name is not None:
        item = reg.get(name)
        fields = env_config_fields(name)
        if as_json:
            click.echo(json.dumps({"name": name, "distribution": item.dist, "description": item.description,
                                   "config": {k: v for k, (v, _) in fields.items()}}, indent=2, default=str))
            return
        echo_wrapped(f"{name} ({item.dist}): {item.description}")
        table(["option", "value", "meaning"], [[k, repr(v), doc] for k, (v, doc) in fields.items()])
        return
    if as_json:
        click.echo(json.dumps([{"name": c.name, "distribution": c.dist, "description": c.description} for c in reg],
                              indent=2))
        return
    table(["env", "distribution", "description"], [[c.name, c.dist, c.description] for c in reg])


@cli.command("check-env")
@click.argument("name")
@click.option("--seeds", default=10, show_default=True, help="Seeds for the determinism and random-episode checks.")
@click.option("--expert-episodes", default=20, show_default=True, help="Expert episodes that must succeed.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="Env config override (e.g. a data path).")
def check_env_cmd(name: str, seeds: int, expert_episodes: int, options: tuple[str, ...]) -> None:
    """Check that env NAME follows the ragen env contract (and gymnasium's)."""
    from ragen.envs.checker import check_env
    from ragen.plugins.loader import get_registry

    get_registry("env").get(name)  # unknown names fail here with a did-you-mean
    checks = check_env(name, seeds=seeds, expert_episodes=expert_episodes, **key_values(options))
    for c in checks:
        click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
    failed = [c.name for c in checks if not c.ok]
    if failed:
        raise RagenError(f"{name}: {len(failed)} check(s) failed: {', '.join(failed)}")
    click.echo(f"{name}: all {len(checks)} checks passed")


@cli.command()
@click.argument("name")
@click.option("--seed", default=0, show_default=True, help="Episode seed.")
@click.option("--episodes", default=1, show_default=True, help="Episodes to play.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Env config override.")
@click.option("--format-penalty", type=click.FloatRange(max=0), default=None,
              help="Cost of a malformed turn (default: a run's trainer.format_penalty).")
@parser_options
def play(name: str, seed: int, episodes: int, options: tuple[str, ...], format_penalty: float | None, parser_name: str,
         parser_options) -> None:
    """Play env NAME in the terminal: type actions (e.g. `Up || Left`) or a full <answer>…</answer> response."""
    from ragen.envs.play import play_episodes

    parser_name, parser_options = resolved_parser(parser_name, parser_options)
    parser_opts = checked_parser(parser_name, parser_options)
    play_episodes(name, seed=seed, episodes=episodes, options=key_values(options), parser=parser_name,
                  parser_options=parser_opts, format_penalty=format_penalty)


@cli.command("serve-env")
@click.argument("name")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Env config override.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind (loopback unless told otherwise).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port; 0 picks a free one.")
@click.option("--token", hidden=True, default=None, help="Refused: the token comes from $RAGEN_ENV_TOKEN.")
@click.option("--insecure", is_flag=True, help="Serve without a token where one is required (another host than "
              "loopback, or an env whose episodes hold a process).")
@click.option("--threads", default=16, show_default=True, type=click.IntRange(1, 512), help="Requests served at once.")
@click.option("--workers", default=4, show_default=True, type=click.IntRange(0, 64),
              help="Processes serving an env not declared concurrency-safe (0: this process, one call at a time).")
@click.option("--episode-timeout", default=None, type=click.FloatRange(min=0.1),
              help="Seconds after which an untouched episode is closed  [default: 600; 120 for envs holding a process]")
@click.option("--max-episodes", default=1024, show_default=True, type=click.IntRange(min=1),
              help="Open episodes at most (an env holding a process may declare fewer).")
@click.option("--max-client-episodes", default=None, type=click.IntRange(min=1),
              help="Open episodes one client may hold  [default: all; half for envs holding a process]")
@click.option("--min-free-memory", default=None, type=click.FloatRange(min=0),
              help="MB the host must keep free when an env holding a process opens an episode  [default: 10% of RAM, "
                   ">= 1024; 0: no check]")
@click.option("--protocol", type=click.Choice(["ragen", "openenv"]), default="ragen", show_default=True,
              help="ragen's own (the `remote` env) or OpenEnv's (any OpenEnv client; needs ragen[openenv]; "
                   "docs/openenv.md).")
def serve_env(name, options, host, port, token, insecure, threads, workers, episode_timeout, max_episodes,
              max_client_episodes, min_free_memory, protocol) -> None:
    """Serve env NAME over HTTP for `ragen run --env remote env.options.url=...` (docs/remote-envs.md), or with
    OpenEnv's protocol for any OpenEnv client (--protocol openenv, docs/openenv.md).

    The token clients must send comes from $RAGEN_ENV_TOKEN."""
    from ragen.plugins.loader import get_registry
    from ragen.serve.http import make_server, token_from_environment

    get_registry("env").get(name)  # unknown names fail here with a did-you-mean
    if protocol == "openenv":
        # the one launch path of the OpenEnv adapter (`python -m ragen.serve.openenv` takes it too)
        from ragen.serve.openenv import serve  # the optional extra: its one-line error names it

        serve(name, key_values(options), host=host, port=port, token=token_from_environment(token), insecure=insecure,
              max_episodes=max_episodes, episode_timeout_s=episode_timeout, echo=_echo_now)
        return
    server = make_server(name, key_values(options), host=host, port=port, token=token_from_environment(token),
                         insecure=insecure, threads=threads, workers=workers, episode_timeout_s=episode_timeout,
                         max_episodes=max_episodes, max_client_episodes=max_client_episodes,
                         min_free_mb=min_free_memory)
    shown = f"[{host}]" if ":" in host else host
    _echo_now(f"serving {name} on http://{shown}:{server.effective_port} (Ctrl-C stops)")
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        server.table.close()


def _echo_now(line: str) -> None:
    """A line a waiting caller reads at once (the URL a server prints before it serves)."""
    click.echo(line)
    sys.stdout.flush()


@cli.command("new-env")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True,
              help="Where to create the ragen-NAME package folder.")
def new_env(name: str, directory: Path) -> None:
    """Scaffold an env plugin package ragen-NAME that passes `ragen check-env NAME` out of the box."""
    from ragen.envs.scaffold import scaffold

    path = scaffold(name, directory)
    click.echo(f"created {path}\nnext: pip install -e {path} && ragen check-env {name} && ragen play {name}")
