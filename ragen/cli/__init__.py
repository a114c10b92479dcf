"""The ``ragen`` command line. Core errors become one line on stderr and a non-zero exit (``--debug``: traceback)."""

from __future__ import annotations

import json
import os
import sys
import warnings
from datetime import datetime
from pathlib import Path

import click

from ragen.errors import Interrupted, RagenError


class _Group(click.Group):
    """A group whose errors are one line: ``Error: ...`` and exit 1 (2 for usage errors)."""

    def main(self, args=None, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in args
        _install_warning_printer()
        try:
            return super().main(args=args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            if debug:
                raise
            click.echo(f"Error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except Interrupted as exc:  # a first Ctrl-C, handled: what was saved and how to go on, not an error
            click.echo(str(exc), err=True)
            sys.exit(130)
        except RagenError as exc:
            if debug:
                raise
            click.echo(f"Error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)

    def resolve_command(self, ctx, args):
        from ragen.errors import did_you_mean

        name = args[0] if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise click.UsageError(f"no such command {name!r}{did_you_mean(name, self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)


def _install_warning_printer() -> None:
    def show(message, category, filename, lineno, file=None, line=None):
        click.echo(f"warning: {message}", err=True)

    warnings.showwarning = show


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="ragen")
def cli(debug: bool) -> None:
    """ragen: multi-turn RL (StarPO) for LLM agents."""


# ---- plugins and components -------------------------------------------------------------------------


LISTING_WIDTH = 100  #: listings fit this many columns (long cells wrap) unless --wide
_wide = False


def _set_wide(ctx, param, value) -> None:
    global _wide
    _wide = bool(value)


_wide_option = click.option("--wide", is_flag=True, expose_value=False, callback=_set_wide,
                            help=f"One line per row, however long (default: fit {LISTING_WIDTH} columns).")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@_wide_option
def plugins(as_json: bool) -> None:
    """List installed plugins, their versions and components, and broken plugins with their errors."""
    from ragen.plugins.loader import KINDS, broken_plugins, clashes, get_registry, loaded_plugins

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # broken plugins and name clashes are listed below, not warned about
        broken = broken_plugins()
        clashed = clashes()
        rows = []
        for p in loaded_plugins():
            comps = {kind: [c.name for c in get_registry(kind) if c.dist == p.dist] for kind in KINDS}
            rows.append({"name": p.name, "distribution": p.dist, "version": p.version, "components": {k: v for k, v in comps.items() if v}})
    if as_json:
        click.echo(json.dumps({"plugins": rows, "broken": [_renamed(vars_of(b)) for b in broken],
                               "clashes": [vars_of(c) for c in clashed]}, indent=2))
        return
    _table(
        ["distribution", "version", "components"],
        [[r["distribution"], r["version"], "; ".join(f"{k}: {', '.join(v)}" for k, v in r["components"].items()) or "-"] for r in rows],
    )
    for b in broken:
        _echo_wrapped(f"BROKEN {b.dist} {b.version}: {b.error}")
    for c in clashed:
        _echo_wrapped(f"CLASH {c.kind} {c.name!r}: registered by {c.kept!r} (used) and {c.refused!r} (refused)")


def _renamed(row: dict) -> dict:
    """``dist`` -> ``distribution``: every listing's JSON names the providing distribution the same way."""
    return {("distribution" if k == "dist" else k): v for k, v in row.items()}


def vars_of(obj) -> dict:
    import attrs

    return attrs.asdict(obj)


def _launch(nproc: int) -> None:
    """Re-run this command under torchrun with ``nproc`` ranks (without --nproc) and exit with its status."""
    import subprocess

    args = sys.argv[1:]
    cleaned, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if not a.startswith("--nproc="):
            cleaned.append(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "ragen", *cleaned]
    raise SystemExit(subprocess.call(cmd))


def _component_settings(item) -> dict:
    """A registered component's effective options (its defaults applied), JSON-ready."""
    import attrs

    from ragen.plugins.components import component_config

    cfg = component_config(item, {}, path=item.name)
    if cfg is None:
        return {}
    return {f.name: _jsonable(getattr(cfg, f.name)) for f in attrs.fields(type(cfg))}


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


PRESET_COLUMNS = ("estimator", "use_critic", "clip_ratio_low", "clip_ratio_high", "loss_agg_mode", "kl_coef",
                  "kl_reward_coef", "filter", "entropy_coef")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@_wide_option
def algos(as_json: bool) -> None:
    """List algorithm presets (--algo) and the estimators, filters and shapers they combine, with their settings."""
    import attrs

    from ragen.plugins.loader import get_registry

    presets = {c.name: {k: _jsonable(v) for k, v in attrs.asdict(c.factory).items()} | {"distribution": c.dist}
               for c in get_registry("algorithm")}
    comps = {kind: {c.name: {"description": c.description, "distribution": c.dist, "settings": _component_settings(c)}
                    for c in get_registry(kind)} for kind in ("estimator", "filter", "shaper")}
    if as_json:
        click.echo(json.dumps({"presets": presets, **{f"{k}s": v for k, v in comps.items()}}, indent=2))
        return
    click.echo("Presets (ragen run --algo NAME; override with algo.options.KEY=VALUE):")
    _table(["name", *PRESET_COLUMNS], [[n, *(str(p[k]) for k in PRESET_COLUMNS)] for n, p in presets.items()])
    for n, p in presets.items():
        _echo_wrapped(f"  {n}: {p['description']}" + (f" [{p['source']}]" if p["source"] else ""), indent="    ")
    for kind, items in comps.items():
        click.echo(f"\n{kind.capitalize()}s:")
        _table(["name", "settings", "description"],
               [[n, ", ".join(f"{k}={v}" for k, v in c["settings"].items()) or "-", c["description"]] for n, c in items.items()])


@cli.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@_wide_option
def envs(name: str | None, as_json: bool) -> None:
    """List registered environments, or show one env's config fields."""
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
        _echo_wrapped(f"{name} ({item.dist}): {item.description}")
        _table(["option", "value", "meaning"], [[k, repr(v), doc] for k, (v, doc) in fields.items()])
        return
    if as_json:
        click.echo(json.dumps([{"name": c.name, "distribution": c.dist, "description": c.description} for c in reg], indent=2))
        return
    _table(["env", "distribution", "description"], [[c.name, c.dist, c.description] for c in reg])


@cli.command("check-env")
@click.argument("name")
@click.option("--seeds", default=10, show_default=True, help="Seeds for the determinism and random-episode checks.")
@click.option("--expert-episodes", default=20, show_default=True, help="Expert episodes that must succeed.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Env config override (e.g. a data path).")
def check_env_cmd(name: str, seeds: int, expert_episodes: int, options: tuple[str, ...]) -> None:
    """Check that env NAME follows the ragen env contract (and gymnasium's)."""
    from ragen.envs.checker import check_env
    from ragen.plugins.loader import get_registry

    get_registry("env").get(name)  # unknown names fail here with a did-you-mean
    checks = check_env(name, seeds=seeds, expert_episodes=expert_episodes, **_options(options))
    for c in checks:
        click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
    failed = [c.name for c in checks if not c.ok]
    if failed:
        raise RagenError(f"{name}: {len(failed)} check(s) failed: {', '.join(failed)}")
    click.echo(f"{name}: all {len(checks)} checks passed")


def _parser_options(command):
    """``--parser NAME`` and ``--parser-option KEY=VALUE`` (repeatable), as ``ragen run`` has them in the config."""
    command = click.option("--parser-option", "parser_options", multiple=True, metavar="KEY=VALUE",
                           help="Option of the parser (its config field), e.g. enable_think=false.")(command)
    return click.option("--parser", "parser_name", default="think-answer", show_default=True,
                        help="Registered action parser that reads the responses (see `ragen plugins`).")(command)


def _checked_parser(name: str, items: tuple[str, ...]) -> dict:
    """The parser's options, with the parser built once so a wrong name or option fails before anything loads."""
    from ragen.plugins.components import make_component

    options = _options(items)
    make_component("parser", name, **options)
    return options


@cli.command()
@click.argument("name")
@click.option("--seed", default=0, show_default=True, help="Episode seed.")
@click.option("--episodes", default=1, show_default=True, help="Episodes to play.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Env config override.")
@_parser_options
def play(name: str, seed: int, episodes: int, options: tuple[str, ...], parser_name: str, parser_options) -> None:
    """Play env NAME in the terminal: type actions (e.g. `Up || Left`) or a full <answer>…</answer> response."""
    from ragen.envs.play import play_episodes

    parser_opts = _checked_parser(parser_name, parser_options)
    play_episodes(name, seed=seed, episodes=episodes, options=_options(options), parser=parser_name, parser_options=parser_opts)


@cli.command("serve-env")
@click.argument("name")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Env config override.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (loopback unless told otherwise).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port; 0 picks a free one.")
@click.option("--token", default=None, help="Shared token clients must send (default: $RAGEN_ENV_TOKEN, else none).")
@click.option("--threads", default=16, show_default=True, type=click.IntRange(1, 512), help="Requests served at once.")
@click.option("--episode-timeout", default=600.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds after which an untouched episode is closed.")
@click.option("--max-episodes", default=1024, show_default=True, type=click.IntRange(min=1), help="Open episodes at most.")
def serve_env(name, options, host, port, token, threads, episode_timeout, max_episodes) -> None:
    """Serve env NAME over HTTP for `ragen run --env remote env.options.url=...` (docs/remote-envs.md)."""
    from ragen.envs.net import is_loopback
    from ragen.envs.server import make_server
    from ragen.plugins.loader import get_registry
    from ragen.envs.remote import TOKEN_ENV

    get_registry("env").get(name)  # unknown names fail here with a did-you-mean
    token = token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        warnings.warn(f"serving {name} on {host} without a token: anyone who reaches this port can run episodes")
    server = make_server(name, _options(options), host=host, port=port, token=token, threads=threads,
                         episode_timeout_s=episode_timeout, max_episodes=max_episodes)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"serving {name} on http://{shown}:{server.effective_port} (Ctrl-C stops)", nl=True)
    sys.stdout.flush()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        server.table.close()


@cli.command("new-env")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Where to create the ragen-NAME package folder.")
def new_env(name: str, directory: Path) -> None:
    """Scaffold an env plugin package ragen-NAME that passes `ragen check-env NAME` out of the box."""
    from ragen.envs.scaffold import scaffold

    path = scaffold(name, directory)
    click.echo(f"created {path}\nnext: pip install -e {path} && ragen check-env {name} && ragen play {name}")


# ---- training -----------------------------------------------------------------------------------------


def _run_config(config_path, overrides, **named):
    from ragen.config import load_config
    from ragen.plugins.loader import get_registry

    keys = {"env_name": "env.name", "algo_name": "algo.name", "model_name": "model.name", "parser_name": "rollout.parser"}
    filter_name = named.pop("filter_name", None)
    extra = [f"{keys[k]}={v}" for k, v in named.items() if v]
    if named.get("env_name"):  # --env NAME trains on that one env, also over a config that lists env.train
        extra.append("env.train=[]")
    cfg = load_config(config_path, [*overrides, *extra])
    from ragen.models.load import check_model_name

    check_model_name(cfg.model.name)  # a missing local path fails now, not after minutes as a hub id
    from ragen.envs.env_lists import check_plan

    check_plan(cfg)  # unknown env names fail here, with a did-you-mean; every listed env's options are checked
    get_registry("algorithm").get(cfg.algo.name)
    if filter_name:  # --filter replaces the preset's filter; options the user gave (algo.options.filter_options.*) stay
        import attrs

        get_registry("filter").get(filter_name)
        options = {**cfg.algo.options, "filter": filter_name, "filter_options": cfg.algo.options.get("filter_options") or {}}
        cfg = attrs.evolve(cfg, algo=attrs.evolve(cfg.algo, options=options))
    from ragen.train.provenance import resolved_config

    resolved_config(cfg)  # every component's options checked now (a misspelt one named), not after the warm start
    if not named.get("env_name") and config_path is None and not any(o.startswith(("env.name=", "env.train=")) for o in overrides):
        click.echo(f"env: {cfg.env.name} (the default; --env NAME picks another)", err=True)
    return cfg


_config_option = click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="YAML or TOML config file.")
_env_option = click.option("--env", "env_name", help="Env variant (env.name).")
_model_option = click.option("--model", "model_name", help="tiny, smollm2, a Hugging Face id or a local path (model.name).")


@cli.command()
@_config_option
@_env_option
@click.option("--algo", "algo_name", help="Algorithm preset (algo.name): grpo, ppo, starpo-s, ... (see `ragen algos`).")
@click.option("--filter", "filter_name", help="Rollout filter replacing the preset's: top-p, v2-main, v2-recommended, ...; "
                                              "its options: algo.options.filter_options.KEY=VALUE.")
@_model_option
@click.option("--parser", "parser_name", help="Registered action parser (rollout.parser); its options: "
                                              "rollout.parser_options.KEY=VALUE.")
@click.option("--resume", type=click.Path(file_okay=False, path_type=Path), help="Continue the run in this folder.")
@click.option("--warmstart/--no-warmstart", default=None,
              help="Fine-tune on expert demonstrations before RL, or never (default: warmstart.mode, 'auto' = only a "
                   "freshly initialised built-in model, cached).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel processes on this machine (launched through torchrun).")
@click.option("--local_rank", "--local-rank", "local_rank", type=int, hidden=True, help="Set by the deepspeed launcher.")
@click.argument("overrides", nargs=-1)
def run(config_path, env_name, algo_name, filter_name, model_name, parser_name, resume, warmstart, nproc, local_rank,
        overrides) -> None:
    """Train a policy with StarPO. OVERRIDES are section.key=value pairs, e.g. trainer.steps=5."""
    if local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(local_rank))
    if nproc > 1 and int(os.environ.get("WORLD_SIZE", "1")) <= 1:  # not yet a rank of a launched group
        _launch(nproc)

    if resume is not None and (config_path or env_name or algo_name or filter_name or model_name or parser_name
                               or overrides or warmstart is not None):
        raise click.UsageError("--resume takes the run folder's own config; give no other options")
    cfg = None if resume is not None else _run_config(config_path, overrides, env_name=env_name, algo_name=algo_name,
                                                       model_name=model_name, filter_name=filter_name,
                                                       parser_name=parser_name)
    from ragen.train.trainer import train  # torch: after the config is checked, so bad input fails in a second

    from ragen.train.interrupt import GracefulInterrupt

    with GracefulInterrupt("the current training step"):  # a first Ctrl-C: finish the step, checkpoint, exit
        run_dir = train(cfg, resume=resume, warmstart=warmstart)
    if int(os.environ.get("RANK", "0")) == 0:
        from ragen.runs.summary import format_summary, run_summary

        click.echo(format_summary(run_summary(run_dir)))
    click.echo(f"run folder: {run_dir}")


@cli.command("sft")
@_config_option
@_env_option
@_model_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Output folder (default runs/sft-<env>).")
@click.argument("overrides", nargs=-1)
def sft_cmd(config_path, env_name, model_name, out, overrides) -> None:
    """Fine-tune a model on expert demonstrations of an env (warmstart.* options); saves a HF model folder."""
    cfg = _run_config(config_path, overrides, env_name=env_name, model_name=model_name)
    from ragen.runs.sft import run_sft  # torch: after the config is checked
    path, metrics = run_sft(cfg, out)
    click.echo(json.dumps(metrics, indent=2))
    click.echo(f"model: {path}")


@cli.command("eval")
@click.option("--env", "env_name", help="Env variant; several, comma-separated, play in one call and print one table.")
@click.option("--model", "model_name", default="tiny", show_default=True, help="tiny, a local path or a Hugging Face id.")
@click.option("-k", "k", default=1, show_default=True, help="Samples per seed (pass@k).")
@click.option("--seeds", "n_groups", default=64, show_default=True, help="Validation seeds per env (123, 124, ...).")
@click.option("--temperature", default=0.5, show_default=True, help="Sampling temperature (RAGEN validation: 0.5).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write trajectories.jsonl and metrics.json (default: a new runs/eval-ENV-TIME folder per call).")
@click.option("--option", "-o", "options", multiple=True, metavar="[ENV:]KEY=VALUE",
              help="Env config override; 'ENV:' limits it to one of several envs.")
@_parser_options
def eval_cmd(env_name, model_name, k, n_groups, temperature, out, options, parser_name, parser_options) -> None:
    """Evaluate a model on the fixed validation seeds of one env or several."""
    from ragen.models.load import check_model_name
    from ragen.plugins.loader import get_registry

    check_model_name(model_name)
    if env_name is None:
        env_name = "sokoban"
        click.echo("env: sokoban (the default; --env NAME picks another)", err=True)
    names = list(dict.fromkeys(n.strip() for n in env_name.split(",") if n.strip()))
    if not names:
        raise click.BadParameter("no env name given", param_hint="--env")
    for name in names:
        get_registry("env").get(name)
    shared, per_env = _env_options(options, names)
    parser_opts = _checked_parser(parser_name, parser_options)
    from ragen.runs.evaluate import evaluate  # torch: after the arguments are checked

    label = "+".join(names)
    out = out or _fresh_dir(Path("runs") / f"eval-{label}-{datetime.now():%Y%m%d-%H%M%S}")
    metrics = evaluate(names[0] if len(names) == 1 else names, model_name, k=k, n_groups=n_groups, temperature=temperature,
                       out=out, options=shared, env_options=per_env, parser=parser_name, parser_options=parser_opts)
    click.echo(json.dumps(metrics, indent=2))
    if len(names) > 1:
        rows = [[n, *_eval_row(m, k)] for n, m in metrics["envs"].items()] + [["overall", *_eval_row(metrics["overall"], k)]]
        _table(["env", "success", "reward", "valid format", f"pass@{k}", "failed"], rows)
    click.echo(f"trajectories: {out / 'trajectories.jsonl'}\nviewer: {out / 'report.html'}")


def _env_options(items: tuple[str, ...], names: list[str]) -> tuple[dict, dict[str, dict]]:
    """``-o`` values: KEY=VALUE for every env, ENV:KEY=VALUE for one (the env must be among ``names``)."""
    shared, per_env = [], {n: [] for n in names}
    for item in items:
        head, sep, rest = item.partition(":")
        if sep and "=" not in head:
            if head not in per_env:
                from ragen.errors import did_you_mean

                raise click.BadParameter(f"{item!r}: {head!r} is not one of the evaluated envs"
                                         f"{did_you_mean(head, names)}", param_hint="-o")
            per_env[head].append(rest)
        else:
            shared.append(item)
    return _options(tuple(shared)), {n: _options(tuple(v)) for n, v in per_env.items() if v}


def _eval_row(m: dict, k: int) -> list[str]:
    return [f"{m['success_rate']:.3f}", f"{m['reward_mean']:.3f}", f"{m['valid_format_rate']:.3f}", f"{m[f'pass@{k}']:.3f}",
            str(m["failed_envs"])]


# ---- looking at runs ----------------------------------------------------------------------------------------


_runs_argument = click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))


@cli.command()
@_runs_argument
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (default: RUN/report.html for one run, report.html for several).")
def report(runs, out) -> None:
    """One self-contained HTML report of RUNS (run or eval folders): curves, collapse panel, trajectory viewer."""
    from ragen.runs.report import build_report

    out = out or (runs[0] / "report.html" if len(runs) == 1 else Path("report.html"))
    click.echo(f"report: {build_report(list(runs), out)}")


@cli.command()
@_runs_argument
@click.option("-m", "--metric", "metrics", multiple=True, metavar="NAME",
              help="Metric to draw (repeatable; default: the key metrics the runs logged).")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("curves.png"), show_default=True,
              help="PNG file to write.")
@click.option("--dpi", default=120, show_default=True, help="Resolution of the PNG.")
def plot(runs, metrics, out, dpi) -> None:
    """PNG curves of RUNS' metrics against step, the runs overlaid (for papers and READMEs)."""
    from ragen.runs import plot as plot_mod

    curves = plot_mod.load_runs(list(runs))
    chosen = list(metrics) or plot_mod.present(curves, plot_mod.KEY_METRICS)
    click.echo(f"plot: {plot_mod.write_png(curves, chosen, out, dpi=dpi)}")


def _fresh_dir(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... if it exists: a default output folder never overwrites an earlier one."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _options(items: tuple[str, ...]) -> dict:
    from ragen.config import apply_overrides

    return apply_overrides({}, list(items))


def _echo_wrapped(text: str, indent: str = "  ") -> None:
    """A free-text listing line, wrapped to ``LISTING_WIDTH`` columns (not with --wide)."""
    import textwrap

    if _wide or len(text) <= LISTING_WIDTH:
        click.echo(text)
    else:
        click.echo(textwrap.fill(text, LISTING_WIDTH, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False))


def _table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell. Wider than ``LISTING_WIDTH`` (and no --wide): the last column wraps inside
    its own column, or, where the other columns leave it under 24 characters, each row becomes a wrapped record."""
    import textwrap

    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lead = sum(widths[:-1]) + 2 * (len(widths) - 1)  # where the last column starts
    room = LISTING_WIDTH - lead
    if not _wide and lead + widths[-1] > LISTING_WIDTH and room < 24:
        for row in rows:
            click.echo(str(row[0]))
            click.echo(textwrap.fill(", ".join(f"{h}={v}" for h, v in zip(header[1:], row[1:], strict=False)),
                                     LISTING_WIDTH, initial_indent="  ", subsequent_indent="  ", break_long_words=False,
                                     break_on_hyphens=False))
        return
    if not _wide and lead + widths[-1] > LISTING_WIDTH:
        widths[-1] = room
    for i, row in enumerate([header, *rows]):
        lines = textwrap.wrap(str(row[-1]), widths[-1], break_long_words=False) if widths[-1] == room else [str(row[-1])]
        first = [*row[:-1], lines[0] if lines else ""]
        click.echo("  ".join(str(x).ljust(w) for x, w in zip(first, widths, strict=False)).rstrip())
        for more in lines[1:]:
            click.echo(" " * lead + more)
        if i == 0:
            click.echo("  ".join("-" * w for w in widths))


def main() -> None:
    cli.main(prog_name="ragen")
