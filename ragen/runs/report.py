"""``ragen report``: one self-contained HTML file for one or more run (or ``ragen eval``) folders.

The page holds what is wrong with each run (the diagnosis, ragen/runs/diagnosis.py), the key curves (several runs
overlaid, validation points, early-stop and warm-start events), the RAGEN-V2 collapse panel, a trajectory viewer,
each run's config and its summary numbers. Curves are matplotlib SVG inlined in the page and the viewer is a small
script from ``ragen/runs/templates``, so the file needs no network to view (docs/report.md says why).
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from pathlib import Path
from typing import Callable

import structlog

from ragen.config.bounded import read_json_file
from ragen.errors import RagenError
from ragen.runs import plot

log = structlog.get_logger("ragen")

TEMPLATES = Path(__file__).parent / "templates"
REGIME_TABLE = (("high H(Z|X)", "diverse reasoning (varied, input-grounded)", "template collapse (diverse-looking, "
                 "input-agnostic boilerplate)"),
                ("low H(Z|X)", "compressed reasoning (short, state-specific)", "low-entropy collapse (one generic "
                 "sentence for every input)"))
COLLAPSE_KEYS = ("mi_estimate", "conditional_entropy_est")
Decode = Callable[[list[int]], str]
SPECIAL = re.compile(r"<\|[^|<>]*\|>")  # ChatML-style special tokens such as <|im_end|>


# ---- reading a run folder -----------------------------------------------------------------------------------------


def find_decoder(run_dir: Path) -> Decode | None:
    """The run's tokenizer as ``ids -> text`` (special tokens kept), from the exported or source model folder."""
    from tokenizers import Tokenizer

    cfg = _config(run_dir)
    model = str(cfg.get("model", {}).get("name", "")) if isinstance(cfg, dict) else ""
    candidates = [run_dir / "final", run_dir / "model-source", *sorted((run_dir / "model-source").glob("*/"))]
    candidates += [Path(model).expanduser()] if model else []
    for folder in candidates:
        if (folder / "tokenizer.json").is_file():
            tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            return lambda ids: tok.decode(ids, skip_special_tokens=False)
    return _hub_decoder(model) if model else None


def _hub_decoder(model: str) -> Decode | None:
    """A Hugging Face id's tokenizer from the local cache (never downloaded: a report works offline), or None."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached, not a tokenizer, a built-in name: observations are then not shown
        return None
    return lambda ids: tok.decode(ids, skip_special_tokens=False)


def _config(run_dir: Path) -> dict:
    import yaml

    path = run_dir / "config.yaml"
    return (yaml.safe_load(_run_file_text(run_dir, "config.yaml")) or {}) if path.is_file() else {}


def _run_file_text(run_dir: Path, name: str) -> str:
    """A run folder's small file, bounded: a regular file inside the folder (a link to ~/.ssh/... is refused, never
    copied into a report page), at most ``MAX_FILE_BYTES``."""
    from ragen.config.bounded import read_file

    return read_file(run_dir / name, inside=run_dir).decode("utf-8", "replace")


def _user_text(text: str) -> str:
    """The env's observation inside a chat-formatted prompt: the last user message (ChatML), else the whole text."""
    start = text.rfind("<|im_start|>user\n")
    if start < 0:
        return text
    body = text[start + len("<|im_start|>user\n"):]
    return body.split("<|im_end|>", 1)[0].strip("\n")


def _split_response(text: str, opened_think: bool) -> tuple[str, str]:
    """(think, answer block) of a response. When the prompt ended with ``<think>`` the response starts inside it, so
    text before ``</think>`` (or all of it, with no answer) is reasoning; chat special tokens are dropped."""
    text = SPECIAL.sub("", text)
    think, sep, rest = text.partition("</think>")
    if not sep:
        before, tag, after = text.partition("<answer>")
        think, rest = (before, tag + after) if tag or opened_think else ("", text)
    think = think.removeprefix("<think>").strip()
    m = re.search(r"<answer>(.*?)(</answer>|$)", rest, re.S)
    return think, (m.group(1).strip() if m else rest.strip())


def _end_reason(t: dict) -> str:
    if t.get("truncated"):
        return f"truncated: {t.get('truncation_reason') or 'unknown'}"
    return "success" if t.get("success") else "episode ended without success"


class _Strings:
    """Interns observation texts: the first prompt repeats across a group, so the page stores it once."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def _prompts(t: dict, decode: Decode | None) -> list[str]:
    """One decoded prompt / delta segment per turn (special tokens kept): what the model read before each response."""
    if decode is None:
        return []
    ids = t.get("input_ids", [])
    return [decode(ids[s:e]) for kind, s, e in t.get("segments", []) if kind in ("prompt", "delta")]


def compact(t: dict, decode: Decode | None, strings: _Strings) -> dict:
    """What the viewer shows of one trajectory row (token ids and masks dropped)."""
    prompts = _prompts(t, decode)
    turns = []
    for i, turn in enumerate(t.get("turns", [])):
        seen = prompts[i] if i < len(prompts) else None
        think, answer = _split_response(turn["response_text"], seen is not None and seen.rstrip().endswith("<think>"))
        turns.append({"obs": strings(_user_text(seen)) if seen is not None else None, "think": think, "answer": answer,
                      "raw": turn["response_text"], "parsed": turn.get("answer"), "executed": turn.get("executed", []),
                      "invalid": turn.get("invalid", []), "valid": bool(turn.get("format_ok")),
                      "reward": turn.get("reward", 0.0), "penalty": turn.get("penalty", 0.0),
                      "finish": turn.get("finish_reason", "stop")})
    return {"step": t.get("step", 0), "split": t.get("split", "train"), "env": t["env_name"], "seed": t["seed"],
            "group": t["group_id"], "member": t["rollout_index"], "success": bool(t.get("success")),
            "score": t.get("score", 0.0), "reward": t.get("reward", 0.0), "penalty": t.get("penalty", 0.0),
            "end": _end_reason(t), "prompt": strings(prompts[0]) if prompts else None, "turns": turns}


def read_run(run_dir: Path, decode: Decode | None = None) -> dict:
    """A run folder (``ragen run``) or an eval folder (``ragen eval``: metrics.json, no metrics.jsonl) as page data."""
    run_dir = Path(run_dir)
    has_log = (run_dir / "metrics.jsonl").is_file()
    if not has_log and not (run_dir / "trajectories.jsonl").is_file():
        raise RagenError(f"{str(run_dir)!r} is not a run or eval folder (no metrics.jsonl or trajectories.jsonl)")
    decode = decode or find_decoder(run_dir)
    strings = _Strings()
    rows = plot.read_jsonl(run_dir / "trajectories.jsonl") + plot.read_jsonl(run_dir / "val_trajectories.jsonl")
    eval_metrics = run_dir / "metrics.json"
    return {"name": run_dir.resolve().name, "dir": str(run_dir),
            "metrics": plot.read_metrics(run_dir) if has_log else [],
            "eval": read_json_file(eval_metrics, inside=run_dir) if eval_metrics.is_file() else None,
            "config": _run_file_text(run_dir, "config.yaml") if (run_dir / "config.yaml").is_file() else "",
            "trajectories": [compact(t, decode, strings) for t in rows], "strings": strings.items}


# ---- page sections ------------------------------------------------------------------------------------------------


def summary(rows: list[dict]) -> list[tuple[str, str, int]]:
    """(metric, last value as written in metrics.jsonl, its step) for every metric of a run."""
    last: dict[str, tuple[object, int]] = {}
    for r in rows:
        for k, v in r.items():
            if k != "step" and v is not None:
                last[k] = (v, r["step"])
    return [(k, json.dumps(v), s) for k, (v, s) in sorted(last.items())]


def _summary_html(run: dict) -> str:
    if run["eval"] is not None and not run["metrics"]:
        items = [(k, json.dumps(v), "") for k, v in run["eval"].items()]
    else:
        items = summary(run["metrics"])
    body = "".join(f"<tr><td>{html.escape(k)}</td><td class=num>{html.escape(v)}</td><td class=num>{s}</td></tr>"
                   for k, v, s in items)
    return (f"<details class=run-summary data-run='{html.escape(run['name'])}' open><summary>{html.escape(run['name'])}"
            f" ({len(items)} values)</summary><table><tr><th>metric</th><th>last value</th><th>step</th></tr>{body}"
            "</table></details>")


def _panels(curves: dict[str, list[dict]], metrics: list[str]) -> str:
    out = []
    for m in metrics:
        fig, ax = plot.panel_figure()
        plot.draw(ax, curves, m)
        out.append(f"<figure class=curve data-metric='{html.escape(m)}'>{plot.to_svg(fig)}</figure>")
    return "".join(out)


def _curve_metrics(curves: dict[str, list[dict]]) -> list[str]:
    """The key metrics, then per-env validation success (``val/<env>/success``) when a run has several envs."""
    per_env = sorted({k for rows in curves.values() for r in rows for k in r
                      if k.startswith("val/") and k.endswith("/success") and k.count("/") == 2})
    return plot.present(curves, [*plot.KEY_METRICS, *(per_env if len(per_env) > 1 else [])])


def _collapse_keys(curves: dict[str, list[dict]]) -> list[str]:
    schemes = sorted({k.split("/")[0] for rows in curves.values() for r in rows for k in r
                      if k.startswith("collapse_") and k.endswith("/mi_estimate")})
    return [f"{s}/{k}" for s in schemes for k in COLLAPSE_KEYS]


def regime_plane(curves: dict[str, list[dict]], scheme: str, thresholds: tuple[float | None, float | None]):
    """MI (x) against H(Z|X) (y), one path per run in step order; the threshold lines split the four regimes."""
    fig, ax = plot.panel_figure((5.2, 3.6))
    for i, (name, rows) in enumerate(curves.items()):
        xs_steps, xs = plot.series(rows, f"{scheme}/mi_estimate")
        ys_steps, ys = plot.series(rows, f"{scheme}/conditional_entropy_est")
        pts = [(s, x, ys[ys_steps.index(s)]) for s, x in zip(xs_steps, xs) if s in ys_steps]
        color = plot.COLORS[i % len(plot.COLORS)]
        ax.plot([p[1] for p in pts], [p[2] for p in pts], marker="o", color=color, label=name)
        for s, x, y in pts:
            ax.annotate(str(s), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    h_thr, i_thr = thresholds
    if h_thr is not None and i_thr is not None:
        ax.axhline(h_thr, color="grey", linestyle="--")
        ax.axvline(i_thr, color="grey", linestyle="--")
        for x, y, name, ha, va in ((0.99, 0.99, "diverse", "right", "top"),
                                   (0.01, 0.99, "template collapse", "left", "top"),
                                   (0.99, 0.01, "compressed", "right", "bottom"),
                                   (0.01, 0.01, "low-entropy collapse", "left", "bottom")):
            ax.text(x, y, name, transform=ax.transAxes, ha=ha, va=va, fontsize=8, color="grey")
    ax.set_xlabel("MI estimate (nats; step numbers at the points)", fontsize=8)
    ax.set_ylabel("H(Z|X) estimate", fontsize=8)
    ax.set_title(f"{scheme}: regime plane", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def _regime_now(run: dict) -> str:
    from ragen.train.collapse import REGIMES

    steps, codes = plot.series(run["metrics"], "collapse/regime")
    if not steps:
        return (f"{html.escape(run['name'])}: no collapse/regime logged (set collapse.h_threshold and "
                "collapse.i_threshold)")
    return f"{html.escape(run['name'])}: {REGIMES[int(codes[-1])].replace('_', ' ')} at step {steps[-1]}"


def _collapse_html(runs: list[dict], curves: dict[str, list[dict]]) -> str:
    keys = _collapse_keys(curves)
    if not keys:
        return ("<p>No collapse diagnostics in these runs (collapse.enabled=false, or the model does not reason in "
                "&lt;think&gt;).</p>")
    cfg = _config(Path(runs[0]["dir"])).get("collapse", {})
    thresholds = (cfg.get('h_threshold'), cfg.get('i_threshold'))
    planes = "".join(f"<figure class=curve data-metric='{html.escape(s)}/regime'>"
                     f"{plot.to_svg(regime_plane(curves, s, thresholds))}</figure>"
                     for s in sorted({k.split('/')[0] for k in keys}))
    table = "".join(f"<tr><th>{h}</th><td>{a}</td><td>{b}</td></tr>" for h, a, b in REGIME_TABLE)
    regimes = "".join(f"<li>{_regime_now(r)}</li>" for r in runs if r["metrics"])
    return (f"<table class=regimes><tr><th></th><th>high MI I(X;Z)</th><th>low MI I(X;Z)</th></tr>{table}</table>"
            f"<ul>{regimes}</ul><div class=grid>{_panels(curves, keys)}{planes}</div>")


# ---- state dependence -----------------------------------------------------------------------------------------------
#: the state-dependence metrics ``rollout_metrics`` writes (ragen.rollout.runner.state_dependence; absent where the
#: env's expert cannot judge actions): the one list, which ``ragen eval`` and the end-of-run summary read too
STATE_KEYS = ("optimal_action_rate", "optimal_action_chance", "judged_actions", "distinct_first_answers")


def _state_of(flat: dict, prefix: str) -> dict | None:
    """The state-dependence numbers under ``prefix`` ('' for an eval, 'val/' or 'val/<env>/' for a run), or None."""
    found = {k: flat.get(prefix + k) for k in STATE_KEYS}
    return found if any(v is not None for v in found.values()) else None


def state_rows(run: dict) -> list[tuple[str, dict]]:
    """(label, numbers) per env of a run's last validation (or of an eval folder), overall first."""
    ev = run["eval"]
    if ev is not None:
        envs = ev.get("envs") or {}
        pairs = [("all envs", ev.get("overall") or {})] if envs else [(ev.get("env", "env"), ev)]
        pairs += list(envs.items())
        return [(label, st) for label, m in pairs if (st := _state_of(m, "")) is not None]
    last = next((r for r in reversed(run["metrics"]) if _state_of(r, "val/")), None)
    if last is None:
        return []
    envs = sorted({k.split("/")[1] for k in last if k.startswith("val/") and k.count("/") == 2
                   and k.endswith("/distinct_first_answers")})
    rows = [(f"step {last['step']}", _state_of(last, "val/"))]
    return rows + [(f"step {last['step']} {e}", st) for e in envs
                   if len(envs) > 1 and (st := _state_of(last, f"val/{e}/"))]


def verdict(st: dict) -> str:
    """At a glance: is the optimal-move rate above its chance level by more than two binomial standard errors?"""
    rate, chance, n = st.get("optimal_action_rate"), st.get("optimal_action_chance"), st.get("judged_actions") or 0
    notes = []
    if rate is not None and chance is not None and n > 0:
        se = max((chance * (1 - chance) / n) ** 0.5, 1e-9)
        notes.append("reads the state" if rate > chance + 2 * se else
                     "below chance" if rate < chance - 2 * se else "at chance: ignores the state?")
    if st.get("distinct_first_answers") == 1:
        notes.append("one first answer for every level")
    return "; ".join(notes)


def _state_html(runs: list[dict]) -> str:
    rows = [(r["name"], label, st) for r in runs for label, st in state_rows(r)]
    if not rows:
        return ("<p>No state-dependence metrics (the env's expert does not implement optimal_actions, or no "
                "validation ran yet).</p>")

    def num(x, pct=True):
        return "-" if x is None else f"{100 * x:.1f}%" if pct else f"{int(x)}"

    body = "".join(f"<tr><td>{html.escape(n)}</td><td>{html.escape(lb)}</td>"
                   f"<td class=num>{num(st['optimal_action_rate'])}</td>"
                   f"<td class=num>{num(st['optimal_action_chance'])}</td>"
                   f"<td class=num>{num(st['judged_actions'], False)}</td>"
                   f"<td class=num>{num(st['distinct_first_answers'], False)}</td>"
                   f"<td>{html.escape(verdict(st))}</td></tr>"
                   for n, lb, st in rows)
    table = ("<table class=state><tr><th>run</th><th>validation</th><th>optimal moves</th><th>chance</th>"
             f"<th>judged actions</th><th>distinct first answers</th><th>verdict</th></tr>{body}</table>")
    bars = [(f"{n} {lb}", st) for n, lb, st in rows if st["optimal_action_rate"] is not None]
    return table + (f"<figure class=curve data-metric=state-dependence>{plot.to_svg(_state_bars(bars))}</figure>"
                    if bars else "")


# ---- the greedy before/after comparison ----------------------------------------------------------------


def _paired_html(runs: list[dict]) -> str:
    """One row per run with a paired comparison: greedy success before and after RL on the same levels, the paired
    change, its SE and z, the discordant levels, optimal moves before and after (ragen/runs/paired.py)."""
    from ragen.runs.paired import verdict as paired_verdict

    rows = [(r["name"], p) for r in runs
            if (p := next((m for m in reversed(r["metrics"]) if m.get("paired/change") is not None), None))]
    if not rows:
        return "<p>No paired comparison (rollout.n_paired_levels = 0, or the run has not finished).</p>"

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    body = "".join(
        f"<tr><td>{html.escape(n)}</td><td class=num>{int(p['paired/levels'])}</td>"
        f"<td class=num>{pct(p['paired/success_before'])}</td><td class=num>{pct(p['paired/success_after'])}</td>"
        f"<td class=num>{100 * p['paired/change']:+.1f}</td><td class=num>{100 * p['paired/se']:.1f}</td>"
        f"<td class=num>{p['paired/z']:.2f}</td><td class=num>{int(p['paired/discordant_better'])} / "
        f"{int(p['paired/discordant_worse'])}</td>"
        f"<td class=num>{pct(p.get('paired/optimal_action_rate_before'))} &rarr; "
        f"{pct(p.get('paired/optimal_action_rate_after'))}</td><td>{html.escape(paired_verdict(p['paired/z']))}</td></tr>"
        for n, p in rows)
    return ("<table class=paired><tr><th>run</th><th>levels</th><th>greedy success before</th><th>after</th>"
            "<th>change (points)</th><th>SE</th><th>z</th><th>levels better / worse</th><th>optimal moves</th>"
            f"<th>verdict</th></tr>{body}</table>")


def _state_bars(bars: list[tuple[str, dict]]):
    """Optimal-move rate per run and env as bars, each with its chance level as a black tick."""
    height = 1.0 + 0.4 * len(bars)
    fig, ax = plot.panel_figure((6.0, height))
    fig.subplots_adjust(left=0.4, bottom=0.45 / height, top=1 - 0.3 / height)  # room for "run step N env" labels
    ys = list(range(len(bars)))
    ax.barh(ys, [st["optimal_action_rate"] for _, st in bars], color=plot.COLORS[0])
    ax.scatter([st["optimal_action_chance"] for _, st in bars], ys, marker="|", s=300, color="black", zorder=3)
    ax.set_yticks(ys, [label for label, _ in bars], fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_title("optimal moves (bars) vs chance on the same states (ticks)", fontsize=9)
    ax.tick_params(labelsize=8)
    return fig


# ---- diagnosis ------------------------------------------------------------------------------------------------------


def _finding_figure(rows: list[dict], name: str, metric: str, threshold: float | None):
    """One finding's metric against step, with the threshold its rule used as a dashed line."""
    fig, ax = plot.panel_figure((4.2, 2.4))
    plot.draw(ax, {name: rows}, metric)
    if threshold is not None and math.isfinite(threshold):
        ax.axhline(threshold, color="grey", linestyle="--", linewidth=1)
    return fig


def _diagnosis_html(runs: list[dict], curves: list[str]) -> str:
    """Each run's findings (ragen/runs/diagnosis.py; docs/diagnosis.md), most severe first: what was seen, what to try
    and its curve (the panel under Curves when drawn there, else a small one here)."""
    from ragen.runs.diagnosis import NOT_MEASURED, diagnose_rows

    items = []
    for r in runs:
        if not r["metrics"]:
            continue
        d = diagnose_rows(r["metrics"], Path(r["dir"]))
        quiet = ", ".join(c.code for c in d.checks if c.status == NOT_MEASURED)
        if not d.findings:
            items.append(f"<p>{html.escape(r['name'])}: no finding"
                         + (f" <span class=meta>(not measured: {html.escape(quiet)})</span>" if quiet else "") + "</p>")
            continue
        for f in d.findings:
            metric = f.metric
            where = (f"<a href='#curves' data-metric='{html.escape(metric)}'>{html.escape(metric)}</a> under Curves"
                     if metric in curves else f"<code>{html.escape(metric)}</code>")
            fig = ""
            if metric and metric not in curves and plot.series(r["metrics"], metric)[0]:
                svg = plot.to_svg(_finding_figure(r["metrics"], r["name"], metric, f.evidence[0].threshold))
                fig = f"<figure class=finding-curve data-metric='{html.escape(metric)}'>{svg}</figure>"
            items.append(
                f"<div class='finding {f.severity}' data-code='{html.escape(f.code)}'><p><b>[{f.severity}] "
                f"{html.escape(f.code)}</b> ({html.escape(r['name'])}): {html.escape(f.summary)}</p>"
                f"<p class=meta>Try: {html.escape(f.action)} Curve: {where}.</p>{fig}</div>")
        if quiet:
            items.append(f"<p class=meta>{html.escape(r['name'])}: not measured: {html.escape(quiet)}</p>")
    return "".join(items) or "<p>No training metrics to diagnose (an eval folder).</p>"


def _data_json(runs: list[dict]) -> str:
    data = [{"name": r["name"], "strings": r["strings"], "trajectories": r["trajectories"]} for r in runs]
    # '</' and '<!--' would end or confuse the script element; JSON allows the escaped forms
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\u0021--")


def render(runs: list[dict]) -> str:
    """The whole page."""
    curves = {r["name"]: r["metrics"] for r in runs if r["metrics"]}
    metrics = _curve_metrics(curves) if curves else []
    page = (TEMPLATES / "report.html").read_text()
    parts = {
        "TITLE": html.escape("ragen report: " + ", ".join(r["name"] for r in runs)),
        "GENERATED": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "RUNS": "".join(f"<li><code>{html.escape(r['dir'])}</code> ({len(r['metrics'])} metric rows, "
                        f"{len(r['trajectories'])} trajectories)</li>" for r in runs),
        "DIAGNOSIS": _diagnosis_html(runs, metrics),
        "CURVES": (_panels(curves, metrics) if metrics
                   else "<p>No training curves (an eval folder, or no step trained yet).</p>"),
        "COLLAPSE": _collapse_html(runs, curves) if curves else "<p>No training metrics.</p>",
        "STATE": _state_html(runs),
        "PAIRED": _paired_html(runs),
        "SUMMARY": "".join(_summary_html(r) for r in runs),
        "CONFIG": "".join(f"<details><summary>{html.escape(r['name'])}/config.yaml</summary><pre>"
                          f"{html.escape(r['config'] or '(none)')}</pre></details>" for r in runs),
        "CSS": (TEMPLATES / "report.css").read_text(),
        "JS": (TEMPLATES / "report.js").read_text(),
        "DATA": _data_json(runs),
    }
    for key, value in parts.items():
        page = page.replace(f"@@{key}@@", value)
    return page


def build_report(paths: list[Path], out: Path, *, decode: Decode | None = None) -> Path:
    """Read the run folders and write the page to ``out``."""
    runs = [read_run(Path(p), decode) for p in paths]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render(runs), encoding="utf-8")
    tmp.replace(out)  # a browser reloading during training never sees half a page
    return out


def refresh(run_dir: Path, step: int, every: int, *, final: bool = False) -> None:
    """The trainer's hook: rewrite ``run_dir/report.html`` every ``every`` steps (and at the end). A failure is
    logged, not raised: a report must never stop a long run."""
    if not every or not (final or step % every == 0):
        return
    try:
        build_report([run_dir], Path(run_dir) / "report.html")
    except Exception as exc:  # noqa: BLE001 - any report bug must leave training running
        log.warning("report_failed", step=step, error=f"{type(exc).__name__}: {exc}")
