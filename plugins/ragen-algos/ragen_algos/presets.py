"""Algorithm presets (algorithms.md §6.4): what `--algo NAME` selects. Unlisted settings take the RAGEN defaults."""

from ragen import AlgorithmPreset

_NO_CRITIC = {"use_critic": False}

PRESETS = {
    "ppo": AlgorithmPreset(
        estimator="gae",
        use_critic=True,
        loss_agg_mode="token-mean",
        description="PPO with a GAE critic (gamma = lambda = 1), clip 0.2/0.28, dual clip 3, no KL (RAGEN default)",
        source="RAGEN base.yaml; Schulman et al. 2017",
    ),
    "grpo": AlgorithmPreset(
        estimator="grpo",
        **_NO_CRITIC,
        loss_agg_mode="seq-mean-token-mean",
        description="GRPO: group-normalised trajectory advantage, no critic (RAGEN GRPO script)",
        source="DeepSeekMath (Shao et al. 2024); RAGEN GRPO script",
    ),
    "dr-grpo": AlgorithmPreset(
        estimator="dr-grpo",
        **_NO_CRITIC,
        loss_agg_mode="seq-mean-token-sum",
        description="Dr. GRPO: GRPO without the std division, seq-mean-token-sum (RAGEN script)",
        source="Liu et al. 2025, Understanding R1-Zero-Like Training; RAGEN script",
    ),
    "rloo": AlgorithmPreset(
        estimator="rloo",
        **_NO_CRITIC,
        loss_agg_mode="token-mean",
        description="RLOO: leave-one-out group baseline, no critic",
        source="Ahmadian et al. 2024, Back to Basics",
    ),
    "reinforce++": AlgorithmPreset(
        estimator="reinforce++",
        **_NO_CRITIC,
        loss_agg_mode="token-mean",
        kl_reward_coef=0.001,
        kl_reward_type="k1",
        description="REINFORCE++: token returns with k1 KL in the reward (beta 0.001), whitened; reference model",
        source="Hu 2025, REINFORCE++",
    ),
    "reinforce++-baseline": AlgorithmPreset(
        estimator="reinforce++-baseline",
        **_NO_CRITIC,
        loss_agg_mode="token-mean",
        description="REINFORCE++ with a group-mean baseline, whitened over the batch, no KL",
        source="Hu 2025, REINFORCE++",
    ),
    "starpo": AlgorithmPreset(
        estimator="gae",
        use_critic=True,
        clip_ratio_high=0.2,
        loss_agg_mode="token-mean",
        kl_coef=0.001,
        kl_type="k1",
        description="Vanilla StarPO (RAGEN V1): PPO + GAE, clip 0.2/0.2, k1 KL in the loss (0.001)",
        source="Wang et al. 2025, RAGEN (V1)",
    ),
    "starpo-s": AlgorithmPreset(
        estimator="gae",
        use_critic=True,
        loss_agg_mode="token-mean",
        filter="top-k",
        filter_options={"value": 0.25, "type": "largest", "metric": "reward_std", "min_groups": 4},
        description=(
            "StarPO-S: PPO + GAE, keep the top 25% of groups by reward std (at least 4), clip-higher 0.28, no KL"
        ),
        source="Wang et al. 2025, RAGEN (V1), StarPO-S",
    ),
    "dapo": AlgorithmPreset(
        estimator="grpo",
        **_NO_CRITIC,
        loss_agg_mode="token-mean",
        filter="zero-variance",
        filter_options={"outcome": "success"},
        entropy_coef=0.0,
        description="DAPO: GRPO advantages, token-mean, clip-higher 0.28, zero-variance groups dropped on success",
        source="Yu et al. 2025, DAPO",
    ),
    "dapo-ragen": AlgorithmPreset(
        estimator="gae",
        use_critic=True,
        loss_agg_mode="token-mean",
        description="The 'DAPO' row of RAGEN V2's table: PPO + GAE with clip 0.2/0.28 and no KL",
        source="RAGEN V2 main table",
    ),
    "gspo": AlgorithmPreset(
        estimator="grpo",
        **_NO_CRITIC,
        loss_agg_mode="seq-mean-token-mean",
        ratio_level="sequence",
        clip_ratio_low=3e-4,
        clip_ratio_high=4e-4,
        description="GSPO: GRPO advantages with the length-normalised sequence importance ratio, clip 3e-4/4e-4",
        source="Zheng et al. 2025, GSPO",
    ),
}
