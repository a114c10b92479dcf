"""Commands that train or evaluate a model: ``run``, ``sft``, ``eval``."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path

import click

from ragen.cli.group import cli
from ragen.cli.options import (
    checked_parser,
    config_option,
    env_option,
    fresh_dir,
    key_values,
    model_option,
    parser_options,
    resolved_parser,
)
from ragen.cli.tables import table


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
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "ragen",
           *cleaned]
    raise SystemExit(subprocess.call(cmd))


def run_config(config_path, overrides, **named):
    """The checked config of ``ragen run`` / ``ragen sft`` (``resolved_run``'s)."""
    return resolved_run(config_path, overrides, **named).cfg


def resolved_run(config_path, overrides, **named):
    """The run of ``ragen run`` / ``ragen sft``, resolved once (``ragen.envs.resolved``) and checked before torch is
    imported: bad input fails in a second, not after the warm start."""
    from ragen.config import load_config
    from ragen.envs.resolved import resolve_run
    from ragen.plugins.loader import get_registry

    keys = {"env_name": "env.name", "algo_name": "algo.name", "model_name": "model.name",
            "parser_name": "rollout.parser"}
    filter_name = named.pop("filter_name", None)
    extra = [f"{keys[k]}={v}" for k, v in named.items() if v]
    if named.get("env_name"):  # --env NAME trains on that one env, also over a config that lists env.train
        extra.append("env.train=[]")
    cfg = load_config(config_path, [*overrides, *extra])
    from ragen.models.load import check_model_name

    check_model_name(cfg.model.name)  # a missing local path fails now, not after minutes as a hub id
    if filter_name:  # --filter replaces the preset's filter; options the user gave (algo.options.filter_options.*) stay
        import attrs

        options = {**cfg.algo.options, "filter": filter_name,
                   "filter_options": cfg.algo.options.get("filter_options") or {}}
        cfg = attrs.evolve(cfg, algo=attrs.evolve(cfg.algo, options=options))
    # unknown env names fail here, with a did-you-mean; every listed env's options are checked; then the algorithm
    run = resolve_run(cfg)
    if filter_name:
        get_registry("filter").get(filter_name)
    from ragen.train.provenance import resolved_config

    resolved_config(cfg)  # every component's options checked now (a misspelt one named), not after the warm start
    if not named.get("env_name") and config_path is None and not any(o.startswith(("env.name=", "env.train="))
                                                                      for o in overrides):
        click.echo(f"env: {cfg.env.name} (the default; --env NAME picks another)", err=True)
    return run


@cli.command()
@config_option
@env_option
@click.option("--algo", "algo_name", help="Algorithm preset (algo.name): grpo, ppo, starpo-s, ... (see `ragen algos`).")
@click.option("--filter", "filter_name", help="Rollout filter replacing the preset's: top-p, v2-main, "
                                              "v2-recommended, ...; its options: "
                                              "algo.options.filter_options.KEY=VALUE.")
@model_option
@click.option("--parser", "parser_name", help="Registered action parser (rollout.parser); its options: "
                                              "rollout.parser_options.KEY=VALUE.")
@click.option("--resume", type=click.Path(file_okay=False, path_type=Path), help="Continue the run in this folder.")
@click.option("--warmstart/--no-warmstart", default=None,
              help="Fine-tune on expert demonstrations before RL, or never (default: warmstart.mode, 'auto' = only a "
                   "freshly initialised built-in model, cached).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel processes on this machine (launched through torchrun).")
@click.option("--local_rank", "--local-rank", "local_rank", type=int, hidden=True,
              help="Set by the deepspeed launcher.")
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
    resolved = None if resume is not None else resolved_run(config_path, overrides, env_name=env_name,
                                                         algo_name=algo_name, model_name=model_name,
                                                         filter_name=filter_name, parser_name=parser_name)
    from ragen.runs.loop import (
        train,  # torch: after the config is checked, so bad input fails in a second
    )
    from ragen.train.interrupt import GracefulInterrupt

    with GracefulInterrupt("the current training step"):  # a first Ctrl-C: finish the step, checkpoint, exit
        run_dir = train(resolved, resume=resume, warmstart=warmstart)
    if int(os.environ.get("RANK", "0")) == 0:
        from ragen.runs.diagnosis import summary_lines
        from ragen.runs.summary import format_summary, run_summary

        click.echo("\n".join([format_summary(run_summary(run_dir)), *summary_lines(run_dir)]))
    click.echo(f"run folder: {run_dir}")


@cli.command("sft")
@config_option
@env_option
@model_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Output folder (default runs/sft-<env>).")
@click.argument("overrides", nargs=-1)
def sft_cmd(config_path, env_name, model_name, out, overrides) -> None:
    """Fine-tune a model on expert demonstrations of an env (warmstart.* options); saves a HF model folder."""
    resolved = resolved_run(config_path, overrides, env_name=env_name, model_name=model_name)
    from ragen.runs.sft import run_sft  # torch: after the config is checked

    path, metrics = run_sft(resolved, out)
    click.echo(json.dumps(metrics, indent=2))
    click.echo(f"model: {path}")


@cli.command("eval")
@click.option("--env", "env_name", help="Env variant; several, comma-separated, play in one call and print one table.")
@click.option("--model", "model_name", default="tiny", show_default=True,
              help="tiny, smollm2, gemma3, a local path or a Hugging Face id.")
@click.option("-k", "k", default=1, show_default=True, help="Samples per seed (pass@k).")
@click.option("--seeds", "n_groups", default=64, show_default=True, help="Validation seeds per env (123, 124, ...).")
@click.option("--temperature", default=0.5, show_default=True, help="Sampling temperature (RAGEN validation: 0.5).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write trajectories.jsonl and metrics.json (default: a new runs/eval-ENV-TIME folder "
                   "per call).")
@click.option("--option", "-o", "options", multiple=True, metavar="[ENV:]KEY=VALUE",
              help="Env config override; 'ENV:' limits it to one of several envs.")
@click.option("--prompt", "prompt", type=click.Choice(["auto", "full", "compact"]), default="auto", show_default=True,
              help="Prompt frame (rollout.prompt); 'auto' = the style a ragen-trained model folder records, else the "
                   "model's default.")
@click.option("--window", default="auto", show_default=True, metavar="auto|N",
              help="Past turns each prompt holds (rollout.max_context_window, 0 = all); 'auto' = the window a "
                   "ragen-trained model folder records, else 0.")
@parser_options
def eval_cmd(env_name, model_name, k, n_groups, temperature, out, options, prompt, window, parser_name,
             parser_options) -> None:
    """Evaluate a model on the fixed validation seeds of one env or several."""
    from ragen.config.schema import default_prompt
    from ragen.models.load import check_model_name, trained_window
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
    if window == "auto":
        window = trained_window(model_name) or 0
    elif not window.isdigit():
        raise click.BadParameter(f"{window!r}: expected 'auto' or a number of turns >= 0", param_hint="--window")
    parser_name, parser_options = resolved_parser(parser_name, parser_options, model_name)
    parser_opts = checked_parser(parser_name, parser_options)
    from ragen.runs.evaluate import evaluate  # torch: after the arguments are checked

    label = "+".join(names)
    out = out or fresh_dir(Path("runs") / f"eval-{label}-{datetime.now():%Y%m%d-%H%M%S}")
    metrics = evaluate(names[0] if len(names) == 1 else names, model_name, k=k, n_groups=n_groups,
                       temperature=temperature, out=out, options=shared, env_options=per_env, parser=parser_name,
                       parser_options=parser_opts,
                       prompt=default_prompt(model_name) if prompt == "auto" else prompt, window=int(window))
    click.echo(json.dumps(metrics, indent=2))
    if len(names) > 1:
        rows = ([[n, *_eval_row(m, k)] for n, m in metrics["envs"].items()]
                + [["overall", *_eval_row(metrics["overall"], k)]])
        table(["env", "success", "reward", "valid format", f"pass@{k}", "failed"], rows)
    from ragen.runs.evaluate import state_line

    for name, m in (metrics["envs"].items() if len(names) > 1 else [(names[0], metrics)]):
        if (line := state_line(m)) is not None:
            click.echo(f"{name}: {line}")
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
    return key_values(tuple(shared)), {n: key_values(tuple(v)) for n, v in per_env.items() if v}


def _eval_row(m: dict, k: int) -> list[str]:
    return [f"{m['success_rate']:.3f}", f"{m['reward_mean']:.3f}", f"{m['valid_format_rate']:.3f}",
            f"{m[f'pass@{k}']:.3f}", str(m["failed_envs"])]
