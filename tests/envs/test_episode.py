"""The core's turn handling (spec 1.2), prompt frame (1.3) and parsing (1.4)."""

import attrs
import pytest

import ragen
from ragen import option
from ragen.contract.parsing import parse_response
from ragen.envs.episode import FORMAT_PENALTY, Episode
from ragen.envs.prompt import format_reward, reward_text, system_prompt, turn_text


@attrs.frozen(kw_only=True)
class CountConfig(ragen.EnvConfig):
    target: int = option(3, "Increments needed.")


class CountEnv(ragen.Env):
    """Say `Inc` `target` times; `Nop` is valid and does nothing."""

    config_cls = CountConfig

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Inc", "Nop"]
        self.instructions = "Count up."

    def _reset(self, seed, options):
        self.n = 0
        self.task_id = f"count/s{seed}"
        return "n=0", {}

    def _step(self, action):
        name = self.canonical_action(action)
        self.n += name == "Inc"
        done = self.n >= self.config.target
        info = {"success": done, "action_is_valid": name is not None, "action_is_effective": name == "Inc"}
        return f"n={self.n}", (1.0 if done else -0.1) if name == "Inc" else 0.0, done, False, info


def episode(**cfg):
    return Episode(CountEnv(CountConfig(**cfg)))


def test_actions_split_validated_and_capped_per_turn():
    ep = episode(max_actions_per_turn=2, target=5)
    ep.reset(seed=0)
    res = ep.step_turn("inc || Inc || Inc")  # third piece dropped silently (RAGEN)
    assert res.executed == ["inc", "Inc"] and res.penalty == 0.0 and ep.actions_used == 2
    res = ep.step_turn("Inc || Jump")
    assert res.executed == ["Inc"] and res.invalid == ["Jump"] and res.penalty == FORMAT_PENALTY
    assert ep.actions_used == 3  # the invalid piece used no budget


def test_no_match_or_no_action_is_penalised_and_consumes_the_turn():
    ep = episode()
    ep.reset(seed=0)
    for answer in (None, "", " || "):
        res = ep.step_turn(answer)
        assert res.penalty == FORMAT_PENALTY and res.executed == [] and res.reward == 0.0
    assert ep.turn == 3 and ep.no_action_last_turn and ep.obs == "n=0"


def test_episode_budget_and_turn_limits():
    ep = episode(max_turns=5, max_actions_per_turn=2, max_actions_per_episode=3, target=10)
    ep.reset(seed=0)
    ep.step_turn("Nop || Nop")
    res = ep.step_turn("Nop || Nop")
    assert res.executed == ["Nop"] and res.done and res.truncated and not res.success
    ep = episode(max_turns=2, target=10)
    ep.reset(seed=0)
    ep.step_turn(None)
    assert ep.step_turn(None).done and ep.truncated


def test_success_ends_and_rewards_sum():
    ep = episode(target=3)
    ep.reset(seed=0)
    r1 = ep.step_turn("Inc || Inc")
    r2 = ep.step_turn("Inc || Inc")  # stops at the terminating step
    assert r1.reward == pytest.approx(-0.2) and r2.executed == ["Inc"] and r2.reward == 1.0
    assert ep.done and ep.success and not ep.truncated


class Needs5(CountConfig):
    min_actions_to_solve = 5


def test_budget_validator_names_keys():
    with pytest.raises(ragen.ConfigError, match="max_actions_per_episode: must be >= 1"):
        CountConfig(max_actions_per_episode=0)
    with pytest.raises(ragen.ConfigError, match="needs >= 5 actions but the budget allows 4.*allow_unreachable"):
        Needs5(max_turns=2, max_actions_per_turn=2)
    assert Needs5(max_turns=2, max_actions_per_turn=2, allow_unreachable=True)
    assert Needs5(max_turns=3, max_actions_per_turn=2)


def test_stepping_after_end_raises():
    env = CountEnv(CountConfig(target=1))
    env.reset(seed=0)
    env.step("Inc")
    with pytest.raises(RuntimeError, match="over"):
        env.step("Inc")


class IndexedCountEnv(CountEnv):
    reset_options = ("task_index",)

    def _reset(self, seed, options):
        self.seen_options = dict(options)
        return super()._reset(seed, options)


def test_reset_options_declared_are_passed_on_and_others_refused_by_the_base():
    env = IndexedCountEnv()
    env.reset(seed=0, options={"task_index": 4, "split": "val", "rollout_index": 2})
    assert env.seen_options == {"task_index": 4} and env.split == "val" and env.rollout_index == 2
    with pytest.raises(ragen.ConfigError, match=r"unknown reset options \['levle', 'zzz'\]"):
        env.reset(seed=0, options={"zzz": 1, "levle": 2, "task_index": 0})
    assert env.seen_options == {"task_index": 4}  # refused before _reset ran


def test_reset_options_unset_passes_every_key_on():
    class Open(IndexedCountEnv):
        reset_options = None

    env = Open()
    env.reset(seed=0, options={"anything": 1, "split": "test"})
    assert env.seen_options == {"anything": 1} and env.split == "test"


def test_register_variants_registers_each_variant_with_the_env_config():
    calls = []
    variants = {"count": ({"target": 2}, "two"), "count-far": ({"target": 9, "max_turns": 9}, "nine")}
    ragen.register_variants(lambda *a, **kw: calls.append((a, kw)), CountEnv, variants)
    assert calls == [(("count", CountEnv), {"config": CountConfig, "defaults": {"target": 2}, "description": "two"}),
                     (("count-far", CountEnv), {"config": CountConfig, "defaults": {"target": 9, "max_turns": 9},
                                                "description": "nine"})]
    calls.clear()
    ragen.register_variants(lambda *a, **kw: calls.append((a, kw)), len, {"n": ({}, "d")}, config=CountConfig)
    assert calls == [(("n", len), {"config": CountConfig, "defaults": {}, "description": "d"})]
    with pytest.raises(TypeError, match="config_cls"):
        ragen.register_variants(lambda *a, **kw: None, len, {"n": ({}, "d")})


@pytest.mark.parametrize(
    "response, matched, think, answer",
    [
        ("I go up</think><answer>Up || Left</answer><|im_end|>", True, "I go up", "Up || Left"),
        ("<think>x</think>\n<answer> Up </answer>", True, "x", "Up"),
        ("", False, "", ""),
        ("no tags at all", False, "", ""),
        ("</think>" + "a" * 10_000, False, "", ""),
        ("<answer>Up</answer>", False, "", ""),  # the prefilled <think> is never closed
    ],
)
def test_parse_think_answer(response, matched, think, answer):
    assert parse_response(response) == ragen.Parsed(matched, think, answer)


def test_parse_answer_only():
    assert parse_response("<answer>Up</answer>", enable_think=False).answer == "Up"


def test_prompt_frame_exact():
    env = CountEnv()
    env.symbol_legend = {"n": "count"}
    assert system_prompt(env) == (
        "You're a helpful assistant. Count up.\nThe meaning of each symbol in the state is:\nn: count"
        "\nYour available actions are:\nInc, Nop"
        '\nYou can make up to 2 actions, separated by the action separator " || "\n'
    )
    assert system_prompt(env, compat="ragen").endswith('up to 10 actions, separated by the action separator " || "\n')
    assert turn_text(2, "n=1", 8, 120, warning=True) == (
        "\nTurn 2:\nState:\nn=1\nNo valid action provided previously. Environment state remains the same. "
        "Please try again.\nYou have 8 actions left. Always output: <think> [Your thoughts] </think> <answer> "
        "[your answer] </answer> with no extra text. Strictly follow this format. "
        "Max response length: 120 words (tokens).\n"
    )


@pytest.mark.parametrize(
    "r, text", [(-0.1 - 0.2, "-0.3"), (10.7, "10.7"), (0.0, "0.0"), (-0.0, "0.0"), (1 / 3, "0.3333")]
)
def test_reward_formatting(r, text):
    assert format_reward(r) == text
    assert reward_text(r) == f"Reward:\n{text}\n"
    assert format_reward(-0.1 - 0.2, compat="ragen") == "-0.30000000000000004"
