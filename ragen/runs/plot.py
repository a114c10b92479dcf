"""Curves of runs' ``metrics.jsonl`` against step, drawn with matplotlib: PNG for ``ragen plot``, SVG for the report.

Several runs share each panel (one colour per run, for comparing algorithms or seeds); validation values are drawn
as markers, and early stops and warm starts as labelled vertical lines, because those are what a curve is read
against. Only ``matplotlib.figure.Figure`` is used (never pyplot), so drawing touches no global backend state.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from ragen.errors import ConfigError, RagenError, did_you_mean

#: the curves RL researchers judge a run by; the report draws those present in a run
KEY_METRICS = (
    "rollout/success",
    "rollout/optimal_action_rate",
    "rollout/distinct_first_answers",
    "reward/mean",
    "reward/group_std",
    "actor/entropy",
    "rollout/filter_kept_ratio",
    "actor/grad_norm",
    "actor/pg_loss",
    "rollout/valid_format_rate",
)
#: a training metric and the validation metric drawn on the same panel as markers
VAL_PAIRS = {"rollout/success": "val/success", "rollout/score": "val/score",
             "rollout/valid_format_rate": "val/valid_format_rate",
             "rollout/optimal_action_rate": "val/optimal_action_rate",
             "rollout/distinct_first_answers": "val/distinct_first_answers"}
#: reference lines drawn on a metric's panel, (training, validation): a rate means little without its chance level
REFERENCES = {"rollout/optimal_action_rate": ("rollout/optimal_action_chance", "val/optimal_action_chance"),
              "val/optimal_action_rate": (None, "val/optimal_action_chance")}
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file ([] when it is missing); a torn last line (a killed run) is skipped, not fatal."""
    from ragen.config.bounded import MAX_JSONL_BYTES, read_file

    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    # bounded: a regular file inside the run folder (a link to a file elsewhere is refused, not shown in a report)
    text = read_file(path, max_bytes=MAX_JSONL_BYTES, inside=path.parent).decode("utf-8", "replace")
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except (ValueError, RecursionError):  # torn, or nested past the parser's recursion limit
            continue
    return rows


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of a run folder's ``metrics.jsonl``."""
    if not (Path(run_dir) / "metrics.jsonl").is_file():
        raise RagenError(f"{str(run_dir)!r} is not a run folder (no metrics.jsonl)")
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def series(rows: list[dict], metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping rows without a finite value."""
    pts = [(r["step"], float(r[metric])) for r in rows
           if isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])]
    return [s for s, _ in pts], [v for _, v in pts]


def events(rows: list[dict]) -> list[tuple[int, str]]:
    """(step, label) of the events a curve is read against: the warm start and early stops."""
    found = []
    for r in rows:
        if any(k.startswith("sft/") for k in r):
            found.append((r["step"], "warm start"))
        found += [(r["step"], "early stop: " + k.split("/", 1)[1]) for k in r if k.startswith("early_stopped/")]
    return found


def check_metrics(runs: dict[str, list[dict]], metrics: list[str]) -> None:
    """One-line error for a metric that no run logged."""
    known = {k for rows in runs.values() for r in rows for k in r if k != "step"}
    for m in metrics:
        if m not in known:
            raise ConfigError(f"--metric {m!r}: no run logged it{did_you_mean(m, known)}")


def present(runs: dict[str, list[dict]], metrics: tuple[str, ...] | list[str]) -> list[str]:
    """The metrics of ``metrics`` that at least one run logged, in order."""
    return [m for m in metrics if any(series(rows, m)[0] for rows in runs.values())]


def draw(ax, runs: dict[str, list[dict]], metric: str) -> None:
    """One panel: ``metric`` of every run, its validation pair as markers, events as vertical lines."""
    from matplotlib.ticker import MaxNLocator

    val = VAL_PAIRS.get(metric)
    for i, (name, rows) in enumerate(runs.items()):
        color = COLORS[i % len(COLORS)]
        steps, values = series(rows, metric)
        marker = "o" if metric.startswith("val/") or len(steps) == 1 else None
        ax.plot(steps, values, color=color, marker=marker, markersize=4, linewidth=1.5, label=name)
        if val:
            vs, vv = series(rows, val)
            ax.plot(vs, vv, color=color, marker="D", markersize=5, linestyle=":", linewidth=1,
                    label=f"{name} ({val})")
        _draw_references(ax, rows, metric, color, name)
        for step, label in events(rows):
            ax.axvline(step, color=color, linestyle="--", linewidth=0.8, alpha=0.7)
            ax.annotate(label, (step, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        va="top", ha="right", color=color)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_title(metric, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if len(runs) > 1 or val:
        ax.legend(fontsize=7)


def _draw_references(ax, rows: list[dict], metric: str, color: str, name: str) -> None:
    """The chance level of ``metric`` (``REFERENCES``) as thin dashed lines in the run's colour: a policy that
    ignores its state draws its curve on top of them."""
    train, val = REFERENCES.get(metric, (None, None))
    for key, style in ((train, "--"), (val, ":")):
        if key is None:
            continue
        steps, values = series(rows, key)
        if steps:
            ax.plot(steps, values, color=color, linestyle=style, linewidth=0.9, alpha=0.6, marker="x" if style == ":"
                    else None, markersize=4, label=f"{name} chance ({key})")


def figure(runs: dict[str, list[dict]], metrics: list[str], ncols: int = 2, panel: tuple[float, float] = (5.0, 3.2)):
    """A grid of panels, one per metric (constrained layout: every label fits, for PNGs)."""
    from matplotlib.figure import Figure

    ncols = max(1, min(ncols, len(metrics)))
    nrows = math.ceil(len(metrics) / ncols)
    fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained")
    for i, metric in enumerate(metrics):
        draw(fig.add_subplot(nrows, ncols, i + 1), runs, metric)
    return fig


def panel_figure(size: tuple[float, float] = (5.2, 3.3)):
    """(figure, axes) of one report panel with fixed margins: constrained layout would draw every panel twice, which
    doubles the report's build time."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    fig.subplots_adjust(left=0.15, right=0.97, top=0.9, bottom=0.15)
    return fig, fig.add_subplot()


def write_png(runs: dict[str, list[dict]], metrics: list[str], out: Path, dpi: int = 120) -> Path:
    """``ragen plot``: the metrics' panels of all runs in one PNG."""
    check_metrics(runs, metrics)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure(runs, metrics).savefig(out, format="png", dpi=dpi)
    return out


def to_svg(fig) -> str:
    """A figure as inline SVG markup (text kept as text, so the page stays searchable and small)."""
    from matplotlib import rc_context

    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "ragen"}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def load_runs(paths: list[Path]) -> dict[str, list[dict]]:
    """Run name (the folder's name, made unique) -> metric rows."""
    runs: dict[str, list[dict]] = {}
    for p in paths:
        name = Path(p).resolve().name
        while name in runs:
            name += "'"
        runs[name] = read_metrics(p)
    return runs
