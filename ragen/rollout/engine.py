"""The rollout engine contract: token ids in, sampled ids and their log-probs out (HF today, vLLM later)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np


@attrs.frozen(kw_only=True)
class SamplingParams:
    """How one batch is sampled. ``temperature == 0`` means greedy; ``seed=None`` leaves the RNG as it is."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 400
    seed: int | None = None

    def derive(self, *keys: int, **changes: Any) -> SamplingParams:
        """A copy whose seed is a deterministic function of ``seed`` and ``keys`` (e.g. the turn), other fields changed."""
        seed = self.seed
        if seed is not None:
            seed = int(np.random.SeedSequence([int(seed), *(int(k) for k in keys)]).generate_state(1)[0])
        return attrs.evolve(self, seed=seed, **changes)


@attrs.frozen
class Generation:
    """One sampled continuation: the ids verbatim (the stop token included if sampled) and their log-probs."""

    token_ids: list[int]
    logprobs: list[float]  #: log π(token | prefix) with logits / temperature (temperature 1 when greedy)
    finish_reason: str  #: 'stop' (ended on an EOS id) | 'length' (hit max_new_tokens)


def check_prompts(prompts: list[list[int]]) -> None:
    """Refuse an empty prompt: an engine has nothing to condition its first token on."""
    if any(not p for p in prompts):
        raise ValueError("empty prompt")


@runtime_checkable
class RolloutEngine(Protocol):
    """What the rollout loop needs from an inference engine."""

    @property
    def eos_token_ids(self) -> Sequence[int]:
        """Ids that end a turn (the sampled one is kept, then generation stops)."""
        ...

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One continuation per prompt (prompts are token ids; nothing is re-tokenized), in order."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights (HF: the same module, a no-op)."""
        ...


def old_logprobs_reusable(engine: Any, *, ppo_epochs: int, tis_cap: float) -> str | None:
    """Whether the trainer may take the engine's sampling log-probs as its old log-probs: None if so, else why not.

    The rule: the engine says its log-probs are the trainer's own (``logprobs_exact``: ``HFEngine`` sampling from
    the trainer's fp32 module, which has not moved since sampling), one PPO epoch, and no truncated importance
    sampling (TIS weighs exactly the gap between the two, so it needs both). Otherwise (vLLM, bf16/fp16, the expert
    engine, ppo_epochs > 1, TIS) the trainer recomputes them with a forward pass and reports the gap.
    """
    if not getattr(engine, "logprobs_exact", False):
        return "the engine's log-probs are not the trainer's (another engine or a low-precision dtype)"
    if ppo_epochs > 1:
        return "several PPO epochs"
    if tis_cap > 0:
        return "truncated importance sampling needs the trainer's own log-probs"
    return None
