"""ragen's chat-template handling is not ChatML-shaped: a Gemma 3 tokenizer (no system role, roles user/model, turns
ending on <end_of_turn> rather than the tokenizer's <eos>, a BOS first) gets its family's template from the packaged
preset and runs token-exact rollouts; a tokenizer with no template and no preset is refused in one line.

Fast: the built-in tiny model's tokenizer with Gemma's special tokens added, and the tiny model resized to them (no
Gemma download; tests/models/test_gemma3_run.py runs the real model where its package is installed)."""

import copy
import subprocess

import pytest
from conftest import ragen_cmd

import ragen
from ragen.models.load import PACKAGED_GGUF, ensure_chat_template, load_model_and_tokenizer
from ragen.models.templates import GEMMA3_CHAT_TEMPLATE
from ragen.rollout import ChatFormat, EnvGroups, HFEngine, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.context import stop_ids
from ragen.rollout.expert import ExpertEngine

GEMMA_SPECIALS = ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_model_and_tokenizer("tiny", tmp_path_factory.mktemp("tiny"), ["frozenlake"])


def gemma_like(tok):
    """The tiny tokenizer as a Gemma 3 GGUF file's loads: Gemma's specials (bos <bos>, eos <eos>) and no template."""
    from tokenizers import AddedToken

    tok = copy.deepcopy(tok)
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA_SPECIALS], special_tokens=True)
    tok.bos_token, tok.eos_token = "<bos>", "<eos>"
    tok.chat_template = None
    return tok


@pytest.fixture(scope="module")
def gemma(tiny):
    """(model, tokenizer): the tiny model with its embeddings grown to the Gemma specials, and the template the
    ``gemma3`` preset supplies."""
    model, tok = copy.deepcopy(tiny[0]), gemma_like(tiny[1])
    ensure_chat_template(tok, "gemma3")
    model.resize_token_embeddings(len(tok))
    return model, tok


def ids(tok, *tokens):
    return [tok.convert_tokens_to_ids(t) for t in tokens]


def test_the_gemma3_preset_supplies_gemmas_template(gemma):
    _, tok = gemma
    assert PACKAGED_GGUF["gemma3"].chat_template == GEMMA3_CHAT_TEMPLATE == tok.chat_template
    assert PACKAGED_GGUF["smollm2"].chat_template is None  # its GGUF file carries its own
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                                    {"role": "assistant", "content": "A"}], tokenize=False)
    # no system role: the system text opens the first user turn; the assistant is 'model'
    assert text == "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n"


def test_chat_format_reads_gemmas_turns(gemma, tiny):
    model, tok = gemma
    eot, sot, bos, eos = ids(tok, "<end_of_turn>", "<start_of_turn>", "<bos>", "<eos>")
    fmt = ChatFormat(tok, enable_think=False)  # the prefix-preservation check passes
    # a turn ends on <end_of_turn>, not on the tokenizer's eos <eos>; <start_of_turn> opens a message
    assert (fmt.eos_id, fmt.eos_text, fmt.closing_text) == (eot, "<end_of_turn>", "\n") and eot != tok.eos_token_id
    assert fmt.start_id == sot
    assert {eos, eot, sot} <= set(stop_ids(tok, model)) and {eot, sot} <= set(HFEngine(model, tok).eos_token_ids)
    assert fmt.prompt_text("S", "\nTurn 1:\nU\n") == (
        "<bos><start_of_turn>user\nS\n\nTurn 1:\nU<end_of_turn>\n<start_of_turn>model\n<answer>")
    assert fmt.delta_text("U2") == "\n<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n<answer>"
    prompt = fmt.prompt_ids("S", "U")
    assert prompt[0] == bos and prompt.count(bos) == 1 and prompt.count(sot) == 2 and prompt.count(eot) == 1
    assert eot not in ChatFormat(tiny[1]).encode(fmt.delta_text("U2"))  # ChatML's tokenizer has no such token


def test_rollouts_in_gemmas_format_are_token_exact(gemma):
    """Sampled turns (cut by the length cap: the EOS fill is <end_of_turn>) and expert turns (which end on it): the
    stored ids are the prompt, the engine's ids and Gemma's deltas, segment by segment."""
    from rollout.test_runner import Recording, assert_token_exact

    model, tok = gemma
    fmt = ChatFormat(tok, enable_think=False)
    eot, sot = ids(tok, "<end_of_turn>", "<start_of_turn>")
    options = {"response_length": 6, "max_turns": 2}
    engine = Recording(HFEngine(model, tok))
    with EnvGroups("frozenlake", group_size=2, n_groups=1, options=options) as groups:
        res = run_rollout(engine, groups, SamplingParams(seed=1), RolloutSettings(chat_format=fmt))
    assert res.failed_envs == 0 and len(res.trajectories) == 2
    assert_token_exact(res.trajectories, engine.calls)
    for tr in res.trajectories:
        for kind, s, e in tr.segments:
            if kind == "eos_fill":
                assert tr.input_ids[s:e] == [eot]
            if kind == "delta":
                assert tok.decode(tr.input_ids[s:e]).startswith("\n<start_of_turn>user\n")
    with EnvGroups("frozenlake", group_size=2, n_groups=1, options={**options, "max_turns": 3}) as groups:
        demos = run_rollout(ExpertEngine(tok, fmt.eos_id, enable_think=False), groups,
                            SamplingParams(temperature=0.0, seed=0), RolloutSettings(chat_format=fmt))
    turns = [t for tr in demos.trajectories for t in tr.turns]
    assert turns and all(t.finish_reason == "stop" for t in turns)
    for tr in demos.trajectories:
        assert not [k for k, _, _ in tr.segments if k == "eos_fill"]  # the expert's turn already ended
        for kind, s, e in tr.segments:
            if kind == "response":
                assert tr.input_ids[e - 1] == eot and sot not in tr.input_ids[s:e]
    assert all(t.format_ok for t in turns)  # the answer read from Gemma's decoded turn, its <end_of_turn> left out


def test_a_model_without_a_chat_template_is_refused_in_one_line(tiny, tmp_path):
    """A base model (no template) that ragen has no preset for: refused when its tokenizer loads, before its
    weights are read (this folder has none), in one line from `ragen eval` too; ragen never guesses a template."""
    model, tok = tiny
    folder = tmp_path / "base"
    bare = gemma_like(tok)
    bare.save_pretrained(folder)
    model.config.save_pretrained(folder)
    with pytest.raises(ragen.ConfigError, match="no chat template") as err:
        load_model_and_tokenizer(str(folder), tmp_path / "src")
    assert "\n" not in str(err.value)
    with pytest.raises(ragen.ConfigError, match="no chat template"):
        ensure_chat_template(gemma_like(tok), "some/base-model")
    proc = subprocess.run(ragen_cmd("eval", "--env", "frozenlake", "--model", str(folder), "--seeds", "1",
                                    "--out", str(tmp_path / "e")), capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no chat template" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_kv_reuse_with_sliding_window_layers_changes_nothing(gemma, temperature):
    """Gemma 3 attends through a sliding window on most layers, whose cache keeps only its last window of keys: the
    real model's `ragen eval` crashed reusing such a cache once a conversation outgrew the window. A tiny random
    Gemma 3 whose window holds the first turn but not the second: the shared first-turn prefill is used, later turns
    prefill in full, and the rollout is the one an engine without reuse plays."""
    import torch
    from rollout.test_runner import Recording, assert_token_exact
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    _, tok = gemma
    fmt = ChatFormat(tok, enable_think=False)
    options = {"response_length": 8, "max_turns": 3}
    with EnvGroups("frozenlake", group_size=2, n_groups=1, options=options) as groups:
        demo = run_rollout(ExpertEngine(tok, fmt.eos_id, enable_think=False), groups,
                           SamplingParams(temperature=0.0, seed=0), RolloutSettings(chat_format=fmt))
    first = demo.trajectories[0].segments[0][2]  # the first prompt's length
    window = first + options["response_length"] + 4
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
                              sliding_window=window, layer_types=["sliding_attention", "full_attention"],
                              max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = Gemma3ForCausalLM(config).eval()
    runs = {}
    for reuse in (False, True):
        engine = Recording(HFEngine(model, tok, kv_reuse=reuse, share_prefill=reuse))
        with EnvGroups("frozenlake", group_size=2, n_groups=1, options=options) as groups:
            res = run_rollout(engine, groups, SamplingParams(temperature=temperature, seed=5),
                              RolloutSettings(chat_format=fmt))
        assert res.failed_envs == 0
        assert_token_exact(res.trajectories, engine.calls)
        runs[reuse] = (res.trajectories, engine.engine.kv_stats)
    (plain, _), (reused, stats) = runs[False], runs[True]
    assert stats.get("shared_prefill_tokens", 0) > 0  # the first turn fits the window: its prefill is shared
    assert max(len(t.input_ids) for t in reused) > window  # and the conversation outgrew it
    for a, b in zip(plain, reused):
        assert a.input_ids == b.input_ids and a.loss_mask == b.loss_mask
        assert a.rollout_logprobs == pytest.approx(b.rollout_logprobs, abs=1e-4)
