"""LoRA through peft: two real steps on CPU change only adapter weights; the exported adapter loads with peft and
matches the merged export; the reference policy is the base model with adapters disabled."""

import pytest
import torch
from conftest import TINY

from ragen.config import load_config
from ragen.train.trainer import Trainer

peft = pytest.importorskip("peft", reason="LoRA needs peft (pip install 'ragen[lora]')")

SMALL = [
    *TINY,
    "env.name=frozenlake",
    "env.options.response_length=16",
    "env.options.max_turns=2",
    "rollout.n_groups=2",
    "rollout.group_size=2",
    "rollout.n_val_groups=1",
    "trainer.ppo_mini_batch_size=4",
    "trainer.micro_batch_size=4",
    "trainer.actor_lr=1e-2",
    "model.lora_rank=8",
    "model.lora_alpha=16",
    "logging.progress=false",
]


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_adding_adapters_reads_no_deprecated_alias_and_keeps_peft_preparation(checkpointing):
    """transformers 5.2x warns on every read of ``is_gradient_checkpointing``, which peft's wrap reads: the adapters
    are added without that warning, and peft still prepares a model that checkpoints its activations (its input
    embeddings' output requires grad, so the recomputed blocks get gradients) and leaves one that does not alone."""
    import warnings

    from ragen.models.lora import add_policy_adapters

    model = _tiny_llama()
    if checkpointing:  # transformers 5.2x's name, else the older one
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    mcfg = load_config(overrides=["model.lora_rank=4", "model.lora_alpha=8"]).model
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wrapped = add_policy_adapters(model, mcfg)
    assert not [w for w in seen if "is_gradient_checkpointing" in str(w.message)], [str(w.message) for w in seen]
    assert any("lora_" in k for k, v in wrapped.named_parameters() if v.requires_grad)
    embedded = wrapped.get_input_embeddings()(torch.tensor([[1, 2, 3]]))
    assert embedded.requires_grad == checkpointing


@pytest.mark.slow
def test_lora_two_steps_change_only_adapters_and_export_loads_with_peft(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = load_config(overrides=[*SMALL, "algo.name=starpo", "trainer.steps=2", f"logging.run_dir={tmp_path}",
                                 "logging.name=r"])
    trainer = Trainer(cfg, tmp_path / "r")
    try:
        module = trainer.actor.module
        before = {k: v.detach().clone() for k, v in module.named_parameters()}
        trainable = {k for k, v in module.named_parameters() if v.requires_grad}
        assert trainable and all("lora_" in k for k in trainable)
        assert trainer.reference is None and trainer.preset.kl_coef > 0  # KL against the adapter-disabled base
        for _ in range(2):
            m = trainer.step().metrics
            assert torch.isfinite(torch.tensor(m["actor/kl_loss"]))
        changed = {k for k, v in module.named_parameters() if not torch.equal(v, before[k])}
        assert changed and changed <= trainable, sorted(changed - trainable)[:5]
        assert any("lora_B" in k for k in changed)  # B starts at zero: a real update moved it
        out = trainer.export()
        source = trainer.model_source.path
    finally:
        trainer.close()
    base = AutoModelForCausalLM.from_pretrained(source)
    with_adapter = PeftModel.from_pretrained(base, out / "adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        a, b = with_adapter(input_ids=ids).logits, merged(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(source)(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-4)
    assert not torch.allclose(a, plain, atol=1e-4)  # the adapter changes the model


@pytest.mark.slow
def test_lora_critic_trains_adapters_and_value_head(tmp_path):
    cfg = load_config(overrides=[*SMALL, "algo.name=ppo", f"logging.run_dir={tmp_path}", "logging.name=r"])
    trainer = Trainer(cfg, tmp_path / "r")
    try:
        critic = trainer.critic.module
        trainable = {k for k, v in critic.named_parameters() if v.requires_grad}
        assert any(k.startswith("value_head") for k in trainable)
        assert all("lora_" in k or k.startswith("value_head") for k in trainable)
        before = {k: v.detach().clone() for k, v in critic.named_parameters()}
        trainer.step()
        changed = {k for k, v in critic.named_parameters() if not torch.equal(v, before[k])}
        assert changed and changed <= trainable
    finally:
        trainer.close()


def test_lora_through_the_cli_exports_a_model_ragen_eval_loads(tmp_path):
    """LoRA on CPU end to end, as a user runs it: `ragen run ... model.lora_rank=8`, the export (merged weights and
    the adapter), `ragen eval` of the exported folder."""
    import json
    import os
    import subprocess

    from conftest import ragen_cmd, run_two_steps

    run, rows = run_two_steps("frozenlake", tmp_path, "model.lora_rank=8", "model.lora_alpha=16",
                              "env.options.max_turns=1", response_length=8)
    steps = [r for r in rows if r.get("timing/step_s") is not None]
    assert len(steps) == 2 and all(r["actor/skipped_updates"] == 0.0 for r in steps)
    final = run / "final"
    assert (final / "adapter" / "adapter_config.json").is_file() and (final / "config.json").is_file()
    proc = subprocess.run(ragen_cmd("eval", "--env", "frozenlake", "--model", str(final), "--seeds", "2",
                                    "-o", "max_turns=1", "-o", "response_length=8", "--out", str(tmp_path / "e")),
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert m["levels"] == 2 and m["failed_envs"] == 0
