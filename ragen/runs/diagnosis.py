"""What is wrong with a run, in words: rules over the metrics a run already writes (``metrics.jsonl``, its trajectory
files), each naming a failure mode with its evidence and the action that usually helps (``ragen doctor``, the live
warning, the run summary's last lines and the report's "Diagnosis" panel; docs/diagnosis.md is the guide).

Each rule answers for one stable ``code``: found (a ``Finding``: severity, evidence with metric names, steps, values
and thresholds, and the action), clear, or "not measured" when the run did not log what the rule reads (an older run
folder, a disabled diagnostic, too few steps): missing metrics are never an error. Thresholds are the named constants
below, each with the reason for its value.

Trends compare the mean of a metric's first third of training steps with its last third (at least
``TREND_MIN_STEPS`` steps), with a Welch t statistic, so a step-to-step wobble of a noisy training metric (a batch of
a few groups) does not read as a trend.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from ragen.errors import RagenError
from ragen.runs import plot

SEVERITIES = ("info", "warning", "high")
FOUND, CLEAR, NOT_MEASURED = "found", "clear", "not measured"

# ---- thresholds ------------------------------------------------------------------------------------------------------
#: a trend needs this many training steps: with fewer, the first and last thirds hold one or two noisy batches each
TREND_MIN_STEPS = 6
#: |Welch t| of the last third against the first at or above this is a trend: about p 0.01 for windows of 10 steps,
#: and above what the main job's noisiest curve (training success of 4 groups x 8) reaches between its thirds
TREND_T = 3.0
#: a rank trend (the Mann-Kendall z over every step, ``Trend.rank_z``) at or above this is a rise: one-sided p 0.01 for
#: independent steps. The thirds' t reads a farmed reward wrong: a shaped reward climbs with dips wherever the format
#: breaks for a step, and one dip in a third of five steps doubles that third's spread (a real farmed shaper: t 1.5
#: while 10 of its 15 steps climbed, rank z 2.6; docs/notes/2026-11-29-diagnosis-real-runs.md). Ranks count each
#: step once, so one low step weighs as one pair-order among many, whatever its size
RANK_Z = 2.33
#: success "rises" when its t reaches this (weaker than TREND_T on purpose: a metric that drifts while success rises
#: even a little is learning, not farming)
SUCCESS_RISE_T = 2.0
#: two binomial standard errors: a rate within this many SEs of its chance level is "at chance" (p ~ 0.05)
CHANCE_SE = 2.0
#: ... but never more than this above chance: with few judged actions two SEs grow past the gap of a policy that reads
#: (a short run's 16 validation episodes put the main job's warm start, 45% against 26% chance on 351 actions, at 35.0%
#: against 26.8% on 100 actions, inside chance + 2 SE = 35.6%); blind warm starts sit at or below chance, reading ones
#: 10-19 points above it (docs/models.md)
CHANCE_MAX_GAP = 0.05
#: judged actions below this make the optimal-move rate too noisy to call a policy blind (the SE of a rate near 25%
#: is then above 8 points)
MIN_JUDGED_ACTIONS = 30
#: one first answer over at least this many validation episodes: at the validation temperature a policy that reads the
#: state answers differently on different levels (the main job's warm start: 12-16 distinct first answers on 64)
ONE_ANSWER_MIN_EPISODES = 8
#: the paired z of the policy's success against a blind replay on the same levels below this: not above the open-loop
#: baseline (the same two-sided 5% line as the before/after comparison, ragen/runs/paired.py)
BLIND_Z = 2.0
#: the share of a step's groups with zero reward spread at or above this, on average over the last half of the run: most
#: groups give every member the same advantage (0 after normalisation), so the update carries almost nothing (SmolLM2
#: on Sokoban sat at 75-100% from step 6 and never moved)
ZERO_SIGNAL_SHARE = 0.75
#: training success at or above this over the same steps makes zero spread a solved task (every member succeeds), not
#: a stuck one: reported as info
ZERO_SIGNAL_SOLVED = 0.9
#: the valid-format rate falling by this much (absolute, first third to last third): one turn in five lost to bad format
#: is a collapse, not noise (the main job's steps dip to 0.66 alone, but its thirds stay within 0.05 of each other)
FORMAT_DROP = 0.2
#: actions per turn falling by this share while success does not rise: the policy is spending fewer actions to pay less
#: step cost (GRPO in all-fail Sokoban groups went from 1.66 to 1.06 actions per turn)
ACTIONS_DROP = 0.25
#: the response length moving by this share (either way) while success does not rise
LENGTH_DRIFT = 0.5
#: a reward "rises" only by more than this share of its start (at least of 1): a score normalised per group (the
#: reward-norm shaper) has a mean of 0 up to rounding, whose 1e-17 wobble can have any t
REWARD_MIN_CHANGE = 1e-6
#: the entropy's last third below this share of its first third: the policy samples almost one answer, so exploration
#: and group spread go with it. Half, not less: the per-token entropy of a real collapsed policy keeps a floor (format
#: tokens, the levels it never solves). Real runs of the `small` model that ended on one first answer on 16 of 16
#: levels kept 39% (a farmed shaper) and 46% (lr 1e-3) of their start, one memorising 8 levels 31%; the README's main
#: job keeps 79%, SmolLM2 on FrozenLake 74% (docs/notes/2026-11-29-diagnosis-real-runs.md)
ENTROPY_FRACTION = 0.5
#: KL to the reference above this (nats per token): the policy moved far from where it started, usually before it
#: degenerates (healthy GRPO/PPO runs stay below 0.1)
REF_KL_MAX = 1.0
#: one update's approximate KL (actor/ppo_kl) above this: the step left the trust region the ratio clip assumes (about
#: ten times a usual target KL; the main job's largest is 0.025)
PPO_KL_MAX = 0.1
#: a gradient norm above this many times the run's median norm is a spike (the main job's largest is 3.4 times)
GRAD_SPIKE_FACTOR = 10.0
#: the paired z at the end below this: the change RL made is within noise of none (paired.Z_THRESHOLD is the line for
#: "better than noise"; below 1 there is not even a hint)
NO_LEARNING_Z = 1.0
#: ... and at or below this (a paired decrease beyond noise) the run made its policy worse: a high-severity finding,
#: not "no change" (SmolLM2 on FrozenLake, 79% -> 70% at z -2.4, mostly from updates of zero-spread groups)
REGRESSION_Z = -2.0
#: training success rising by this much (absolute, with a trend) while held-out success does not: the run is learning
#: its training levels, not the task
OVERFIT_TRAIN_RISE = 0.1
#: held-out success rising by less than this many standard errors from the first validation to the last: flat (a fall
#: counts too: a real 8-level run rose 37% -> 59% on its training levels while held-out fell 34% -> 23%, SE 8)
FLAT_SE = 1.0
#: V2 template collapse without configured thresholds: MI below this share of its upper bound log N (the reasoning
#: barely tells the prompts apart) while H(Z|X) per token stays above TEMPLATE_MIN_H (varied text, not one sentence)
TEMPLATE_MI_FRACTION = 0.1
TEMPLATE_MIN_H = 0.5
#: the live warning looks only after this many steps: the first steps of a run are too few for any trend and a cold
#: start's first batch is often all-fail
LIVE_MIN_STEPS = 3
#: past this many steps the live check runs every LIVE_EVERY steps: each check reads every row so far, and a trend
#: over hundreds of steps does not turn in one
LIVE_EVERY_AFTER, LIVE_EVERY = 100, 10
#: training levels the exhaustive fixed-sequence search chooses its sequence on (seeds from the training base), enough
#: for its success to be within a few points of the truth
OPEN_LOOP_TRAIN_LEVELS = 256


# ---- records ---------------------------------------------------------------------------------------------------------


@attrs.frozen
class Evidence:
    """One measurement behind a finding: a metric, the steps it was read at, the values and the threshold used."""

    metric: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    threshold: float | None = None
    note: str = ""

    def to_json(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class Finding:
    """A failure mode a rule found: its code, severity, what was seen (one line with the numbers), the evidence and
    the action that usually helps."""

    code: str
    severity: str = attrs.field(validator=attrs.validators.in_(SEVERITIES))
    summary: str
    evidence: tuple[Evidence, ...]
    action: str

    @property
    def metric(self) -> str:
        """The curve to look at (the report links the finding to it)."""
        return self.evidence[0].metric if self.evidence else ""

    def to_json(self) -> dict:
        return {"code": self.code, "severity": self.severity, "summary": self.summary, "action": self.action,
                "metric": self.metric, "evidence": [e.to_json() for e in self.evidence]}


@attrs.frozen
class Check:
    """A rule's answer for one run: ``found`` (with its finding), ``clear`` or ``not measured`` (with why)."""

    code: str
    status: str
    finding: Finding | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {"code": self.code, "status": self.status, "note": self.note,
                **({"finding": self.finding.to_json()} if self.finding else {})}


@attrs.frozen
class Diagnosis:
    """Every rule's check of one run."""

    run_dir: str
    checks: tuple[Check, ...]
    open_loop: dict | None = None  #: the blind baseline ``ragen doctor`` measured (``open_loop_baseline``)

    @property
    def findings(self) -> list[Finding]:
        """The findings, most severe first (rule order within a severity)."""
        found = [c.finding for c in self.checks if c.finding is not None]
        return sorted(found, key=lambda f: -SEVERITIES.index(f.severity))

    def to_json(self) -> dict:
        return {"run_dir": self.run_dir, "findings": [f.to_json() for f in self.findings],
                "checks": [c.to_json() for c in self.checks], "open_loop": self.open_loop}


@attrs.frozen
class RunData:
    """What the rules read: the ``metrics.jsonl`` rows, and (``ragen doctor``, the summary) the run folder for the
    trajectory files; ``open_loop``: replay blind baselines in the env (``ragen doctor`` only: it plays episodes)."""

    rows: tuple[dict, ...]
    run_dir: Path | None = None
    open_loop: bool = False
    search_levels: int = 0  #: training levels the exhaustive fixed-sequence search uses (0: no search)
    #: the run's ``rollout.train_levels`` (config.yaml or the live run's config); None: not known (a folder without it)
    train_levels: int | None = None
    cache: dict = attrs.field(factory=dict, eq=False)

    def jsonl(self, name: str) -> list[dict]:
        if self.run_dir is None:
            return []
        if name not in self.cache:
            self.cache[name] = plot.read_jsonl(self.run_dir / name)
        return self.cache[name]


@attrs.frozen
class Rule:
    """One diagnosis: its code, default severity, what it means, how it looks, the action, and the check."""

    code: str
    severity: str
    title: str
    action: str
    check: Callable[[RunData], Check]
    live: bool = True  #: checked during a run (False: it needs the run's end, or plays episodes)


# ---- reading metrics -------------------------------------------------------------------------------------------------


def _train_rows(data: RunData) -> list[dict]:
    return [r for r in data.rows if r.get("step", 0) > 0]


def _series(rows: Iterable[dict], metric: str) -> tuple[list[int], list[float]]:
    return plot.series(list(rows), metric)


@attrs.frozen
class Trend:
    """A metric's first third against its last third of training steps."""

    metric: str
    steps: tuple[int, int, int, int]  #: first and last step of the first third, then of the last third
    start: float
    end: float
    t: float
    values: tuple[float, ...] = attrs.field(default=(), repr=False)  #: every step's value, for the rank trend

    @functools.cached_property
    def rank_z(self) -> float:
        """The Mann-Kendall z of the whole series (``rank_z``), computed when a rule first asks and kept: its pairs
        grow with the square of the steps, only the rising-reward rule reads it, and it reads it up to four times
        (the live diagnosis runs at every step)."""
        return rank_z(self.values)

    @property
    def change(self) -> float:
        return self.end - self.start

    @property
    def relative(self) -> float:
        return self.change / abs(self.start) if self.start else (math.inf if self.change else 0.0)

    def evidence(self, threshold: float | None = None, note: str = "") -> Evidence:
        return Evidence(self.metric, self.steps, (self.start, self.end), threshold,
                        note or f"mean of steps {self.steps[0]}-{self.steps[1]} -> {self.steps[2]}-{self.steps[3]}")


def _mean_var(xs: Sequence[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0)


def rank_z(values: Sequence[float]) -> float:
    """The Mann-Kendall trend statistic: S = the number of later-greater pairs minus later-smaller ones, over its
    standard deviation without a trend (ties corrected), with the usual continuity correction; about N(0, 1) for
    independent values."""
    n = len(values)
    s = sum((b > a) - (b < a) for i, a in enumerate(values) for b in values[i + 1:])
    ties = Counter(values).values()
    var = (n * (n - 1) * (2 * n + 5) - sum(k * (k - 1) * (2 * k + 5) for k in ties)) / 18
    if var <= 0 or s == 0:
        return 0.0
    return (s - math.copysign(1, s)) / math.sqrt(var)


def trend(steps: Sequence[int], values: Sequence[float], metric: str) -> Trend | None:
    """The trend of one series, None with fewer than ``TREND_MIN_STEPS`` points."""
    if len(values) < TREND_MIN_STEPS:
        return None
    w = len(values) // 3
    a, b = values[:w], values[-w:]
    (ma, va), (mb, vb) = _mean_var(a), _mean_var(b)
    se = math.sqrt(va / len(a) + vb / len(b))
    t = (mb - ma) / se if se > 0 else (0.0 if mb == ma else math.copysign(math.inf, mb - ma))
    return Trend(metric, (steps[0], steps[w - 1], steps[-w], steps[-1]), ma, mb, t, tuple(values))


def metric_trend(data: RunData, metric: str) -> Trend | None:
    return trend(*_series(_train_rows(data), metric), metric)


def _success_trend(data: RunData) -> Trend | None:
    return metric_trend(data, "rollout/success")


def _success_rises(success: Trend | None) -> bool:
    return success is not None and success.t >= SUCCESS_RISE_T


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _not_measured(code: str, *metrics: str, why: str = "") -> Check:
    return Check(code, NOT_MEASURED, note=why or f"not logged: {', '.join(metrics)}")


def _last(rows: Sequence[dict], *keys: str) -> dict | None:
    """The last row holding every key (with a finite number)."""
    for r in reversed(rows):
        if all(isinstance(r.get(k), (int, float)) and math.isfinite(r[k]) for k in keys):
            return r
    return None


# ---- the rules -------------------------------------------------------------------------------------------------------

BLIND = "blind-policy"


def check_blind(data: RunData) -> Check:
    """Optimal moves within noise of chance, one first answer on every level, or success not above a blind replay."""
    rule, ev, parts, severity = RULE[BLIND], [], [], None
    val = _last(data.rows, "val/optimal_action_rate", "val/optimal_action_chance", "val/judged_actions")
    measured = False
    if val is not None and val["val/judged_actions"] >= MIN_JUDGED_ACTIONS:
        measured = True
        rate, chance, n = val["val/optimal_action_rate"], val["val/optimal_action_chance"], val["val/judged_actions"]
        line = chance + min(CHANCE_SE * math.sqrt(chance * (1 - chance) / n), CHANCE_MAX_GAP)
        if rate <= line:
            severity = "high"
            parts.append(f"optimal moves {_pct(rate)} vs chance {_pct(chance)} ({int(n)} judged actions)")
            ev.append(Evidence("val/optimal_action_rate", (val["step"],), (rate, chance), line,
                               f"at or below chance + {CHANCE_SE:g} SE, at most + {CHANCE_MAX_GAP:g}"))
    one = _last(data.rows, "val/distinct_first_answers", "val/num_trajectories")
    if one is not None and one["val/num_trajectories"] >= ONE_ANSWER_MIN_EPISODES:
        measured = True
        if one["val/distinct_first_answers"] == 1:  # 0: no parsed first answer at all, a format problem
            severity = "high"
            parts.append(f"one first answer on all {int(one['val/num_trajectories'])} validation episodes")
            ev.append(Evidence("val/distinct_first_answers", (one["step"],), (one["val/distinct_first_answers"],), 1.0,
                               "the same first answer on every level"))
    if data.open_loop:
        base = open_loop_baseline(data)
        if base.get("z") is not None:
            measured = True
            if base["z"] < BLIND_Z:
                severity = severity or "warning"
                parts.append(f"success {_pct(base['policy'])} not above a blind replay of "
                             f"{' '.join(base['sequence'])!r}: {_pct(base['blind'])} on the same "
                             f"{base['levels']} levels (z {base['z']:.1f})")
                ev.append(Evidence(base["metric"], (), (base["policy"], base["blind"]), BLIND_Z,
                                   f"paired z {base['z']:.2f} against the best blind sequence ({base['source']})"))
    if not measured:
        return _not_measured(BLIND, "val/optimal_action_rate", "val/distinct_first_answers",
                             why="no judged actions, first answers or blind replay (the env's expert cannot judge "
                                 "moves, or too few validation episodes)")
    if severity is None:
        return Check(BLIND, CLEAR)
    return Check(BLIND, FOUND, Finding(BLIND, severity, "the policy does not read its state: " + "; ".join(parts),
                                       tuple(ev), rule.action))


TEMPLATE = "template-collapse"


def check_template(data: RunData) -> Check:
    schemes = sorted({k.split("/")[0] for r in data.rows for k in r
                      if k.startswith("collapse_") and k.endswith("/mi_estimate")})
    if not schemes:
        return _not_measured(TEMPLATE, "collapse_*/mi_estimate", why="no collapse metrics (collapse.enabled false, "
                                                                   "or the parser does not think)")
    regime = _last(data.rows, "collapse/regime")
    if regime is not None:
        if int(regime["collapse/regime"]) == 2:
            return Check(TEMPLATE, FOUND, Finding(
                TEMPLATE, "warning", f"template collapse at step {regime['step']} (collapse/regime, with the run's "
                "collapse.h_threshold and i_threshold)",
                (Evidence("collapse/regime", (regime["step"],), (2.0,), None, "2 = template collapse"),),
                RULE[TEMPLATE].action))
        return Check(TEMPLATE, CLEAR)
    for s in schemes:
        mi, h, bound = f"{s}/mi_estimate", f"{s}/conditional_entropy_est", f"{s}/mi_upper_bound"
        row = _last(data.rows, mi, h)
        if row is None:
            continue
        top = row.get(bound) or 0.0
        if top > 0 and row[mi] <= TEMPLATE_MI_FRACTION * top and row[h] >= TEMPLATE_MIN_H:
            return Check(TEMPLATE, FOUND, Finding(
                TEMPLATE, "warning", f"{s}: MI {row[mi]:.3f} nats, {100 * row[mi] / top:.0f}% of its bound log N = "
                f"{top:.2f}, while H(Z|X) is {row[h]:.2f} nats per token: varied reasoning that ignores the prompt",
                (Evidence(mi, (row["step"],), (row[mi],), TEMPLATE_MI_FRACTION * top, "MI at most 10% of log N"),
                 Evidence(h, (row["step"],), (row[h],), TEMPLATE_MIN_H, "H(Z|X) still high")),
                RULE[TEMPLATE].action))
    return Check(TEMPLATE, CLEAR)


ZERO = "zero-signal"


def check_zero_signal(data: RunData) -> Check:
    steps, shares = _series(_train_rows(data), "rollout/frac_zero_std_groups")
    if not steps:
        return _not_measured(ZERO, "rollout/frac_zero_std_groups")
    half = max(1, len(shares) // 2)
    mean = sum(shares[-half:]) / half
    if mean < ZERO_SIGNAL_SHARE:
        return Check(ZERO, CLEAR)
    ev = [Evidence("rollout/frac_zero_std_groups", (steps[-half], steps[-1]), (mean,), ZERO_SIGNAL_SHARE,
                   "mean over the last half of the steps")]
    s_steps, success = _series([r for r in _train_rows(data) if r["step"] >= steps[-half]], "rollout/success")
    solved = sum(success) / len(success) if success else None
    what = f"{100 * mean:.0f}% of groups had zero reward spread over steps {steps[-half]}-{steps[-1]}"
    if solved is not None and solved >= ZERO_SIGNAL_SOLVED:  # every member succeeds: saturated, not stuck
        ev.append(Evidence("rollout/success", (s_steps[0], s_steps[-1]), (solved,), ZERO_SIGNAL_SOLVED, "mean"))
        return Check(ZERO, FOUND, Finding(
            ZERO, "info", f"{what}, with {_pct(solved)} training success: the training levels are solved, so there "
            "is little left to learn from them", tuple(ev), "Train on harder or more levels (rollout.train_levels), or "
            "stop: further steps change little."))
    return Check(ZERO, FOUND, Finding(
        ZERO, "high", f"{what}: their advantages are 0, so the updates carry almost no signal", tuple(ev),
        RULE[ZERO].action))


FORMAT = "format-collapse"


def check_format(data: RunData) -> Check:
    tr = metric_trend(data, "rollout/valid_format_rate")
    if tr is None:
        return _not_measured(FORMAT, "rollout/valid_format_rate", why=f"fewer than {TREND_MIN_STEPS} steps with "
                                                                       "rollout/valid_format_rate")
    if -tr.change < FORMAT_DROP:
        return Check(FORMAT, CLEAR)
    return Check(FORMAT, FOUND, Finding(
        FORMAT, "high", f"valid-format turns fell from {_pct(tr.start)} to {_pct(tr.end)}",
        (tr.evidence(FORMAT_DROP),), RULE[FORMAT].action))


def actions_per_turn(data: RunData) -> tuple[list[int], list[float]]:
    """``rollout/actions_per_turn`` per step, or (a run folder written before that metric) the executed actions per
    turn of the training trajectories in ``trajectories.jsonl``."""
    steps, values = _series(_train_rows(data), "rollout/actions_per_turn")
    if steps:
        return steps, values
    per_step: dict[int, list[int]] = {}
    for t in data.jsonl("trajectories.jsonl"):
        if t.get("split", "train") == "train":
            counts = [len(x.get("executed", [])) for x in t.get("turns", [])]
            per_step.setdefault(int(t.get("step", 0)), []).extend(counts)
    pts = sorted((s, sum(v) / len(v)) for s, v in per_step.items() if v)
    return [s for s, _ in pts], [v for _, v in pts]


FARMING = "step-cost-farming"


def check_farming(data: RunData) -> Check:
    tr = trend(*actions_per_turn(data), "rollout/actions_per_turn")
    if tr is None:
        return _not_measured(FARMING, "rollout/actions_per_turn",
                             why=f"fewer than {TREND_MIN_STEPS} steps with actions per turn")
    success = _success_trend(data)
    if not (tr.relative <= -ACTIONS_DROP and tr.t <= -TREND_T) or _success_rises(success):
        return Check(FARMING, CLEAR)
    ev = [tr.evidence(-ACTIONS_DROP, f"{tr.evidence().note}; relative change {100 * tr.relative:+.0f}%, threshold "
                                     "a relative change")]
    if success is not None:
        ev.append(success.evidence(None, f"{success.evidence().note}; not rising (t {success.t:.1f})"))
    return Check(FARMING, FOUND, Finding(
        FARMING, "high", f"actions per turn fell from {tr.start:.2f} to {tr.end:.2f} while success did not rise"
        + (f" ({_pct(success.start)} -> {_pct(success.end)})" if success else ""), tuple(ev), RULE[FARMING].action))


LENGTH = "length-drift"


def check_length(data: RunData) -> Check:
    tr = metric_trend(data, "rollout/response_length_mean")
    if tr is None:
        return _not_measured(LENGTH, "rollout/response_length_mean", why=f"fewer than {TREND_MIN_STEPS} steps with "
                                                                          "rollout/response_length_mean")
    success = _success_trend(data)
    if not (abs(tr.relative) >= LENGTH_DRIFT and abs(tr.t) >= TREND_T) or _success_rises(success):
        return Check(LENGTH, CLEAR)
    return Check(LENGTH, FOUND, Finding(
        LENGTH, "warning", f"response length went from {tr.start:.0f} to {tr.end:.0f} tokens "
        f"({100 * tr.relative:+.0f}%) while success did not rise",
        (tr.evidence(LENGTH_DRIFT, f"{tr.evidence().note}; threshold a relative change"),), RULE[LENGTH].action))


REWARD = "reward-without-success"


def check_reward(data: RunData) -> Check:
    """The raw reward (env rewards and format penalties) or, with reward shapers, the shaped training score rising
    while success does not."""
    rows = _train_rows(data)
    raw = next((m for m in ("reward/mean", "rollout/score") if _series(rows, m)[0]), None)
    trends = [tr for m in ("reward/shaped_mean", raw) if m and (tr := metric_trend(data, m)) is not None]
    success = _success_trend(data)
    if not trends or success is None:
        return _not_measured(REWARD, "reward/mean", "rollout/success", why=f"fewer than {TREND_MIN_STEPS} steps "
                                                                           "with reward/mean and rollout/success")
    rising = [tr for tr in trends if (tr.t >= TREND_T or tr.rank_z >= RANK_Z)
              and tr.change > REWARD_MIN_CHANGE * max(1.0, abs(tr.start))]
    if not rising or success.t >= 1.0 or success.change > 0:
        return Check(REWARD, CLEAR)
    tr = rising[0]
    return Check(REWARD, FOUND, Finding(
        REWARD, "high", f"{tr.metric} rose from {tr.start:.3g} to {tr.end:.3g} (t {tr.t:.1f}, rank z {tr.rank_z:.1f}) "
        f"while success went {_pct(success.start)} -> {_pct(success.end)}: the reward is being earned some other way",
        (tr.evidence(TREND_T if tr.t >= TREND_T else RANK_Z,
                     f"{tr.evidence().note}; threshold on the thirds' t ({TREND_T:g}, here {tr.t:.1f}) or the rank z "
                     f"over every step ({RANK_Z:g}, here {tr.rank_z:.1f})"),
         success.evidence(None, f"{success.evidence().note}; t {success.t:.1f}")), RULE[REWARD].action))


ENTROPY = "entropy-collapse"


def check_entropy(data: RunData) -> Check:
    tr = metric_trend(data, "actor/entropy")
    if tr is None:
        return _not_measured(ENTROPY, "actor/entropy", why=f"fewer than {TREND_MIN_STEPS} steps with actor/entropy")
    if tr.start <= 0 or tr.end > ENTROPY_FRACTION * tr.start:
        return Check(ENTROPY, CLEAR)
    return Check(ENTROPY, FOUND, Finding(
        ENTROPY, "warning", f"token entropy fell from {tr.start:.3g} to {tr.end:.3g} "
        f"({100 * tr.end / tr.start:.0f}% of its start)", (tr.evidence(ENTROPY_FRACTION * tr.start),),
        RULE[ENTROPY].action))


KL = "kl-blowup"


def check_kl(data: RunData) -> Check:
    rows = _train_rows(data)
    ev, parts = [], []
    measured = False
    for metric, limit in (("actor/ref_kl", REF_KL_MAX), ("actor/ppo_kl", PPO_KL_MAX)):
        steps, values = _series(rows, metric)
        if not steps:
            continue
        measured = True
        worst = max(range(len(values)), key=lambda i: abs(values[i]))
        if abs(values[worst]) >= limit:
            parts.append(f"{metric} {values[worst]:.3g} at step {steps[worst]} (limit {limit:g})")
            ev.append(Evidence(metric, (steps[worst],), (values[worst],), limit, "largest |value|"))
    if not measured:
        return _not_measured(KL, "actor/ref_kl", "actor/ppo_kl")
    if not ev:
        return Check(KL, CLEAR)
    return Check(KL, FOUND, Finding(KL, "high", "; ".join(parts), tuple(ev), RULE[KL].action))


UNSTABLE = "unstable-update"


def check_unstable(data: RunData) -> Check:
    rows = _train_rows(data)
    skipped = [(r["step"], r[k]) for r in rows for k in ("actor/skipped_updates", "critic/skipped_updates")
               if isinstance(r.get(k), (int, float)) and r[k] > 0]
    nonfinite = [r["step"] for r in rows if isinstance(r.get("actor/grad_norm"), float)
                 and not math.isfinite(r["actor/grad_norm"])]
    steps, norms = _series(rows, "actor/grad_norm")
    if not steps and not skipped and not nonfinite and not any("actor/skipped_updates" in r for r in rows):
        return _not_measured(UNSTABLE, "actor/grad_norm", "actor/skipped_updates")
    ev, parts, severity = [], [], None
    if skipped or nonfinite:
        severity = "high"
        where = sorted({s for s, _ in skipped} | set(nonfinite))
        parts.append(f"non-finite updates skipped at steps {', '.join(map(str, where[:8]))}"
                     + (" ..." if len(where) > 8 else ""))
        ev.append(Evidence("actor/skipped_updates", tuple(where), tuple(float(v) for _, v in skipped), 0.0,
                           "updates skipped for a non-finite loss or gradient"))
    positive = sorted(v for v in norms if v > 0)
    if len(positive) >= TREND_MIN_STEPS:
        median = positive[len(positive) // 2]
        spikes = [(s, v) for s, v in zip(steps, norms) if v >= GRAD_SPIKE_FACTOR * median]
        if spikes:
            severity = severity or "warning"
            s, v = max(spikes, key=lambda p: p[1])
            parts.append(f"gradient norm {v:.3g} at step {s}, {v / median:.0f}x the median {median:.3g} "
                         f"({len(spikes)} spike{'s' if len(spikes) > 1 else ''})")
            ev.append(Evidence("actor/grad_norm", tuple(p[0] for p in spikes), tuple(p[1] for p in spikes),
                               GRAD_SPIKE_FACTOR * median, f"{GRAD_SPIKE_FACTOR:g}x the median"))
    if severity is None:
        return Check(UNSTABLE, CLEAR)
    return Check(UNSTABLE, FOUND, Finding(UNSTABLE, severity, "; ".join(parts), tuple(ev), RULE[UNSTABLE].action))


NO_LEARNING = "no-learning"
#: what usually helps when the paired change is a decrease beyond noise
REGRESSION_ACTION = ("Lower trainer.actor_lr, and drop zero-spread groups (--filter zero-variance): Adam scales every "
                     "update to about the learning rate, so steps whose advantages are all 0 still move the weights "
                     "along the entropy bonus and the KL term alone. Check zero-signal first.")


def check_no_learning(data: RunData) -> Check:
    p = _last(data.rows, "paired/z", "paired/change", "paired/se", "paired/levels")
    if p is None:
        return _not_measured(NO_LEARNING, "paired/z", why="no greedy before/after comparison (rollout.n_paired_levels "
                                                          "0, or the run did not finish)")
    if p["paired/z"] >= NO_LEARNING_Z:
        return Check(NO_LEARNING, CLEAR)
    worse = p["paired/z"] <= REGRESSION_Z
    return Check(NO_LEARNING, FOUND, Finding(
        NO_LEARNING, "high" if worse else "warning", f"greedy success on {int(p['paired/levels'])} held-out levels "
        f"changed by {100 * p['paired/change']:+.1f} points (SE {100 * p['paired/se']:.1f}, z {p['paired/z']:.1f}): "
        + ("RL made the policy worse, beyond noise" if worse else "no change distinguishable from noise"),
        (Evidence("paired/z", (p["step"],), (p["paired/z"], p["paired/change"], p["paired/se"]),
                  REGRESSION_Z if worse else NO_LEARNING_Z, "z, change, SE"),),
        REGRESSION_ACTION if worse else RULE[NO_LEARNING].action))


OVERFIT = "overfit-levels"


def check_overfit(data: RunData) -> Check:
    if data.train_levels == 0:
        # every group played a level it never trained on (rollout.train_levels 0): training success is itself a
        # held-out measure, and its rises follow the level schedule (steps whose levels happen to be easy: the README
        # main job's training success rose from 20% to 54% by step 20 while validation went 34% -> 36%)
        return Check(OVERFIT, CLEAR)
    train = _success_trend(data)
    vals = [r for r in data.rows if isinstance(r.get("val/success"), (int, float))]
    if train is None or len(vals) < 2:
        return _not_measured(OVERFIT, "rollout/success", "val/success", why="a training-success trend and two "
                                                                              "validations are needed")
    first, last = vals[0], vals[-1]
    n = min(first.get("val/num_trajectories") or 0, last.get("val/num_trajectories") or 0)
    if not n:
        return _not_measured(OVERFIT, "val/num_trajectories")
    p = (first["val/success"] + last["val/success"]) / 2
    se = math.sqrt(2 * p * (1 - p) / n)
    change = last["val/success"] - first["val/success"]
    rises = train.change >= OVERFIT_TRAIN_RISE and train.t >= TREND_T
    if not rises or (se > 0 and change >= FLAT_SE * se) or (se == 0 and change > 0):
        return Check(OVERFIT, CLEAR)
    return Check(OVERFIT, FOUND, Finding(
        OVERFIT, "warning", f"training success rose from {_pct(train.start)} to {_pct(train.end)} while held-out "
        f"success went {_pct(first['val/success'])} -> {_pct(last['val/success'])} (SE {100 * se:.1f})",
        (train.evidence(OVERFIT_TRAIN_RISE),
         Evidence("val/success", (first["step"], last["step"]), (first["val/success"], last["val/success"]),
                  FLAT_SE * se, "held-out rise under one SE")), RULE[OVERFIT].action))


RULES: tuple[Rule, ...] = (
    Rule(BLIND, "high", "The policy does not read its state",
         "Check that the warm start reads the board before RL (optimal moves above chance, several first answers); "
         "train it longer (warmstart.epochs) or on the compact prompt (rollout.prompt=compact); RL rarely fixes a "
         "blind start.", check_blind),
    Rule(TEMPLATE, "warning", "Template collapse (RAGEN-V2): reasoning that ignores its input",
         "Filter groups by reward spread (filter top_p, algo starpo-s), raise the KL or entropy coefficient, or "
         "shorten the think budget; compare the trajectories' reasoning across levels in the report.", check_template),
    Rule(ZERO, "high", "Zero signal: most groups give every member the same reward",
         "Make the task reachable (a warm start, easier levels, more turns), raise the group size or temperature, or "
         "add a denser reward (a shaper); a filter that drops zero-spread groups at least stops wasted updates.",
         check_zero_signal),
    Rule(FORMAT, "high", "Format collapse: valid answers falling",
         "Lower the learning rate, add a KL term (algo.options.kl_coef), keep the format penalty, or stop at the best "
         "checkpoint; look at the invalid turns in the report's viewer.", check_format),
    Rule(FARMING, "high", "Step-cost farming: fewer actions without more success",
         "Keep all-fail groups out of group-relative updates (algo.options.success_gate=auto or always), or remove the "
         "per-action cost from the reward.", check_farming),
    Rule(LENGTH, "warning", "Length drift: responses growing or shrinking while success does not",
         "Check the length penalty or budget (rollout.response_length), the loss aggregation (token- vs "
         "sequence-mean), and look at the longest responses in the viewer.", check_length),
    Rule(REWARD, "high", "Reward without success: a farmed reward",
         "The shaped reward or score pays for something other than solving: check the shaper and the env's partial "
         "rewards, train on success alone to compare.", check_reward),
    Rule(ENTROPY, "warning", "Entropy collapse: the policy samples almost one answer",
         "Raise the temperature or the entropy coefficient, lower the learning rate, use a clip-higher preset (DAPO) "
         "or a KL term.", check_entropy),
    Rule(KL, "high", "KL blow-up: the policy moved far from its reference",
         "Lower the learning rate, raise the KL coefficient, use fewer PPO epochs or a smaller clip range.", check_kl),
    Rule(UNSTABLE, "high", "Unstable updates: gradient spikes or skipped non-finite updates",
         "Lower the learning rate, clip gradients harder, check rewards for extreme values, use bf16/fp32 instead of "
         "fp16.", check_unstable),
    Rule(NO_LEARNING, "warning", "No learning: the before/after change is within noise",
         "Run longer or with more groups, check the zero-signal and blind-policy findings first, and compare seeds "
         "before concluding.", check_no_learning, live=False),
    Rule(OVERFIT, "warning", "Overfit levels: training success rises, held-out does not",
         "Train on more levels (rollout.train_levels=0 plays fresh ones), stop earlier, or add held-out validation "
         "more often to see when it turns.", check_overfit),
)
RULE = {r.code: r for r in RULES}
CODES = tuple(RULE)


# ---- the open-loop baseline (``ragen doctor``) -----------------------------------------------------------------------


def _resolved(run_dir: Path):
    """The run's resolved config, from its config.yaml as a resume reads it."""
    from ragen import config as config_mod
    from ragen.envs.resolved import resolve_run
    from ragen.train.runlog import saved_config

    return resolve_run(config_mod.load_config(base=saved_config(run_dir)))


def _policy_levels(data: RunData) -> tuple[dict, list[tuple], str]:
    """The final policy's per-level successes and executed action sequences: the greedy pass after RL
    (paired_trajectories.jsonl), else the last validation (val_trajectories.jsonl)."""
    rows = [r for r in data.jsonl("paired_trajectories.jsonl") if r.get("pass") == "after"]
    source = "greedy pass after RL"
    if not rows:
        val = data.jsonl("val_trajectories.jsonl")
        last = max((r.get("step", 0) for r in val), default=None)
        rows, source = [r for r in val if r.get("step", 0) == last], f"validation at step {last}"
        rows = list({(r["env_name"], r["seed"]): r for r in rows}.values())  # one episode per level
    outcomes, sequences = {}, []
    for r in rows:
        level = (r["env_name"], int(r["seed"]), r.get("split", "val"), int(r.get("rollout_index", 0)))
        outcomes[level] = bool(r.get("success"))
        sequences.append(tuple(a for t in r.get("turns", []) for a in t.get("executed", [])))
    return outcomes, sequences, source


def open_loop_baseline(data: RunData) -> dict:
    """The best blind baseline on the final policy's own levels: the policy's most frequent action sequences replayed,
    and (``data.search_levels`` > 0) the best fixed sequence chosen on that many training levels; with the policy's
    success on the same levels and the paired z of policy against baseline. Only ``note`` (why) when not measurable."""
    if "open_loop" not in data.cache:
        data.cache["open_loop"] = _open_loop(data)
    return data.cache["open_loop"]


def _open_loop(data: RunData) -> dict:
    from ragen.envs import openloop
    from ragen.envs.resolved import TRAIN_SEED_BASE
    from ragen.plugins.components import make_env
    from ragen.runs.paired import compare

    if data.run_dir is None or not (data.run_dir / "config.yaml").is_file():
        return {"note": "no config.yaml"}
    outcomes, sequences, source = _policy_levels(data)
    if not outcomes:
        return {"note": "no trajectories of the final policy"}
    try:
        run = _resolved(data.run_dir)
    except RagenError as exc:
        return {"note": f"the run's config does not load here: {exc}"}
    options = {p.name: p.options for p in (*run.train_plan, *run.val_plan)}  # the levels are validation levels
    names = sorted({lv[0] for lv in outcomes})
    if any(n not in options for n in names):
        return {"note": "levels of envs the config does not name"}

    def make(name):
        return make_env(name, **options[name])

    for name in names:
        env = make(name)
        why = openloop.supports(env)
        env.close()
        if why:
            return {"note": why}
    candidates = [(s, f"the policy's own sequence ({c} of {len(sequences)} episodes)")
                  for s, c in openloop.frequent_sequences(sequences)]
    if data.search_levels > 0 and len(names) == 1:
        train = [(names[0], TRAIN_SEED_BASE + i, "train", 0) for i in range(data.search_levels)]
        best = openloop.best_fixed_sequence(make, train)
        candidates.append((best.actions, f"best of {best.searched:,} fixed sequences on {best.levels} training "
                                         f"levels ({_pct(best.success)} there)"))
    if not candidates:
        return {"note": "no executed actions to replay"}
    scored = []
    for seq, label in candidates:
        blind = openloop.replay(make, seq, outcomes)
        p = compare(blind, outcomes)
        scored.append({"sequence": list(seq), "source": label, "blind": p.success_before, "policy": p.success_after,
                       "z": p.z, "levels": p.levels, "policy_source": source,
                       "metric": "paired/success_after" if source.startswith("greedy") else "val/success"})
    return max(scored, key=lambda s: (s["blind"], -s["z"]))


# ---- running the rules -----------------------------------------------------------------------------------------------


def configured_train_levels(run_dir: Path) -> int | None:
    """``rollout.train_levels`` from the run folder's config.yaml; None when it has none, or an unreadable one."""
    from ragen.train.runlog import saved_config

    try:
        rollout = saved_config(run_dir).get("rollout")
    except RagenError:  # a hint for one rule: a folder that does not say is "not known", never an error
        return None
    value = rollout.get("train_levels") if isinstance(rollout, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _run_data(rows: Iterable[dict], run_dir: Path | None, open_loop: bool, search_levels: int,
              train_levels: int | None = None) -> RunData:
    """What the rules read; ``train_levels`` None: from ``run_dir``'s config.yaml when there is a folder."""
    if train_levels is None and run_dir is not None:
        train_levels = configured_train_levels(Path(run_dir))
    return RunData(tuple(rows), Path(run_dir) if run_dir is not None else None, open_loop, search_levels,
                   train_levels)


def diagnose_rows(rows: Iterable[dict], run_dir: Path | None = None, *, open_loop: bool = False,
                  search_levels: int = 0, live: bool = False, train_levels: int | None = None) -> Diagnosis:
    """Every rule over ``rows`` (metrics.jsonl rows); ``live``: only the rules that make sense mid-run;
    ``train_levels``: the run's ``rollout.train_levels`` (None: from ``run_dir``'s config.yaml when given)."""
    data = _run_data(rows, run_dir, open_loop, search_levels, train_levels)
    checks = []
    for rule in RULES:
        if live and not rule.live:
            continue
        checks.append(rule.check(data))
    return Diagnosis(str(run_dir or ""), tuple(checks))


def diagnose(run_dir: str | Path, *, open_loop: bool = False, search_levels: int = 0) -> Diagnosis:
    """Every rule over a run folder (a finished, interrupted or older one); ``open_loop`` replays blind baselines in
    the env, with the exhaustive fixed-sequence search on ``search_levels`` training levels (seconds to a minute)."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        raise RagenError(f"{str(run_dir)!r} is not a run folder (no metrics.jsonl)")
    data = _run_data(plot.read_jsonl(run_dir / "metrics.jsonl"), run_dir, open_loop, search_levels)
    diag = Diagnosis(str(run_dir), tuple(rule.check(data) for rule in RULES))
    return attrs.evolve(diag, open_loop=open_loop_baseline(data) if open_loop else None)


class Watcher:
    """The live warning: fed each step's metrics, it returns the findings that fire for the first time (a resumed run
    starts from its folder's rows, and what they already showed is not warned again)."""

    def __init__(self, rows: Iterable[dict] = (), train_levels: int | None = None):
        self.rows, self.train_levels = list(rows), train_levels
        self.warned = ({f.code for f in self._diagnose().findings} if self._steps() >= LIVE_MIN_STEPS else set())

    def _diagnose(self) -> Diagnosis:
        return diagnose_rows(self.rows, live=True, train_levels=self.train_levels)

    def _steps(self) -> int:
        return len({r["step"] for r in self.rows if r.get("step", 0) > 0})

    @classmethod
    def for_run(cls, run_dir: Path, train_levels: int | None = None) -> Watcher:
        """A watcher of the run in ``run_dir``, starting from the rows it already wrote; ``train_levels``: the run's
        ``rollout.train_levels`` (None: read from its config.yaml)."""
        if train_levels is None:
            train_levels = configured_train_levels(Path(run_dir))
        return cls(plot.read_jsonl(Path(run_dir) / "metrics.jsonl"), train_levels)

    def __call__(self, step: int, metrics: dict) -> list[Finding]:
        self.rows.append({"step": step, **metrics})
        if self._steps() < LIVE_MIN_STEPS or (step > LIVE_EVERY_AFTER and step % LIVE_EVERY):
            return []
        new = [f for f in self._diagnose().findings if f.code not in self.warned]
        self.warned |= {f.code for f in new}
        return new

    def warn(self, step: int, metrics: dict) -> None:
        """The loop's hook: one warning line per new finding. A failure is logged, not raised: a diagnosis must never
        stop a run."""
        from ragen.log import log  # structlog: imported by a run, not by every command that reads this module

        try:
            new = self(step, metrics)
        except Exception as exc:  # noqa: BLE001 - any rule bug must leave training running
            log.warning("diagnosis_failed", step=step, error=f"{type(exc).__name__}: {exc}")
            return
        for f in new:
            log.warning("diagnosis", step=step, code=f.code, severity=f.severity, finding=f.summary,
                        details=f"ragen doctor RUN; docs/diagnosis.md#{f.code}")


# ---- text ------------------------------------------------------------------------------------------------------------


def finding_line(f: Finding) -> str:
    return f"[{f.severity}] {f.code}: {f.summary}"


def evidence_line(e: Evidence) -> str:
    steps = "" if not e.steps or "step" in e.note else f" at step {e.steps[0]}" if len(e.steps) == 1 else (
        f" at steps {', '.join(map(str, e.steps))}")
    values = ", ".join(f"{v:.4g}" for v in e.values)
    limit = "" if e.threshold is None else f"; threshold {e.threshold:.4g}"
    return f"{e.metric}{steps}: {values}{limit}" + (f" ({e.note})" if e.note else "")


def format_diagnosis(d: Diagnosis, *, verbose: bool = True) -> str:
    """The findings as text: each with its action (``verbose``), then the rules not measured."""
    found = d.findings
    lines = [f"Diagnosis ({d.run_dir}): " + (f"{len(found)} finding{'s' if len(found) != 1 else ''}" if found
                                             else "no finding")]
    for f in found:
        lines.append("  " + finding_line(f))
        if verbose:
            lines += [f"      evidence: {evidence_line(e)}" for e in f.evidence]
            lines.append(f"      try: {f.action}")
    if d.open_loop is not None:
        lines.append("  " + open_loop_line(d.open_loop))
    unmeasured = [c.code for c in d.checks if c.status == NOT_MEASURED]
    if unmeasured:
        lines.append(f"  not measured: {', '.join(unmeasured)}")
    if verbose:
        lines.append("  (docs/diagnosis.md explains each finding)")
    return "\n".join(lines)


def open_loop_line(base: dict) -> str:
    """The blind baseline in one line."""
    if base.get("z") is None:
        return f"open-loop baseline: not measured ({base.get('note', 'unknown reason')})"
    return (f"open-loop baseline: {' '.join(base['sequence'])!r} played blind, {base['source']}: "
            f"{_pct(base['blind'])} on {base['levels']} levels, against the policy's {_pct(base['policy'])} "
            f"({base['policy_source']}; paired z {base['z']:.1f})")


def summary_lines(run_dir: str | Path) -> list[str]:
    """The run summary's last lines: one per finding (metrics only), or none when the run shows nothing."""
    try:
        d = diagnose(run_dir)
    except Exception as exc:  # noqa: BLE001 - the run is over and saved: a rule bug must not turn it into an error
        return [f"  diagnosis failed: {type(exc).__name__}: {exc}"]
    return [f"  diagnosis: {finding_line(f)}" for f in d.findings] + (
        ["  details and what to try: ragen doctor " + str(run_dir)] if d.findings else [])
