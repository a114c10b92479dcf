"""The rollout engine contract: token ids in, sampled ids and their log-probs out (HF today, vLLM later)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
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
        """A copy whose seed is a deterministic function of ``seed`` and ``keys`` (e.g. the turn), other fields
        changed."""
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


def cut_at_stop(ids: Sequence[int], logprobs: Sequence[float], stop_ids: Collection[int],
                max_new_tokens: int) -> Generation:
    """The turn an engine sampled, as a ``Generation``: ``ids`` cut after their first id in ``stop_ids`` (kept,
    ``'stop'``), else at ``max_new_tokens`` (``'length'``); ``logprobs`` cut alike. Engines may sample past the end of
    the turn (a batch decodes until every row stops), so every engine cuts the same way here."""
    cut = next((k + 1 for k, t in enumerate(ids) if t in stop_ids), None)
    if cut is None:
        cut = min(len(ids), int(max_new_tokens))
        return Generation(list(ids[:cut]), list(logprobs[:cut]), "length")
    return Generation(list(ids[:cut]), list(logprobs[:cut]), "stop")


def check_prompts(prompts: list[list[int]]) -> None:
    """Refuse an empty prompt: an engine has nothing to condition its first token on."""
    if any(not p for p in prompts):
        raise ValueError("empty prompt")


@runtime_checkable
class RolloutEngine(Protocol):
    """What the rollout loop and the trainer need from an inference engine: every member is called directly, so an
    engine (a test's fake or a bench wrapper included) defines them all."""

    @property
    def eos_token_ids(self) -> Sequence[int]:
        """Ids that end a turn (the sampled one is kept, then generation stops)."""
        ...

    @property
    def logprobs_exact(self) -> bool:
        """Whether the sampling log-probs are the trainer's own numbers (its module, in float32, not moved since
        sampling), so the trainer may reuse them as its old log-probs (``old_logprobs_reusable``)."""
        ...

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One continuation per prompt (prompts are token ids; nothing is re-tokenized), in order."""
        ...

    def generate_for_envs(self, envs: Sequence[Any], prompts: list[list[int]],
                          params: SamplingParams) -> list[Generation]:
        """What the rollout loop calls: one continuation per (env, prompt), in order. An engine that samples from a
        model answers from the prompts alone (``generate``); one that answers from each env's state (the expert
        engine: demonstrations) reads ``envs``."""
        ...

    def sync_weights(self, model: Any) -> dict[str, float]:
        """Make the engine sample from ``model``'s current weights (HF: the same module, a no-op) and return the
        sync's metrics for the step's log (vLLM: load and probe times, the probe's log-prob gap; else ``{}``)."""
        ...

    def close(self) -> None:
        """Release what the engine holds (vLLM: its engine core); the trainer calls it once, at the end."""
        ...


def old_logprobs_reusable(engine: RolloutEngine, *, ppo_epochs: int, tis_cap: float) -> str | None:
    """Whether the trainer may take the engine's sampling log-probs as its old log-probs: None if so, else why not.

    The rule: the engine says its log-probs are the trainer's own (``logprobs_exact``: ``HFEngine`` sampling from
    the trainer's fp32 module, which has not moved since sampling), one PPO epoch, and no truncated importance
    sampling (TIS weighs exactly the gap between the two, so it needs both). Otherwise (vLLM, bf16/fp16, the expert
    engine, ppo_epochs > 1, TIS) the trainer recomputes them with a forward pass and reports the gap.
    """
    if not engine.logprobs_exact:
        return "the engine's log-probs are not the trainer's (another engine or a low-precision dtype)"
    if ppo_epochs > 1:
        return "several PPO epochs"
    if tis_cap > 0:
        return "truncated importance sampling needs the trainer's own log-probs"
    return None
