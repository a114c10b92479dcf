"""Commands that read run folders: ``report``, ``plot`` and ``doctor``."""

from __future__ import annotations

from pathlib import Path

import click

from ragen.cli.group import cli
from ragen.cli.options import runs_argument
from ragen.runs.diagnosis import OPEN_LOOP_TRAIN_LEVELS


@cli.command()
@runs_argument
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (default: RUN/report.html for one run, report.html for several).")
def report(runs, out) -> None:
    """One self-contained HTML report of RUNS (run or eval folders): curves, collapse panel, trajectory viewer."""
    from ragen.runs.report import build_report

    out = out or (runs[0] / "report.html" if len(runs) == 1 else Path("report.html"))
    click.echo(f"report: {build_report(list(runs), out)}")


@cli.command()
@runs_argument
@click.option("-m", "--metric", "metrics", multiple=True, metavar="NAME",
              help="Metric to draw (repeatable; default: the key metrics the runs logged).")
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("curves.png"),
    show_default=True,
    help="PNG file to write.",
)
@click.option("--dpi", default=120, show_default=True, help="Resolution of the PNG.")
def plot(runs, metrics, out, dpi) -> None:
    """PNG curves of RUNS' metrics against step, the runs overlaid (for papers and READMEs)."""
    from ragen.runs import plot as plot_mod

    curves = plot_mod.load_runs(list(runs))
    chosen = list(metrics) or plot_mod.present(curves, plot_mod.KEY_METRICS)
    click.echo(f"plot: {plot_mod.write_png(curves, chosen, out, dpi=dpi)}")


@cli.command()
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: each rule's status, findings, baseline.")
@click.option("--open-loop/--no-open-loop", default=True, show_default=True,
              help="Replay blind baselines in the env: the policy's most frequent action sequences, and the best "
                   "fixed sequence (plays episodes: seconds to a minute).")
@click.option("--search-levels", type=click.IntRange(min=0), default=OPEN_LOOP_TRAIN_LEVELS, show_default=True,
              help="Training levels the best fixed sequence is chosen on (0: no exhaustive search).")
def doctor(run, as_json, open_loop, search_levels) -> None:
    """What is wrong with RUN (a run folder, finished or not): each finding with its evidence and what to try
    (docs/diagnosis.md)."""
    import json

    from ragen.runs.diagnosis import diagnose, format_diagnosis

    diag = diagnose(run, open_loop=open_loop, search_levels=search_levels)
    click.echo(json.dumps(diag.to_json(), indent=2) if as_json else format_diagnosis(diag))
