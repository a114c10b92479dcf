"""rollout.max_context_window: a turn's prompt holds the system prompt and the last k turns; the trained row
packs each windowed prompt with its response, and training sees exactly what the engine saw (docs/history-window.md)."""

import pytest
import torch
from rollout import test_runner as tr

from ragen.envs.prompt import system_prompt
from ragen.rollout import EnvGroups, HFEngine, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.context import SEGMENT_MASK
from ragen.train.batch import collate, model_attention

tiny, fmt = tr.tiny, tr.fmt  # module fixtures: the tiny model built on the toy envs

OPTS = {**tr.WIDE, "target": 50, "max_turns": 4}  # never reached: every episode plays 4 turns


def _play(tiny, fmt, window, seed=5, n_groups=2, group_size=2, opts=OPTS):
    model, tok = tiny
    engine = tr.Recording(HFEngine(tr.eos_biased(model, fmt.eos_id), tok))
    with EnvGroups("count", group_size=group_size, n_groups=n_groups, options=opts, factory=tr.factory) as groups:
        res = run_rollout(
            engine, groups, SamplingParams(seed=seed), RolloutSettings(chat_format=fmt, max_context_window=window)
        )
    assert res.failed_envs == 0
    return res, engine


def assert_token_exact_blocks(trajs, calls):
    """Segments rebuild the ids and masks; each response is the engine's output for exactly its block's prefix."""
    pool = list(calls)
    for t in trajs:
        rebuilt, mask = [], []
        for kind, start, end in t.segments:
            rebuilt += t.input_ids[start:end]
            mask += [SEGMENT_MASK[kind]] * (end - start)
        assert rebuilt == t.input_ids and mask == t.loss_mask
        starts = [0, *t.blocks]
        served = 0
        for turn in t.turns:
            s, e = turn.span
            block = max(b for b in starts if b <= s)
            match = next((c for c in pool if c[0] == t.input_ids[block:s] and c[1].token_ids == t.input_ids[s:e]), None)
            assert match is not None, f"turn at {s}:{e} of {t.episode_id} is not an engine output for its block"
            pool.remove(match)
            assert t.rollout_logprobs[s:e] == match[1].logprobs
            served += e - s
        assert sum(t.loss_mask) == served
    assert pool == []


def test_window_1_prompt_at_turn_3_holds_the_system_prompt_and_the_last_turn_only(tiny, fmt):
    res, engine = _play(tiny, fmt, window=1)
    _, tok = tiny
    t = res.trajectories[0]
    assert t.num_turns == 4 and len(t.blocks) == 2  # turns 3 and 4 each open a block
    third = t.turns[2].span[0]
    prompt = t.input_ids[t.blocks[0]:third]
    assert any(c[0] == prompt for c in engine.calls)  # what the engine was given at turn 3
    text = tok.decode(prompt, skip_special_tokens=False)
    env = tr.CountEnv(tr.CountConfig(**OPTS))
    assert system_prompt(env) in text and text.count("<|im_start|>system") == 1
    assert "Turn 1:" not in text and "Turn 2:" in text and "Turn 3:" in text
    second = t.turns[1].span
    ids2 = t.input_ids[second[0]:second[1]]
    assert _end_of(prompt, ids2) > 0  # turn 2's sampled ids, verbatim (never decoded and re-encoded)
    assert_token_exact_blocks(res.trajectories, engine.calls)


def _end_of(haystack, needle):
    """End index of the last occurrence of ``needle`` in ``haystack`` (turn 2's sampled ids inside turn 3's prompt)."""
    for i in range(len(haystack) - len(needle), -1, -1):
        if haystack[i:i + len(needle)] == needle:
            return i + len(needle)
    raise AssertionError("turn 2's sampled ids are not in turn 3's prompt verbatim")


def test_trained_ids_equal_sampled_ids_and_training_sees_what_the_engine_saw(tiny, fmt):
    res, engine = _play(tiny, fmt, window=1, seed=9)
    model, tok = tiny
    biased = tr.eos_biased(model, fmt.eos_id)
    batch = collate(res.trajectories, tok.pad_token_id, [0.0] * len(res.trajectories))
    assert batch.blocks is not None
    with torch.no_grad():
        logits = biased(input_ids=batch.input_ids, attention_mask=model_attention(batch, biased),
                        position_ids=batch.position_ids).logits.float()
    lp = torch.log_softmax(logits, -1)
    for i, t in enumerate(res.trajectories):
        assert batch.input_ids[i, :len(t.input_ids)].tolist() == t.input_ids  # the trained ids are the sampled ones
        starts = [0, *t.blocks, len(t.input_ids)]
        for a, b in zip(starts, starts[1:]):  # each block on its own, as the engine scored it
            ref = tr.teacher_forced_logprobs(biased, t.input_ids[a:b])
            for j in range(a + 1, b):
                if t.loss_mask[j]:
                    assert lp[i, j - 1, t.input_ids[j]].item() == pytest.approx(ref[j - a], abs=1e-4)
                    assert t.rollout_logprobs[j] == pytest.approx(ref[j - a], abs=1e-3)
        assert batch.position_ids[i, t.blocks[0]].item() == 0 if t.blocks else True


def test_window_wide_enough_is_full_mode_exactly(tiny, fmt):
    full, _ = _play(tiny, fmt, window=0, seed=3)
    wide, _ = _play(tiny, fmt, window=3, seed=3)  # 4 turns: turn 4 sees turns 1-3, nothing is dropped
    assert [t.input_ids for t in full.trajectories] == [t.input_ids for t in wide.trajectories]
    assert all(t.blocks == [] for t in wide.trajectories)
    assert collate(wide.trajectories, 0, [0.0] * len(wide.trajectories)).blocks is None


def test_window_2_keeps_two_turns_and_caps_the_prompt_not_the_row(tiny, fmt):
    res, engine = _play(tiny, fmt, window=2, seed=4)
    _, tok = tiny
    for t in res.trajectories:
        assert len(t.blocks) == t.num_turns - 3 if t.num_turns > 3 else t.blocks == []
        if t.blocks:
            text = tok.decode(t.input_ids[t.blocks[0]:t.turns[3].span[0]], skip_special_tokens=False)
            assert "Turn 1:" not in text and all(f"Turn {k}:" in text for k in (2, 3, 4))
    assert_token_exact_blocks(res.trajectories, engine.calls)
    # the cap acts on the engine's prompt: a row longer than max_model_len still trains when every prompt fits
    longest_prompt = max(len(c[0]) + 32 for c in engine.calls)
    model, tok = tiny
    rec = tr.Recording(HFEngine(tr.eos_biased(model, fmt.eos_id), tok))
    with EnvGroups("count", group_size=2, n_groups=2, options=OPTS, factory=tr.factory) as groups:
        again = run_rollout(
            rec,
            groups,
            SamplingParams(seed=4),
            RolloutSettings(chat_format=fmt, max_context_window=2, max_model_len=longest_prompt),
        )
    assert [t.input_ids for t in again.trajectories] == [t.input_ids for t in res.trajectories]
    assert any(len(t.input_ids) > longest_prompt for t in again.trajectories)
