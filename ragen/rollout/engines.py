"""The one place that picks a rollout engine from ``rollout.engine``: ``hf``, ``vllm`` or ``expert``."""

from __future__ import annotations

import os
from typing import Any

import torch

from ragen.errors import ConfigError
from ragen.plugins.components import parser_thinks
from ragen.rollout.context import ChatFormat
from ragen.rollout.expert import ExpertEngine


def make_rollout_engine(cfg: Any, module: torch.nn.Module, tokenizer: Any, model_path: str, dtype: Any = "float32",
                        thinks: bool | None = None):
    """The rollout engine ``cfg.rollout.engine`` names: 'hf' (the trainer's module), 'vllm' (synced and verified) or
    'expert' (each env's expert answers: scripted, off-policy rollouts for pipeline checks and tests only).
    ``thinks``: whether the run's parser expects ``<think>`` (the resolved run's; None: read from ``cfg``)."""
    r = cfg.rollout
    name = str(r.engine).lower()
    if name == "expert":
        think = parser_thinks(r.parser, r.parser_options) if thinks is None else thinks
        fmt = ChatFormat(tokenizer, enable_think=think)
        return ExpertEngine(tokenizer, fmt.eos_id, fmt.enable_think, noise=cfg.warmstart.noise, seed=cfg.trainer.seed)
    if name == "hf":
        from ragen.rollout.hf import HFEngine

        return HFEngine(module, tokenizer, max_batch=r.max_batch, decode=r.decode)
    if name == "vllm":
        if os.path.isdir(model_path) and not os.path.isfile(os.path.join(model_path, "config.json")):
            raise ConfigError(f"rollout.engine=vllm: {model_path} is not a Hugging Face model folder (a GGUF model?); "
                              "vLLM starts from a folder with config.json and safetensors")
        max_pos = getattr(getattr(module, "config", None), "max_position_embeddings", None)
        max_len = int(r.max_model_len) if not max_pos else min(int(r.max_model_len), int(max_pos))
        from ragen.rollout.vllm import VLLMEngine

        engine = VLLMEngine(
            model_path, tokenizer, model=module, dtype=str(dtype).removeprefix("torch."), max_model_len=max_len,
            memory_fraction=r.vllm_memory_fraction, kv_cache_gb=r.vllm_kv_cache_gb, enforce_eager=r.vllm_enforce_eager,
            enable_prefix_caching=True, seed=int(cfg.trainer.seed), sync_tol=r.sync_check_tol, max_num_seqs=r.max_batch,
        )
        engine.sync_weights(module)  # the trainer's module may differ from the files (warm start, resume): verified now
        return engine
    raise ConfigError(f"rollout.engine: expected 'hf', 'vllm' or 'expert', got {r.engine!r}")
