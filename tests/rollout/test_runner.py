"""The rollout side: token-exact trajectories (strict comparator), masks, prompt frame, seeding, failure paths."""

import copy
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import attrs
import pytest
import torch

import ragen
from ragen import option
from ragen.envs.episode import FORMAT_PENALTY
from ragen.envs.prompt import WARNING, reward_text, system_prompt, turn_text
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.rollout import (
    ChatFormat,
    EnvGroups,
    EnvSlot,
    Generation,
    GroupSpec,
    HFEngine,
    RolloutSettings,
    SamplingParams,
    Trajectory,
    run_rollout,
    train_seed,
    val_seed,
)
from ragen.rollout.context import SEGMENT_MASK, stop_ids, turn_end, turn_start

# ---------------------------------------------------------------------------------------------------------------
# two small deterministic envs
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CountConfig(ragen.EnvConfig):
    target: int = option(4, "Increments needed.")
    max_steps: int = option(100, "The env's own step limit (truncates).")
    fail_on_seed: int = option(-1, "Raise in step() for this seed (failure isolation tests).")
    fail_reset_seed: int = option(-1, "Raise in reset() for this seed.")


class CountEnv(ragen.Env):
    """Say `Inc` until the counter reaches the target; `Nop` is valid and does nothing."""

    config_cls = CountConfig

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Inc", "Nop"]
        self.instructions = "Count up to the target."

    def _reset(self, seed, options):
        if seed == self.config.fail_reset_seed:
            raise RuntimeError("reset exploded")
        self.n, self.steps = seed % 3, 0
        self.task_id = f"count/s{seed}"
        return f"n={self.n} target={self.config.target}", {}

    def _step(self, action):
        if self.current_seed == self.config.fail_on_seed:
            raise RuntimeError("step exploded")
        name = self.canonical_action(action)
        self.n += name == "Inc"
        self.steps += 1
        done = self.n >= self.config.target
        info = {"success": done, "action_is_valid": name is not None, "action_is_effective": name == "Inc", "n": self.n}
        reward = (1.0 if done else -0.1) if name == "Inc" else 0.0
        truncated = self.steps >= self.config.max_steps and not done
        return f"n={self.n} target={self.config.target}", reward, done, truncated, info


@attrs.frozen(kw_only=True)
class GuessConfig(ragen.EnvConfig):
    max_actions_per_turn: int = option(1, "One guess per turn.")


class GuessEnv(ragen.Env):
    """Guess a digit 0-7; the obs says higher/lower."""

    config_cls = GuessConfig
    action_separator = None

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = [str(i) for i in range(8)]
        self.instructions = "Guess the secret digit."

    def _reset(self, seed, options):
        self.secret = (seed * 5) % 8
        self.task_id = f"guess/s{seed}"
        return "No guess yet.", {}

    def _step(self, action):
        g = int(action)
        hit = g == self.secret
        obs = "Correct." if hit else ("Higher." if g < self.secret else "Lower.")
        return obs, float(hit), hit, False, {"success": hit, "action_is_valid": True, "action_is_effective": True}


FACTORIES = {"count": CountEnv, "guess": GuessEnv}


def factory(name, options):
    cls = FACTORIES[name]
    return cls(cls.config_cls(**options))


SMALL = {"response_length": 16, "max_tokens": 16}
#: room for a whole `</think><answer>a || b</answer>` in the built-in tokenizer (one token per symbol: about 20)
WIDE = {**SMALL, "response_length": 32}


# ---------------------------------------------------------------------------------------------------------------
# model, engines
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", [CountEnv(), GuessEnv()], corpus_seeds=10)
    model, tok = load_model_and_tokenizer(path, "unused")
    return model, tok


@pytest.fixture(scope="module")
def fmt(tiny):
    return ChatFormat(tiny[1])


class Recording:
    """Wraps an engine and records every (prompt, generation) it served."""

    def __init__(self, engine):
        self.engine = engine
        self.calls = []

    @property
    def eos_token_ids(self):
        return self.engine.eos_token_ids

    @property
    def logprobs_exact(self):
        return self.engine.logprobs_exact

    def sync_weights(self, model):
        return self.engine.sync_weights(model)

    def close(self):
        self.engine.close()

    def generate(self, prompts, params):
        gens = self.engine.generate(prompts, params)
        self.calls.extend((list(p), g, params) for p, g in zip(prompts, gens))
        return gens

    def generate_for_envs(self, envs, prompts, params):
        return self.generate(prompts, params)  # recorded


class FixedEngine:
    """A fake engine for failure paths: returns the given id lists in turn (cycling)."""

    def __init__(self, eos_id, responses):
        self.eos = eos_id
        self.responses = responses
        self.i = 0

    logprobs_exact = False

    @property
    def eos_token_ids(self):
        return [self.eos]

    def sync_weights(self, model):
        return {}

    def close(self):
        pass

    def generate(self, prompts, params):
        out = []
        for _ in prompts:
            ids = list(self.responses[self.i % len(self.responses)])
            self.i += 1
            out.append(Generation(ids, [-1.0] * len(ids), "stop" if ids and ids[-1] == self.eos else "length"))
        return out

    def generate_for_envs(self, envs, prompts, params):
        return self.generate(prompts, params)


def eos_biased(model, eos_id, bias=3.5):
    """A copy of the tiny model that samples EOS often (so both 'stop' and 'length' turns occur)."""
    m = copy.deepcopy(model)
    head = torch.nn.Linear(m.lm_head.in_features, m.lm_head.out_features, bias=True)
    head.weight = m.lm_head.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[eos_id] = bias
    m.lm_head = head
    return m


# ---------------------------------------------------------------------------------------------------------------
# the strict comparator
# ---------------------------------------------------------------------------------------------------------------


def assert_token_exact(trajs: list[Trajectory], calls: list) -> None:
    """Stored ids = concatenation of the segments; masks = segment flags; Σ mask = engine ids; every response segment is
    exactly what the engine returned for exactly the prefix before it (a bijection between turns and engine calls)."""
    pool = list(calls)
    for tr in trajs:
        assert tr.segments and tr.segments[0][0] == "prompt" and tr.segments[0][1] == 0
        rebuilt, mask, pos = [], [], 0
        for kind, start, end in tr.segments:
            assert start == pos and end > start and kind in SEGMENT_MASK
            rebuilt += tr.input_ids[start:end]
            mask += [SEGMENT_MASK[kind]] * (end - start)
            pos = end
        assert rebuilt == tr.input_ids and pos == len(tr.input_ids)
        assert mask == tr.loss_mask
        assert len(tr.rollout_logprobs) == len(tr.input_ids)
        responses = [(s, e) for k, s, e in tr.segments if k == "response"]
        assert [t.span for t in tr.turns if t.span[1] > t.span[0]] == responses
        if tr.turns:
            assert tr.segments[-1][0] == "response"  # the env state after the final action is not appended
        served = 0
        for turn in tr.turns:
            s, e = turn.span
            match = next(
                (c for c in pool if c[0] == tr.input_ids[:s] and c[1].token_ids == tr.input_ids[s:e]),
                None,
            )
            assert match is not None, f"turn at {s}:{e} of {tr.episode_id} is not an engine output for that prefix"
            pool.remove(match)
            assert tr.rollout_logprobs[s:e] == match[1].logprobs
            served += len(match[1].token_ids)
        assert sum(tr.loss_mask) == served == tr.response_length
        for j, m in enumerate(tr.loss_mask):
            if not m:
                assert tr.rollout_logprobs[j] == 0.0
    assert pool == [], "engine outputs that no trajectory holds"
    assert sum(tr.response_length for tr in trajs) == sum(len(c[1].token_ids) for c in calls)


def teacher_forced_logprobs(model, ids, temperature=1.0):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return [0.0] + [lp[j - 1, ids[j]].item() for j in range(1, len(ids))]


# ---------------------------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------------------------


def test_strict_comparator_two_envs_several_turns(tiny, fmt):
    model, tok = tiny
    biased = eos_biased(model, fmt.eos_id)
    engine = Recording(HFEngine(biased, tok, max_batch=4))
    specs = [GroupSpec("count", 2, {**SMALL, "target": 9, "max_turns": 3}),
             GroupSpec("guess", 1, {"response_length": 12, "max_tokens": 12})]
    with EnvGroups(specs, group_size=3, factory=factory) as groups:
        res = run_rollout(engine, groups, SamplingParams(seed=7), RolloutSettings(max_model_len=4096, chat_format=fmt),
                          policy_version=3)
    assert res.failed_envs == 0 and len(res.trajectories) == 9
    assert {t.env_name for t in res.trajectories} == {"count", "guess"}
    assert all(t.num_turns >= 2 for t in res.trajectories) and all(t.policy_version == 3 for t in res.trajectories)
    assert_token_exact(res.trajectories, engine.calls)
    reasons = [t.finish_reason for tr in res.trajectories for t in tr.turns]
    assert "stop" in reasons and "length" in reasons  # both the EOS path and the EOS-fill path ran
    kinds = {k for tr in res.trajectories for k, _, _ in tr.segments}
    assert kinds == {"prompt", "response", "delta", "eos_fill"}
    # per-env generation caps (response_length) were honoured
    for tr in res.trajectories:
        cap = 12 if tr.env_name == "guess" else 16
        assert all(t.span[1] - t.span[0] <= cap for t in tr.turns)
        assert all((t.span[1] - t.span[0] == cap) or t.finish_reason in ("stop", "new_message") for t in tr.turns)


def test_rollout_logprobs_match_teacher_forcing(tiny, fmt):
    model, tok = tiny
    engine = HFEngine(model, tok)
    with EnvGroups("count", group_size=2, n_groups=1, options={**SMALL, "max_turns": 2}, factory=factory) as groups:
        res = run_rollout(engine, groups, SamplingParams(temperature=0.8, top_p=0.9, seed=1),
                          RolloutSettings(chat_format=fmt))
    for tr in res.trajectories:
        ref = teacher_forced_logprobs(model, tr.input_ids, temperature=0.8)
        diffs = [abs(a - b) for a, b, m in zip(ref, tr.rollout_logprobs, tr.loss_mask) if m]
        assert diffs and max(diffs) < 1e-4


def test_masks_prompt_frame_and_delta(tiny, fmt):
    model, tok = tiny
    engine = HFEngine(model, tok)  # unbiased tiny model: 16 random tokens, no EOS -> eos_fill
    env = CountEnv(CountConfig(**SMALL, max_turns=2))
    res = run_rollout(engine, [EnvSlot(env, "count", 10001, 0, 0, "train")], SamplingParams(seed=0),
                      RolloutSettings(chat_format=fmt))
    (tr,) = res.trajectories
    assert tr.num_turns == 2
    kinds = [k for k, _, _ in tr.segments]
    assert kinds[:2] == ["prompt", "response"] and kinds[-1] == "response" and "delta" in kinds
    # only sampled ids carry mask 1
    sampled = {j for k, s, e in tr.segments if k == "response" for j in range(s, e)}
    assert {j for j, m in enumerate(tr.loss_mask) if m} == sampled
    # P_1 is exactly the RAGEN frame: system + "\nTurn 1:\nState:\n..." + generation prompt + "<think>"
    _, s, e = tr.segments[0]
    obs = "n=2 target=4"  # 10001 % 3 == 2
    expected = (
        "<|im_start|>system\n" + system_prompt(env) + "<|im_end|>\n<|im_start|>user\n"
        + turn_text(1, obs, 10, 16) + "<|im_end|>\n<|im_start|>assistant\n<think>"
    )
    assert expected.startswith("<|im_start|>system\nYou're a helpful assistant. Count up to the target.")
    assert "<|im_start|>user\n\nTurn 1:\nState:\nn=2 target=4\nYou have 10 actions left." in expected
    assert tok.decode(tr.input_ids[s:e]) == expected
    assert tr.input_ids[s:e] == tok(expected, add_special_tokens=False)["input_ids"]
    assert all(m == 0 for m in tr.loss_mask[s:e])
    # the delta: closing "\n" after the EOS, "Reward:\n...", the next turn text, generation prompt, prefill — all mask 0
    first = tr.turns[0]
    (d_kind, ds, de) = next(seg for seg in tr.segments if seg[0] == "delta")
    delta = tok.decode(tr.input_ids[ds:de])
    user2 = reward_text(first.reward) + turn_text(2, f"n={2 + first.executed.count('Inc')} target=4",
                                                  10 - len(first.executed), 16, warning=not first.executed)
    assert delta == "\n<|im_start|>user\n" + user2 + "<|im_end|>\n<|im_start|>assistant\n<think>"
    assert "Reward:\n" in delta and "\nTurn 2:\nState:\n" in delta and all(m == 0 for m in tr.loss_mask[ds:de])
    if not first.executed:
        assert WARNING in delta
    # the role header, glue and prefill tokens of every delta are mask 0
    header = tok("<|im_start|>assistant\n<think>", add_special_tokens=False)["input_ids"]
    assert tr.input_ids[de - len(header) : de] == header
    # a turn cut by the length cap gets the EOS appended with mask 0
    if first.finish_reason == "length":
        fill = next(seg for seg in tr.segments if seg[0] == "eos_fill")
        assert tr.input_ids[fill[1] : fill[2]] == [fmt.eos_id] and tr.loss_mask[fill[1]] == 0


def test_chat_format_facts_and_prefix_check(tiny, fmt):
    _, tok = tiny
    assert (fmt.eos_text, fmt.closing_text) == ("<|im_end|>", "\n")
    assert fmt.delta_text("U") == "\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>"
    assert ChatFormat(tok, enable_think=False).prompt_text("S", "U").endswith("<|im_start|>assistant\n<answer>")
    # a template with no text after the end-of-turn token
    flat = copy.deepcopy(tok)
    flat.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert turn_end(flat)[1:] == ("<|im_end|>", "")
    ChatFormat(flat)  # prefix-preserving: accepted
    # a Qwen3-like template that strips the reasoning of earlier assistant turns is refused
    strip = copy.deepcopy(tok)
    strip.chat_template = (
        "{% for m in messages %}{% set c = m['content'] %}"
        "{% if m['role'] == 'assistant' and not loop.last and '</think>' in c %}{% set c = c.split('</think>')[-1] "
        "%}{% endif %}<|im_start|>{{ m['role'] }}\n{{ c }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ragen.ConfigError, match="not prefix-preserving"):
        ChatFormat(strip)


def test_group_seeding_and_pool(tiny, fmt):
    model, tok = tiny
    engine = HFEngine(model, tok)
    groups = EnvGroups("count", group_size=3, n_groups=2, options={**SMALL, "max_turns": 1}, factory=factory)
    envs = groups.envs()
    s0, s1 = groups.slots(0), groups.slots(1)
    assert [s.seed for s in s0] == [10000] * 3 + [10001] * 3 == [train_seed(0, g, 2) for g in (0, 0, 0, 1, 1, 1)]
    assert [s.seed for s in s1] == [10002] * 3 + [10003] * 3
    assert [s.rollout_index for s in s0] == [0, 1, 2, 0, 1, 2] and [s.group_id for s in s0] == [0, 0, 0, 1, 1, 1]
    assert [s.env for s in s1] == envs  # the pool is reused across steps
    pinned = EnvGroups("count", group_size=2, n_groups=2, options=SMALL, factory=factory, levels=1)
    assert {s.seed for step in range(3) for s in pinned.slots(step)} == {10000}  # rollout.train_levels=1
    cycled = EnvGroups("count", group_size=1, n_groups=2, options=SMALL, factory=factory, levels=3)
    assert [s.seed for step in range(3) for s in cycled.slots(step)] == [10000, 10001, 10002, 10000, 10001, 10002]
    pinned.close(), cycled.close()
    res = run_rollout(engine, groups, SamplingParams(seed=0), RolloutSettings(chat_format=fmt), step=1)
    p1 = {}
    for tr in res.trajectories:
        _, s, e = tr.segments[0]
        p1.setdefault(tr.group_id, set()).add(tuple(tr.input_ids[s:e]))
        assert tr.seed == 10002 + tr.group_id and tr.task_id == f"count/s{tr.seed}"
    assert all(len(v) == 1 for v in p1.values())  # members share the initial observation
    assert p1[0] != p1[1]
    assert [e.rollout_index for e in envs] == [0, 1, 2, 0, 1, 2]
    groups.close()
    assert all(e.closed for e in envs)
    groups.close()  # idempotent
    val = EnvGroups.validation("count", n_val_groups=3, options=SMALL, factory=factory)
    assert [(s.seed, s.split, s.rollout_index) for s in val.slots(0)] == \
        [(123, "val", 0), (124, "val", 0), (125, "val", 0)]
    assert [s.seed for s in val.slots(7)] == [val_seed(g) for g in range(3)]
    val.close()


def test_sampling_is_reproducible_per_seed(tiny, fmt):
    model, tok = tiny
    engine = HFEngine(model, tok, max_batch=2)

    def run(seed):
        with EnvGroups("count", group_size=2, n_groups=2, options={**SMALL, "max_turns": 2}, factory=factory) as g:
            res = run_rollout(engine, g, SamplingParams(seed=seed), RolloutSettings(chat_format=fmt))
            return [t.input_ids for t in res.trajectories]

    a, b, c = run(5), run(5), run(6)
    assert a == b and a != c


def test_hf_engine_padding_is_not_inferred_from_ids(tiny):
    model, tok = tiny
    prompts = [tok(f"<|im_start|>user\n{'x y ' * k}", add_special_tokens=False)["input_ids"] for k in (1, 6, 3)]
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    engine = HFEngine(model, tok, max_batch=2)
    batched = engine.generate(prompts, greedy)
    single = [engine.generate([p], greedy)[0] for p in prompts]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    engine.pad_token_id = engine.eos_token_ids[0]  # pad == EOS: same result, the attention mask decides
    assert [g.token_ids for g in engine.generate(prompts, greedy)] == [g.token_ids for g in single]


def test_generate_passes_the_kv_cache_by_the_name_the_installed_transformers_takes(tiny, monkeypatch):
    """transformers 5.2x renamed generate's and forward's ``past_key_values`` to ``cache``; the old name printed a
    deprecation warning on every run. The engine passes the cache by the name the model's forward takes."""
    import inspect

    model, tok = tiny
    new_name = "cache" in inspect.signature(model.forward).parameters
    seen = []
    generate = model.generate

    def recording(*args, **kwargs):
        seen.append(set(kwargs))
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording)
    prompt = tok("<|im_start|>user\nx y x y", add_special_tokens=False)["input_ids"]
    HFEngine(model, tok).generate([prompt], SamplingParams(temperature=0, max_new_tokens=3))
    assert seen and all(("cache" in k) == new_name and ("past_key_values" in k) != new_name for k in seen)


def test_malformed_outputs_are_penalised_not_fatal(tiny, fmt):
    _, tok = tiny
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    eos = fmt.eos_id
    responses = [
        [],  # empty
        enc("no tags at all") + [eos],
        [5, 77, 300, 2, 2, 9, 1, 1],  # garbage incl. special ids
        enc("x" * 200)[:32],  # huge: fills the cap
        enc(" ok</think><answer>Jump</answer>") + [eos],  # invalid action
        [len(tok) + 50, 3],  # ids the tokenizer does not know
        enc("</think><answer></answer>") + [eos],  # matched, zero actions
    ]
    engine = FixedEngine(eos, responses)
    env = CountEnv(CountConfig(**WIDE, max_turns=len(responses), target=50))
    res = run_rollout(engine, [EnvSlot(env, "count", 1, 0, 0, "train")], SamplingParams(),
                      RolloutSettings(chat_format=fmt))
    (tr,) = res.trajectories
    assert res.failed_envs == 0 and tr.num_turns == len(responses)
    assert all(t.penalty == FORMAT_PENALTY and not t.format_ok and not t.executed for t in tr.turns)
    assert tr.penalty == pytest.approx(FORMAT_PENALTY * len(responses)) and tr.score == pytest.approx(tr.penalty)
    assert tr.turns[4].invalid == ["Jump"] and tr.turns[4].answer == "Jump"
    assert tr.truncated and tr.truncation_reason == "max_turns"
    assert res.metrics["valid_format_rate"] == 0.0
    # a well-formed answer earns no penalty and the env's reward
    good = FixedEngine(eos, [enc(" go</think><answer>Inc || Inc</answer>") + [eos]])
    env = CountEnv(CountConfig(**WIDE, target=4))
    parser = ragen.make_component("parser", "think-answer")
    (tr,) = run_rollout(good, [EnvSlot(env, "count", 0, 0, 0, "train")], SamplingParams(),
                        RolloutSettings(parser=parser, chat_format=fmt)).trajectories
    assert tr.success and not tr.truncated and tr.truncation_reason is None and tr.num_turns == 2
    assert [t.executed for t in tr.turns] == [["Inc", "Inc"], ["Inc", "Inc"]] and tr.penalty == 0.0
    assert tr.reward == pytest.approx(-0.1 * 3 + 1.0) and all(t.format_ok for t in tr.turns)
    assert tr.turns[0].info["n"] == 2.0


class TwoEosEngine(FixedEngine):
    """A model whose end-of-turn ids include one whose text is plain (like "</s>" or "<end_of_turn>")."""

    def __init__(self, eos_ids, responses):
        super().__init__(eos_ids[0], responses)
        self.eos_ids = eos_ids

    @property
    def eos_token_ids(self):
        return list(self.eos_ids)


def test_text_after_the_answer_fails_the_turn_but_an_end_of_turn_token_does_not(tiny, fmt):
    _, tok = tiny
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    plain_eos = enc("Z")[-1]  # an end-of-turn id whose text the special-token pattern does not know
    answer = enc(" go</think><answer>Inc</answer>")
    responses = [answer + [fmt.eos_id], answer + [plain_eos], answer + enc(" and then Inc") + [fmt.eos_id]]
    env = CountEnv(CountConfig(**WIDE, max_turns=3, target=50))
    res = run_rollout(TwoEosEngine([fmt.eos_id, plain_eos], responses), [EnvSlot(env, "count", 0, 0, 0, "train")],
                      SamplingParams(), RolloutSettings(chat_format=fmt))
    (tr,) = res.trajectories
    assert [t.format_ok for t in tr.turns] == [True, True, False]
    assert [t.executed for t in tr.turns] == [["Inc"], ["Inc"], []] and tr.turns[2].penalty == FORMAT_PENALTY


def test_a_turn_that_opens_a_new_message_stops_there_and_is_malformed(tiny, fmt):
    """The sokoban GRPO collapse (docs/benchmarks.md): derailed turns ran on as `<|im_start|>user ...` prompt text up
    to the cap. The real engine now stops on the template's message-opening token; the turn is parsed whole (so even
    a complete answer before it is malformed), gets the EOS fill, and is counted."""
    model, tok = tiny
    start = turn_start(tok)
    assert tok.convert_ids_to_tokens(start) == "<|im_start|>"
    assert HFEngine(model, tok).eos_token_ids == [fmt.eos_id, start] == stop_ids(tok, model)
    engine = Recording(HFEngine(eos_biased(model, start, bias=8.0), tok))
    env = CountEnv(CountConfig(**SMALL, max_turns=2))
    res = run_rollout(engine, [EnvSlot(env, "count", 10001, 0, 0, "train")], SamplingParams(seed=0),
                      RolloutSettings(chat_format=fmt))
    (tr,) = res.trajectories
    assert tr.num_turns == 2 and [t.finish_reason for t in tr.turns] == ["new_message", "new_message"]
    assert all(tr.input_ids[t.span[1] - 1] == start and not t.format_ok and not t.truncated_response for t in tr.turns)
    fill = next(seg for seg in tr.segments if seg[0] == "eos_fill")  # the turn is closed for the next message
    assert tr.input_ids[fill[1]:fill[2]] == [fmt.eos_id] and tr.loss_mask[fill[1]] == 0
    assert_token_exact(res.trajectories, engine.calls)
    assert res.metrics["turn_new_message_rate"] == 1.0 and res.metrics["turn_length_clip_rate"] == 0.0
    # the collapse's turns: an answer cut off by the new message is malformed; a complete one stands (the parser
    # ignores chat special tokens after </answer>), and both turns are closed with the fill
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    fixed = TwoEosEngine([fmt.eos_id, start], [enc(" go</think><answer>Inc || Inc</") + [start],
                                               enc(" go</think><answer>Inc</answer>") + [start]])
    env = CountEnv(CountConfig(**WIDE, max_turns=2, target=50))
    (tr,) = run_rollout(fixed, [EnvSlot(env, "count", 0, 0, 0, "train")], SamplingParams(),
                        RolloutSettings(chat_format=fmt)).trajectories
    assert [t.format_ok for t in tr.turns] == [False, True] and tr.turns[0].penalty == FORMAT_PENALTY
    assert [t.finish_reason for t in tr.turns] == ["new_message"] * 2 and tr.turns[1].executed == ["Inc"]
    assert [k for k, _, _ in tr.segments] == ["prompt", "response", "eos_fill", "delta", "response"]


def test_truncation_reasons(tiny, fmt):
    _, tok = tiny
    eos = fmt.eos_id
    nop = tok(" x</think><answer>Nop || Nop</answer>", add_special_tokens=False)["input_ids"] + [eos]

    def one(**cfg):
        env = CountEnv(CountConfig(**WIDE, **cfg))
        res = run_rollout(FixedEngine(eos, [nop]), [EnvSlot(env, "count", 0, 0, 0, "train")], SamplingParams(),
                          RolloutSettings(chat_format=fmt))
        return res.trajectories[0]

    assert one(max_actions_per_episode=3, max_turns=5, allow_unreachable=True).truncation_reason == "budget"
    assert one(max_turns=2).truncation_reason == "max_turns"
    tr = one(max_steps=3)
    assert tr.truncated and tr.truncation_reason == "env" and tr.num_turns == 2


def test_context_cap_ends_the_episode_visibly(tiny, fmt):
    _, tok = tiny
    eos = fmt.eos_id
    env = CountEnv(CountConfig(**SMALL))
    p1 = len(fmt.prompt_ids(system_prompt(env), turn_text(1, "n=0 target=4", 10, 16)))
    engine = FixedEngine(eos, [[7] * 16])
    # turn 1 fits, turn 2 would not: the episode ends after A_1 (the delta is not appended)
    res = run_rollout(engine, [EnvSlot(env, "count", 0, 0, 0, "train")], SamplingParams(),
                      RolloutSettings(max_model_len=p1 + 16 + 20, chat_format=fmt))
    (tr,) = res.trajectories
    assert tr.truncated and tr.truncation_reason == "context_overflow" and tr.num_turns == 1
    assert tr.segments[-1][0] == "response" and len(tr.input_ids) == p1 + 16
    assert res.metrics["truncated/context_overflow"] == 1.0
    # not even turn 1 fits: kept, flagged, nothing sampled
    env2 = CountEnv(CountConfig(**SMALL))
    res = run_rollout(engine, [EnvSlot(env2, "count", 0, 0, 0, "train")], SamplingParams(),
                      RolloutSettings(max_model_len=p1 + 15, chat_format=fmt))
    (tr,) = res.trajectories
    assert tr.truncation_reason == "context_overflow" and tr.num_turns == 0 and tr.response_length == 0


def test_failing_env_is_isolated_and_counted(tiny, fmt):
    model, tok = tiny
    engine = Recording(HFEngine(model, tok))
    specs = [GroupSpec("count", 3, {**SMALL, "max_turns": 2, "fail_on_seed": 10001, "fail_reset_seed": 10002})]
    with EnvGroups(specs, group_size=2, factory=factory) as groups:
        res = run_rollout(engine, groups, SamplingParams(seed=0), RolloutSettings(chat_format=fmt))
    # seed 10001 fails in step only if an action is executed; seed 10002 always fails in reset
    assert res.failed_envs >= 2 and len(res.trajectories) + res.failed_envs == 6
    assert all(t.seed != 10002 for t in res.trajectories) and res.metrics["failed_envs"] == res.failed_envs
    assert any("reset raised RuntimeError: reset exploded" in e for e in res.errors)
    kept = {id(t) for t in res.trajectories}
    assert len(kept) == len(res.trajectories)


def test_failing_step_drops_the_trajectory(tiny, fmt):
    _, tok = tiny
    eos = fmt.eos_id
    inc = tok(" x</think><answer>Inc</answer>", add_special_tokens=False)["input_ids"] + [eos]
    slots = [EnvSlot(CountEnv(CountConfig(**SMALL, fail_on_seed=s)), "count", 5, 0, i, "train")
             for i, s in enumerate((5, 6))]
    res = run_rollout(FixedEngine(eos, [inc]), slots, SamplingParams(), RolloutSettings(chat_format=fmt))
    assert res.failed_envs == 1 and [t.rollout_index for t in res.trajectories] == [1]
    assert "turn 1 raised RuntimeError: step exploded" in res.errors[0]


def test_trajectory_json_and_metrics(tiny, fmt):
    model, tok = tiny
    options = {"response_length": 8, "max_tokens": 8}
    with EnvGroups("guess", group_size=2, n_groups=1, options=options, factory=factory) as g:
        res = run_rollout(HFEngine(model, tok), g, SamplingParams(seed=3), RolloutSettings(chat_format=fmt))
    tr = res.trajectories[0]
    data = json.loads(tr.to_json())
    for key in ("env_name", "seed", "group_id", "rollout_index", "split", "policy_version", "input_ids", "loss_mask",
                "rollout_logprobs", "segments", "turns", "reward", "penalty", "score", "success", "truncated",
                "truncation_reason", "num_turns", "response_length"):
        assert key in data
    assert data["input_ids"] == tr.input_ids and data["turns"][0]["span"] == list(tr.turns[0].span)
    assert tr.last_token_index == max(j for j, m in enumerate(tr.loss_mask) if m)
    for key in ("success", "score", "valid_format_rate", "turns_mean", "truncated/max_turns",
                "truncated/context_overflow", "guess/success", "failed_envs"):
        assert key in res.metrics
    assert res.metrics["num_trajectories"] == 2.0


def test_engine_must_stop_on_the_template_eos(tiny, fmt):
    _, tok = tiny
    with pytest.raises(ragen.ConfigError, match="end-of-turn"):
        run_rollout(FixedEngine(0, [[1]]), [], SamplingParams(), RolloutSettings(chat_format=fmt))


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
def test_strict_comparator_on_registered_envs(tiny, fmt, name):
    if name not in {c.name for c in ragen.list_envs()}:
        pytest.skip(f"env {name!r} is not registered (its plugin is not installed)")
    model, tok = tiny
    engine = Recording(HFEngine(eos_biased(model, fmt.eos_id), tok))
    with EnvGroups(name, group_size=2, n_groups=2, options={**SMALL, "max_turns": 3}) as groups:
        res = run_rollout(engine, groups, SamplingParams(seed=11), RolloutSettings(chat_format=fmt))
    assert res.failed_envs == 0 and len(res.trajectories) == 4
    assert_token_exact(res.trajectories, engine.calls)
    for tr in res.trajectories:
        assert tr.num_turns >= 1 and all(t.penalty == FORMAT_PENALTY or t.format_ok for t in tr.turns)


def test_answer_only_mode_prefills_answer(tiny):
    _, tok = tiny
    fmt = ChatFormat(tok, enable_think=False)
    eos = fmt.eos_id
    engine = FixedEngine(eos, [tok("Inc || Inc</answer>", add_special_tokens=False)["input_ids"] + [eos]])
    env = CountEnv(CountConfig(**SMALL, target=3))
    parser = ragen.make_component("parser", "answer")
    res = run_rollout(engine, [EnvSlot(env, "count", 0, 0, 0, "train")], SamplingParams(),
                      RolloutSettings(parser=parser, chat_format=fmt))
    (tr,) = res.trajectories
    assert tr.success and tr.turns[0].executed == ["Inc", "Inc"] and tr.penalty == 0.0
    prompt = tok.decode(tr.input_ids[: tr.segments[0][2]])
    assert prompt.endswith("<|im_start|>assistant\n<answer>")
    assert "Always output: <answer> [your answer] </answer> with" in prompt


def test_engine_restores_the_training_mode(tiny):
    model, tok = tiny
    model.train()
    try:
        HFEngine(model, tok).generate([[1, 5, 6]], SamplingParams(max_new_tokens=2, seed=0))
        assert model.training
    finally:
        model.eval()


def test_rollout_handle_from_a_run_config(tiny):
    from ragen.config import EnvSection, RunConfig
    from ragen.rollout import Rollout

    model, tok = tiny
    cfg = RunConfig()
    cfg = attrs.evolve(
        cfg,
        env=EnvSection(name="count", options={**SMALL, "max_turns": 2}),
        rollout=attrs.evolve(cfg.rollout, n_groups=2, group_size=2, n_val_groups=3),
    )
    handle = Rollout(HFEngine(model, tok), tok, cfg, ragen.make_component("parser", "think-answer"), factory=factory)
    try:
        train = handle.train_batch(1, policy_version=1, seed=4)
        assert [t.seed for t in train.trajectories] == [10002, 10002, 10003, 10003]
        assert {t.policy_version for t in train.trajectories} == {1} and train.failed_envs == 0
        val = handle.val_batch(policy_version=1, seed=4)
        assert [(t.seed, t.split) for t in val.trajectories] == [(123, "val"), (124, "val"), (125, "val")]
        assert "success" in val.metrics
    finally:
        handle.close()
    assert all(e.closed for e in handle.train_groups.envs() + handle.val_groups.envs())


def test_response_length_override_caps_every_turn(tiny, fmt):
    model, tok = tiny
    with EnvGroups("count", group_size=2, n_groups=1, options={**SMALL, "max_turns": 2}, factory=factory) as g:
        res = run_rollout(HFEngine(model, tok), g, SamplingParams(seed=2),
                          RolloutSettings(chat_format=fmt, response_length=5))
    assert all(t.span[1] - t.span[0] <= 5 for tr in res.trajectories for t in tr.turns)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_kv_reuse_across_turns_changes_nothing_but_the_work(tiny, fmt, temperature):
    """Later turns feed only their new tokens, and the rollout is the same as with every prompt re-encoded."""
    model, tok = tiny
    runs = {}
    for reuse in (False, True):
        engine = Recording(HFEngine(model, tok, kv_reuse=reuse, max_batch=3))  # 2 chunks: entries from both are kept
        with EnvGroups("frozenlake", group_size=2, n_groups=2, options={"response_length": 12, "max_turns": 4}) as g:
            res = run_rollout(engine, g, SamplingParams(temperature=temperature, seed=5),
                              RolloutSettings(chat_format=fmt))
        assert_token_exact(res.trajectories, engine.calls)
        runs[reuse] = (res.trajectories, engine.engine.kv_stats)
    (plain, plain_stats), (reused, stats) = runs[False], runs[True]
    assert plain_stats["reused_tokens"] == 0 and stats["reused_tokens"] > stats["prompt_tokens"] // 2
    assert [t.num_turns for t in reused] == [t.num_turns for t in plain] and plain[0].num_turns > 1
    for a, b in zip(plain, reused):
        assert a.input_ids == b.input_ids and a.loss_mask == b.loss_mask
        assert a.rollout_logprobs == pytest.approx(b.rollout_logprobs, abs=1e-4)


def test_kv_reuse_is_dropped_when_weights_change(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok)
    prompt = tok("hello there", add_special_tokens=False)["input_ids"]
    (gen,) = engine.generate([prompt], SamplingParams(max_new_tokens=4, seed=0))
    assert len(engine._kv) == 1
    assert engine._cached_prefix(prompt + gen.token_ids + [5])[0] == len(prompt) + len(gen.token_ids) - 1
    engine.sync_weights(model)
    assert engine._kv == {} and engine._cached_prefix(prompt + gen.token_ids + [5]) == (0, None)
