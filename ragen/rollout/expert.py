"""``ExpertEngine``: a rollout engine whose samples are each env's expert answers, so the real rollout loop records
demonstrations (the warm start) or scripted, off-policy rollouts (``rollout.engine=expert``: pipeline checks)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from ragen.errors import ConfigError
from ragen.rollout.engine import Generation, SamplingParams


class ExpertEngine:
    """A rollout engine whose 'samples' are the expert's answers for each env's current state."""

    def __init__(self, tokenizer: Any, eos_id: int, enable_think: bool = True, noise: float = 0.0, seed: int = 0):
        self.tokenizer, self.eos_id, self.enable_think = tokenizer, eos_id, enable_think
        self.noise, self.seed = noise, seed
        self.rng = random.Random(seed)

    @property
    def eos_token_ids(self) -> list[int]:
        return [self.eos_id]

    @property
    def logprobs_exact(self) -> bool:
        """Never: its log-probs are placeholders (0.0), not a model's."""
        return False

    def sync_weights(self, model: Any) -> dict[str, float]:
        """No weights: the answers come from the envs' experts."""
        return {}

    def close(self) -> None:
        """Nothing to release."""

    def generate(self, prompts, params):
        raise TypeError("ExpertEngine answers per env: the rollout calls generate_for_envs")

    def _episode_rng(self, env, prompt_len: int) -> random.Random:
        """Noise drawn per (seed, episode, turn): demos do not depend on how episodes are batched or sharded."""
        key = [self.seed, int(env.current_seed or 0), int(env.rollout_index), prompt_len]
        return random.Random(int(np.random.SeedSequence(key).generate_state(1)[0]))

    def response_text(self, env, rng: random.Random | None = None) -> str:
        rng = rng or self.rng
        if env.expert is None:
            raise ConfigError(f"env {env.name!r} has no expert, so it cannot be warm-started")
        expert = env.expert.next_actions(env, env.config.max_actions_per_turn)
        actions = expert
        if env.action_names:
            actions = [rng.choice(env.action_names) if rng.random() < self.noise else a for a in actions]
        sep = f" {env.action_separator} " if env.action_separator else ""
        answer = sep.join(actions) if sep else (actions[0] if actions else "")
        answer_part = f"<answer>{answer}</answer>"
        if not self.enable_think:  # the prefill was "<answer>"
            return answer_part.removeprefix("<answer>")
        # A noised turn must not carry the expert's reasoning for other actions: the demo would teach answers that
        # contradict their own <think>. It says it explores instead, a branch RL can learn to prune.
        think = env.expert.rationale(env) if actions == expert else f"Exploring: trying {answer}."
        return f"{think}</think>{answer_part}"

    def generate_for_envs(self, envs, prompts, params: SamplingParams) -> list[Generation]:
        """Each env's expert answer for its current state, tokenized, ending on the EOS id (log-probs 0.0)."""
        out = []
        for env, prompt in zip(envs, prompts, strict=True):
            text = self.response_text(env, self._episode_rng(env, len(prompt)))
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_new_tokens - 1]
            ids.append(self.eos_id)
            out.append(Generation(ids, [0.0] * len(ids), "stop"))
        return out
