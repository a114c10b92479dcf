"""The HF engine's static-cache decode path (``decode='static'``) returns what the plain path returns: the same
sampled ids under a seed, the same stops, log-probs equal to float rounding - across chunks of different row counts,
shared prefills and KV reuse from the previous turn. On CUDA the decoding step is compiled with CUDA graphs; on a CPU
the compiled step is traced with dynamo's eager backend (no C++ compilation) to check the same thing."""

import copy

import pytest
import torch

from ragen.errors import ConfigError
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.rollout.context import turn_end
from ragen.rollout.engine import SamplingParams
from ragen.rollout.hf import HFEngine


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("decode") / "tiny", ["frozenlake"], corpus_seeds=5)
    model, tok = load_model_and_tokenizer(path, "unused")
    # bias the end-of-turn id so that some rows stop early and others run to the length cap
    model = copy.deepcopy(model)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    head.weight = model.lm_head.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[turn_end(tok)[0]] = 1.5
    model.lm_head = head
    return model, tok


def _prompts(tok, n=7):
    """Prompts of different lengths (left padding differs by row), two of them equal (a shared prefill)."""
    g = torch.Generator().manual_seed(0)
    out = [
        torch.randint(5, len(tok) - 1, (int(k),), generator=g).tolist() for k in torch.randint(2, 40, (n,), generator=g)
    ]
    out[3] = list(out[1])
    return out


def _two_turns(engine, prompts, temperature):
    """A first call, then a second whose prompts extend the first's rows (so the engine reuses their cached keys)."""
    first = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=11))
    follow = [p + g.token_ids + [7, 8, 9] for p, g in zip(prompts, first)]
    second = engine.generate(follow, SamplingParams(temperature=temperature, max_new_tokens=24, seed=12))
    return first + second


def _assert_same(plain, fast):
    assert [g.token_ids for g in fast] == [g.token_ids for g in plain]
    assert [g.finish_reason for g in fast] == [g.finish_reason for g in plain]
    for a, b in zip(plain, fast):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)


class CountingBackend:
    """A torch.compile backend that runs the traced graph eagerly and counts the graphs it was given."""

    def __init__(self):
        self.graphs = 0

    def __deepcopy__(self, memo):  # CompileConfig.to_dict deep-copies its fields: count in this instance
        return self

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("decode", ["static", "static-eager"])
def test_static_decode_returns_the_plain_ids(tiny, temperature, decode):
    model, tok = tiny
    prompts = _prompts(tok)
    # max_batch=4: chunks of 4 and 3 rows, so two static buffers are in use
    plain = HFEngine(model, tok, max_batch=4)
    fast = HFEngine(model, tok, max_batch=4, decode=decode)
    want, got = _two_turns(plain, prompts, temperature), _two_turns(fast, prompts, temperature)
    _assert_same(want, got)
    reasons = {g.finish_reason for g in want}
    assert reasons == {"stop", "length"}, reasons  # both stop paths are compared
    assert (
        fast.kv_stats == plain.kv_stats
        and fast.kv_stats["reused_tokens"] > 0
        and fast.kv_stats["shared_prefill_tokens"] > 0
    )
    assert sorted(rows for rows, _, _ in fast._static) == [3, 4]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_compiled_decode_step_returns_the_plain_ids(tiny, temperature):
    """transformers compiles the decoding step when the cache is static; forced here on a CPU with a backend that runs
    the traced graphs eagerly, which checks that the traced step (static addresses, mask, positions) samples the same
    ids without paying inductor's C++ compilation."""
    from transformers import CompileConfig

    model, tok = tiny
    model = copy.deepcopy(model)  # transformers keeps the compiled call on the module: not on the shared fixture
    backend = CountingBackend()
    cfg = CompileConfig(backend=backend, mode=None)
    cfg._compile_all_devices = True  # transformers' own switch for compiling on a CPU (otherwise CUDA/XPU only)
    prompts = _prompts(tok)
    want = _two_turns(HFEngine(model, tok, max_batch=4), prompts, temperature)
    fast = HFEngine(model, tok, max_batch=4, decode="static", compile_config=cfg)
    got = _two_turns(fast, prompts, temperature)
    _assert_same(want, got)
    assert backend.graphs > 0  # the decoding step did go through torch.compile
    graphs = backend.graphs
    _assert_same(want, _two_turns(fast, prompts, temperature))
    assert backend.graphs == graphs  # later calls of the same shapes reuse the compiled step


def test_static_decode_gives_the_plain_rollout(tiny):
    """Through the rollout runner (chat template, env turns, KV reuse over four turns): the same trajectories."""
    from ragen.rollout import ChatFormat, EnvGroups, RolloutSettings, run_rollout

    model, tok = tiny
    runs = []
    for decode in ("plain", "static"):
        engine = HFEngine(model, tok, max_batch=3, decode=decode)
        with EnvGroups("frozenlake", group_size=2, n_groups=2, options={"response_length": 12, "max_turns": 4}) as g:
            res = run_rollout(
                engine, g, SamplingParams(temperature=0.7, seed=5), RolloutSettings(chat_format=ChatFormat(tok))
            )
        runs.append(res.trajectories)
    plain, static = runs
    assert max(t.num_turns for t in plain) > 1
    for a, b in zip(plain, static):
        assert a.input_ids == b.input_ids and a.loss_mask == b.loss_mask
        assert b.rollout_logprobs == pytest.approx(a.rollout_logprobs, abs=1e-5)


def test_static_buffer_is_kept_between_calls_and_only_grows(tiny):
    """Compiled graphs are specialised on shapes and CUDA graphs on addresses: calls of the same row count must write
    into the same buffer (no re-recording per call), a longer call grows it once, and a shorter one keeps the long
    one. A new module drops the buffers."""
    model, tok = tiny
    engine = HFEngine(model, tok, decode="static")
    prompts = _prompts(tok, 4)
    engine.generate(prompts, SamplingParams(max_new_tokens=8, seed=0))
    ((key, (length, cache)),) = engine._static.items()
    ptr = cache.layers[0].keys.data_ptr()
    assert key[0] == 4 and length == 256  # 40 columns + 8 new tokens, rounded up to one bucket
    engine.generate(prompts, SamplingParams(max_new_tokens=16, seed=1))
    assert engine._static[key][1] is cache and cache.layers[0].keys.data_ptr() == ptr
    engine.generate(prompts, SamplingParams(max_new_tokens=300, seed=2))
    length, grown = engine._static[key]
    assert length == 512 and grown is not cache and grown.layers[0].keys.shape[-2] == 512
    engine.generate(prompts, SamplingParams(max_new_tokens=8, seed=3))
    assert engine._static[key] == (512, grown)
    engine.sync_weights(copy.deepcopy(model))
    assert engine._static == {}


def test_unknown_decode_path_is_refused(tiny):
    model, tok = tiny
    with pytest.raises(ConfigError, match="rollout.decode"):
        HFEngine(model, tok, decode="graphs")


def test_config_selects_the_decode_path(tiny):
    from ragen.config.load import load_config
    from ragen.rollout.engines import make_rollout_engine

    model, tok = tiny
    assert load_config().rollout.decode == "plain"
    assert (
        make_rollout_engine(load_config(overrides=["rollout.decode=static"]), model, tok, "unused").decode == "static"
    )
    with pytest.raises(ConfigError):
        load_config(overrides=["rollout.decode=graphs"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_compiled_static_decode_on_cuda_returns_the_plain_ids(tiny, temperature):
    """The real fast path: on CUDA transformers compiles the decoding step (reduce-overhead: CUDA graphs). In float32
    the compiled step's logits equal the eager ones to rounding, so the sampled ids must be identical."""
    model, tok = tiny
    model = copy.deepcopy(model).cuda()
    prompts = _prompts(tok)
    want = _two_turns(HFEngine(model, tok, max_batch=4), prompts, temperature)
    fast = HFEngine(model, tok, max_batch=4, decode="static")
    got = _two_turns(fast, prompts, temperature)
    _assert_same(want, got)
    assert hasattr(model, "_compiled_call")  # transformers did compile the step (its cache of the compiled call)
    again = _two_turns(fast, prompts, temperature)  # replays the recorded graphs on the kept buffers
    _assert_same(want, again)
