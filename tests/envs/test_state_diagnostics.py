"""Does a policy read its state? The core's per-action verdicts (``Expert.optimal_actions``), their
aggregates in ``rollout_metrics``, the potentials it records per turn, and the ``potential`` shaper on real episodes."""

import math

import pytest
import torch

import ragen
from ragen.contract.trajectory import ACTIONS_CHANCE, ACTIONS_JUDGED, ACTIONS_OPTIMAL, POTENTIAL_END, POTENTIAL_START
from ragen.envs.episode import Episode
from ragen.models.builtin import train_tokenizer
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.expert import ExpertEngine
from ragen.rollout.runner import rollout_metrics

VOCAB = "<think> </think> <answer> </answer> Up Down Left Right || Trying the plan."


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([VOCAB] * 20, vocab_size=300)


class PolicyEngine(ExpertEngine):
    """Answers from a scripted policy of the env's state: ``policy(env, rng) -> list of actions``; the rng is drawn
    per (seed, member, turn), so episodes do not depend on batching."""

    def __init__(self, tok, policy):
        fmt = ChatFormat(tok)
        super().__init__(tok, fmt.eos_id, seed=7)
        self.policy, self.fmt = policy, fmt

    def response_text(self, env, rng=None):
        actions = self.policy(env, rng or self.rng)
        return f"Trying the plan.</think><answer>{' || '.join(actions)}</answer>"


def expert(env, rng):
    return env.expert.next_actions(env, env.config.max_actions_per_turn) or ["Up"]


def uniform(env, rng):
    return [rng.choice(env.action_names) for _ in range(env.config.max_actions_per_turn)]


def fixed(env, rng):
    return ["Right", "Down"]


def play(tok, name, policy, n=64, options=None):
    engine = PolicyEngine(tok, policy)
    with EnvGroups([GroupSpec(name, n, options or {})], group_size=1, split="val") as groups:
        return run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=0),
                           RolloutSettings(chat_format=engine.fmt, max_model_len=100_000))


# ---- verdicts and metrics ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sokoban", "frozenlake", "frozenlake-slippery"])
def test_expert_moves_optimally_and_random_moves_at_chance(tok, name):
    """The expert's every action is optimal; a uniformly random policy's rate sits at its chance level (binomial
    error over ~400 actions); a fixed sequence ignores the state: one first answer on 64 levels."""
    m = play(tok, name, expert).metrics
    assert m["optimal_action_rate"] == 1.0 and m[f"{name}/optimal_action_rate"] == 1.0
    assert 0.2 < m["optimal_action_chance"] < 0.5
    rand = play(tok, name, uniform).metrics
    se = math.sqrt(0.25 / rand["judged_actions"])
    assert abs(rand["optimal_action_rate"] - rand["optimal_action_chance"]) < 3 * se
    assert rand["optimal_action_rate"] < 0.5
    assert m["distinct_first_answers"] > 3 and play(tok, name, fixed).metrics["distinct_first_answers"] == 1


def test_verdicts_are_recorded_per_executed_action(tok):
    """Each turn counts the actions it executed in a judged state; the per-turn numbers add up to the metric."""
    res = play(tok, "sokoban", uniform, n=8)
    turns = [t for tr in res.trajectories for t in tr.turns]
    assert all(t.info[ACTIONS_JUDGED] <= len(t.executed) for t in turns if ACTIONS_JUDGED in t.info)
    judged = sum(t.info.get(ACTIONS_JUDGED, 0) for t in turns)
    optimal = sum(t.info.get(ACTIONS_OPTIMAL, 0) for t in turns)
    assert judged > 0 and res.metrics["optimal_action_rate"] == pytest.approx(optimal / judged)
    assert res.metrics["optimal_action_chance"] == pytest.approx(
        sum(t.info.get(ACTIONS_CHANCE, 0) for t in turns) / judged
    )
    assert "sokoban/actions_judged" not in res.metrics  # the raw counts are not averaged like env info


def test_verdict_is_taken_in_the_state_before_the_action():
    """Replaying an episode by hand: the verdict of each action is the expert's set in the state it was applied to."""
    env = ragen.make_env("frozenlake")
    ep = Episode(env)
    ep.reset(130)
    expected = []
    probe = ragen.make_env("frozenlake")
    probe.reset(seed=130)
    for action in ("Right", "Down"):
        expected.append(float(action in probe.expert.optimal_actions(probe)))
        probe.step(action)
        if probe._done:
            break
    res = ep.step_turn("Right || Down")
    assert res.diagnostics[ACTIONS_JUDGED] == len(expected)
    assert res.diagnostics[ACTIONS_OPTIMAL] == sum(expected)


def test_unknown_gives_no_metric_not_zero():
    """An env whose expert cannot judge (no optimal_actions) yields no optimal_action_* metric at all."""
    from ragen.contract.trajectory import Trajectory, TurnRecord

    turn = TurnRecord(response_text="", answer="Up", executed=["Up"], invalid=[], reward=0.0, penalty=0.0,
                      format_ok=True, info={"success": 0.0}, truncated_response=False, span=(0, 1))
    traj = Trajectory(env_name="e", seed=1, group_id=0, rollout_index=0, split="val", policy_version=0,
                      input_ids=[1], loss_mask=[1], rollout_logprobs=[0.0], segments=[], turns=[turn])
    m = rollout_metrics([traj])
    assert not any(k.endswith(("optimal_action_rate", "optimal_action_chance")) for k in m)
    assert m["distinct_first_answers"] == 1.0
    assert ragen.Expert().optimal_actions(None) is None


# ---- potentials and the potential shaper --------------------------------------------------------------------------


def replay_potential(name, seed, actions):
    """Phi of the state a fresh env reaches from ``seed`` after ``actions`` (independent of the recorded values)."""
    env = ragen.make_env(name)
    env.reset(seed=seed, options={"split": "val"})
    for a in actions:
        env.step(a)
    return env.potential()


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_potential_terms_telescope_on_real_episodes(tok, name, gamma):
    """Acceptance: Σ_t γ^t (γΦ(s_{t+1}) - Φ(s_t)) = γ^T Φ(s_T) - Φ(s_0), with Φ(s_0) and Φ(s_T) computed
    by replaying the executed actions on a fresh env; the shaped score is the raw score plus that sum."""
    res = play(tok, name, uniform, n=12)
    trajs = res.trajectories
    shape = ragen.make_component("shaper", "potential", gamma=gamma)
    out = shape(ragen.ShapeInput(scores=[t.score for t in trajs], group_ids=[t.group_id for t in trajs],
                                 trajectories=trajs))
    for traj, score, turn_scores in zip(trajs, out.scores, out.turn_scores):
        executed = [a for turn in traj.turns for a in turn.executed]
        phi0, phi_t = replay_potential(name, traj.seed, []), replay_potential(name, traj.seed, executed)
        terms = [shaped - (turn.reward + turn.penalty) for shaped, turn in zip(turn_scores, traj.turns)]
        big_t = len(traj.turns)
        assert sum(gamma ** t * f for t, f in enumerate(terms)) == pytest.approx(gamma ** big_t * phi_t - phi0)
        assert score == pytest.approx(traj.score + gamma ** big_t * phi_t - phi0)
        assert traj.turns[0].info[POTENTIAL_START] == phi0 and traj.turns[-1].info[POTENTIAL_END] == phi_t
    assert any(t.success for t in trajs) and any(not t.success for t in trajs)


def oscillate(env, rng):
    return ["Left", "Right"] if env.name.startswith("frozenlake") else ["Up", "Down"]


def test_oscillating_gains_nothing_at_gamma_1_and_less_than_solving_below(tok):
    """Farming: a policy walking back and forth earns exactly 0 from the potential at gamma 1 (it ends where it
    started); at gamma < 1 it earns at most (1 - gamma^T)|Phi(s_0)| (the bounded bias of a negative potential),
    and always less than the expert's shaped score on the same level."""
    name = "frozenlake"
    loops = play(tok, name, oscillate, n=32)
    solved = {t.seed: t for t in play(tok, name, expert, n=32).trajectories}
    back_home = [t for t in loops.trajectories if not t.turns[-1].info.get("success")
                 and t.turns[-1].info[POTENTIAL_END] == t.turns[0].info[POTENTIAL_START]]
    assert len(back_home) >= 5, "levels where walking Left/Right returns to the start"
    for gamma in (1.0, 0.95):
        shape = ragen.make_component("shaper", "potential", gamma=gamma)
        farm = shape(ragen.ShapeInput(scores=[t.score for t in back_home], group_ids=[0] * len(back_home),
                                      trajectories=back_home))
        best = shape(ragen.ShapeInput(scores=[solved[t.seed].score for t in back_home], group_ids=[0] * len(back_home),
                                      trajectories=[solved[t.seed] for t in back_home]))
        for t, shaped, solve in zip(back_home, farm.scores, best.scores):
            gain = shaped - t.score
            phi0 = t.turns[0].info[POTENTIAL_START]
            if gamma == 1.0:
                assert gain == 0.0
            else:
                assert 0.0 <= gain <= (1 - gamma ** len(t.turns)) * abs(phi0) + 1e-9
            assert shaped < solve


def test_no_potential_no_keys_and_the_shaper_leaves_scores_alone():
    """An env without potential() records no potential keys; the shaper then changes nothing."""
    from ragen.contract.trajectory import Trajectory, TurnRecord

    env = ragen.make_env("frozenlake")
    env.potential = lambda: None  # an env without a potential
    ep = Episode(env)
    ep.reset(123)
    res = ep.step_turn("Left")
    assert POTENTIAL_START not in res.diagnostics and POTENTIAL_END not in res.diagnostics
    turn = TurnRecord(response_text="", answer="Left", executed=["Left"], invalid=[], reward=0.5, penalty=-0.1,
                      format_ok=True, info={}, truncated_response=False, span=(0, 1))
    traj = Trajectory(env_name="e", seed=1, group_id=0, rollout_index=0, split="val", policy_version=0,
                      input_ids=[1], loss_mask=[1], rollout_logprobs=[0.0], segments=[], turns=[turn], reward=0.5,
                      penalty=-0.1)
    out = ragen.make_component("shaper", "potential", gamma=0.9)(
        ragen.ShapeInput(scores=[0.4], group_ids=[0], trajectories=[traj]))
    assert out.scores == [0.4] and out.turn_scores == [[pytest.approx(0.4)]]


def test_episode_asks_the_potential_once_per_turn_boundary():
    """Φ is read at reset and after each turn that executed something (a no-op turn keeps the state and Φ)."""
    env = ragen.make_env("sokoban")
    calls = []
    real = env.potential
    env.potential = lambda: calls.append(1) or real()
    ep = Episode(env)
    ep.reset(123)
    ep.step_turn(None)  # malformed: nothing runs
    ep.step_turn("Up")
    assert len(calls) == 2


# ---- ragen eval, the run summary, ragen report --------------------------------------------------------------------


def test_eval_reports_the_same_state_metrics(tok, tmp_path, monkeypatch):
    """``ragen eval``'s metrics carry rollout_metrics' state numbers unchanged and print them in one line."""
    from click.testing import CliRunner

    from ragen.cli import cli
    from ragen.runs import evaluate

    res = play(tok, "sokoban", uniform, n=16)
    summary = evaluate._summary(res.trajectories, 1, 0)
    for key in evaluate.STATE_KEYS:
        assert summary[key] == res.metrics[key]
    assert summary["levels"] == 16
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **kw: {"env": "sokoban", **summary})
    out = CliRunner().invoke(cli, ["eval", "--env", "sokoban", "--model", "tiny", "--out", str(tmp_path / "e")])
    assert out.exit_code == 0, out.output
    rate, chance = 100 * summary["optimal_action_rate"], 100 * summary["optimal_action_chance"]
    assert (
        f"sokoban: state dependence: optimal moves {rate:.1f}% (chance on the same states {chance:.1f}%" in out.output
    )
    assert f"{int(summary['distinct_first_answers'])} distinct first answers over 16 levels" in out.output


def test_summary_shows_optimal_moves_before_and_after():
    import json

    from ragen.runs.summary import format_summary, run_summary

    rows = [{"step": 0, "val/success": 0.25, "val/num_trajectories": 64.0, "val/optimal_action_rate": 0.33,
             "val/optimal_action_chance": 0.36, "val/distinct_first_answers": 1.0},
            {"step": 2, "val/success": 0.5, "val/num_trajectories": 64.0, "val/optimal_action_rate": 0.71,
             "val/optimal_action_chance": 0.3, "val/distinct_first_answers": 12.0}]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        s = run_summary(d)
    assert s["before"]["optimal_action_rate"] == 0.33 and s["after"]["distinct_first_answers"] == 12.0
    text = format_summary(s)
    assert "reads the state before RL: optimal moves 33.0% (chance 36.0%); 1 distinct first answers over 64" in text
    assert "reads the state after RL : optimal moves 71.0% (chance 30.0%); 12 distinct first answers" in text


def test_report_draws_the_state_dependence_of_evals_and_runs(tok, tmp_path):
    """An eval folder per policy and a training run: the report's table says at a glance which policy reads its
    state, and the curve panel carries the chance level."""
    import json

    from ragen.runs import evaluate
    from ragen.runs.report import build_report

    dirs = []
    for name, policy in (("expert", expert), ("uniform", uniform), ("fixed", fixed)):
        res = play(tok, "sokoban", policy, n=32)
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.json").write_text(json.dumps({"env": "sokoban", **evaluate._summary(res.trajectories, 1, 0)}))
        (d / "trajectories.jsonl").write_text("".join(t.to_json() + "\n" for t in res.trajectories))
        dirs.append(d)
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "rollout/success": 0.1 * s, "rollout/optimal_action_rate": 0.3 + 0.1 * s,
             "rollout/optimal_action_chance": 0.3, "val/optimal_action_rate": 0.3 + 0.1 * s,
             "val/optimal_action_chance": 0.31, "val/judged_actions": 400.0, "val/distinct_first_answers": 1.0 + s}
            for s in range(4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report([*dirs, run], tmp_path / "r.html").read_text()
    table = page[page.index("<table class=state>"):]
    table = table[:table.index("</table>")]
    by_run = {row.split("</td>")[0].removeprefix("<td>"): row for row in table.split("<tr>")[2:]}
    assert "reads the state" in by_run["expert"] and "100.0%" in by_run["expert"]
    assert "at chance: ignores the state?" in by_run["uniform"]
    assert "one first answer for every level" in by_run["fixed"]
    assert "step 3" in by_run["run"] and "60.0%" in by_run["run"] and "reads the state" in by_run["run"]
    assert "data-metric=state-dependence" in page
    panel = page[page.index("data-metric='rollout/optimal_action_rate'"):]
    assert "chance (val/optimal_action_chance)" in panel[:panel.index("</figure>")]


def test_check_env_catches_a_judge_or_a_potential_that_lies(monkeypatch):
    """ragen check-env: the expert's own actions must be judged optimal, Phi must be 0 exactly on solved states."""
    from ragen_frozenlake.env import FrozenLakeEnv, ShortestPathExpert

    from ragen.testing import check_env

    [ok] = [c for c in check_env("frozenlake", expert_episodes=5) if c.name == "expert"]
    assert ok.ok and "judged actions all optimal" in ok.detail and "potential checked" in ok.detail
    monkeypatch.setattr(ShortestPathExpert, "optimal_actions", lambda self, env: {"Up"})
    [bad] = [c for c in check_env("frozenlake", expert_episodes=5) if c.name == "expert"]
    assert not bad.ok and "optimal_actions judged only" in bad.detail
    monkeypatch.undo()
    real = FrozenLakeEnv.potential
    monkeypatch.setattr(FrozenLakeEnv, "potential", lambda self: None if real(self) is None else real(self) - 1.0)
    [bad] = [c for c in check_env("frozenlake", expert_episodes=5) if c.name == "expert"]
    assert not bad.ok and "in a solved state" in bad.detail


def test_the_trainer_places_the_shaped_turn_rewards(tok):
    """The potential shaper's turn rewards reach the batch (Batch.turn_scores, read by turn-gae and bi-level-gae, and
    the turn-placed token rewards): reward + penalty + γΦ(s') − Φ(s) per turn; without it nothing changes."""
    from types import SimpleNamespace

    from ragen.train.batch import collate
    from ragen.train.trainer import Trainer

    trajs = [t for t in play(tok, "sokoban", uniform, n=6).trajectories if t.num_turns >= 2][:4]
    def trainer_with(shapers):  # the parts of a Trainer its _shape reads, without building one
        ns = SimpleNamespace(shapers=shapers, _nonfinite_warned=set(), step_idx=0)
        ns._count_nonfinite = lambda *args: Trainer._count_nonfinite(ns, *args)
        return ns

    plain = trainer_with([])
    scores, turns = Trainer._shape(plain, trajs, {})
    assert turns == [[t.reward + t.penalty for t in traj.turns] for traj in trajs]  # no shaper: as before
    base = collate(trajs, 0, scores, placement="turn", turn_scores=turns)
    plain_batch = collate(trajs, 0, scores, placement="turn")
    assert torch.equal(base.turn_scores, plain_batch.turn_scores) and torch.equal(base.token_rewards,
                                                                                  plain_batch.token_rewards)
    gamma = 0.9
    shaped = trainer_with([ragen.make_component("shaper", "potential", gamma=gamma)])
    metrics = {}
    scores, turns = Trainer._shape(shaped, trajs, metrics)
    batch = collate(trajs, 0, scores, placement="turn", turn_scores=turns)
    for i, traj in enumerate(trajs):
        for k, turn in enumerate(traj.turns):
            term = gamma * turn.info[POTENTIAL_END] - turn.info[POTENTIAL_START]
            expected = turn.reward + turn.penalty + term
            assert float(batch.turn_scores[i, k]) == pytest.approx(expected, abs=1e-5)
            assert float(base.turn_scores[i, k]) == pytest.approx(turn.reward + turn.penalty, abs=1e-5)
        # the turn-placed token rewards carry the same per-turn sums
        assert float(batch.token_rewards[i].sum()) == pytest.approx(float(batch.turn_scores[i].sum()), abs=1e-4)
    assert metrics["shaper/potential/turns_with_potential"] == 1.0
