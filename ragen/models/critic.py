"""The PPO critic: the policy's base architecture with a scalar value head (hidden -> 1)."""

from __future__ import annotations

import torch
from torch import nn


class ValueModel(nn.Module):
    """Values aligned like log-probs: the value of token j is read from the hidden state at j - 1."""

    def __init__(self, base: nn.Module, hidden_size: int):
        super().__init__()
        self.base = base
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_causal_lm(cls, model_dir: str, dtype: torch.dtype, **kwargs) -> ValueModel:
        from transformers import AutoModel

        base = AutoModel.from_pretrained(model_dir, dtype=dtype, **kwargs)
        return cls(base, base.config.hidden_size).to(dtype)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.base(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        v = self.value_head(hidden).squeeze(-1).float()
        out = torch.zeros_like(v)
        out[:, 1:] = v[:, :-1]
        return out
