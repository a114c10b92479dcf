"""The warm start's faster forward pass (``causal_forward_masks``, bench/warmstart_speed.py; not the default) gives
right-padded rows no attention mask (so SDPA takes its causal kernel): the padding after a row must not change the
loss of its real tokens. The default (``forward_masks``) keeps the padding mask."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ragen.contract.trajectory import Trajectory
from ragen.train.batch import collate
from ragen.train.losses import token_logprobs
from ragen.warmstart.sft import causal_forward_masks, forward_masks


def _traj(ids: list[int], n_prompt: int) -> Trajectory:
    mask = [0] * n_prompt + [1] * (len(ids) - n_prompt)
    return Trajectory(env_name="x", seed=0, group_id=0, rollout_index=0, split="train", policy_version=0,
                      input_ids=ids, loss_mask=mask, rollout_logprobs=[0.0] * len(ids), segments=[])


def _model(attn: str) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
                         tie_word_embeddings=True, pad_token_id=0, attn_implementation=attn)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


def _logprobs(model, batch) -> torch.Tensor:
    hidden = model.get_decoder()(input_ids=batch.input_ids, **causal_forward_masks(batch)).last_hidden_state
    return token_logprobs(hidden, model.get_output_embeddings(), batch.input_ids, chunk=8)[0]


def test_right_padding_without_a_mask_leaves_the_real_tokens_loss_unchanged():
    gen = torch.Generator().manual_seed(1)
    short = _traj(torch.randint(1, 64, (9,), generator=gen).tolist(), 4)
    long = _traj(torch.randint(1, 64, (23,), generator=gen).tolist(), 6)
    for attn in ("sdpa", "eager"):
        model = _model(attn)
        padded = collate([short, long], pad_id=0, scores=[0.0, 0.0])
        assert padded.blocks is None and causal_forward_masks(padded)["attention_mask"] is None
        assert forward_masks(padded)["attention_mask"] is padded.attention_mask  # the default keeps the mask
        assert int(padded.attention_mask[0].sum()) == 9 and padded.input_ids.shape[1] == 23  # 14 pads after row 0
        alone = collate([short], pad_id=0, scores=[0.0])
        with torch.no_grad():
            lp_padded, lp_alone = _logprobs(model, padded), _logprobs(model, alone)
            lp_masked = token_logprobs(model.get_decoder()(input_ids=padded.input_ids,
                                                           attention_mask=padded.attention_mask,
                                                           position_ids=padded.position_ids).last_hidden_state,
                                       model.get_output_embeddings(), padded.input_ids, chunk=8)[0]
        real = padded.attention_mask[0].bool()
        torch.testing.assert_close(lp_padded[0][real], lp_alone[0], rtol=1e-5, atol=1e-5)
        # the loss the warm start takes (sampled tokens of both rows) is the one the padding mask gave
        loss = padded.loss_mask.bool()
        torch.testing.assert_close(lp_padded[loss], lp_masked[loss], rtol=1e-5, atol=1e-5)
        loss_alone = -(lp_alone * alone.loss_mask).sum() / alone.loss_mask.sum()
        loss_padded = -(lp_padded[0] * padded.loss_mask[0]).sum() / padded.loss_mask[0].sum()
        torch.testing.assert_close(loss_padded, loss_alone, rtol=1e-5, atol=1e-6)


def test_without_the_prompt_loss_sft_scores_only_the_sampled_tokens_with_the_same_loss_and_gradients():
    """A real model's warm start (no prompt loss) takes the LM head only at the sampled tokens: the loss and every
    weight's gradient equal the every-position path's, for padded rows of different lengths."""
    from ragen.warmstart.sft import response_logprobs

    gen = torch.Generator().manual_seed(2)
    rows = [_traj(torch.randint(1, 64, (n,), generator=gen).tolist(), p) for n, p in ((11, 4), (19, 9), (7, 2))]
    batch = collate(rows, pad_id=0, scores=[0.0] * 3)
    grads = []
    for every in (True, False):
        model = _model("sdpa")
        hidden = model.get_decoder()(input_ids=batch.input_ids, **forward_masks(batch)).last_hidden_state
        lp, _ = response_logprobs(hidden, model.get_output_embeddings(), batch, chunk=5, every=every)
        loss = -(lp * batch.loss_mask).sum() / batch.loss_mask.sum()
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        if not every:  # nothing outside the sampled tokens was scored
            assert bool((lp[batch.loss_mask == 0] == 0).all())
    (loss_all, g_all), (loss_sampled, g_sampled) = grads
    torch.testing.assert_close(loss_sampled, loss_all, rtol=1e-6, atol=1e-6)
    for name, g in g_all.items():
        torch.testing.assert_close(g_sampled[name], g, rtol=1e-5, atol=1e-6)
