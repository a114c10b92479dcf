"""ragen-lean: the progress reward cannot be farmed.

The red-team sequences of the issue (and fresh-state variants of them) are played turn by turn within lean-easy's
budget (8 turns x 4 tactics, 30 in all); each must score below the expert's proof of the same lemma, and junk
tactics added to a proof must not raise its score. With RAGEN's rewards ``pose (x := 0). || clear x.`` every turn
scored +25.0 against +15.4 for the proof.
"""

from __future__ import annotations

import shutil

import pytest

import ragen

pytestmark = pytest.mark.skipif(
    shutil.which("coqtop") is None, reason="coqtop not found: install the Debian packages coq and libcoq-coquelicot"
)

#: lemmas with the shortest (2 tactics), a typical (6, the issue's) and the longest (10) known proof
LEMMAS = ("zero_not_succ", "add_succ_r", "not_or")

#: one answer per turn, repeated every turn
CYCLE = "pose (x := 0). || clear x. || pose (x := 0). || clear x."


def fresh(template: str) -> list[str]:
    """One answer per turn, 4 tactics each, every tactic reaching a goal state never seen before."""
    return [" || ".join(template.format(k=4 * turn + i) for i in range(4)) for turn in range(8)]


FARMS = {
    "pose/clear cycle": [CYCLE] * 8,
    "pose proof I as h": ["pose proof I as h. || pose proof I as h. || clear h. || pose proof I as h."] * 8,
    "assert True by trivial": [
        "assert (h : True) by trivial. || clear h. || assert (h : True) by trivial. || idtac."] * 8,
    "fresh pose proof": fresh("pose proof I as h{k}."),
    "fresh assert": fresh("assert (h{k} : True) by trivial."),
    "fresh cut chain": fresh("cut ({k} = {k})."),
    "fresh set": fresh("set (v{k} := {k})."),
    "idtac": ["idtac. || idtac. || idtac. || idtac."] * 8,
}


def play(env, name: str, answers: list[str]) -> tuple[float, bool]:
    """(return, proved) of one episode on lemma ``name``, each answer one turn, within the env's budget."""
    split, index = next((s, i) for s in ("train", "val") for i, p in enumerate(env.problems_for(s)) if p.name == name)
    env.reset(seed=0, options={"task_index": index, "split": split})
    cfg, total, used = env.config, 0.0, 0
    for answer in answers[: cfg.max_turns]:
        for tactic in env.split_actions(answer)[: cfg.max_actions_per_turn]:
            _, reward, terminated, truncated, info = env.step(tactic)
            total, used = total + reward, used + 1
            if terminated or truncated:
                return total, bool(info["success"])
            if used >= cfg.max_actions_per_episode:
                return total, False
    return total, False


def proof_answers(env, name: str, junk: list[str] | None = None) -> list[str]:
    """The known proof of ``name`` (after ``junk`` tactics), 4 tactics per turn."""
    problem = next(p for s in ("train", "val") for p in env.problems_for(s) if p.name == name)
    tactics = [*(junk or []), *problem.proof]
    return [" || ".join(tactics[i : i + 4]) for i in range(0, len(tactics), 4)]


@pytest.fixture(scope="module")
def env():
    env = ragen.make_env("lean-easy")
    yield env
    env.close()


@pytest.mark.parametrize("lemma", LEMMAS)
def test_farming_sequences_score_below_the_experts_proof(env, lemma):
    expert, proved = play(env, lemma, proof_answers(env, lemma))
    assert proved
    cfg = env.config
    # the most an unproved episode can earn: the progress cap, then every tactic's step penalty and the truncation
    bound = cfg.max_progress_reward + cfg.max_actions_per_episode * cfg.step_penalty + cfg.max_steps_penalty
    scores = {}
    for farm, answers in FARMS.items():
        score, farm_proved = play(env, lemma, answers)
        assert not farm_proved, farm
        scores[farm] = score
    print(f"{lemma}: expert {expert:.1f}, farms {scores}")
    for farm, score in scores.items():
        assert score < expert, f"{farm} scores {score} on {lemma}, the proof {expert}"
        assert score <= bound + 1e-9, f"{farm} scores {score} on {lemma}, above the unproved bound {bound}"
        assert score < cfg.success_reward / 2, farm


@pytest.mark.parametrize("lemma", LEMMAS)
def test_junk_before_a_proof_does_not_raise_its_score(env, lemma):
    """Fresh-state junk (paid progress on its own) ahead of the proof only costs its step penalties."""
    plain, proved = play(env, lemma, proof_answers(env, lemma))
    assert proved
    junks = (["pose proof I as j1.", "pose proof I as j2.", "pose proof I as j3."],
             ["assert (e : 1 = 1) by reflexivity.", "pose (v := 7)."])
    for junk in junks:
        padded, proved = play(env, lemma, proof_answers(env, lemma, junk))
        assert proved
        assert padded == pytest.approx(plain + len(junk) * env.config.step_penalty)


def test_revisited_states_earn_nothing_and_the_proof_tops_the_cap_up(env):
    name = "add_succ_r"
    split, index = next((s, i) for s in ("train", "val") for i, p in enumerate(env.problems_for(s)) if p.name == name)
    env.reset(seed=0, options={"task_index": index, "split": split})
    assert env.step("intros n m.")[1] == pytest.approx(0.9)  # new goals
    assert env.step("revert n m.")[1] == pytest.approx(-0.1)  # back to the start
    assert env.step("intros n m.")[1] == pytest.approx(-0.1)  # seen
    step = env.step("pose (x := 0).")  # a new hypothesis: the goal is the same
    assert step[1] == pytest.approx(-0.1) and step[4]["action_is_valid"] and step[4]["action_is_effective"]
    assert env.step("clear x.")[1] == pytest.approx(-0.1)
    rewards = [env.step(t)[1] for t in env.problem.proof[1:]]
    assert rewards[:-1] == pytest.approx([0.9] * 4)  # 1 (intros) + 4 paid: the cap of 5 is reached
    assert rewards[-1] == pytest.approx(10 - 0.1)
    assert env.progress_paid == pytest.approx(5.0)


#: one tactic a turn for lean-easy's 8 turns, each adding something new beside the goal: the episode ends at max_turns
#: (8 tactics of 30), so no truncation penalty offsets it. With hypotheses counted as progress the first scored +4.2.
ONE_A_TURN = {
    "fresh pose proof": [f"pose proof I as h{k}." for k in range(1, 9)],
    "fresh assert by": [f"assert (h{k} : {k} = {k}) by reflexivity." for k in range(1, 9)],
    "fresh set": [f"set (v{k} := {k})." for k in range(1, 9)],
    "fresh cut": [f"cut ({k} = {k})." for k in range(1, 9)],
    "fresh assert goal": [f"assert (h{k} : {k} = {k})." for k in range(1, 9)],
    "assert then close": [f"assert (h{k} : {k} = {k}). || reflexivity." for k in range(1, 9)],
}


@pytest.mark.parametrize("lemma", ["add_succ_r", "app_nil_r"])
def test_a_new_hypothesis_a_turn_is_not_progress(env, lemma):
    """Junk beside the goal, one piece a turn, scores below an honest failed attempt (the known proof without its last
    tactic, then tactics the prover rejects) and far below the proof."""
    cfg = env.config
    proof = next(p for s in ("train", "val") for p in env.problems_for(s) if p.name == lemma).proof
    expert, proved = play(env, lemma, list(proof))
    assert proved
    honest = [*proof[:-1], *["exact I."] * (cfg.max_turns - len(proof) + 1)]
    attempt, proved = play(env, lemma, honest)
    assert not proved and attempt < cfg.success_reward / 2
    for farm, answers in ONE_A_TURN.items():
        score, proved = play(env, lemma, answers)
        assert not proved, farm
        print(f"{lemma}: {farm} {score:.1f}, honest failure {attempt:.1f}, proof {expert:.1f}")
        assert score < attempt, f"{farm} scores {score} on {lemma}, an honest failed attempt {attempt}"
        assert score <= 0.0, f"{farm} scores {score} on {lemma}: paid for no progress"
        assert score < expert - cfg.success_reward, farm


def test_ragen_rewards_stay_available_and_the_cap_is_checked():
    env = ragen.make_env("lean-easy", reward_noop=True, max_progress_reward=None)
    try:
        score, _ = play(env, "add_succ_r", FARMS["pose/clear cycle"])
        assert score == pytest.approx(30 * 0.9 - 2.0)  # RAGEN's +25.0
    finally:
        env.close()
    with pytest.raises(ragen.ConfigError, match="max_progress_reward"):
        ragen.make_env("lean-easy", max_progress_reward=10.0)
    with pytest.raises(ragen.ConfigError, match="max_progress_reward"):
        ragen.make_env("lean-easy", max_progress_reward=-1.0)
