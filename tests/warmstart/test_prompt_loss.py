"""The warm start's prompt loss: which tokens it covers, and when it is on."""


from ragen.config import load_config
from ragen.contract.trajectory import Trajectory
from ragen.train.batch import collate
from ragen.warmstart.sft import context_mask, prompt_weight


def _traj(n_prompt: int, n_sampled: int, n_env: int, n_sampled2: int) -> Trajectory:
    mask = [0] * n_prompt + [1] * n_sampled + [0] * n_env + [1] * n_sampled2
    ids = list(range(10, 10 + len(mask)))
    return Trajectory(env_name="x", seed=0, group_id=0, rollout_index=0, split="train", policy_version=0, input_ids=ids,
                      loss_mask=mask, rollout_logprobs=[0.0] * len(ids), segments=[])


def test_context_mask_covers_prompt_and_env_tokens_but_not_sampled_padding_or_the_first_token():
    batch = collate([_traj(3, 2, 2, 1), _traj(2, 1, 0, 0)], pad_id=0, scores=[0.0, 0.0])
    ctx = context_mask(batch)
    assert ctx[0].tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert ctx[1].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # right padding is not covered
    assert not (ctx * batch.loss_mask).any()


def test_prompt_loss_defaults_to_on_for_built_in_models_only():
    assert prompt_weight(load_config(overrides=["model.name=small"])) == 1.0
    assert prompt_weight(load_config(overrides=["model.name=tiny"])) == 1.0
    assert prompt_weight(load_config(overrides=["model.name=smollm2"])) == 0.0
    assert prompt_weight(load_config(overrides=["model.name=small", "warmstart.prompt_loss_weight=0"])) == 0.0
