"""LoRA through peft: adapters on the policy (and the critic's backbone); the frozen base is the reference policy."""

from __future__ import annotations

import contextlib
import copy
import warnings
from pathlib import Path

import torch

from ragen.errors import ConfigError

INSTALL = "pip install 'ragen[lora]' (peft)"


def _lora_config(mcfg, task_type: str | None):
    try:
        from peft import LoraConfig
    except ImportError:
        raise ConfigError(f"model.lora_rank: LoRA needs peft; {INSTALL}") from None
    target = (
        "all-linear"
        if mcfg.lora_target == "all-linear"
        else [t.strip() for t in mcfg.lora_target.split(",") if t.strip()]
    )
    return LoraConfig(r=mcfg.lora_rank, lora_alpha=mcfg.lora_alpha, lora_dropout=mcfg.lora_dropout,
                      target_modules=target, task_type=task_type)


@contextlib.contextmanager
def _checkpointing_alias_read():
    """Wrapping a model (``PeftModel.__init__``, peft 0.17-0.21) reads ``model.is_gradient_checkpointing``, which
    transformers 5.2x deprecated with a FutureWarning on every read; the alias returns ``is_activation_checkpointing``
    (the supported name), so silencing exactly that warning around the wrap changes no value peft sees (peft still
    prepares a model that checkpoints its activations). ragen itself never reads either name."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def _wrap(model: torch.nn.Module, task_type: str | None, mcfg) -> torch.nn.Module:
    """``get_peft_model`` without transformers' deprecation warning (``_checkpointing_alias_read``)."""
    from peft import get_peft_model

    with _checkpointing_alias_read():
        return get_peft_model(model, _lora_config(mcfg, task_type))


def add_policy_adapters(model: torch.nn.Module, mcfg) -> torch.nn.Module:
    """A peft model whose only trainable weights are the adapters ('all-linear' leaves the LM head alone)."""
    return _wrap(model, "CAUSAL_LM", mcfg)


def add_critic_adapters(value_model: torch.nn.Module, mcfg) -> torch.nn.Module:
    """Adapters on the critic's backbone; the value head stays fully trainable."""
    value_model.base = _wrap(value_model.base, None, mcfg)
    for p in value_model.value_head.parameters():
        p.requires_grad_(True)
    return value_model


def is_peft(module: torch.nn.Module) -> bool:
    return hasattr(module, "disable_adapter") and hasattr(module, "peft_config")


def export(module: torch.nn.Module, out: Path) -> None:
    """``out/adapter``: the adapter alone (loads with ``PeftModel.from_pretrained``); ``out``: the merged model, a
    plain HF folder that ``ragen eval`` and any transformers user can load."""
    module.save_pretrained(out / "adapter")
    merged = copy.deepcopy(module).merge_and_unload()
    merged.save_pretrained(out)
