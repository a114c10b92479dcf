"""The rollout engine protocol: every engine defines every member the core calls, and one end-of-turn cut."""

import pytest

from ragen.rollout.engine import Generation, RolloutEngine, cut_at_stop
from ragen.rollout.expert import ExpertEngine
from ragen.rollout.hf import HFEngine
from ragen.rollout.vllm import VLLMEngine

MEMBERS = sorted(name for name in vars(RolloutEngine) if not name.startswith("_"))


def test_the_protocol_declares_what_the_core_calls():
    assert MEMBERS == ["close", "eos_token_ids", "generate", "generate_for_envs", "logprobs_exact", "sync_weights"]
    for name in MEMBERS:
        member = vars(RolloutEngine)[name]
        assert (member.fget if isinstance(member, property) else member).__doc__, name


@pytest.mark.parametrize("cls", [HFEngine, VLLMEngine, ExpertEngine])
def test_every_engine_defines_every_member(cls):
    """On the class itself (the core calls them directly; vLLM need not be importable to check)."""
    missing = [name for name in MEMBERS if not any(name in vars(k) for k in cls.__mro__ if k is not object)]
    assert missing == []


def test_engines_without_a_model_say_their_log_probs_are_not_the_trainers():
    expert = ExpertEngine(tokenizer=None, eos_id=2)
    assert isinstance(expert, RolloutEngine)
    assert expert.logprobs_exact is False and expert.sync_weights(None) == {} and expert.close() is None
    assert VLLMEngine.__new__(VLLMEngine).logprobs_exact is False


def test_cut_at_stop_keeps_the_first_stop_id_and_drops_what_follows():
    assert cut_at_stop([5, 6, 2, 7, 2], [-1.0, -2.0, -3.0, -4.0, -5.0], {2, 9}, 8) == \
        Generation([5, 6, 2], [-1.0, -2.0, -3.0], "stop")
    assert cut_at_stop([9], [-0.5], {2, 9}, 8) == Generation([9], [-0.5], "stop")


def test_cut_at_stop_without_a_stop_id_is_cut_at_the_budget():
    assert cut_at_stop([5, 6, 7, 8], [-1.0, -2.0, -3.0, -4.0], {2}, 3) == \
        Generation([5, 6, 7], [-1.0, -2.0, -3.0], "length")
    assert cut_at_stop([5, 6], [-1.0, -2.0], {2}, 3) == Generation([5, 6], [-1.0, -2.0], "length")
    assert cut_at_stop([], [], {2}, 3) == Generation([], [], "length")
