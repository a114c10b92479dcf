"""RAGEN-V2 collapse diagnostics (algorithms.md §9): estimates by hand, MI ≈ log N for a copying policy and ≈ 0 for one
that ignores its prompt, X/Z extraction, seeded sampling, and the real tiny model on a real rollout."""

import math
import types

import numpy as np
import pytest
import torch
from conftest import TINY

from ragen.errors import ConfigError
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.rollout import ChatFormat, EnvGroups, RolloutSettings, SamplingParams, Trajectory, TurnRecord, run_rollout
from ragen.train.collapse import (
    REGIMES,
    CollapseDiagnostics,
    CollapseSection,
    Draw,
    EmaStd,
    cross_score,
    estimates,
    extract_samples,
    reasoning_ids,
    retrieval,
    sample_first_turn,
    sample_trajectory,
    scheme_metrics,
)

# ---------------------------------------------------------------------------------------------------------------
# fixtures and builders
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", ["frozenlake"], corpus_seeds=10)
    return load_model_and_tokenizer(path, "unused")


@pytest.fixture(scope="module")
def fmt(tiny):
    return ChatFormat(tiny[1])


def enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def make_traj(pieces, group_id, rollout_index=0):
    """A Trajectory from alternating ('prompt'|'delta', ids) and ('response', ids) pieces, laid out as the rollout
    does."""
    ids, mask, segments, turns = [], [], [], []
    for kind, part in pieces:
        start = len(ids)
        ids += part
        mask += [int(kind == "response")] * len(part)
        segments.append((kind, start, len(ids)))
        if kind == "response":
            turns.append(TurnRecord("", None, [], [], 0.0, 0.0, True, {}, False, (start, len(ids))))
    return Trajectory("toy", 100 + group_id, group_id, rollout_index, "train", 0, ids, mask, [0.0] * len(ids), segments,
                      turns)


class KeyDecoder(torch.nn.Module):
    """Hidden state = one-hot of the token the policy will emit (scaled by the identity LM head): in 'copy' mode the
    most recent key token seen so far (causal), in 'ignore' mode every key at once (uniform over keys, whatever the
    prompt)."""

    def __init__(self, vocab, keys, mode):
        super().__init__()
        self.vocab, self.mode = vocab, mode
        self.register_buffer("keys", torch.tensor(keys))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        b, n = input_ids.shape
        if self.mode == "ignore":
            h = torch.zeros(b, n, self.vocab)
            h[..., self.keys] = 1.0
        else:
            pos = torch.arange(n).expand(b, n)
            last = torch.where(torch.isin(input_ids, self.keys), pos, -1).cummax(dim=1).values
            token = input_ids.gather(1, last.clamp(min=0))
            h = torch.nn.functional.one_hot(token, self.vocab).float() * (last >= 0)[..., None]
        return types.SimpleNamespace(last_hidden_state=h)


class KeyLM(torch.nn.Module):
    """A causal LM with an exactly known conditional distribution (the object under measurement, not a mock):
    'copy' reasons by repeating the prompt's key (p = 1 − O(V·e^−60)); 'ignore' draws keys uniformly."""

    def __init__(self, vocab, keys, mode, scale=60.0):
        super().__init__()
        self.decoder = KeyDecoder(vocab, keys, mode)
        self.lm_head = torch.nn.Linear(vocab, vocab, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.eye(vocab) * scale)
        self.lm_head.requires_grad_(False)

    def get_decoder(self):
        return self.decoder

    def get_output_embeddings(self):
        return self.lm_head

    @torch.no_grad()
    def sample(self, ids, n, gen):
        """``n`` tokens sampled from this policy after ``ids``."""
        out = list(ids)
        for _ in range(n):
            logits = self.lm_head(self.decoder(torch.tensor([out])).last_hidden_state[0, -1])
            out.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)))
        return out[len(ids):]


class KeyWorld:
    """Prompts that differ in one key token (first prompt: one key per group; turn 2: one per trajectory)."""

    def __init__(self, tok, fmt, n_groups=8, group_size=2):
        self.tok, self.eos = tok, fmt.eos_id
        self.p_a, self.p_b = (enc(tok, s) for s in fmt.prompt_text("Remember the key.", "Key: @@").split("@@"))
        self.d_a, self.d_b = (enc(tok, s) for s in fmt.delta_text("Reward: 0\nKey: @@").split("@@"))
        self.tail = enc(tok, "</think><answer>Up</answer>") + [self.eos]
        taken = set(self.p_a + self.p_b + self.d_a + self.d_b + self.tail)
        words = [i for i in range(len(tok)) if i not in taken and tok.decode([i]).isalpha()]
        self.n_groups, self.group_size = n_groups, group_size
        need = n_groups * (1 + group_size)
        assert len(words) >= need
        self.keys = words[:need]

    def rollout(self, policy, turns=2, seed=0):
        """One group_size-member group per first key; every turn's reasoning is 3 tokens sampled from ``policy``."""
        gen = torch.Generator().manual_seed(seed)
        trajs = []
        for g in range(self.n_groups):
            for r in range(self.group_size):
                pieces = [("prompt", self.p_a + [self.keys[g]] + self.p_b)]
                for t in range(turns):
                    if t:
                        key = self.keys[self.n_groups + g * self.group_size + r]
                        pieces.append(("delta", self.d_a + [key] + self.d_b))
                    prefix = [i for _, p in pieces for i in p]
                    pieces.append(("response", policy.sample(prefix, 3, gen) + self.tail))
                trajs.append(make_traj(pieces, g, r))
        return trajs


def plain_estimates(L, own):
    """An independent plain-Python MI / entropy / z-score reference."""
    n = len(L[0])
    matched = [row[c] for row, c in zip(L, own)]
    marginal = [math.log(sum(math.exp(v) for v in row) / n) for row in L]
    gaps = [a - b for a, b in zip(matched, marginal)]
    mean_m = sum(marginal) / len(marginal)
    std = math.sqrt(sum((v - mean_m) ** 2 for v in marginal) / len(marginal))
    return {
        "mi_estimate": sum(gaps) / len(gaps),
        "conditional_entropy_est": -sum(matched) / len(matched),
        "reasoning_entropy_est": -mean_m,
        "matched_log_prob_mean": sum(matched) / len(matched),
        "marginal_log_prob_mean": mean_m,
        "marginal_std": std,
        "mi_zscore": sum(g / (std + 1e-3) for g in gaps) / len(gaps),
    }


# ---------------------------------------------------------------------------------------------------------------
# (a) estimates by hand
# ---------------------------------------------------------------------------------------------------------------

# columns 0 and 1 hold identical prompts (one class), column 2 another
L3 = np.array([[-1.0, -1.0, -3.0], [-0.5, -2.0, -4.0], [-0.2, -6.0, -0.3]])
OWN3 = np.array([0, 1, 2])
CLASSES3 = np.array([0, 0, 1])


def test_estimates_match_a_plain_python_reference():
    got = estimates(L3, OWN3)
    want = plain_estimates(L3.tolist(), OWN3.tolist())
    assert got == pytest.approx(want, abs=1e-12)
    assert got["mi_estimate"] == pytest.approx(got["reasoning_entropy_est"] - got["conditional_entropy_est"])
    # by hand: p(z_i | own prompt) = 1/2, p(z_i | other) = 1/4 -> mixture 3/8, MI = log(4/3), H(Z|X) = log 2
    half = estimates(np.log([[0.5, 0.25], [0.25, 0.5]]), np.array([0, 1]))
    assert half["mi_estimate"] == pytest.approx(math.log(4 / 3))
    assert half["conditional_entropy_est"] == pytest.approx(math.log(2))
    assert half["reasoning_entropy_est"] == pytest.approx(math.log(8 / 3))
    assert half["marginal_std"] == 0.0 and half["mi_zscore"] == pytest.approx(math.log(4 / 3) / 1e-3)


def test_retrieval_counts_identical_prompts_as_one_class():
    got = retrieval(L3, OWN3, CLASSES3)
    # row 0: tie of columns 0/1 -> column 0, same class ✓; row 1: best column 0 is the twin of its own column 1 ✓;
    # row 2: best column 0 (class 0) but its class is 1 ✗, its class is second -> top-2 ✓
    assert got["retrieval_acc"] == pytest.approx(2 / 3)
    assert got["retrieval_chance"] == pytest.approx((2 / 3 + 2 / 3 + 1 / 3) / 3)
    assert got["retrieval_above_chance"] == pytest.approx(2 / 3 - 5 / 9)
    assert got["retrieval_top2_acc"] == 1.0
    assert "retrieval_top4_acc" not in got and "retrieval_top8_acc" not in got  # only k < N
    # without the duplicate, row 1 misses
    assert retrieval(L3, OWN3, np.array([0, 1, 2]))["retrieval_acc"] == pytest.approx(1 / 3)


def test_zscore_ema_over_two_calls_and_state_round_trip():
    draw = Draw([], [(1,), (1,), (2,)], OWN3)
    ema = EmaStd()
    first = scheme_metrics(L3, 2 * L3, draw, ema, "first_turn")
    s1 = plain_estimates(L3.tolist(), OWN3)["marginal_std"]
    s1_seq = plain_estimates((2 * L3).tolist(), OWN3)["marginal_std"]
    assert first["marginal_std_ema"] == pytest.approx(s1) and first["marginal_std_ema_seq"] == pytest.approx(s1_seq)
    assert first["mi_zscore_ema"] == pytest.approx(first["mi_estimate"] / (s1 + 1e-3))
    assert first["mi_estimate_seq"] == pytest.approx(plain_estimates((2 * L3).tolist(), OWN3)["mi_estimate"])
    assert first["mi_upper_bound"] == pytest.approx(math.log(3)) and first["num_samples"] == first["num_prompts"] == 3
    L2 = L3 + np.array([[0.0], [1.0], [-2.0]])  # shifts the marginals apart: another std
    second = scheme_metrics(L2, 2 * L2, draw, ema, "first_turn")
    s2 = plain_estimates(L2.tolist(), OWN3)["marginal_std"]
    assert s2 != pytest.approx(s1)
    assert second["marginal_std_ema"] == pytest.approx(0.9 * s1 + 0.1 * s2)
    assert second["mi_zscore_ema"] == pytest.approx(second["mi_estimate"] / (0.9 * s1 + 0.1 * s2 + 1e-3))
    assert second["mi_zscore"] == pytest.approx(plain_estimates(L2.tolist(), OWN3)["mi_zscore"])
    # another scheme has its own EMA; state_dict carries them all
    assert scheme_metrics(L2, L2, draw, ema, "trajectory")["marginal_std_ema"] == pytest.approx(s2)
    diag = CollapseDiagnostics(CollapseSection(), None, seed=0)
    diag.ema = ema
    other = CollapseDiagnostics(CollapseSection(), None, seed=0)
    other.load_state_dict(diag.state_dict())
    assert other.ema.values == ema.values
    assert set(ema.values) == {"first_turn", "first_turn_seq", "trajectory", "trajectory_seq"}


def test_config_and_schedule():
    diag = CollapseDiagnostics(CollapseSection(compute_freq=5), None, seed=0)
    assert [s for s in range(1, 21) if diag.should_run(s)] == [1, 5, 10, 15, 20]
    assert not CollapseDiagnostics(CollapseSection(enabled=False), None, seed=0).should_run(1)
    assert CollapseSection(schemes=["trajectory"]).schemes == ("trajectory",)
    for bad in ({"schemes": ("turn",)}, {"num_samples": 1}, {"compute_freq": 0}):
        with pytest.raises(ConfigError):
            CollapseSection(**bad)


# ---------------------------------------------------------------------------------------------------------------
# (b) acceptance: MI ≈ log N when reasoning copies the prompt, ≈ 0 when it ignores it
# ---------------------------------------------------------------------------------------------------------------


def test_mi_is_log_n_for_a_copying_policy_and_zero_for_an_ignoring_one(tiny, fmt):
    tok = tiny[1]
    world = KeyWorld(tok, fmt, n_groups=8, group_size=2)
    copy, ignore = (KeyLM(len(tok), world.keys, mode) for mode in ("copy", "ignore"))
    trajs = world.rollout(copy)
    assert all(len(set(tr.input_ids[s:e][:3])) == 1 for tr in trajs for s, e in (t.span for t in tr.turns))
    section = CollapseSection(num_samples=64, h_threshold=1.0, i_threshold=1.0)
    diag = CollapseDiagnostics(section, tok, seed=0)
    m = diag(copy, trajs, step=1)
    assert REGIMES[int(m["collapse/regime"])] == "compressed"  # low H(Z|X), high MI
    ft = "collapse_first_turn_sample/"
    assert m["collapse/valid_thinking_rate"] == 1.0 and m["collapse/prompt_mismatch"] == 0.0
    assert m[ft + "num_prompts"] == 8 and m[ft + "num_samples"] == 16
    assert m[ft + "mi_estimate"] == pytest.approx(math.log(8), abs=1e-6) == m[ft + "mi_upper_bound"]
    assert m[ft + "mi_estimate_seq"] == pytest.approx(math.log(8), abs=1e-6)
    assert m[ft + "conditional_entropy_est"] == pytest.approx(0.0, abs=1e-6)
    assert m[ft + "retrieval_acc"] == 1.0 and m[ft + "retrieval_chance"] == pytest.approx(1 / 8)
    assert m[ft + "retrieval_top2_acc"] == m[ft + "retrieval_top4_acc"] == 1.0 and ft + "retrieval_top8_acc" not in m
    # trajectory scheme: 32 columns, first-turn prompts repeat within a group, so a perfect copier reaches
    # log N − mean log |class| (the mixture holds |class| copies of its own prompt)
    tr = "collapse_trajectory_sample/"
    draw = sample_trajectory(extract_samples(trajs, tok), 64, diag.rng(1, "trajectory"))
    sizes = np.bincount(draw.classes)[draw.classes[draw.own]]
    assert m[tr + "num_prompts"] == m[tr + "num_samples"] == 32
    assert m[tr + "mi_estimate"] == pytest.approx(math.log(32) - np.log(sizes).mean(), abs=1e-6)
    assert m[tr + "retrieval_acc"] == 1.0

    ignoring = world.rollout(ignore, seed=1)
    m = CollapseDiagnostics(section, tok, seed=0)(ignore, ignoring, step=1)
    assert REGIMES[int(m["collapse/regime"])] == "template_collapse"  # high H(Z|X), no MI
    for prefix in (ft, tr):
        assert abs(m[prefix + "mi_estimate"]) < 1e-6 and abs(m[prefix + "mi_estimate_seq"]) < 1e-6
        assert abs(m[prefix + "mi_zscore"]) < 1e-3
        assert m[prefix + "conditional_entropy_est"] == pytest.approx(math.log(len(world.keys)), abs=1e-3)
        assert abs(m[prefix + "retrieval_above_chance"]) < 0.2
    assert m[ft + "retrieval_acc"] == pytest.approx(m[ft + "retrieval_chance"])


# ---------------------------------------------------------------------------------------------------------------
# (c) extraction
# ---------------------------------------------------------------------------------------------------------------


def test_reasoning_ids_strip_whitespace_and_find_merged_markers(tiny, fmt):
    tok = tiny[1]
    eos = fmt.eos_id
    z = reasoning_ids(tok, enc(tok, "  \n hello world \n</think><answer>Up</answer>") + [eos])
    assert tok.decode(z) == " hello world"  # whitespace-only tokens go; ' hel' keeps its own space (exact ids)
    # a plain byte-level BPE (real models' kind; the built-in one isolates symbols) merges '.</' across the marker:
    # the straddling token is left out, the rest kept
    from ragen.models.builtin import build_corpus, train_tokenizer

    plain = train_tokenizer(build_corpus(["frozenlake"], seeds=10), cell_tokens=False)
    ids = enc(plain, "Go up.</think><answer>Up</answer>")
    assert ".</" in [plain.decode([i]) for i in ids]
    assert plain.decode(reasoning_ids(plain, ids)) == "Go up"
    assert tok.decode(reasoning_ids(tok, enc(tok, "Go up.</think><answer>Up</answer>"))) == "Go up."
    assert reasoning_ids(tok, enc(tok, "no marker <answer>Up</answer>") + [eos]) is None
    assert reasoning_ids(tok, enc(tok, "</think><answer>Up</answer>")) == []
    assert reasoning_ids(tok, enc(tok, " \n \n</think>")) == []
    assert tok.decode(reasoning_ids(tok, enc(tok, "a</think>b</think>"))) == "a"  # the first marker ends it


def test_x_is_the_prompt_up_to_the_prefill_and_invalid_turns_are_counted(tiny, fmt):
    tok = tiny[1]
    eos = fmt.eos_id
    p1, d2 = fmt.prompt_ids("S", "U1"), fmt.delta_ids("U2")
    a1, a2 = enc(tok, " plan A</think><answer>Up</answer>") + [eos], enc(tok, "no marker") + [eos]
    good = make_traj([("prompt", p1), ("response", a1), ("delta", d2), ("response", a2)], 0)
    bad = make_traj([("prompt", p1), ("response", enc(tok, " \n</think><answer>Up</answer>") + [eos])], 0, 1)
    empty = make_traj([("prompt", p1)], 1)  # overflowed before turn 1: no turn
    samples = extract_samples([good, bad, empty], tok)
    (s1, s2), (b1,), () = samples
    assert list(s1.x) == p1 and tok.decode(s1.x).endswith("<|im_start|>assistant\n<think>")
    assert list(s2.x) == p1 + a1 + d2 and tok.decode(s1.z) == " plan A"
    assert not s2.valid and not b1.valid
    diag = CollapseDiagnostics(CollapseSection(), tok, seed=0)
    m = diag(KeyLM(len(tok), [5], "ignore"), [good, bad, empty], step=1)
    assert m["collapse/valid_thinking_rate"] == pytest.approx(1 / 3)
    assert (m["collapse/first_turn_num_total"], m["collapse/first_turn_num_valid"]) == (3.0, 1.0)
    assert m["collapse/first_turn_valid_rate"] == pytest.approx(1 / 3)
    assert not any(k.startswith("collapse_") for k in m)  # one valid pair: no second prompt to compare with
    assert m["timing_s/collapse_metrics"] >= 0


def test_prompt_mismatch_is_counted_and_skips_the_first_turn_scheme(tiny, fmt):
    tok = tiny[1]
    world = KeyWorld(tok, fmt, n_groups=3, group_size=2)
    copy = KeyLM(len(tok), world.keys, "copy")
    trajs = world.rollout(copy)
    # member 1 of group 0 saw group 1's prompt
    moved = world.rollout(copy)[2]
    moved.group_id, moved.rollout_index = 0, 1
    trajs[1] = moved
    m = CollapseDiagnostics(CollapseSection(), tok, seed=0)(copy, trajs, step=1)
    assert m["collapse/prompt_mismatch"] == 1.0
    assert not any(k.startswith("collapse_first_turn_sample/") for k in m)
    assert m["collapse_trajectory_sample/mi_estimate"] > 1.0


def test_default_schedule_is_step_1_and_every_10th_of_the_default_run_and_ragen_yaml_keeps_5():
    from pathlib import Path

    from ragen.config import load_config

    cfg = load_config(overrides=["env.name=sokoban"])
    diag = CollapseDiagnostics(cfg.collapse, None, seed=0)
    ran = [s for s in range(1, cfg.trainer.steps + 1) if diag.should_run(s)]
    assert ran == [1, *range(10, cfg.trainer.steps + 1, 10)] and ran[-1] == cfg.trainer.steps
    ragen_yaml = load_config(Path(__file__).resolve().parents[2] / "configs" / "ragen.yaml")
    assert ragen_yaml.collapse.compute_freq == 5


def test_a_skipped_step_changes_only_the_ema_metrics_of_the_steps_that_run(tiny, fmt):
    """compute_freq 10 instead of 5 skips step 5: step 10's draws and estimates are the same (seeded by the step);
    only the EMA of the marginal std, which averaged step 5's value too, differs."""
    tok = tiny[1]
    world = KeyWorld(tok, fmt, n_groups=4, group_size=3)
    copy = KeyLM(len(tok), world.keys, "copy")
    batches = {step: world.rollout(copy) for step in (1, 5, 10)}
    out = {}
    for freq in (5, 10):
        diag = CollapseDiagnostics(CollapseSection(compute_freq=freq, num_samples=6), tok, seed=0)
        out[freq] = [diag(copy, batches[s], step=s) for s in (1, 5, 10) if diag.should_run(s)]
        for m in out[freq]:
            m.pop("timing_s/collapse_metrics")
    every5, every10 = out[5], out[10]
    assert len(every5) == 3 and len(every10) == 2 and every5[0] == every10[0]
    ema = {k for k in every5[2] if "_ema" in k}
    assert ema and set(every5[2]) == set(every10[1])
    assert {k: v for k, v in every5[2].items() if k not in ema} == {k: v for k, v in every10[1].items() if k not in ema}
    assert any(every5[2][k] != every10[1][k] for k in ema)


# ---------------------------------------------------------------------------------------------------------------
# (d) seeded sampling
# ---------------------------------------------------------------------------------------------------------------


def test_sampling_is_seeded_and_follows_each_scheme(tiny, fmt):
    tok = tiny[1]
    world = KeyWorld(tok, fmt, n_groups=4, group_size=3)
    copy = KeyLM(len(tok), world.keys, "copy")
    samples = extract_samples(world.rollout(copy), tok)
    rng = np.random.default_rng

    def picks(draw):
        return [(s.traj, s.turn) for s in draw.samples]

    a, b = sample_first_turn(samples, 5, rng(0)), sample_first_turn(samples, 5, rng(0))
    assert picks(a) == picks(b) and len(set(picks(a))) == 5  # without replacement
    assert all(s.turn == 0 for s in a.samples)
    assert [a.columns[c] for c in a.own] == [s.x for s in a.samples]  # each sample's column is its group's prompt
    assert len(a.columns) == len({s.group_id for s in a.samples})
    assert picks(sample_first_turn(samples, 50, rng(0))) == [(k, 0) for k in range(12)]  # all when fewer
    t1, t2 = sample_trajectory(samples, 40, rng(3)), sample_trajectory(samples, 40, rng(3))
    assert picks(t1) == picks(t2) and len(t1.samples) == 24 and list(t1.own) == list(range(24))
    assert len(set(picks(t1))) < 24  # with replacement
    assert picks(sample_trajectory(samples, 40, rng(4))) != picks(t1)
    # the entry point: same seed and step -> same metrics; another seed -> other draws
    trajs = world.rollout(copy)
    runs = [CollapseDiagnostics(CollapseSection(num_samples=6), tok, seed=s)(copy, trajs, step=5) for s in (7, 7, 8)]
    for r in runs:
        r.pop("timing_s/collapse_metrics")
    assert runs[0] == runs[1] and runs[0] != runs[2]


# ---------------------------------------------------------------------------------------------------------------
# (e) the real tiny model on a real rollout
# ---------------------------------------------------------------------------------------------------------------


def test_tiny_model_on_a_rollout_gives_finite_metrics(tiny, fmt):
    from ragen.rollout.expert import ExpertEngine

    model, tok = tiny
    engine = ExpertEngine(tok, fmt.eos_id, noise=0.5, seed=0)  # expert reasoning: "The player is at ... </think>"
    with EnvGroups("frozenlake", group_size=2, n_groups=4, options={"max_turns": 2}) as groups:
        trajs = run_rollout(
            engine, groups, SamplingParams(temperature=0.0, seed=0), RolloutSettings(chat_format=fmt)
        ).trajectories
    assert len(trajs) == 8
    diag = CollapseDiagnostics(CollapseSection(num_samples=8, micro_batch_size=16), tok, seed=0)
    model.train()  # the trainer's actor may be in train mode: scored in eval mode, mode restored
    try:
        m = diag(model, trajs, step=1, temperature=1.0)
        assert model.training
    finally:
        model.eval()
    assert m["collapse/valid_thinking_rate"] == 1.0 and m["collapse/prompt_mismatch"] == 0.0
    for scheme in ("first_turn", "trajectory"):
        p = f"collapse_{scheme}_sample/"
        for key in (
            "mi_estimate",
            "mi_upper_bound",
            "conditional_entropy_est",
            "reasoning_entropy_est",
            "retrieval_acc",
            "retrieval_chance",
            "retrieval_above_chance",
            "marginal_std",
            "mi_zscore",
            "mi_zscore_ema",
            "matched_log_prob_mean",
            "marginal_log_prob_mean",
            "num_samples",
            "num_prompts",
            "mi_estimate_seq",
            "conditional_entropy_est_seq",
            "reasoning_entropy_est_seq",
            "mi_zscore_seq",
            "mi_zscore_ema_seq",
        ):
            assert math.isfinite(m[p + key]), p + key
        assert m[p + "mi_estimate"] <= m[p + "mi_upper_bound"] + 1e-9
    assert m["collapse_first_turn_sample/num_prompts"] == 4 and "collapse/regime" not in m  # no thresholds set
    assert all(math.isfinite(v) for v in m.values())


def test_cross_score_matches_full_teacher_forcing(tiny, fmt):
    """The padded, length-sorted, window-gathered scoring equals plain per-row forward passes."""
    model, tok = tiny
    xs = [fmt.prompt_ids("S", "a short prompt"), fmt.prompt_ids("S", "a much longer prompt " * 6)]
    zs = [enc(tok, " Up twice."), enc(tok, " The player is at (1, 2) and moves left.")]
    l_mean, l_sum = cross_score(
        model, xs, zs, temperature=0.7, micro_batch_size=3, pad_id=tok.pad_token_id, pad_rows_to=2
    )
    for i, z in enumerate(zs):
        for j, x in enumerate(xs):
            with torch.no_grad():
                logits = model(torch.tensor([x + z])).logits[0].float() / 0.7
            lp = torch.log_softmax(logits, -1)
            ref = sum(lp[len(x) + k - 1, t].item() for k, t in enumerate(z))
            assert l_sum[i, j] == pytest.approx(ref, abs=1e-4)
            assert l_mean[i, j] == pytest.approx(ref / len(z), abs=1e-4)


@pytest.mark.slow
def test_collapse_metrics_appear_in_metrics_jsonl_during_a_run(tmp_path):
    """A real run whose rollouts carry reasoning (the scripted expert engine, noise 0.3): step 1 logs both schemes,
    cross-scored by the run's actor; with compute_freq 2 steps 1 and 2 are diagnosed, step 3 is not."""
    import json

    from ragen.config import load_config
    from ragen.runs.loop import train

    cfg = load_config(overrides=[*TINY, "env.name=frozenlake", "rollout.engine=expert", "warmstart.noise=0.3",
                                 "rollout.n_groups=3", "rollout.group_size=2", "rollout.n_val_groups=1",
                                 "collapse.num_samples=6", "collapse.compute_freq=2", "trainer.steps=3",
                                 "trainer.test_freq=0", "logging.progress=false", f"logging.run_dir={tmp_path}",
                                 "logging.name=r"])
    run = train(cfg)
    rows = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["step"]}
    assert [s for s, r in sorted(rows.items()) if "timing_s/collapse_metrics" in r] == [1, 2]
    assert rows[3]["timing/diagnose_s"] < 0.5 * rows[1]["timing/diagnose_s"]
    step1 = rows[1]
    assert step1["collapse/valid_thinking_rate"] == 1.0, step1["collapse/valid_thinking_rate"]
    for scheme in ("collapse_first_turn_sample", "collapse_trajectory_sample"):
        assert math.isfinite(step1[f"{scheme}/mi_estimate"]), scheme
        assert step1[f"{scheme}/mi_upper_bound"] == pytest.approx(math.log(step1[f"{scheme}/num_prompts"]))
    assert "timing_s/collapse_metrics" in step1
