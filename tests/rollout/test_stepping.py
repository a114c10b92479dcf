"""Concurrent env stepping: same trajectories with env_workers=1 and 8; process envs; chunked overlap."""

import os
import random
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest

import ragen
from ragen.contract.trajectory import DIAGNOSTIC_KEYS
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.expert import ExpertEngine
from ragen.rollout.stepping import EnvStepper, PooledFactory, group_chunks

#: answers an env executes but that do not solve it, so trajectories mix wins, losses and multi-turn episodes
WRONG = {"deepcoder": "print(42)", "webshop": "click[next >]", "frozenlake": "Up"}


class MixedEngine(ExpertEngine):
    """The expert's answer or a wrong one, drawn per (seed, member, turn): trajectories that differ between members
    and depend only on each episode, never on batching or on which thread stepped which env."""

    def response_text(self, env, rng=None):
        rng = rng or self.rng
        if rng.random() < 0.5:
            wrong = WRONG[env.name.split("-")[0]]
            return f"Trying.</think><answer>{wrong}</answer>"
        return super().response_text(env, rng)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", ["frozenlake"], corpus_seeds=2)
    return load_model_and_tokenizer(path, "unused")[1]


def _play(tok, groups, workers, chunks=1):
    fmt = ChatFormat(tok)
    engine = MixedEngine(tok, fmt.eos_id, seed=3)
    t0 = time.perf_counter()
    settings = RolloutSettings(chat_format=fmt, max_model_len=100_000, env_workers=workers, overlap_chunks=chunks)
    res = run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=0), settings)
    return res, time.perf_counter() - t0


def _view(res):
    """Everything a trajectory carries that training or metrics read."""
    return [(t.env_name, t.seed, t.group_id, t.rollout_index, list(t.input_ids), list(t.loss_mask), t.reward,
             t.success, t.truncation_reason,
             [(x.answer, x.executed, x.reward, sorted(x.info.items())) for x in t.turns])
            for t in res.trajectories], res.failed_envs


def _identical_at_1_and_8(tok, name, options, n_groups, multi_turn=True):
    views = []
    with EnvGroups([GroupSpec(name, n_groups, options)], group_size=2) as groups:
        for workers in (1, 8, 1, 8):  # interleaved: a warm cache must not make one of them look different
            res, seconds = _play(tok, groups, workers)
            views.append(_view(res))
            print(f"{name}: env_workers={workers} {seconds:.2f} s, load {os.getloadavg()[0]:.1f}")
    assert views[0] == views[1] == views[2] == views[3]
    trajs, failed = views[0]
    assert failed == 0 and len(trajs) == 2 * n_groups
    assert {t[7] for t in trajs} == {True, False}, "the mix must hold wins and losses"
    if multi_turn:
        assert any(len(t[9]) > 1 for t in trajs), "some episodes must take several turns"


@pytest.mark.bwrap
def test_deepcoder_trajectories_do_not_depend_on_env_workers(tok):
    from ragen_deepcoder import sandbox

    problem = sandbox.sandbox_problem(sandbox.default_python())
    if problem is not None:
        pytest.skip(f"needs a working bubblewrap: {problem}")
    _identical_at_1_and_8(tok, "deepcoder", {}, n_groups=4, multi_turn=False)  # one submission per episode


def test_webshop_trajectories_do_not_depend_on_env_workers(tok):
    _identical_at_1_and_8(tok, "webshop", {"num_products": 50}, n_groups=4)


def test_declared_concurrency():
    from ragen_deepcoder import DeepCoderEnv
    from ragen_sokoban.env import SokobanEnv
    from ragen_webshop.env import WebShopEnv

    assert DeepCoderEnv.concurrency == WebShopEnv.concurrency == "thread"
    assert SokobanEnv.concurrency == "none"  # cheap pure-Python steps: a pool would only add overhead


class _Probe(ragen.Env):
    concurrency = "none"

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.threads = set()


def test_envs_not_declared_safe_step_in_the_callers_thread():
    import threading

    stepper = EnvStepper(8)
    env = _Probe()
    futures = stepper.map([env] * 5, [lambda: env.threads.add(threading.get_ident())] * 5)
    assert all(f.done() for f in futures)  # ran inline, before map returned
    assert env.threads == {threading.get_ident()}
    safe = _Probe()
    safe.concurrency = "thread"
    seen = []
    futures = stepper.map([safe] * 8, [lambda: (time.sleep(0.05), seen.append(threading.get_ident()))] * 8)
    [f.result() for f in futures]
    stepper.close()
    assert threading.get_ident() not in seen and len(set(seen)) > 1


def test_bad_concurrency_declaration_is_a_config_error():
    env = _Probe()
    env.concurrency = "fibers"
    with pytest.raises(ragen.ConfigError, match="concurrency must be one of none, thread, process"):
        EnvStepper(2).submit(env, lambda: None)


def test_group_chunks_keep_groups_whole():
    class M:
        def __init__(self, g):
            self.slot = type("S", (), {"group_id": g})()

    members = [M(g) for g in (0, 0, 1, 1, 2, 2, 3, 3, 4)]
    chunks = group_chunks(members, 2)
    assert [[m.slot.group_id for m in c] for c in chunks] == [[0, 0, 1, 1], [2, 2, 3, 3, 4]]
    assert group_chunks(members, 1) == [members]
    assert len(group_chunks(members, 99)) == 5  # never more chunks than groups


def test_overlap_chunks_play_the_same_episodes(tok):
    """Expert answers do not depend on the sampling seed, so chunked generation must give the same trajectories."""
    with EnvGroups([GroupSpec("frozenlake", 4, {})], group_size=2) as groups:
        a, _ = _play(tok, groups, 1)
        b, _ = _play(tok, groups, 4, chunks=2)
    assert _view(a) == _view(b)


class ProcessFrozenLake:
    """A module-level factory (picklable for the worker processes) of a frozenlake declaring concurrency='process'."""

    def __call__(self, name, options):
        env = ragen.make_env("frozenlake", **options)
        env.concurrency = "process"
        return env


def test_process_envs_run_in_worker_processes_with_the_same_trajectories(tok, monkeypatch):
    from ragen.rollout import stepping

    monkeypatch.setattr(stepping, "_env_class", lambda name: type("P", (), {"concurrency": "process"}))
    local = EnvGroups([GroupSpec("frozenlake", 3, {})], group_size=2)
    pooled = PooledFactory(ProcessFrozenLake(), workers=2)
    remote = EnvGroups([GroupSpec("frozenlake", 3, {})], group_size=2, factory=pooled)
    try:
        envs = remote.envs()
        assert {type(e).__name__ for e in envs} == {"RemoteEnv"}
        workers = {w for e in envs for w in e.transport.table.host.workers}
        pids = {w.proc.pid for w in workers}
        assert len(pids) == 2 and os.getpid() not in pids
        a, _ = _play(tok, local, 1)
        b, _ = _play(tok, remote, 2)
        # identical, the state diagnostics included: the worker's env answers Expert.optimal_actions and Env.potential
        # over its pipe (the served envs' judge), so optimal_action_rate works for process envs too
        assert _view(a) == _view(b)
        assert any(k in dict(turn[3]) for t in _view(b)[0] for turn in t[9] for k in DIAGNOSTIC_KEYS)
    finally:
        local.close()
        remote.close()
        pooled.close()
    assert not any(w.proc.is_alive() for w in workers)


def test_rng_is_per_episode_not_global():
    """Stepping order must not matter: a global RNG drawn between steps would change nothing."""
    env = ragen.make_env("frozenlake-slippery")
    obs_a, _ = env.reset(seed=5)
    random.seed(123)
    np.random.seed(123)
    obs_b, _ = env.reset(seed=5)
    assert obs_a == obs_b
    env.close()
