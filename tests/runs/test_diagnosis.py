"""The diagnosis (ragen/runs/diagnosis.py): every finding provoked by metrics rows in a real run-folder layout, a
healthy run that raises none, an old run folder whose missing metrics read "not measured", the open-loop baseline of
a policy that plays one sequence blind, `ragen doctor` (text, --json, one-line errors), the live warning (once per
finding), the summary's lines and the report's Diagnosis panel."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ragen_cmd

from ragen.runs import diagnosis as dg
from ragen.runs import report

STEPS = 30


def wobble(s: int, size: float) -> float:
    """A deterministic zero-mean wobble (period 3), so a flat metric has noise but no trend."""
    return size * ((s % 3) - 1)


def healthy_rows(steps: int = STEPS) -> list[dict]:
    """A run that learns a little and shows nothing wrong: every metric a rule reads, at plausible values."""
    val = {"val/num_trajectories": 64.0, "val/optimal_action_rate": 0.45, "val/optimal_action_chance": 0.26,
           "val/judged_actions": 380.0, "val/distinct_first_answers": 14.0}
    rows = [{"step": 0, "val/success": 0.30, **val}]
    for s in range(1, steps + 1):
        row = {"step": s, "rollout/success": 0.3 + wobble(s, 0.05), "reward/mean": 1.0 + wobble(s, 0.2),
               "rollout/score": 1.0 + wobble(s, 0.2), "rollout/frac_zero_std_groups": 0.25,
               "rollout/valid_format_rate": 0.97 + wobble(s, 0.02), "rollout/actions_per_turn": 1.7 + wobble(s, 0.1),
               "rollout/response_length_mean": 40 + wobble(s, 3), "actor/entropy": 0.15 + wobble(s, 0.02),
               "actor/ppo_kl": 0.001, "actor/ref_kl": 0.01 + wobble(s, 0.005), "actor/grad_norm": 0.6 + wobble(s, 0.2),
               "actor/skipped_updates": 0.0, "collapse_first_turn_sample/mi_estimate": 1.0,
               "collapse_first_turn_sample/mi_upper_bound": 2.77,
               "collapse_first_turn_sample/conditional_entropy_est": 1.2}
        if s % 10 == 0:
            row |= {"val/success": 0.30 + 0.02 * s / 10, **val}
        rows.append(row)
    rows[-1] |= {"paired/levels": 256.0, "paired/success_before": 0.30, "paired/success_after": 0.36,
                 "paired/change": 0.06, "paired/se": 0.025, "paired/z": 2.3, "paired/discordant_better": 28.0,
                 "paired/discordant_worse": 13.0}
    return rows


def ramp(s: int, start: float, end: float, steps: int = STEPS) -> float:
    return start + (end - start) * (s - 1) / (steps - 1)


def with_series(rows: list[dict], metric: str, f) -> list[dict]:
    for r in rows:
        if r["step"] > 0 and metric in r:
            r[metric] = f(r["step"])
    return rows


def add_series(rows: list[dict], metric: str, f) -> list[dict]:
    """``metric`` logged at every training step (a metric the healthy rows do not have)."""
    for r in rows:
        if r["step"] > 0:
            r[metric] = f(r["step"])
    return rows


def last_val(rows: list[dict], **values) -> list[dict]:
    next(r for r in reversed(rows) if "val/success" in r).update(values)
    return rows


#: (code, severity, the evidence's metric, how the healthy rows are changed to provoke it)
PROVOKED = [
    ("blind-policy", "high", "val/optimal_action_rate",
     lambda rows: last_val(rows, **{"val/optimal_action_rate": 0.27, "val/optimal_action_chance": 0.26})),
    ("blind-policy", "high", "val/distinct_first_answers",
     lambda rows: last_val(rows, **{"val/distinct_first_answers": 1.0})),
    ("template-collapse", "warning", "collapse_first_turn_sample/mi_estimate",
     lambda rows: with_series(rows, "collapse_first_turn_sample/mi_estimate", lambda s: 0.05)),
    ("zero-signal", "high", "rollout/frac_zero_std_groups",
     lambda rows: with_series(rows, "rollout/frac_zero_std_groups", lambda s: 0.25 if s < 6 else 0.9)),
    ("format-collapse", "high", "rollout/valid_format_rate",
     lambda rows: with_series(rows, "rollout/valid_format_rate", lambda s: ramp(s, 1.0, 0.5) + wobble(s, 0.02))),
    ("step-cost-farming", "high", "rollout/actions_per_turn",
     lambda rows: with_series(rows, "rollout/actions_per_turn", lambda s: ramp(s, 1.66, 1.06) + wobble(s, 0.05))),
    ("length-drift", "warning", "rollout/response_length_mean",
     lambda rows: with_series(rows, "rollout/response_length_mean", lambda s: ramp(s, 40, 120) + wobble(s, 3))),
    ("reward-without-success", "high", "reward/mean",
     lambda rows: with_series(rows, "reward/mean", lambda s: ramp(s, 1.0, 5.0) + wobble(s, 0.2))),
    ("reward-without-success", "high", "reward/shaped_mean",
     lambda rows: add_series(rows, "reward/shaped_mean", lambda s: ramp(s, 1.0, 5.0) + wobble(s, 0.2))),
    ("entropy-collapse", "warning", "actor/entropy",
     lambda rows: with_series(rows, "actor/entropy", lambda s: 0.5 if s <= 10 else 0.02)),
    ("kl-blowup", "high", "actor/ref_kl", lambda rows: with_series(rows, "actor/ref_kl", lambda s: ramp(s, 0.01, 2.0))),
    ("unstable-update", "high", "actor/skipped_updates",
     lambda rows: with_series(rows, "actor/skipped_updates", lambda s: 1.0 if s == 12 else 0.0)),
    ("unstable-update", "warning", "actor/grad_norm",
     lambda rows: with_series(rows, "actor/grad_norm", lambda s: 50.0 if s == 15 else 0.6 + wobble(s, 0.2))),
    ("no-learning", "warning", "paired/z", lambda rows: rows[:-1] + [rows[-1] | {"paired/z": 0.4}]),
    ("overfit-levels", "warning", "rollout/success",
     lambda rows: with_series(rows, "rollout/success", lambda s: ramp(s, 0.2, 0.8) + wobble(s, 0.05))),
]


def write_run(folder: Path, rows: list[dict], config: dict | None = None, **files: list[dict]) -> Path:
    """A run folder as ``ragen run`` lays it out: metrics.jsonl, config.yaml and any trajectory files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.yaml").write_text(yaml.safe_dump(config or {"env": {"name": "frozenlake"}}))
    for name, items in files.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return folder


def test_a_healthy_run_raises_nothing_and_every_rule_is_measured(tmp_path):
    d = dg.diagnose(write_run(tmp_path / "ok", healthy_rows()))
    assert d.findings == []
    assert {c.code: c.status for c in d.checks} == {code: dg.CLEAR for code in dg.CODES}


@pytest.mark.parametrize("code, severity, metric, provoke", PROVOKED,
                         ids=[f"{p[0]}-{p[2].split('/')[-1]}" for p in PROVOKED])
def test_each_finding_fires_with_its_evidence(tmp_path, code, severity, metric, provoke):
    d = dg.diagnose(write_run(tmp_path / "run", provoke(healthy_rows())))
    found = {f.code: f for f in d.findings}
    assert code in found, [c.to_json() for c in d.checks if c.code == code]
    f = found[code]
    assert f.severity == severity
    assert metric in [e.metric for e in f.evidence]
    ev = next(e for e in f.evidence if e.metric == metric)
    assert ev.values and ev.steps is not None and f.action == dg.RULE[code].action
    assert set(found) == {code}  # the other rules stay quiet: each provocation moves one metric


def test_thresholds_are_the_named_constants(tmp_path):
    rows = with_series(healthy_rows(), "rollout/frac_zero_std_groups", lambda s: 0.9)
    [f] = dg.diagnose(write_run(tmp_path / "z", rows)).findings
    assert f.evidence[0].threshold == dg.ZERO_SIGNAL_SHARE and f.evidence[0].values == (pytest.approx(0.9),)
    assert f.evidence[0].steps == (16, 30)  # the last half of the 30 steps
    rows = with_series(healthy_rows(), "rollout/frac_zero_std_groups", lambda s: dg.ZERO_SIGNAL_SHARE - 0.01)
    assert dg.diagnose(write_run(tmp_path / "just-below", rows)).findings == []


def test_few_judged_actions_do_not_make_a_reading_policy_blind(tmp_path):
    """A short run's 16 validation episodes put the main job's warm start (which reads: 45% optimal moves against 26%
    chance on 351 actions) at 35.0% against 26.8% on 100 actions: inside chance + 2 SE (35.6%), but more than
    CHANCE_MAX_GAP above chance, so not blind; 30% on the same 100 actions is."""
    def at(rate):
        return last_val(healthy_rows(), **{"val/optimal_action_rate": rate, "val/optimal_action_chance": 0.2675,
                                           "val/judged_actions": 100.0})

    assert dg.diagnose(write_run(tmp_path / "reads", at(0.35))).findings == []
    [f] = dg.diagnose(write_run(tmp_path / "blind", at(0.30))).findings
    assert f.code == "blind-policy" and f.evidence[0].threshold == pytest.approx(0.2675 + dg.CHANCE_MAX_GAP)


def test_a_score_normalised_per_group_is_no_rising_reward(tmp_path):
    """The reward-norm shaper makes each group's training scores mean 0: their logged mean is 0 up to rounding, a
    wobble of 1e-17 whose t can be anything. It is not a reward being earned."""
    rows = add_series(healthy_rows(), "reward/shaped_mean", lambda s: 1e-17 * s + wobble(s, 1e-18))
    assert dg.metric_trend(dg.RunData(tuple(rows)), "reward/shaped_mean").t >= dg.TREND_T
    assert dg.diagnose(write_run(tmp_path / "norm", rows)).findings == []


def test_zero_spread_on_solved_levels_is_information_not_an_alarm(tmp_path):
    rows = with_series(healthy_rows(), "rollout/frac_zero_std_groups", lambda s: 1.0)
    rows = with_series(rows, "rollout/success", lambda s: 1.0)
    [f] = dg.diagnose(write_run(tmp_path / "solved", rows)).findings
    assert (f.code, f.severity) == ("zero-signal", "info") and "training levels are solved" in f.summary
    assert [e.metric for e in f.evidence] == ["rollout/frac_zero_std_groups", "rollout/success"]


def test_an_old_run_folder_reads_not_measured_and_doctor_works_on_it(tmp_path):
    """A folder from before most diagnostics: only success and reward, three steps, no config or trajectories."""
    rows = [{"step": 0, "val/success": 0.1}] + [{"step": s, "rollout/success": 0.1, "reward/mean": 0.0}
                                                for s in (1, 2, 3)]
    run = tmp_path / "old"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "rollo')  # torn
    d = dg.diagnose(run)
    assert d.findings == [] and all(c.status == dg.NOT_MEASURED and c.note for c in d.checks)
    proc = subprocess.run(ragen_cmd("doctor", str(run)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no finding" in proc.stdout and "not measured: blind-policy, template-collapse" in proc.stdout
    assert "open-loop baseline: not measured (no config.yaml)" in proc.stdout


def test_doctor_json_and_one_line_errors(tmp_path):
    run = write_run(tmp_path / "z", with_series(healthy_rows(), "rollout/frac_zero_std_groups", lambda s: 1.0))
    proc = subprocess.run(ragen_cmd("doctor", str(run), "--json", "--no-open-loop"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [f["code"] for f in data["findings"]] == ["zero-signal"]
    assert data["findings"][0]["metric"] == "rollout/frac_zero_std_groups" and data["open_loop"] is None
    assert {c["code"] for c in data["checks"]} == set(dg.CODES)
    text = subprocess.run(ragen_cmd("doctor", str(run), "--no-open-loop"), capture_output=True, text=True,
                          timeout=300).stdout
    assert "[high] zero-signal: 100% of groups had zero reward spread" in text and "try: " in text
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(ragen_cmd("doctor", str(empty)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"Error: {str(empty)!r} is not a run folder (no metrics.jsonl)"


def paired_rows(sequence: list[str], seeds: range, successes: dict[int, bool]) -> list[dict]:
    """paired_trajectories.jsonl rows of the greedy pass after RL: every level played with ``sequence``."""
    turns = [{"executed": sequence[i:i + 2]} for i in range(0, len(sequence), 2)]
    return [{"step": STEPS, "pass": "after", "env_name": "frozenlake", "seed": s, "split": "val", "rollout_index": 0,
             "success": successes[s], "turns": turns} for s in seeds]


def test_a_policy_its_own_blind_replay_matches_is_blind(tmp_path):
    """The policy's every episode is one sequence: its success is exactly that sequence's blind success, so it is
    not above the open-loop baseline (z 0), whatever its other metrics say."""
    from ragen.envs import openloop
    from ragen.plugins.components import make_env

    seq, seeds = ["Right", "Down", "Right", "Up"], range(123, 123 + 32)
    blind = openloop.replay(make_env, seq, [("frozenlake", s, "val", 0) for s in seeds])
    outcomes = {lv[1]: ok for lv, ok in blind.items()}
    rows = healthy_rows()
    rows[-1] |= {"paired/success_after": sum(outcomes.values()) / len(outcomes)}
    run = write_run(tmp_path / "blind", rows, paired_trajectories=paired_rows(seq, seeds, outcomes))
    d = dg.diagnose(run, open_loop=True, search_levels=8)
    [f] = d.findings
    assert f.code == "blind-policy" and f.severity == "warning"  # it reads by its optimal moves; only blind replay
    assert d.open_loop["z"] <= 0.0 and d.open_loop["levels"] == 32  # its own sequence, or a better blind one
    assert d.open_loop["blind"] >= d.open_loop["policy"] == sum(outcomes.values()) / 32
    # a policy that solves every level is above any blind sequence that does not
    all_ok = write_run(tmp_path / "reads", healthy_rows(),
                       paired_trajectories=paired_rows(seq, seeds, dict.fromkeys(seeds, True)))
    d = dg.diagnose(all_ok, open_loop=True, search_levels=8)
    assert d.findings == [] and d.open_loop["z"] >= dg.BLIND_Z
    assert "open-loop baseline: " in dg.format_diagnosis(d) and d.open_loop["policy"] == 1.0


def test_the_live_warning_fires_once_per_finding_and_not_before_three_steps():
    from structlog.testing import capture_logs

    rows = with_series(healthy_rows(), "rollout/frac_zero_std_groups", lambda s: 1.0)
    watch = dg.Watcher(rows[:1])
    with capture_logs() as logs:
        for r in rows[1:]:
            watch.warn(r["step"], {k: v for k, v in r.items() if k != "step"})
    warned = [e for e in logs if e["event"] == "diagnosis"]
    assert [(e["code"], e["step"]) for e in warned] == [("zero-signal", dg.LIVE_MIN_STEPS)]
    assert warned[0]["log_level"] == "warning" and "zero reward spread" in warned[0]["finding"]
    # a resumed run does not warn again about what its folder already showed
    again = dg.Watcher(rows)
    assert again(STEPS + 1, {k: v for k, v in rows[-1].items() if k != "step"}) == []


def test_summary_lines_and_the_reports_diagnosis_panel(tmp_path):
    rows = with_series(healthy_rows(), "rollout/valid_format_rate", lambda s: ramp(s, 1.0, 0.5))
    run = write_run(tmp_path / "fmt", rows)
    lines = dg.summary_lines(run)
    assert lines[0].startswith("  diagnosis: [high] format-collapse: valid-format turns fell from")
    assert lines[-1] == f"  details and what to try: ragen doctor {run}"
    assert dg.summary_lines(write_run(tmp_path / "ok", healthy_rows())) == []
    page = report.build_report([run], tmp_path / "r.html", decode=lambda ids: "").read_text()
    head = page[:page.index("<section id=curves>")]
    assert "<section id=diagnosis>" in head and "data-code='format-collapse'" in head
    assert "<a href='#curves' data-metric='rollout/valid_format_rate'>" in head  # drawn under Curves: linked there


def test_a_rising_reward_with_one_deep_dip_is_still_rising(tmp_path):
    """A farmed reward climbs with dips where the format breaks for a step: one dip doubles a third's spread and holds
    the thirds' t under TREND_T, but the rank trend over every step still reads the climb."""
    rows = add_series(healthy_rows(15), "reward/shaped_mean", lambda s: 1.0 + 0.5 * s - (6.0 if s == 11 else 0.0))
    tr = dg.metric_trend(dg.RunData(tuple(rows)), "reward/shaped_mean")
    assert tr.t < dg.TREND_T and tr.rank_z >= dg.RANK_Z
    [f] = dg.diagnose(write_run(tmp_path / "dip", rows)).findings
    assert f.code == "reward-without-success" and f.evidence[0].threshold == dg.RANK_Z
    flat = add_series(healthy_rows(15), "reward/shaped_mean", lambda s: 3.0 + wobble(s, 1.0) - (6.0 if s == 11 else 0))
    assert dg.metric_trend(dg.RunData(tuple(flat)), "reward/shaped_mean").rank_z < dg.RANK_Z
    assert dg.diagnose(write_run(tmp_path / "flat", flat)).findings == []


def test_rank_z_is_the_mann_kendall_statistic():
    assert dg.rank_z([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == pytest.approx((15 - 1) / (6 * 5 * 17 / 18) ** 0.5)
    assert dg.rank_z([3.0, 3.0, 3.0]) == 0.0 and dg.rank_z([1.0, 2.0, 2.0, 1.0]) == pytest.approx(0.0)
    assert dg.rank_z([6.0, 5.0, 4.0, 3.0, 2.0, 1.0]) == pytest.approx(-dg.rank_z([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))


DATA = Path(__file__).parent / "data"


def test_the_readme_main_job_raises_no_finding():
    """The README's main job (Sokoban GRPO from the warm start, 60 steps), from its own run folder: metrics.jsonl cut to
    the keys the rules read, and trajectories.jsonl cut to each turn's executed actions (docs/notes/
    2026-11-28-diagnosis.md). A run folder from before rollout/actions_per_turn: counted from the trajectories."""
    d = dg.diagnose(DATA / "main-job")
    assert d.findings == []
    status = {c.code: c.status for c in d.checks}
    assert [code for code, st in status.items() if st == dg.NOT_MEASURED] == ["template-collapse"]  # it does not think
    steps, per_turn = dg.actions_per_turn(dg.RunData((), DATA / "main-job"))
    assert len(steps) == 60 and 1.0 <= min(per_turn) and max(per_turn) <= 2.0


def test_rollouts_log_actions_per_turn():
    from ragen.contract.trajectory import Trajectory, TurnRecord
    from ragen.rollout.runner import rollout_metrics

    def traj(*executed):
        turns = [TurnRecord("r", "a", list(e), [], 0.0, 0.0, True, {}, False, (0, 1)) for e in executed]
        return Trajectory(env_name="toy", seed=1, group_id=0, rollout_index=0, split="train", policy_version=0,
                          input_ids=[1], loss_mask=[0], rollout_logprobs=[0.0], segments=[], turns=turns)

    m = rollout_metrics([traj(["Up", "Left"], []), traj(["Down"])])
    assert m["actions_per_turn"] == 1.0  # (2 + 0 + 1) actions over 3 turns


def test_docs_explain_every_finding():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "diagnosis.md").read_text()
    for rule in dg.RULES:
        assert f"### `{rule.code}`" in guide, rule.code


def test_a_real_model_run_that_got_worse_is_named():
    """SmolLM2-135M-Instruct on FrozenLake from a warm start that reads (79% greedy on 128 held-out levels), 20 GRPO
    steps at actor lr 5e-5 (docs/notes/2026-11-29-real-llm-reads.md), its metrics.jsonl as written: 75-100% of groups
    had no reward spread, and greedy success fell to 70% (z -2.4). Both are named, the fall as worse, not as noise."""
    d = dg.diagnose(DATA / "smollm2-frozenlake")
    found = {f.code: f for f in d.findings}
    assert found["zero-signal"].severity == "high"
    worse = found["no-learning"]
    assert worse.severity == "high" and "worse" in worse.summary and worse.action == dg.REGRESSION_ACTION
    assert worse.evidence[0].values[0] == pytest.approx(-2.4, abs=0.01)
    assert "blind-policy" not in found  # it reads its state: optimal moves far above chance


#: real short runs of the built-in `small` model from the cached Sokoban warm start, each provoking failures
#: (docs/notes/2026-11-29-diagnosis-real-runs.md has their commands); metrics.jsonl cut to the keys the rules read.
#: name -> (what `ragen doctor` finds at the end, and what the live warning fired replaying the rows step by step:
#: code -> (severity, or the step of its one live warning; the evidence's metric; its values))
REAL_RUNS = {
    # GRPO at actor lr 1e-3 (10x the default) without the success gate, 15 steps, log_ref_kl: the valid format fell
    # (1.0 -> 0.66 at step 5) and came back as one action per turn, success fell to 0 and the policy onto one answer
    "high-lr": (
        {"blind-policy": ("high", "val/distinct_first_answers", (1.0,)),
         "zero-signal": ("high", "rollout/frac_zero_std_groups", (0.75,)),
         "kl-blowup": ("high", "actor/ref_kl", (1.468,)),
         "no-learning": ("high", "paired/z", (-3.0, -0.2812, 0.09375)),
         "entropy-collapse": ("warning", "actor/entropy", (0.1368, 0.0634))},
        {"kl-blowup": (3, "actor/ppo_kl", (0.1321,)),
         "format-collapse": (6, "rollout/valid_format_rate", (0.9914, 0.7289)),
         "blind-policy": (15, "val/optimal_action_rate", (0.125, 0.2625)),
         "zero-signal": (15, "rollout/frac_zero_std_groups", (0.75,)),
         "entropy-collapse": (15, "actor/entropy", (0.1368, 0.0634))}),
    # the same at actor lr 3e-3, 12 steps: the format collapsed to no valid turn from step 7 (12-token answers)
    "lr-3e-3": (
        {"format-collapse": ("high", "rollout/valid_format_rate", (0.7004, 0.0)),
         "zero-signal": ("high", "rollout/frac_zero_std_groups", (1.0,)),
         "kl-blowup": ("high", "actor/ppo_kl", (0.6813,)),
         "unstable-update": ("warning", "actor/grad_norm", (0.3529, 3.811, 1.4416, 0.9905, 0.8653)),
         "no-learning": ("warning", "paired/z", (-1.7321, -0.1875, 0.1083))},
        {"kl-blowup": (3, "actor/ppo_kl", (0.6813,)),
         "format-collapse": (6, "rollout/valid_format_rate", (0.6908, 0.15)),
         "length-drift": (6, "rollout/response_length_mean", (40.4062, 20.1875)),
         "zero-signal": (7, "rollout/frac_zero_std_groups", (0.8333,)),
         "unstable-update": (9, "actor/grad_norm", (3.811,))}),
    # GRPO at actor lr 5e-4 without the gate, paid +1 per executed Up by a farmable test shaper
    # (tests/runs/farmed_reward_run.py): the policy ended on "Up Up" everywhere, success 16% -> 0%, while the shaped
    # reward climbed (a one-step dip at step 11 held the thirds' t at 1.5; the rank z over every step is 2.6); its
    # token entropy fell to 39% of its start
    "farmed-shaper": (
        {"blind-policy": ("high", "val/optimal_action_rate", (0.04, 0.25)),
         "reward-without-success": ("high", "reward/shaped_mean", (3.9787, 6.5269)),
         "no-learning": ("high", "paired/z", (-2.8284, -0.25, 0.0884)),
         "entropy-collapse": ("warning", "actor/entropy", (0.1196, 0.0463))},
        {"entropy-collapse": (14, "actor/entropy", (0.1231, 0.0538)),
         "blind-policy": (15, "val/optimal_action_rate", (0.04, 0.25)),
         "reward-without-success": (15, "reward/shaped_mean", (3.9787, 6.5269))}),
    # the main job's command with an empty warm-start cache at git acdfb0a: a warm start that came out blind (its
    # optimal moves below chance from step 0), 60 steps of RL that moved nothing
    "blind-warm-start": (
        {"blind-policy": ("high", "val/optimal_action_rate", (0.198, 0.2878)),
         "no-learning": ("warning", "paired/z", (0.378, 0.0078, 0.0207))},
        {"blind-policy": (3, "val/optimal_action_rate", (0.2295, 0.283)),
         # training success follows the level schedule (the note): a warning that is gone by the end (this folder
         # has no config.yaml; with rollout.train_levels 0 known the rule stays clear: see the test below)
         "overfit-levels": (23, "rollout/success", (0.1161, 0.3304))}),
    # the main job with success_gate=never (RAGEN's behaviour): GRPO farms the step cost in all-fail groups
    "farming-gate-never": (
        {},
        {"step-cost-farming": (14, "rollout/actions_per_turn", (1.7549, 1.3021))}),
    # not `small` on Sokoban: the built-in `tiny` model on FrozenLake, which reasons in <think> (so the collapse
    # metrics run), warm-started for one epoch instead of 24 (`warmstart.epochs=1`, 8 GRPO steps, collapse.compute_freq
    # 2): its reasoning has the demos' shape ("The player is at ... the goal is at ...") but not their content, so it
    # varies as much after one board as after another: first-turn MI 0.1-1% of log N while H(Z|X) stays above 0.5
    # nats per token; no valid answer, so every group is all-fail
    "under-trained-think": (
        {"template-collapse": ("warning", "collapse_first_turn_sample/mi_estimate", (0.0013,)),
         "zero-signal": ("high", "rollout/frac_zero_std_groups", (1.0,)),
         "unstable-update": ("warning", "actor/grad_norm", (0.2756,))},
        {"zero-signal": (3, "rollout/frac_zero_std_groups", (1.0,)),
         "template-collapse": (3, "collapse_first_turn_sample/conditional_entropy_est", (0.5281,)),
         "unstable-update": (6, "actor/grad_norm", (0.2756,))}),
    # GRPO on 8 fixed training levels (rollout.train_levels=8, 8 groups a step: every level every step) at actor lr
    # 3e-4, 36 steps, 64 held-out validation levels every 6 steps: success on the training levels rose 37% -> 59%
    # while held-out success fell 34% -> 23% (greedy on 64 held-out levels 31% -> 22%, z -1.6), and the token
    # entropy fell to 31% of its start as the policy settled on its answers to those levels
    "levels8": (
        {"overfit-levels": ("warning", "rollout/success", (0.3737, 0.5885)),
         "entropy-collapse": ("warning", "actor/entropy", (0.0966, 0.0298)),
         "no-learning": ("warning", "paired/z", (-1.6036, -0.0938, 0.0585))},
        {"overfit-levels": (12, "rollout/success", (0.3281, 0.4375)),
         "entropy-collapse": (13, "actor/entropy", (0.1214, 0.0586))}),
}


def assert_evidence(f: dg.Finding, metric: str, values: tuple) -> None:
    assert f.action and metric in [e.metric for e in f.evidence], f.to_json()
    assert next(e for e in f.evidence if e.metric == metric).values == pytest.approx(values, abs=1e-3)


@pytest.mark.parametrize("name", REAL_RUNS)
def test_a_real_run_is_diagnosed_with_its_evidence(name):
    expected, _ = REAL_RUNS[name]
    d = dg.diagnose(DATA / name)
    found = {f.code: f for f in d.findings}
    for code, (severity, metric, values) in expected.items():
        assert code in found, [c.to_json() for c in d.checks if c.code == code]
        assert found[code].severity == severity
        assert_evidence(found[code], metric, values)
    assert {c for c, f in found.items() if f.severity == "high"} <= set(expected)  # no other alarm


def test_a_real_overfit_run_shows_its_held_out_levels():
    """The 8-level run (REAL_RUNS["levels8"]): beside the training rise, the evidence holds the first and last
    validation on the 64 held-out levels and the line a rise had to clear: one binomial SE of their difference."""
    [f] = [f for f in dg.diagnose(DATA / "levels8").findings if f.code == "overfit-levels"]
    train, held = f.evidence
    assert train.metric == "rollout/success" and train.threshold == dg.OVERFIT_TRAIN_RISE
    assert held.metric == "val/success" and held.steps == (0, 36)
    assert held.values == pytest.approx((22 / 64, 15 / 64))
    p = (22 + 15) / 128
    assert held.threshold == pytest.approx(dg.FLAT_SE * (2 * p * (1 - p) / 64) ** 0.5)
    assert held.values[1] - held.values[0] < held.threshold


@pytest.mark.parametrize("name", REAL_RUNS)
def test_a_real_runs_live_warnings_fire_once_at_their_step(name):
    """The rows replayed through the live watcher as the training loop feeds it: each finding warned once, at the step
    it first showed (the high-lr run's format collapse, 99% -> 73% valid turns by step 6, warned there though the format
    came back by the end), with its evidence."""
    from structlog.testing import capture_logs

    from ragen.runs import plot

    _, live = REAL_RUNS[name]
    rows = plot.read_jsonl(DATA / name / "metrics.jsonl")
    watch, fired = dg.Watcher(rows[:1]), {}
    for r in rows[1:]:
        fired |= {f.code: (r["step"], f) for f in watch(r["step"], {k: v for k, v in r.items() if k != "step"})}
    assert {code: step for code, (step, _) in fired.items()} == {code: spec[0] for code, spec in live.items()}
    for code, (_, metric, values) in live.items():
        assert_evidence(fired[code][1], metric, values)
    watch = dg.Watcher(rows[:1])  # the loop's hook: one warning line per finding
    with capture_logs() as logs:
        for r in rows[1:]:
            watch.warn(r["step"], {k: v for k, v in r.items() if k != "step"})
    assert sorted((e["code"], e["step"]) for e in logs if e["event"] == "diagnosis") == sorted(
        (code, spec[0]) for code, spec in live.items())


#: the learning benchmark's stored results (bench/learning.py, full mode, 2026-11-27): one summary per run, no per-step
#: rows; the runs users see in docs/benchmarks.md
LEARNING = Path(__file__).resolve().parents[2] / "bench" / "results" / "learning.json"


def benchmark_rows(run: dict) -> list[dict]:
    """The rows `ragen doctor` reads that a stored benchmark summary holds: the validation curve (its episodes, the
    first answers and optimal moves before and after RL) and the greedy before/after comparison at the end. No
    training rows: the trend rules read "not measured" on them, and without the judged-action count the optimal-move
    half of blind-policy does too."""
    rows = [{"step": s, "val/success": v, "val/num_trajectories": run["val_episodes"]} for s, v in run["curve"]]
    for row, when in ((rows[0], "before"), (rows[-1], "after")):
        row |= {f"val/{k}": run["val_state"][f"{when}_{k}"] for k in ("optimal_action_rate", "optimal_action_chance",
                                                                        "distinct_first_answers")
                if run["val_state"][f"{when}_{k}"] is not None}
    rows[-1] |= {f"paired/{k}": run["paired"][k] for k in ("z", "change", "se", "levels")}
    return rows


@pytest.mark.parametrize("env", ["frozenlake", "sokoban"])
def test_the_learning_benchmarks_runs_raise_no_high_finding(tmp_path, env):
    """Each stored frozenlake / sokoban run of the learning benchmark (4 arms x 3 seeds), as a run folder of the rows
    its summary holds: no high-severity finding (a paired z down to -1.2 is a no-learning warning, not an alarm), and
    the rules those rows can show are measured."""
    runs = [r for r in json.loads(LEARNING.read_text())["runs"] if r["env"] == env]
    assert len(runs) == 12
    for run in runs:
        d = dg.diagnose(write_run(tmp_path / f"{run['arm']}-{run['seed']}", benchmark_rows(run),
                                  {"env": {"name": env}}))
        status = {c.code: c.status for c in d.checks}
        assert status["blind-policy"] == dg.CLEAR and status["no-learning"] != dg.NOT_MEASURED, status
        assert [f.to_json() for f in d.findings if f.severity == "high"] == [], (run["arm"], run["seed"])


def test_the_bandit_runs_that_got_worse_greedy_and_only_they_raise_no_learning_high(tmp_path):
    """The learning benchmark's 9 bandit runs: sampled validation success rose in every one, greedy success fell beyond
    noise in three (paired z -3.1 to -3.9). The greedy paired comparison is the verdict (docs/diagnosis.md
    "no-learning"), so those three raise `no-learning` high, nothing else is high, and the other six raise nothing
    high."""
    runs = [r for r in json.loads(LEARNING.read_text())["runs"] if r["env"] == "bandit"]
    assert len(runs) == 9 and all(r["curve"][-1][1] > r["curve"][0][1] for r in runs)
    flagged = set()
    for run in runs:
        d = dg.diagnose(write_run(tmp_path / f"{run['arm']}-{run['seed']}", benchmark_rows(run),
                                  {"env": {"name": "bandit"}}))
        high = [f for f in d.findings if f.severity == "high"]
        if run["paired"]["z"] <= dg.REGRESSION_Z:
            assert [f.code for f in high] == ["no-learning"], (run["arm"], run["seed"], high)
            assert high[0].evidence[0].values[0] == pytest.approx(run["paired"]["z"])
            flagged.add((run["arm"], run["seed"]))
        else:
            assert high == [], (run["arm"], run["seed"], high)
    assert flagged == {("grpo", 1), ("ppo", 2), ("starpo-s", 0)}


def test_overfit_levels_needs_repeated_training_levels(tmp_path):
    """With rollout.train_levels 0 every group plays a level it never trained on, so training success is itself
    held out: the README main job's training success rose 20% -> 54% by step 20 with the level schedule (steps whose
    levels are easy) while validation had not moved, and the live check warned `overfit-levels` there. From the run's
    config.yaml (or the live run's config) the rule now knows; the 8-level run still fires, live and at the end."""
    from ragen.runs import plot

    def replay(folder: Path, rows: list[dict], train_levels=None) -> dict:
        watch, fired = dg.Watcher.for_run(folder, train_levels), {}
        for r in rows[1:]:
            fired |= {f.code: r["step"] for f in watch(r["step"], {k: v for k, v in r.items() if k != "step"})}
        return fired

    main_rows = plot.read_jsonl(DATA / "main-job" / "metrics.jsonl")
    assert replay(write_run(tmp_path / "unknown", main_rows[:1]), main_rows) == {"overfit-levels": 20}  # no config
    fresh = write_run(tmp_path / "fresh", main_rows[:1], {"env": {"name": "sokoban"}, "rollout": {"train_levels": 0}})
    assert dg.configured_train_levels(fresh) == 0
    assert replay(fresh, main_rows) == {}
    assert replay(write_run(tmp_path / "given", main_rows[:1]), main_rows, train_levels=0) == {}  # the loop passes it
    to_20 = [r for r in main_rows if r["step"] <= 20]  # the report's path: rows and the run folder
    assert "overfit-levels" in {f.code for f in dg.diagnose_rows(to_20, tmp_path / "unknown", live=True).findings}
    assert "overfit-levels" not in {f.code for f in dg.diagnose_rows(to_20, fresh, live=True).findings}

    rows = plot.read_jsonl(DATA / "levels8" / "metrics.jsonl")
    fixed = write_run(tmp_path / "levels8", rows, {"env": {"name": "sokoban"}, "rollout": {"train_levels": 8}})
    assert "overfit-levels" in {f.code for f in dg.diagnose(fixed).findings}
    assert replay(write_run(tmp_path / "levels8-live", rows[:1], {"rollout": {"train_levels": 8}}), rows)[
        "overfit-levels"] == 12
    (fixed / "config.yaml").write_text("rollout: [not, a, mapping]\n")
    assert dg.configured_train_levels(fixed) is None  # unreadable: not known, the rule runs as before
