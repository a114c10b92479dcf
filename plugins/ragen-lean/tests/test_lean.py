"""ragen-lean: tactic splitting and policy, miniF2F parsing, the Coq backend (real coqtop), the env contract and
rewards, the expert, the Lean 4 protocol layer, and a two-step training run (spec section 11)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gymnasium.utils import env_checker as gym_checker
from ragen_lean.backend import ProblemLoadError
from ragen_lean.coq import CoqBackend, clean_goals
from ragen_lean.curriculum import CURRICULUM
from ragen_lean.env import LeanEnv
from ragen_lean.lean4 import (
    NOT_AVAILABLE,
    KiminaBackend,
    LeanReplBackend,
    indent_tactics,
    kimina_result,
    proof_skeleton,
    tactic_verdict,
)
from ragen_lean.problems import (
    bundled_minif2f_proofs,
    group_focus,
    known_unloadable,
    load_lean_jsonl,
    load_minif2f,
    parse_coq_file,
    partition,
)
from ragen_lean.tactics import (
    COQ_FORBIDDEN_COMMANDS,
    check_coq_action,
    check_lean_tactic,
    coq_sentences,
    split_tactics,
)

import ragen
from ragen.envs.episode import Episode
from ragen.testing import check_env, run_two_steps

HERE = Path(__file__).resolve().parent
SHARED = Path(__file__).resolve().parents[4] / "shared"  # the data folder beside this repository
MINIF2F = SHARED / "data" / "minif2f-rocq"
HAVE_COQ = shutil.which("coqtop") is not None
coq = pytest.mark.skipif(not HAVE_COQ, reason="coqtop not found: install the Debian packages coq and libcoq-coquelicot")
needs_minif2f = pytest.mark.skipif(not MINIF2F.is_dir(), reason=f"miniF2F-rocq data not found at {MINIF2F}")
VARIANTS = {"lean": (15, 4, 30), "lean-easy": (8, 4, 30), "lean4": (15, 4, 30)}
ADD_0_R = next(p for p in CURRICULUM if p.name == "add_0_r")


def curriculum_env(**kw) -> LeanEnv:
    return ragen.make_env("lean-easy", **kw)


def reset_to(env: LeanEnv, name: str) -> str:
    """Reset ``env`` on the problem called ``name``, whichever split holds it (through the task_index option)."""
    split, index = next((s, i) for s in ("train", "val") for i, p in enumerate(env.problems_for(s)) if p.name == name)
    obs, info = env.reset(seed=0, options={"task_index": index, "split": split})
    assert info["problem"] == name
    return obs


def coqtop_children() -> list[int]:
    """coqtop processes whose parent is this test process (what close() must leave none of)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if fields[1] == str(os.getpid()) and comm.startswith("coqtop"):
            found.append(int(entry.name))
    return found


def proof_term(state) -> str:
    """Coq's partial proof term: equal terms mean equal proof states."""
    return state.session.send("Show Proof.", 30).output


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ---- registration and config -----------------------------------------------------------------------------------------
def test_variants_registered_with_spec_budgets():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    for name, (turns, per_turn, per_episode) in VARIANTS.items():
        assert listed.get(name) == "ragen-lean"
        fields = ragen.env_config_fields(name)
        assert (fields["max_turns"][0], fields["max_actions_per_turn"][0], fields["max_actions_per_episode"][0]) == (
            turns, per_turn, per_episode)
    assert ragen.env_config_fields("lean")["response_length"][0] == 512
    assert ragen.env_config_fields("lean")["problems"][0] == "minif2f"
    assert ragen.env_config_fields("lean-easy")["problems"][0] == "curriculum"
    assert ragen.env_config_fields("lean4")["backend"][0] == "lean4"


@pytest.mark.parametrize(
    "options",
    [{"backend": "isabelle"}, {"problems": "mathlib"}, {"problems": "jsonl"}, {"tactic_timeout_s": 0},
     {"load_timeout_s": -1}, {"memory_limit_mb": -5}, {"val_size": -1}, {"goals_chars": -1}],
)  # fmt: skip
def test_bad_config_is_a_config_error(options):
    with pytest.raises(ragen.ConfigError):
        ragen.make_env("lean-easy", **options)


@coq
def test_missing_data_is_an_actionable_config_error(tmp_path):
    with pytest.raises(ragen.ConfigError, match="data_path"):
        ragen.make_env("lean", data_path=str(tmp_path / "nowhere"))
    with pytest.raises(ragen.ConfigError, match="data_path"):
        ragen.make_env("lean", data_path=None)


def test_missing_coqtop_is_an_actionable_config_error():
    with pytest.raises(ragen.ConfigError, match="coqtop.*coq and libcoq-coquelicot"):
        ragen.make_env("lean-easy", coqtop="/nonexistent/coqtop")


def test_lean4_without_toolchain_says_so(monkeypatch, tmp_path):
    monkeypatch.delenv("RAGEN_LEAN_REPL", raising=False)
    monkeypatch.delenv("RAGEN_KIMINA_URL", raising=False)
    with pytest.raises(ragen.ConfigError, match=NOT_AVAILABLE):
        ragen.make_env("lean4", data_path=str(tmp_path / "x.jsonl"))
    with pytest.raises(ragen.ConfigError, match=NOT_AVAILABLE):
        ragen.make_env("lean4", lean_repl_path=str(tmp_path / "no-repl"))
    with pytest.raises(ragen.ConfigError, match=NOT_AVAILABLE):
        ragen.make_env("lean4", kimina_url="http://127.0.0.1:9")  # nothing listens on the discard port


# ---- splitting answers and Coq sentences -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "pieces"),
    [
        ("intros x y h. || subst. || lra.", ["intros x y h.", "subst.", "lra."]),
        ("(lia || lra). || reflexivity.", ["(lia || lra).", "reflexivity."]),
        ("destruct b as [||]. || auto.", ["destruct b as [||].", "auto."]),
        ('idtac "a || b". || idtac.', ['idtac "a || b".', "idtac."]),
        ("idtac. (* x || y *) || auto.", ["idtac. (* x || y *)", "auto."]),
        ("  || lia. ||  ||", ["lia."]),
        ("", []),
        ("a) || b.", ["a)", "b."]),  # a stray closer does not hide later separators
        ("lia || lra.", ["lia", "lra."]),  # depth 0: Coq's tactical must be parenthesised (the instructions say so)
    ],
)
def test_split_tactics_at_depth_zero(answer, pieces):
    assert split_tactics(answer) == pieces


def test_split_tactics_lean_comments_and_strings():
    assert split_tactics('norm_num [x] || decide', "lean") == ["norm_num [x]", "decide"]
    assert split_tactics('simp -- a || b\n || ring', "lean") == ["simp -- a || b", "ring"]


@pytest.mark.parametrize(
    ("text", "sentences", "rest"),
    [
        ("intros n. simpl.", ["intros n.", "simpl."], ""),
        ("- split.", ["-", "split."], ""),
        ("{ reflexivity. }", ["{", "reflexivity.", "}"], ""),
        ("++ lia.", ["++", "lia."], ""),
        ("rewrite Nat.add_comm.", ["rewrite Nat.add_comm."], ""),
        ("assert (x = 1.5). lra.", ["assert (x = 1.5).", "lra."], ""),
        ('idtac "a. b". auto.', ['idtac "a. b".', "auto."], ""),
        ("(* a. b *) auto.", ["auto."], ""),
        ("apply (f x)", [], "apply (f x)"),
        ("exists {x | x > 0}.", ["exists {x | x > 0}."], ""),
        ("intros [x ..].", ["intros [x ..]."], ""),
        ("idtac.. Drop.", ["idtac..", "Drop."], ""),  # Coq ends a sentence at '. ' even after '..'
        ("2: { reflexivity. }", ["2: {", "reflexivity.", "}"], ""),  # 'N: {' is a sentence of its own
        ("all:{ lia.", ["all:{", "lia."], ""),
    ],
)
def test_coq_sentences(text, sentences, rest):
    assert coq_sentences(text) == (sentences, rest)


@pytest.mark.parametrize("text", ['idtac "open', "(* never closed auto."])
def test_unterminated_literals_are_rejected(text):
    checked = check_coq_action(text)
    assert not checked.ok and "unterminated" in checked.error


# ---- the tactic policy -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", COQ_FORBIDDEN_COMMANDS)
def test_every_spec_command_is_rejected(command):
    checked = check_coq_action(f"{command} foo.")
    assert not checked.ok and command in checked.error


@pytest.mark.parametrize(
    "action",
    ["admit.", "try admit.", "(lia || admit).", "give_up.", "Admitted.", "Fail Quit.", "Time Drop.",
     "Timeout 1 Load x.",
     'Redirect "out" Print All.', "#[bypass_check(guard)] fix f 1.", "Ltac t := idtac.", "Definition x := 1.",
     "Declare ML Module \"x\".", "Extraction \"f.ml\" nat.", "Cd \"/tmp\".", "all: Drop.", "Local Set Printing All.",
     "2: { Drop.", "idtac.. Drop.", "- Quit."],
)  # fmt: skip
def test_escapes_are_rejected_unsent(action):
    assert not check_coq_action(action).ok


@pytest.mark.parametrize(
    ("action", "pieces"),
    [
        ("intros n", ("intros n.",)),  # the final period is appended
        ("- simpl.", ("-", "simpl.")),
        ("all: lia.", ("all: lia.",)),
        ("2: { reflexivity. }", ("2: {", "reflexivity.", "}")),
        ("Search (_ + 0 = _).", ("Search (_ + 0 = _).",)),
        ("Check Nat.add_comm.", ("Check Nat.add_comm.",)),
        ("Unshelve.", ("Unshelve.",)),
        ("}", ("}",)),
        ("(lia || lra).", ("(lia || lra).",)),
    ],
)
def test_allowed_actions(action, pieces):
    checked = check_coq_action(action)
    assert checked.ok, checked.error
    if pieces is not None:
        assert checked.pieces == pieces


def test_several_sentences_are_one_action_too_many():
    checked = check_coq_action("simpl. reflexivity.")
    assert not checked.ok and "One tactic per action" in checked.error
    assert not check_coq_action("").ok


def test_lean_policy():
    assert check_lean_tactic("nlinarith [sq_nonneg (a - b)]").ok
    assert check_lean_tactic('simp -- no sorry here').ok
    assert check_lean_tactic('trace "sorry"').ok
    for bad in ("sorry", "exact sorry", "admit", "run_tac (IO.println 1)", "#eval 1", "native_decide; sorry"):
        assert not check_lean_tactic(bad).ok, bad
    assert not check_lean_tactic("  ").ok


# ---- miniF2F-rocq parsing and data -----------------------------------------------------------------------------------
def test_parse_coq_file_splits_header_statement_and_shipped_proof():
    text = ("Require Import Reals.\nOpen Scope R_scope.\n\nDefinition f (x : R) := 2 * x.\n"
            "Theorem t (x : R) :\n  f x = 2 * x.\nProof.\n  unfold f.\n  - reflexivity.\nQed.\n\n"
            "Theorem u : True.\nProof.\nAdmitted.\n")  # fmt: skip
    p = parse_coq_file(text, "t")
    assert p.header == "Require Import Reals.\nOpen Scope R_scope.\n\nDefinition f (x : R) := 2 * x."
    assert p.statement == "Theorem t (x : R) :\n  f x = 2 * x."
    assert p.proof == ("unfold f.", "- reflexivity.")
    assert parse_coq_file(text.replace("Qed.", "Admitted."), "t").proof is None
    with pytest.raises(ValueError):
        parse_coq_file("Require Import Reals.\n", "none")
    assert group_focus(["-", "split.", "+", "lia.", "}"]) == ("- split.", "+ lia.", "}")


@needs_minif2f
def test_minif2f_files_and_splits():
    train, val = load_minif2f(MINIF2F, "train"), load_minif2f(MINIF2F, "val")
    assert len(train) == 244 and len(val) == 244
    assert [p.name for p in train] == sorted(p.name for p in train)
    assert {p.source for p in train} == {"minif2f-rocq/valid"} and {p.source for p in val} == {"minif2f-rocq/test"}
    assert load_minif2f(MINIF2F, "test") == val
    for p in train + val:
        assert p.statement.split()[0] in ("Theorem", "Lemma") and "Proof." not in p.statement
        assert "Admitted" not in p.statement
    # the second theorem of imo_1966_p5 and its Admitted are dropped
    imo = next(p for p in train if p.name == "imo_1966_p5")
    assert "imo_1966_p5'" not in imo.statement and imo.proof is None


def test_partition_is_a_fixed_disjoint_split():
    items = list(CURRICULUM)
    train, val = partition(items, "train", None), partition(items, "val", None)
    assert len(val) == len(items) // 10 and len(train) + len(val) == len(items)
    assert not {p.name for p in train} & {p.name for p in val}
    assert partition(items, "test", None) == val and partition(items, "train", None) == train


def test_lean_jsonl_loader(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [{"name": "a", "formal_statement": "theorem a : 1 + 1 = 2 := by", "proof": "norm_num"},
            {"name": "b", "formal_statement": "theorem b : True := by sorry", "header": "import Mathlib"}]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    a, b = load_lean_jsonl(path)
    assert a.header.startswith("import Mathlib\nimport Aesop") and a.proof == ("norm_num",)
    assert b.header == "import Mathlib" and b.proof is None
    path.write_text('{"name": "x"}\n')
    with pytest.raises(ValueError, match="formal_statement"):
        load_lean_jsonl(path)


# ---- the Coq backend -------------------------------------------------------------------------------------------------
@coq
def test_curriculum_has_30_plus_lemmas_and_every_known_proof_checks():
    assert len(CURRICULUM) >= 30 and len({p.name for p in CURRICULUM}) == len(CURRICULUM)
    backend, state = CoqBackend(), None
    for problem in CURRICULUM:
        state = backend.open(problem.header, problem.statement, state)
        results = [state.run(t, 30) for t in problem.proof]
        assert all(r.accepted for r in results), (problem.name, [r.messages for r in results])
        assert state.complete and results[-1].complete and not any(r.complete for r in results[:-1]), problem.name
    state.close()


@coq
def test_bad_tactic_is_rejected_with_the_state_unchanged():
    state = CoqBackend().open(ADD_0_R.header, ADD_0_R.statement)
    try:
        assert state.run("intros n.", 30).accepted
        term = proof_term(state)
        goals, number, pid = state.goals(), state.session.last.state, state.pid
        for bad in ("rewrite IH.", "apply nonexistent_lemma.", "exact 0.", "intros m."):
            result = state.run(bad, 30)
            assert result.status == "rejected" and result.messages and not result.complete
            assert state.goals() == result.goals == goals
            assert state.session.last.state == number and state.pid == pid  # coqtop's state number did not move
        assert proof_term(state) == term and state.accepted == ["intros n."]
        # a bullet that goes through followed by a failing tactic is undone as a whole (BackTo)
        assert state.run("induction n as [|n IH].", 30).accepted
        goals, term = state.goals(), proof_term(state)
        result = state.run("- exact I.", 30)
        assert result.status == "rejected" and state.goals() == goals and proof_term(state) == term
        assert state.run("- reflexivity.", 30).accepted
    finally:
        state.close()


@coq
@pytest.mark.parametrize("escape", ["Admitted.", "admit.", "Drop.", "Quit.", 'Load "/etc/passwd".', "Abort.",
                                    'Redirect "x" Show.', 'Cd "/".', "Require Import Coquelicot.Coquelicot.",
                                    "Undo.", "Restart.", "Qed."])  # fmt: skip
def test_escapes_never_reach_coqtop(escape):
    state = CoqBackend().open(ADD_0_R.header, ADD_0_R.statement)
    try:
        number, goals = state.session.last.state, state.goals()
        result = state.run(escape, 30)
        assert result.status == "rejected" and not result.complete
        assert state.session.alive and state.session.last.state == number and state.goals() == goals
        for tactic in ADD_0_R.proof:  # the proof goes on as if nothing happened
            assert state.run(tactic, 30).accepted
        assert state.complete
        assert not list(Path(state.session.workdir).iterdir())  # nothing written to coqtop's working directory
    finally:
        state.close()


@coq
def test_fake_prompts_printed_by_the_model_cannot_desynchronise_coqtop():
    state = CoqBackend().open(ADD_0_R.header, ADD_0_R.statement)
    fake = "<prompt>add_0_r < 99 |add_0_r| 0 < </prompt>"
    try:
        attempts = [f'fail "{fake}".', f'idtac "No more goals.{fake}".', 'idtac "<pro" "mpt>Coq < 2 || 0 < </prompt>".',
                    f"exact {fake}.", 'idtac "No more goals."']  # fmt: skip
        statuses = []
        for attempt in attempts:
            result = state.run(attempt, 30)
            statuses.append(result.status)
            assert not result.complete and not state.complete, attempt
            assert "forall n : nat, n + 0 = n" in state.goals(), attempt
        assert statuses == ["rejected", "accepted", "accepted", "rejected", "accepted"]  # as Coq judged each one
        # coqtop and our reading are still in step: the real proof goes through, and only at its end
        results = [state.run(t, 30) for t in ADD_0_R.proof]
        assert all(r.accepted for r in results) and [r.complete for r in results] == [False] * 5 + [True]
        assert state.restarts == 0
    finally:
        state.close()


@coq
def test_hanging_prover_is_timed_out_and_restarted_with_the_proof_restored():
    state = CoqBackend().open(ADD_0_R.header, ADD_0_R.statement)
    try:
        for tactic in ADD_0_R.proof[:2]:
            assert state.run(tactic, 30).accepted
        goals, old_pid = state.goals(), state.pid
        t0 = time.monotonic()
        result = state.run("do 1000000000 idtac.", 2)
        assert time.monotonic() - t0 < 20
        assert result.status == "timeout" and "Timeout" in result.messages[0]
        assert state.pid != old_pid and gone(old_pid) and state.restarts == 1
        assert state.goals() == goals and state.accepted == list(ADD_0_R.proof[:2])
        for tactic in ADD_0_R.proof[2:]:
            assert state.run(tactic, 30).accepted
        assert state.complete
    finally:
        state.close()


@coq
def test_a_prover_killed_by_its_memory_limit_is_restarted():
    state = CoqBackend(memory_limit_mb=1024).open("", "Theorem t : True.")
    try:
        pid = state.pid
        result = state.run("let rec loop x := loop x in loop 0.", 60)  # grows until the address-space limit
        assert result.status in ("timeout", "rejected")  # Coq may also report a stack overflow itself
        if result.status == "timeout":
            assert state.pid != pid and gone(pid)
        assert state.run("exact I.", 30).complete
    finally:
        state.close()


@coq
def test_qed_failure_rejects_the_closing_tactic():
    state = CoqBackend().open("", "Theorem bad : nat -> False.")
    try:
        assert state.run("fix f 1.", 30).accepted and state.run("intros n.", 30).accepted
        goals = state.goals()
        result = state.run("exact (f n).", 30)  # closes the goal, but the fixpoint is not guarded: Qed fails
        assert result.status == "rejected" and "Qed failed" in result.messages[0] and not state.complete
        assert state.goals() == goals
    finally:
        state.close()


@coq
def test_braces_close_before_qed():
    state = CoqBackend().open("", "Theorem two : 1 = 1 /\\ 2 = 2.")
    try:
        for tactic in ("split.", "{ reflexivity.", "}", "{ reflexivity."):
            assert state.run(tactic, 30).accepted, tactic
        assert not state.complete and "}" in state.goals()
        assert state.run("}", 30).complete
    finally:
        state.close()


@coq
def test_recycled_session_is_exact():
    backend = CoqBackend()
    first = backend.open(ADD_0_R.header, ADD_0_R.statement)
    for tactic in ADD_0_R.proof:
        first.run(tactic, 30)
    assert first.complete
    pid = first.pid
    second = backend.open(ADD_0_R.header, "Theorem again : forall n : nat, n + 0 = n.", first)
    try:
        assert second.reused and second.pid == pid and first.session is None
        # BackTo removed the first theorem: it cannot be used to prove the second
        assert second.run("exact add_0_r.", 30).status == "rejected"
        assert second.run("Check add_0_r.", 30).status == "rejected"
        for tactic in ADD_0_R.proof:
            assert second.run(tactic, 30).accepted
        assert second.complete
        third = backend.open("Require Import List.", "Theorem t3 : True.", second)
        assert not third.reused and gone(pid) and third.run("exact I.", 30).complete
        third.close()
    finally:
        second.close()


@coq
def test_goals_are_cleaned():
    assert clean_goals("<infomsg>hi</infomsg>\n1 goal (ID 12)\n  \n  x : R   \n") == "hi\n1 goal\n\n  x : R"


# ---- the env ---------------------------------------------------------------------------------------------------------
@coq
def test_observation_layout_and_instructions():
    env = curriculum_env()
    try:
        obs = reset_to(env, "add_0_r")
        assert obs.startswith("Steps taken: 0/30 | accepted tactics: 0\n\nTheorem:\n  Theorem add_0_r")
        assert "Proof so far:\n  (no tactics yet)" in obs and "Current goals:" in obs and "forall n : nat" in obs
        assert "Proof log" not in obs and "Last prover feedback" not in obs
        env.step("intros n.")
        obs = env.step("rewrite IH.")[0]
        assert "Steps taken: 2/30 | accepted tactics: 1" in obs and "Proof so far:\n  1. intros n." in obs
        assert "Proof log (latest 5 steps):\n  [ok] intros n.\n  [fail] rewrite IH." in obs
        assert "Last prover feedback:\n  01. [ERROR] The reference IH was not found" in obs
        assert env.render() == obs
        for word in ("Coq", "||", "(lia || lra).", "admit", "Qed", "30"):
            assert word in env.instructions
        assert env.action_names is None and env.symbol_legend is None and env.action_separator == "||"
        assert env.split_actions("intros. || (lia || lra).") == ["intros.", "(lia || lra)."]
    finally:
        env.close()


@coq
def test_reward_table():
    env = curriculum_env()
    try:
        reset_to(env, "add_0_r")
        assert env.step("intros n.")[1] == pytest.approx(0.9)
        step = env.step("rewrite IH.")
        assert step[1] == pytest.approx(-1.1) and not step[4]["action_is_valid"]
        assert env.step("")[1] == pytest.approx(-1.1)
        assert env.step("Admitted.")[1] == pytest.approx(-1.1)
        assert env.step("idtac.")[1] == pytest.approx(-0.1)  # an accepted no-op earns nothing by default
        for tactic in ADD_0_R.proof[1:-1]:
            env.step(tactic)
        paid = env.progress_paid  # the proof is paid the rest of max_progress_reward
        assert paid == pytest.approx(5.0)
        obs, reward, terminated, truncated, info = env.step(ADD_0_R.proof[-1])
        assert reward == pytest.approx(9.9 + 5.0 - paid) and terminated and not truncated and info["success"]
        assert "No goals: the proof is complete." in obs
        with pytest.raises(RuntimeError):
            env.step("idtac.")
    finally:
        env.close()


def _episode_return(env: LeanEnv, tactics) -> float:
    reset_to(env, "add_0_r")
    total, done = 0.0, False
    for tactic in tactics:
        _, reward, terminated, truncated, _ = env.step(tactic)
        total += reward
        done = terminated or truncated
        if done:
            break
    assert done
    return total


@coq
def test_idtac_farming_earns_less_than_a_real_proof():
    """With RAGEN's reward_noop=true, 30 x `idtac.` out-earned a proof; the default must not."""
    farm = ["idtac."] * 30
    env = curriculum_env()
    try:
        assert not env.config.reward_noop
        proof, farmed = _episode_return(env, ADD_0_R.proof), _episode_return(env, farm)
        assert farmed == pytest.approx(30 * -0.1 - 2.0) and farmed < 0 < proof
    finally:
        env.close()
    env = curriculum_env(reward_noop=True, max_progress_reward=None)  # RAGEN's setting stays available
    try:
        farmed = _episode_return(env, farm)
        assert farmed == pytest.approx(30 * 0.9 - 2.0) and farmed > _episode_return(env, ADD_0_R.proof)
    finally:
        env.close()


@coq
def test_timeout_and_max_steps_rewards_and_noop_option():
    env = curriculum_env(tactic_timeout_s=2, max_actions_per_episode=3, max_turns=3, max_actions_per_turn=1,
                         reward_noop=False)
    try:
        reset_to(env, "add_0_r")
        obs, reward, terminated, truncated, info = env.step("do 1000000000 idtac.")
        assert reward == pytest.approx(-2.1) and info["prover_timeout"] == 1 and not info["action_is_valid"]
        assert "[TIMEOUT]" in obs
        step = env.step("idtac.")  # accepted but changes nothing: no +1 with reward_noop=False
        assert step[1] == pytest.approx(-0.1) and step[4]["action_is_valid"] and not step[4]["action_is_effective"]
        obs, reward, terminated, truncated, info = env.step("intros n.")
        assert reward == pytest.approx(0.9 - 2.0) and truncated and not terminated and not info["success"]
    finally:
        env.close()


@coq
def test_determinism_under_a_seed():
    a, b = curriculum_env(), curriculum_env()
    try:
        for seed in (0, 7, 10_003):
            oa, ia = a.reset(seed=seed)
            ob, ib = b.reset(seed=seed)
            assert oa == ob and ia["task_id"] == ib["task_id"]
            assert a.reset(seed=seed, options={"rollout_index": 3})[0] == oa
            for tactic in ("intros.", "foo.", "simpl."):
                assert repr(a.step(tactic)) == repr(b.step(tactic))
        ids = {a.reset(seed=s)[1]["task_id"] for s in range(40)}
        assert len(ids) == len(a.problems_for("train"))  # seed mod N covers the split
        val_ids = {a.reset(seed=s, options={"split": "val"})[1]["task_id"] for s in range(10)}
        assert not ids & val_ids
    finally:
        a.close()
        b.close()


@coq
def test_expert_proves_every_curriculum_lemma_through_the_env():
    env = curriculum_env()
    try:
        for split in ("train", "val"):
            for index in range(len(env.problems_for(split))):
                ep = Episode(env)
                ep.reset(seed=0, options={"task_index": index, "split": split})
                while not ep.done:
                    plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
                    assert plan, env.problem.name
                    ep.step_turn(" || ".join(plan))
                assert ep.success and not ep.truncated, env.problem.name
                assert ep.turn <= env.config.max_turns
    finally:
        env.close()


@coq
def test_expert_replans_only_on_its_path():
    env = curriculum_env()
    try:
        reset_to(env, "add_0_r")
        assert env.expert.next_actions(env, 2) == list(ADD_0_R.proof[:2])
        assert "Induction on n" in env.expert.rationale(env)
        env.step("intros n.")
        assert env.expert.next_actions(env, 1) == [ADD_0_R.proof[1]]
        env.step("rewrite IH.")  # rejected: still on the path
        assert env.expert.next_actions(env, 1) == [ADD_0_R.proof[1]]
        env.step("idtac.")  # accepted off the path: no plan any more
        assert env.expert.next_actions(env, 4) == []
        assert env.expert.rationale(env).startswith("I do not know")
    finally:
        env.close()


@coq
def test_close_leaves_no_coqtop_behind():
    before = set(coqtop_children())
    env = curriculum_env()
    env.reset(seed=1)
    pid = env.proof_state.pid
    assert pid in coqtop_children()
    env.reset(seed=2)  # another lemma: the old coqtop is reused or killed, never leaked
    assert len(set(coqtop_children()) - before) == 1
    pid = env.proof_state.pid
    env.close()
    env.close()
    assert gone(pid) and set(coqtop_children()) <= before


@coq
def test_three_curriculum_lemmas_through_the_prover_and_admitted_rejected():
    env = curriculum_env()
    try:
        for name in ("add_0_r", "app_nil_r", "r_linear"):
            reset_to(env, name)
            assert env.step("Admitted.")[4]["action_is_valid"] is False
            problem = env.problem
            results = [env.step(t) for t in problem.proof]
            assert results[-1][2] and results[-1][4]["success"], name
            assert all(r[4]["action_is_valid"] for r in results)
    finally:
        env.close()


@coq
def test_unloadable_statements_are_detected_cached_and_skipped(tmp_path):
    for sub in ("valid", "test"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "a_broken.v").write_text("Require Import NoSuchLibrary.\nTheorem a_broken : True.\nProof.\n")
        (tmp_path / sub / "b_fine.v").write_text("Theorem b_fine : 1 = 1.\nProof.\nreflexivity.\nQed.\n")
    env = ragen.make_env("lean", data_path=str(tmp_path))
    try:
        assert env.deterministic is False  # the expert knows the proof of b_fine only
        obs, info = env.reset(seed=0)  # index 0 = a_broken: skipped
        assert info["problem"] == "b_fine" and info["task_index"] == 1
        assert env.expert.next_actions(env, 4) == ["reflexivity."]  # the proof shipped in the file
        t0 = time.monotonic()
        assert env.reset(seed=2)[1]["problem"] == "b_fine"
        assert time.monotonic() - t0 < 5  # cached: a_broken is not loaded again
        assert env.step("reflexivity.")[4]["success"]
    finally:
        env.close()
    strict = ragen.make_env("lean", data_path=str(tmp_path), skip_unloadable=False)
    try:
        with pytest.raises(ragen.ConfigError, match="NoSuchLibrary"):
            strict.reset(seed=0)
    finally:
        strict.close()


@coq
@needs_minif2f
def test_minif2f_statements_are_proved_by_known_short_proofs():
    bundled = bundled_minif2f_proofs()
    assert len(bundled) >= 5
    env = ragen.make_env("lean", data_path=str(MINIF2F))
    try:
        train = env.problems_for("train")
        for key, entry in bundled.items():
            assert key.startswith("valid/")
            index = next(i for i, p in enumerate(train) if p.name == key.split("/", 1)[1])
            env.reset(seed=0, options={"task_index": index})
            assert env.expert.next_actions(env, 30) == entry["proof"]
            steps = [env.step(t) for t in entry["proof"]]
            assert steps[-1][2] and steps[-1][4]["success"], (key, env.render())
    finally:
        env.close()


@coq
@needs_minif2f
def test_bundled_unloadable_list_matches_the_data():
    listed = known_unloadable().get("8.16.1", {})
    assert 5 <= len(listed) <= 40
    names = {f"valid/{p.name}" for p in load_minif2f(MINIF2F, "train")} | {
        f"test/{p.name}" for p in load_minif2f(MINIF2F, "val")
    }
    assert set(listed) <= names
    backend = CoqBackend()
    if backend.version() != "8.16.1":
        pytest.skip(f"the bundled list is for Coq 8.16.1, this is {backend.version()}")
    for key in sorted(listed)[:2]:  # spot-check that listed items really fail to load here
        problem = parse_coq_file((MINIF2F / f"{key}.v").read_text(), key)
        with pytest.raises(ProblemLoadError):
            backend.open(problem.header, problem.statement).close()


# ---- contract checks -------------------------------------------------------------------------------------------------
@coq
def test_check_env_lean_easy():
    checks = check_env("lean-easy")
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.name == "expert" and "20/20" in c.detail for c in checks)


@coq
@needs_minif2f
def test_check_env_lean():
    checks = check_env("lean", data_path=str(MINIF2F))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@coq
@pytest.mark.filterwarnings("ignore:.*alternative render modes")  # ragen envs are not made through gymnasium.make
@pytest.mark.parametrize("name", ["lean-easy", "lean"])
def test_gymnasium_check_env(name):
    if name == "lean" and not MINIF2F.is_dir():
        pytest.skip(f"miniF2F-rocq data not found at {MINIF2F}")
    env = ragen.make_env(name, **({"data_path": str(MINIF2F)} if name == "lean" else {}))
    gym_checker.check_env(env, skip_close_check=False)
    env.close()


@coq
def test_random_text_never_crashes_the_env():
    env = curriculum_env()
    rng = env.action_space
    rng.seed(0)
    try:
        env.reset(seed=5)
        for _ in range(25):
            obs, reward, terminated, truncated, info = env.step(rng.sample())
            assert isinstance(obs, str) and info["action_is_valid"] in (True, False)
            if terminated or truncated:
                env.reset(seed=5)
        assert env.proof_state.session.alive
    finally:
        env.close()


# ---- Lean 4: the protocol layer against a stand-in REPL; the real toolchain when present -----------------------------
@pytest.fixture
def fake_repl(tmp_path):
    """An executable speaking the REPL protocol (tests/fake_lean_repl.py) and the log of requests it received."""
    log = tmp_path / "requests.jsonl"
    exe = tmp_path / "repl"
    exe.write_text(f'#!/bin/sh\nFAKE_REPL_LOG="{log}" exec "{sys.executable}" "{HERE / "fake_lean_repl.py"}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, log


def requests(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_lean_repl_protocol_layer(fake_repl):
    exe, log = fake_repl
    backend = LeanReplBackend(str(exe))
    assert backend.available()[0]
    state = backend.open("import Mathlib", "theorem t : 2 := by")
    try:
        sent = requests(log)
        assert sent[0] == {"cmd": "import Mathlib"}
        assert sent[1] == {"cmd": "theorem t : 2 := by\n  sorry", "env": 0}
        assert state.goals() == "⊢ goal 0\n⊢ goal 1"
        assert state.run("step", 10).accepted and state.goals() == "⊢ goal 1"
        assert requests(log)[-1] == {"tactic": "step", "proofState": 0}
        for bad, text in (("bad", "type mismatch"), ("crash", "unknown tactic"), ("hole", "sorry"), ("sorry", "sorry")):
            result = state.run(bad, 10)
            assert result.status == "rejected" and text in result.messages[0] and state.goals() == "⊢ goal 1"
        result = state.run("hang", 1)
        assert result.status == "timeout" and state.restarts == 1 and state.goals() == "⊢ goal 1"
        replay = requests(log)[-3:]  # header, statement, the accepted tactic again
        assert replay[0] == {"cmd": "import Mathlib"} and replay[2]["tactic"] == "step"
        result = state.run("exit", 5)
        assert result.status == "timeout" and "died" in result.messages[0] and state.restarts == 2
        final = state.run("step", 10)
        assert final.complete and state.complete and state.accepted == ["step", "step"]
        pid = state.pid
        again = backend.open("import Mathlib", "theorem u : 1 := by sorry", state)
        assert again.reused and again.pid == pid and requests(log)[-1]["env"] == 0
        assert again.run("step", 10).complete
        again.close()
        assert gone(pid)
    finally:
        state.close()


def test_lean_repl_load_errors(fake_repl):
    exe, _ = fake_repl
    with pytest.raises(ProblemLoadError, match="unexpected statement"):
        LeanReplBackend(str(exe)).open("import Mathlib", "theorem t : True := by")


def test_lean_helpers():
    assert proof_skeleton("theorem t : x = 1 := by sorry") == "theorem t : x = 1 := by"
    assert proof_skeleton("theorem t : x = 1 :=") == "theorem t : x = 1 := by"
    assert proof_skeleton("theorem t : x = 1") == "theorem t : x = 1 := by"
    assert (
        indent_tactics(["intro x", "cases h with\n| inl h => simp"]) == "  intro x\n  cases h with\n  | inl h => simp"
    )
    assert tactic_verdict({"proofState": 3, "goals": []}) is None
    assert "does not check" in tactic_verdict({"proofState": 3, "goals": [], "proofStatus": "Error: kernel"})
    assert tactic_verdict({"message": "Lean error:\nunknown"}) == "unknown"
    assert kimina_result({"results": [{"id": "a", "response": {"messages": []}}]}) == {"messages": []}
    assert kimina_result({"id": "a", "error": "Lean REPL command timed out in 5 seconds"})["error"].endswith("seconds")
    assert kimina_result([{"id": "a", "response": {"message": "bad"}}]) == {"error": "bad"}


def test_lean4_env_over_the_protocol_layer(fake_repl, tmp_path):
    exe, _ = fake_repl
    data = tmp_path / "p.jsonl"
    data.write_text("\n".join(json.dumps({"name": f"p{k}", "formal_statement": f"theorem p{k} : {k} := by",
                                          "proof": "\n".join(["step"] * k)}) for k in range(1, 12)))  # fmt: skip
    env = ragen.make_env("lean4", lean_repl_path=str(exe), data_path=str(data))
    try:
        assert env.split_actions("step || norm_num [a || b] || simp") == ["step", "norm_num [a || b]", "simp"]
        obs, info = env.reset(seed=3)
        assert info["task_id"].startswith("lean/lean4/jsonl/") and "Lean 4" in env.instructions
        steps = [env.step(t) for t in env.expert.next_actions(env, 30)]
        # every proof earns the whole progress cap (5) and the success reward, less 0.1 a tactic
        assert steps[-1][4]["success"] and sum(s[1] for s in steps) == pytest.approx(15 - 0.1 * len(steps))
    finally:
        env.close()


class _KiminaStandIn(BaseHTTPRequestHandler):
    """Answers /health and /api/check like a Kimina server would for a proof 'by step' (protocol layer only)."""

    seen: list = []

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body))
        code = body["snippets"][0]["code"]
        lines = code.split(":= by\n", 1)[1].splitlines()
        if any(line.strip() == "sorry" for line in lines):
            response = {"env": 0, "sorries": [{"goal": "⊢ 1 = 1", "proofState": 0}]}
        elif any(line.strip() == "bad" for line in lines):
            response = {"env": 0, "messages": [{"severity": "error", "data": "unknown tactic"}]}
        elif lines == ["  rfl"]:
            response = {"env": 0, "messages": []}
        else:
            response = {"env": 0, "messages": [{"severity": "error", "data": "unsolved goals\n⊢ 1 = 1"}]}
        data = json.dumps({"results": [{"id": body["snippets"][0]["id"], "time": 0.1, "response": response}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_kimina_protocol_layer():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KiminaStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        backend = KiminaBackend(f"http://127.0.0.1:{server.server_port}", api_key="k")
        assert backend.available()[0]
        state = backend.open("import Mathlib", "theorem t : 1 = 1 := by")
        assert state.goals() == "⊢ 1 = 1"
        path, auth, body = _KiminaStandIn.seen[-1]
        assert path == "/api/check" and auth == "Bearer k"
        assert body["snippet"] == body["snippets"][0] and body["snippets"][0]["code"].startswith("import Mathlib\n\n")
        assert state.run("bad", 5).status == "rejected"
        assert state.run("skip", 5).accepted and not state.complete and state.goals() == "⊢ 1 = 1"
        assert state.run("sorry", 5).status == "rejected"
        assert not state.run("rfl", 5).complete  # re-checked after 'skip': skip + rfl is not just rfl here
        assert _KiminaStandIn.seen[-1][2]["snippets"][0]["code"].endswith("  skip\n  rfl\n")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(not (os.environ.get("RAGEN_LEAN_REPL") or os.environ.get("RAGEN_KIMINA_URL")),
                    reason="Lean 4 toolchain or Kimina server not available")  # fmt: skip
def test_real_lean4_prover(tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"name": "two", "formal_statement": "theorem two : (1 : ℕ) + 1 = 2 := by",
                                "proof": "norm_num"}) + "\n")  # fmt: skip
    env = ragen.make_env("lean4", data_path=str(data), val_size=0)
    try:
        env.reset(seed=0)
        assert env.step("exact bogus_lemma")[4]["action_is_valid"] is False
        assert env.step("sorry")[4]["action_is_valid"] is False
        assert env.step("norm_num")[4]["success"]
    finally:
        env.close()


# ---- training smoke test ---------------------------------------------------------------------------------------------
@coq
@pytest.mark.slow
def test_two_step_grpo_run(tmp_path):
    # lean-easy's 8 turns x 400 tokens take a tiny model on a loaded CPU many minutes: keep it short
    _, rows = run_two_steps("lean-easy", tmp_path, "env.options.max_turns=3")
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2]
    assert "rollout/lean-easy/success" in rows[1] and "val/lean-easy/success" in rows[0]
