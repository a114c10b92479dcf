"""Algorithm presets (algorithms.md §6.4): what `--algo NAME` selects."""

from ragen import AlgorithmPreset

PRESETS = {
    "grpo": AlgorithmPreset(
        estimator="grpo",
        use_critic=False,
        loss_agg_mode="seq-mean-token-mean",
        description="GRPO: group-normalised trajectory advantage, no critic (RAGEN GRPO script)",
    ),
    "ppo": AlgorithmPreset(
        estimator="gae",
        use_critic=True,
        loss_agg_mode="token-mean",
        description="PPO with a GAE critic, clip 0.2/0.28, no KL, entropy 0.001 (RAGEN default)",
    ),
}
