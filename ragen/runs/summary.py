"""The end-of-run summary: validation success before RL and after, the change and its standard error, and the
greedy before/after comparison on the same levels (``paired/*``, ragen/runs/paired.py).

Every number comes from the run's ``metrics.jsonl`` (so the summary and the file cannot disagree): the step-0
validation is "before RL" (after the warm start, if any), the last validation is "after RL".
"""

from __future__ import annotations

import math
from pathlib import Path

from ragen.runs import report
from ragen.runs.plot import read_jsonl

#: the validation metrics that say whether the policy reads its state, as the summary (and the learning bench's rows)
#: give them: the rates and the first answers; the count of judged actions only sizes the report's verdict
STATE_KEYS = tuple(k for k in report.STATE_KEYS if k != "judged_actions")


def _se(p: float, n: float) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else float("nan")


def run_summary(run_dir: str | Path) -> dict:
    """Before/after validation success (with standard errors), steps, warm start and timing of a run folder."""
    rows = read_jsonl(Path(run_dir) / "metrics.jsonl")  # a torn last line of an interrupted run is skipped
    vals = [r for r in rows if r.get("val/success") is not None]
    before = next((r for r in vals if r["step"] == 0), None)
    after = next((r for r in reversed(vals) if r["step"] > 0), None)
    warm = next((r for r in rows if "sft/demo_success" in r), {})
    steps = max((r["step"] for r in rows), default=0)
    step_rows = [r for r in rows if r["step"] > 0 and "timing/step_s" in r]
    out: dict = {
        "run_dir": str(run_dir),
        "steps": steps,
        "rl_time_s": sum(r.get("timing/step_s", 0.0) or 0.0 for r in rows),
        "warmstart": bool(warm),
        "warmstart_cached": bool(warm.get("warmstart/cached", 0.0)),
        "warmstart_stored": _warmstart_stored(Path(run_dir)) if warm else None,
        "demo_success": warm.get("sft/demo_success"),
        "first_step_valid_format_rate": next((r.get("rollout/valid_format_rate") for r in rows if r["step"] == 1),
                                             None),
        "updates": _updates(step_rows, Path(run_dir)),
        "short_run": _short_run(Path(run_dir)),
    }
    for name, row in (("before", before), ("after", after)):
        if row is not None:
            p, n = row["val/success"], row.get("val/num_trajectories", 0.0)
            out[name] = {"step": row["step"], "success": p, "n": n, "se": _se(p, n),
                         "failed": row.get("val/failed_envs", 0.0) or 0.0, "failed_by": _reasons(row, "val/failed/"),
                         "valid_format_rate": row.get("val/valid_format_rate"), "score": row.get("val/score"),
                         **{key: row.get(f"val/{key}") for key in STATE_KEYS}}
    paired_row = next((r for r in reversed(rows) if r.get("paired/change") is not None), None)
    if paired_row is not None:
        out["paired"] = {k.removeprefix("paired/"): v for k, v in paired_row.items() if k.startswith("paired/")}
    if before is not None and after is not None:
        change = out["after"]["success"] - out["before"]["success"]
        out["change"] = change
        out["change_se"] = math.hypot(out["before"]["se"], out["after"]["se"])  # independent samples: conservative
    return out


def _updates(step_rows: list[dict], run_dir: Path) -> dict:
    """How many steps updated the policy, and why the others did not: the success gate left every group out, the
    filters did, or a non-finite loss skipped the update (the step's metrics say which)."""
    gate = sum(bool(r.get("rollout/success_gate_empty")) for r in step_rows if "actor/pg_loss" not in r)
    filtered = sum(bool(r.get("rollout/empty_after_filter")) for r in step_rows if "actor/pg_loss" not in r)
    updated = sum("actor/pg_loss" in r for r in step_rows)
    return {"steps": len(step_rows), "updated": updated, "gate": gate, "filtered": filtered,
            "skipped": len(step_rows) - updated - gate - filtered, "filter": _filter_name(run_dir)}


def _short_run(run_dir: Path) -> dict | None:
    """A short run's steps and ``trainer.short_run_steps`` from config.yaml (it played no validation and no greedy
    pass: ragen/envs/resolved.py); None for a full run or an unreadable config."""
    from ragen.config import read_file
    from ragen.envs.resolved import is_short_run

    try:
        t = read_file(run_dir / "config.yaml")["trainer"]
        steps, short = int(t["steps"]), int(t.get("short_run_steps") or 0)
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return None
    return {"steps": steps, "short_run_steps": short} if is_short_run(steps, short) else None


def _warmstart_stored(run_dir: Path) -> bool:
    """Whether the run's warm start went into the cache: ``warmstart.cache`` of config.yaml (on when unreadable, the
    field's default); with it off the warm start is trained for this run alone (ragen/warmstart/cache.py)."""
    from ragen.config import read_file

    try:
        return read_file(run_dir / "config.yaml")["warmstart"].get("cache", True) is not False
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return True


def _warmstart_origin(s: dict) -> str:
    if s["warmstart_cached"]:
        return "from the cache"
    if s.get("warmstart_stored") is False:
        return "trained for this run, not cached (warmstart.cache=false)"
    return "trained and cached"


def _filter_name(run_dir: Path) -> str:
    """The run's filters as config.yaml names them ("top-p", "top-p after zero-variance")."""
    from ragen.config import read_file

    try:
        options = read_file(run_dir / "config.yaml")["algo"]["options"]
    except (OSError, KeyError, TypeError, ValueError):
        return "?"
    pre = options.get("pre_filter")
    return str(options.get("filter", "?")) + (f" after {pre}" if pre else "")


def _updates_line(u: dict) -> str:
    n = u["steps"]
    why = [(u["filtered"], f"every group was filtered out (filter {u['filter']})"),
           (u["gate"], "no group had a success, so the success gate left every group out (algo.options.success_gate)"),
           (u["skipped"], "a non-finite loss or gradient skipped the update")]
    parts = [what if k == n else f"in {k}, {what}" for k, what in why if k]
    return f"  {u['updated']} of {n} steps updated the policy" + (": " + "; ".join(parts) if parts else "")


def _reasons(row: dict, prefix: str) -> dict[str, float]:
    """Dropped episodes by reason: the ``<prefix><reason>`` counts of a metrics row."""
    return {k.removeprefix(prefix): v for k, v in row.items() if k.startswith(prefix) and v}


def _dropped(count: float, reasons: dict[str, float]) -> str:
    """``"3 dropped: CAPACITY_REACHED"``; several reasons with their counts."""
    if len(reasons) == 1:
        why = next(iter(reasons))
    else:
        why = ", ".join(f"{int(n)} {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])) or "env failures"
    return f"{int(count)} dropped: {why}"


def _pct(p: float | None) -> str:
    return "-" if p is None else f"{100 * p:.1f}%"


def format_summary(s: dict) -> str:
    """One screen of text for the end of ``ragen run``."""
    lines = [f"Run summary ({s['run_dir']})"]
    if s["warmstart"]:
        lines.append(f"  warm start: {_warmstart_origin(s)}; "
                     f"the demonstrations' own success {_pct(s['demo_success'])}")
    lines.append(f"  RL: {s['steps']} steps in {s['rl_time_s'] / 60:.1f} min; valid format at step 1: "
                 f"{_pct(s['first_step_valid_format_rate'])}")
    if s.get("updates", {}).get("steps"):
        lines.append(_updates_line(s["updates"]))
    if s.get("short_run"):
        lines.append(f"  no validation and no greedy pass: a short run ({s['short_run']['steps']} steps, fewer than "
                     f"trainer.short_run_steps={s['short_run']['short_run_steps']}); trainer.short_run_steps=0 "
                     "plays them")
    for name, label in (("before", "before RL"), ("after", "after RL ")):
        v = s.get(name)
        if v is not None:
            dropped = f"; {_dropped(v['failed'], v['failed_by'])}" if v.get("failed") else ""
            lines.append(f"  validation success {label} (step {v['step']}): {_pct(v['success'])} "
                         f"± {100 * v['se']:.1f} (s.e., {int(v['n'])} episodes{dropped})")
    if "change" in s:
        spread = (f"{s['change'] / s['change_se']:+.1f} s.e." if s["change_se"] > 0
                  else "no spread: every episode scored alike")  # a z of 0/0 would print as nan
        lines.append(f"  change: {100 * s['change']:+.1f} points ± {100 * s['change_se']:.1f} (s.e.; {spread})")
    lines += _state_lines(s)
    lines += _paired_lines(s.get("paired"))
    return "\n".join(lines)


def _paired_lines(p: dict | None) -> list[str]:
    """The greedy before/after comparison on the same levels (ragen/runs/paired.py), in plain words."""
    if not p:
        return []
    from ragen.runs.paired import verdict

    levels = f"{int(p['levels'])} held-out levels"
    if p.get("levels_dropped"):  # levels an env failed on in either pass: left out of the comparison
        reasons: dict[str, float] = {}
        for label in ("before", "after"):
            for reason, n in _reasons(p, f"failed_{label}/").items():
                reasons[reason] = reasons.get(reason, 0.0) + n
        levels = (f"{int(p['levels'])} of {int(p.get('levels_planned') or 0)} held-out levels "
                  f"({_dropped(p['levels_dropped'], reasons)})")
    lines = [f"  greedy success on {levels}: {_pct(p['success_before'])} -> "
             f"{_pct(p['success_after'])} (paired change {100 * p['change']:+.1f} points, SE {100 * p['se']:.1f}, "
             f"z {p['z']:.1f}: {verdict(p['z'])}; {int(p['discordant_better'])} levels better, "
             f"{int(p['discordant_worse'])} worse)"]
    if p.get("optimal_action_rate_after") is not None:
        lines.append("  greedy optimal moves: " + " -> ".join(
            f"{_pct(p.get(f'optimal_action_rate_{w}'))} (chance {_pct(p.get(f'optimal_action_chance_{w}'))})"
            for w in ("before", "after")))
    return lines


def _state_lines(s: dict) -> list[str]:
    """Optimal moves beside chance and distinct first answers, before and after RL: a policy that ignores its state
    sits at chance with one first answer whatever its success."""
    lines = []
    for name, label in (("before", "before RL"), ("after", "after RL ")):
        v = s.get(name) or {}
        parts = []
        if v.get("optimal_action_rate") is not None:
            parts.append(f"optimal moves {_pct(v['optimal_action_rate'])} "
                         f"(chance {_pct(v.get('optimal_action_chance'))})")
        if v.get("distinct_first_answers") is not None:
            parts.append(f"{int(v['distinct_first_answers'])} distinct first answers over {int(v['n'])} episodes")
        if parts:
            lines.append(f"  reads the state {label}: " + "; ".join(parts))
    return lines
