"""ragen-bandit: arm draws, payouts and their statistics, group prompts, noise seeding, expert, the env contract."""

import collections
import math

import pytest
from ragen_bandit.env import PROMPT, TEST_PAIRS, TRAIN_PAIRS, BanditConfig, BanditEnv, draw_arms

import ragen
from ragen.envs.episode import Episode
from ragen.envs.prompt import system_prompt
from ragen.rollout.groups import EnvGroups
from ragen.testing import env_contract_tests, run_two_steps

VARIANTS = ["bandit", "bandit-test"]

def make(**kw):
    return BanditEnv(BanditConfig(max_turns=1, max_actions_per_turn=1, max_actions_per_episode=1, **kw))


# ---- registration and config --------------------------------------------------------------------------------------
def test_variants_registered_with_budget():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    assert all(listed.get(name) == "ragen-bandit" for name in VARIANTS)
    for name, pair_set in (("bandit", "train"), ("bandit-test", "test")):
        cfg = ragen.make_env(name).config
        assert cfg.pair_set == pair_set
        assert (cfg.low_reward, cfg.high_reward, cfg.high_prob) == (0.1, 1.0, 0.25)
        assert (cfg.max_turns, cfg.max_actions_per_turn, cfg.max_actions_per_episode, cfg.response_length) == (
            1,
            1,
            1,
            500,
        )


@pytest.mark.parametrize(
    "options", [{"pair_set": "val"}, {"high_prob": 1.5}, {"high_prob": -0.1}, {"low_reward": math.nan},
                {"high_reward": math.inf}, {"max_turns": 0}]
)
def test_bad_config_is_a_config_error(options):
    with pytest.raises(ragen.ConfigError):
        ragen.make_env("bandit", **options)


def test_pair_sets_are_ragens_and_disjoint():
    assert len(TRAIN_PAIRS) == 12 and len(TEST_PAIRS) == 8
    assert ("Teacher", "Trader") in TRAIN_PAIRS and ("CivilServant", "StartupAccelerator") in TEST_PAIRS
    train_names = {n for p in TRAIN_PAIRS for n in p}
    test_names = {n for p in TEST_PAIRS for n in p}
    assert len(train_names) == 24 and len(test_names) == 16 and not train_names & test_names


# ---- arm draw and prompt ------------------------------------------------------------------------------------------
def test_draw_is_uniform_over_pairs_and_order():
    n = 4800
    draws = [draw_arms(TRAIN_PAIRS, seed) for seed in range(n)]
    assert draws == [draw_arms(TRAIN_PAIRS, seed) for seed in range(n)]  # a pure function of the seed
    pairs = collections.Counter((d.low, d.high) for d in draws)
    assert set(pairs) == set(TRAIN_PAIRS)
    assert all(abs(c / n - 1 / 12) < 0.02 for c in pairs.values()), pairs
    swapped = sum(d.shown == (d.high, d.low) for d in draws) / n
    assert abs(swapped - 0.5) < 0.03
    assert all(set(d.shown) == {d.low, d.high} for d in draws)


def test_observation_and_prompt_text():
    env = ragen.make_env("bandit")
    obs, info = env.reset(seed=10000)
    arms = draw_arms(TRAIN_PAIRS, 10000)
    a, b = arms.shown
    assert obs == (
        "You are playing a bandit game. Goal: maximize your total reward by choosing which arm to pull.\nRules:\n"
        f"1. There are 2 arms, named {a} and {b}.\n2. Each arm has its own reward distribution, related to its name.\n"
        "3. Reason about what each name suggests about how its rewards behave.\n"
        f"4. Choose the arm you expect to pay more on average, answering like <answer> {a} </answer> or "
        f"<answer> {b} </answer>."
    )
    assert obs == PROMPT.format(a=a, b=b) and env.render() == obs
    assert env.action_names == [a, b] and env.instructions == ""
    assert info["task_id"] == f"bandit/train/{a}-{b}/s10000" and info["high_risk_arm"] == arms.high
    assert system_prompt(env) == f"You're a helpful assistant. \nYour available actions are:\n{a}, {b}"


def test_bandit_test_uses_only_held_out_pairs():
    env = ragen.make_env("bandit-test")
    seen = set()
    for seed in range(300):
        env.reset(seed=seed)
        assert (env.arms.low, env.arms.high) in TEST_PAIRS
        seen.add((env.arms.low, env.arms.high))
    assert seen == set(TEST_PAIRS)


@pytest.mark.parametrize("name", VARIANTS)
def test_group_members_share_the_first_observation(name):
    """Acceptance 2: every member of a group (rollout_index 0..group_size-1) sees the same prompt."""
    groups = EnvGroups(name, group_size=5, n_groups=8)
    try:
        for step in range(3):
            by_group = collections.defaultdict(set)
            for slot in groups.slots(step):
                obs, info = slot.env.reset(seed=slot.seed, options=slot.reset_options)
                by_group[slot.group_id].add((obs, info["task_id"], tuple(slot.env.action_names)))
            assert len(by_group) == 8 and all(len(v) == 1 for v in by_group.values()), by_group
            assert len({next(iter(v)) for v in by_group.values()}) >= 2  # different groups, different prompts
    finally:
        groups.close()


# ---- payouts ------------------------------------------------------------------------------------------------------
def test_empirical_arm_means_over_10000_seeded_pulls():
    """Acceptance 2: low-risk mean 0.1 and high-risk mean 0.25, each within 0.02, over 10,000 seeded pulls."""
    env = ragen.make_env("bandit")
    totals = {"low": [], "high": []}
    for seed in range(10_000):
        for kind in ("low", "high"):
            env.reset(seed=seed)
            arm = getattr(env.arms, kind)
            obs, reward, terminated, truncated, info = env.step(arm)
            assert terminated and not truncated and info["success"] is (kind == "high")
            assert obs == f"{arm}: {reward} points"
            totals[kind].append(reward)
    assert set(totals["low"]) == {0.1} and set(totals["high"]) == {0.0, 1.0}
    low, high = (sum(v) / len(v) for v in (totals["low"], totals["high"]))
    assert abs(low - 0.1) <= 0.02 and abs(high - 0.25) <= 0.02, (low, high)
    env.close()


def test_payout_settings_from_config():
    env = make(low_reward=0.15, high_reward=2.0, high_prob=1.0)
    env.reset(seed=3)
    assert env.step(env.arms.low)[1] == 0.15
    env.reset(seed=3)
    assert env.step(env.arms.high)[1] == 2.0
    never = make(high_prob=0.0)
    assert all(never.reset(seed=s) and never.step(never.arms.high)[1] == 0.0 for s in range(200))


def _high_payouts(noise, rollout_index, seeds=range(200)):
    env = make(noise=noise)
    out = []
    for seed in seeds:
        env.reset(seed=seed, options={"rollout_index": rollout_index})
        out.append(env.step(env.arms.high)[1])
    return out


def test_noise_per_rollout_vs_shared():
    assert _high_payouts("shared", 0) == _high_payouts("shared", 3)
    per0, per1 = _high_payouts("per_rollout", 0), _high_payouts("per_rollout", 1)
    assert per0 != per1 and per0 == _high_payouts("per_rollout", 0)


def test_same_seed_same_episode():
    a, b = ragen.make_env("bandit"), ragen.make_env("bandit")
    for seed in range(50):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        arm = a.action_names[seed % 2]
        assert repr(a.step(arm)) == repr(b.step(arm))


# ---- actions ------------------------------------------------------------------------------------------------------
def test_actions_are_case_insensitive_and_end_the_episode():
    env = ragen.make_env("bandit")
    env.reset(seed=11)
    high = env.arms.high
    assert env.validate_action(f"  {high.upper()} ") and not env.validate_action(f"{high} please")
    obs, reward, terminated, truncated, info = env.step(high.lower())
    assert obs.startswith(f"{high}: ") and terminated and info["success"] and info["action_is_effective"]
    with pytest.raises(RuntimeError):
        env.step(high)


@pytest.mark.parametrize("text", ["", "arm 1", "Teacher Trader", "0", "<answer>x</answer>"])
def test_unknown_arm_is_a_noop_with_feedback(text):
    env = ragen.make_env("bandit")
    first, _ = env.reset(seed=10000)
    a, b = env.action_names
    obs, reward, terminated, truncated, info = env.step(text)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"success": False, "action_is_valid": False, "action_is_effective": False}
    assert obs.startswith(first) and f"answer with exactly one arm name, {a} or {b}" in obs
    assert not env.validate_action(text)
    assert env.step(a)[2]  # the episode is still playable


def test_core_keeps_one_action_and_penalises_bad_answers():
    env = ragen.make_env("bandit")
    ep = Episode(env)
    ep.reset(seed=10000)
    a, b = env.action_names
    res = ep.step_turn(f"{b} || {a}")  # 1 action per turn: the second is dropped
    assert res.executed == [b] and res.done and res.penalty == 0.0 and ep.success is (b == env.arms.high)
    ep.reset(seed=10000)
    res = ep.step_turn("the risky one")
    assert res.executed == [] and res.penalty < 0 and res.done and res.truncated and not ep.success


# ---- expert -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", VARIANTS)
def test_expert_picks_the_high_risk_arm(name):
    env = ragen.make_env(name)
    for seed in range(200):
        ep = Episode(env)
        ep.reset(seed=seed)
        plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
        assert plan == [env.arms.high]
        why = env.expert.rationale(env)
        assert env.arms.low in why and why.endswith(f"so I pull {env.arms.high}.")
        ep.step_turn(plan[0])
        assert ep.done and ep.success
        assert env.expert.next_actions(env, 1) == []


# ---- the env contract ---------------------------------------------------------------------------------------------
test_ragen_check_env, test_gymnasium_check_env = env_contract_tests(VARIANTS)


@pytest.mark.slow
def test_two_step_grpo_run(tmp_path):
    _, rows = run_two_steps("bandit", tmp_path)
    steps = [r for r in rows if "rollout/success" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all("rollout/bandit/success" in r for r in steps)  # (info metrics only appear once an action ran)
    assert rows[0]["step"] == 0 and "val/success" in rows[0]
