"""Envs over HTTP: `ragen serve-env`, the `remote` env, bad requests, concurrency, lost servers."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import requests

import ragen
from ragen.envs.checker import check_env
from ragen.errors import RemoteEnvError
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout
from ragen.serve.http import make_server

ENV = "frozenlake"


class Served:
    """A waitress server for ENV on a free loopback port, run in a thread; ``stop()`` closes it and its workers."""

    def __init__(self, name=ENV, options=None, **kw):
        kw.setdefault("workers", 1)  # one worker process starts fastest; the pool's own tests ask for more
        self.server = make_server(name, dict(options or {}), host="127.0.0.1", port=0, **kw)
        self.url = f"http://127.0.0.1:{self.server.effective_port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.close()
        self.server.table.close()
        self.thread.join(timeout=2)


@pytest.fixture
def served():
    s = Served()
    yield s
    s.stop()


def test_remote_env_passes_check_env(served):
    checks = check_env("remote", url=served.url, seeds=4, expert_episodes=4)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_remote_env_reports_the_served_states_optimal_actions_and_potential(served):
    """The state diagnostics (optimal_action_rate, potential credit) work for a served env: the same answers as the
    env in this process, state by state."""
    import random

    local, remote = ragen.make_env(ENV), ragen.make_env("remote", url=served.url)
    try:
        assert remote.served["has_judge"] and remote.served["has_potential"]
        rng = random.Random(0)
        for seed in range(3):
            local.reset(seed=seed), remote.reset(seed=seed)
            for _ in range(6):
                assert remote.expert.optimal_actions(remote) == local.expert.optimal_actions(local)
                assert remote.potential() == local.potential()
                action = rng.choice(local.action_names)
                if local.step(action)[2] | remote.step(action)[2]:
                    break
            assert remote.potential() == local.potential()  # the final state's too (a fresh answer after the step)
    finally:
        local.close(), remote.close()


def test_remote_env_mirrors_the_served_env(served):
    local = ragen.make_env(ENV)
    remote = ragen.make_env("remote", url=served.url)
    try:
        from ragen.envs.prompt import system_prompt

        assert system_prompt(remote) == system_prompt(local) == remote.served["system_prompt"]
        assert remote.config.max_turns == local.config.max_turns
        for seed in (0, 7):
            assert remote.reset(seed=seed)[0] == local.reset(seed=seed)[0]
            for action in ("Left", "Down", "Right"):
                a, b = remote.step(action), local.step(action)
                assert a[:4] == b[:4]
                if a[2] or a[3]:
                    break
        assert remote.task_id == local.task_id
    finally:
        local.close()
        remote.close()


def _post(url, path, data=None, raw=None, method="POST", headers=None):
    return requests.request(method, url + path, json=data, data=raw, headers=headers, timeout=10)


def test_bad_requests_get_4xx_json_errors(served):
    url = served.url
    eid = _post(url, "/episodes", {"seed": 1}).json()["episode"]
    cases = [
        ("/episodes", None, b"{not json", "POST", 400),
        ("/episodes", None, b"[1, 2]", "POST", 400),
        ("/episodes", {"seed": "x"}, None, "POST", 400),
        ("/episodes", {"seed": -1}, None, "POST", 400),
        ("/episodes", {"seed": True}, None, "POST", 400),
        ("/episodes", {"seed": 1, "options": [1]}, None, "POST", 400),
        ("/episodes", {"seed": 1, "options": {"split": "nope"}}, None, "POST", 400),
        ("/episodes", None, b"\xff\xfe", "POST", 400),
        ("/episodes", None, b"[" * 100_000, "POST", 400),
        (f"/episodes/{eid}/step", {"action": 3}, None, "POST", 400),
        (f"/episodes/{eid}/step", {}, None, "POST", 400),
        (f"/episodes/{eid}/expert", {"k": "all"}, None, "POST", 400),
        ("/episodes/nope/step", {"action": "Left"}, None, "POST", 404),
        ("/nothing", None, None, "GET", 404),
        ("/info", None, None, "DELETE", 405),
        ("/episodes", None, None, "GET", 405),
        ("/episodes", None, b"x" * (2 << 20), "POST", 413),
    ]
    for path, data, raw, method, status in cases:
        r = _post(url, path, data, raw, method, headers={"Content-Type": "application/json"})
        assert r.status_code == status, (path, data, raw and raw[:20], r.status_code, r.text[:200])
        if r.headers.get("Content-Type") == "application/json":
            assert "error" in r.json()
    # an episode that has ended refuses more steps with 409, not 500
    env = ragen.make_env(ENV)
    env.reset(seed=1)
    step = {"terminated": False, "truncated": False}
    for _ in range(100):
        step = _post(url, f"/episodes/{eid}/step", {"action": "Left"}).json()
        if step["terminated"] or step["truncated"]:
            break
    r = _post(url, f"/episodes/{eid}/step", {"action": "Left"})
    assert r.status_code in (200, 409), r.text  # frozenlake may never end on Left: then 200 is right
    env.close()
    assert _post(url, "/health", method="GET").status_code == 200


def test_many_concurrent_episodes_no_5xx(served):
    url = served.url

    def episode(i):
        codes = []
        r = _post(url, "/episodes", {"seed": i})
        codes.append(r.status_code)
        eid = r.json()["episode"]
        for action in ("Left", "Down", "bogus"):
            codes.append(_post(url, f"/episodes/{eid}/step", {"action": action}).status_code)
        codes.append(_post(url, f"/episodes/{eid}/step", raw=b"{",
                           headers={"Content-Type": "application/json"}).status_code)
        codes.append(_post(url, f"/episodes/{eid}", method="DELETE").status_code)
        return codes

    with ThreadPoolExecutor(32) as pool:  # 200 episodes, 6 requests each, bounded by the pool
        results = list(pool.map(episode, range(200)))
    codes = [c for r in results for c in r]
    assert not [c for c in codes if c >= 500]
    assert codes.count(201) == 200 and codes.count(400) == 200
    assert _post(url, "/health", method="GET").json()["episodes"] == 0


def test_token_is_required_when_set():
    s = Served(token="s3cret")
    try:
        assert _post(s.url, "/info", method="GET").status_code == 401
        assert _post(s.url, "/info", method="GET", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert _post(s.url, "/health", method="GET").status_code == 200
        with pytest.raises(ragen.ConfigError, match="refused the token"):
            ragen.make_env("remote", url=s.url)
        env = ragen.make_env("remote", url=s.url, token="s3cret")
        env.reset(seed=0)
        env.close()
    finally:
        s.stop()


def test_abandoned_episodes_are_closed_after_the_timeout():
    s = Served(episode_timeout_s=0.3)
    try:
        env = ragen.make_env("remote", url=s.url)
        env.reset(seed=0)
        time.sleep(0.6)
        s.server.table.reap()  # the reaper thread may have been first: either way it is gone, counted once
        assert s.server.table.reaped == 1
        with pytest.raises(RemoteEnvError, match="404"):
            env.step("Left")
        env.close()
    finally:
        s.stop()


class PeakConnections:
    """The most HTTP connections a served env held open at once, sampled every 5 ms while the block runs."""

    def __init__(self, served):
        self.served, self.peak, self._stop = served, 0, threading.Event()

    def now(self):
        return len(self.served.server.active_channels)

    def __enter__(self):
        def watch():
            while not self._stop.wait(0.005):
                self.peak = max(self.peak, self.now())

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=2)

    def settle(self, expected=0, within_s=10.0):
        """Wait (bounded) until the server has seen the clients close their connections; the count then."""
        deadline = time.monotonic() + within_s
        while self.now() > expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.now()


def test_remote_envs_share_one_bounded_connection_pool():
    """150 open remote episodes (more than waitress's 100-connection limit) over a pool of at most 8 connections;
    closing the envs closes the connections (one session per env exhausted the server: waitress stops accepting at
    100 connections)."""
    s = Served()
    try:
        with PeakConnections(s) as conns:
            envs = [ragen.make_env("remote", url=s.url, timeout_s=10) for _ in range(150)]
            try:
                for i, env in enumerate(envs):
                    env.reset(seed=i)
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda e: e.step("Left"), envs))
            finally:
                for env in envs:
                    env.close()
        assert 1 <= conns.peak <= 8, conns.peak
        assert conns.settle(0) == 0
        assert _post(s.url, "/health", method="GET").json()["episodes"] == 0
    finally:
        s.stop()


def test_unreachable_server_is_one_config_error():
    with pytest.raises(ragen.ConfigError, match="env.options.url: cannot use the env server"):
        ragen.make_env("remote", url="http://127.0.0.1:9")
    with pytest.raises(ragen.ConfigError, match="env.options.url"):
        ragen.make_env("remote")


class KillingEngine:
    """The expert's answers; stops the env server after the first round (a lost connection mid-rollout)."""

    def __init__(self, tok, fmt, served):
        from ragen.rollout.expert import ExpertEngine

        self.inner, self.served, self.rounds = ExpertEngine(tok, fmt.eos_id), served, 0
        self.eos_token_ids = self.inner.eos_token_ids
        self.logprobs_exact = False

    def generate(self, prompts, params):
        return self.inner.generate(prompts, params)

    def sync_weights(self, model):
        return {}

    def close(self):
        pass

    def generate_for_envs(self, envs, prompts, params):
        self.rounds += 1
        out = self.inner.generate_for_envs(envs, prompts, params)
        if self.rounds == 1:
            self.served.kill()
            self.served.wait(timeout=30)
        return out


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from ragen.models.builtin import build_tiny_model
    from ragen.models.load import load_model_and_tokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", [ENV], corpus_seeds=2)
    return load_model_and_tokenizer(path, "unused")[1]


@pytest.mark.parametrize("workers", [1, 4])
def test_lost_server_fails_those_episodes_and_the_rollout_goes_on(tok, workers):
    fmt = ChatFormat(tok)
    local = Served()
    lost, lost_url = _serve(ENV, "--port", "0")  # a real server process, killed mid-rollout
    specs = [GroupSpec("remote", 2, {"url": local.url}), GroupSpec("remote", 2, {"url": lost_url, "timeout_s": 5})]
    try:
        with EnvGroups(specs, group_size=2) as groups:
            engine = KillingEngine(tok, fmt, lost)
            res = run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=0),
                              RolloutSettings(chat_format=fmt, env_workers=workers))
        assert res.failed_envs == 4 and len(res.trajectories) == 4
        assert all("lost the env server" in e for e in res.errors)
        assert {t.group_id for t in res.trajectories} == {0, 1}
        assert all(t.turns for t in res.trajectories)
    finally:
        local.stop()
        lost.kill()
        lost.wait(timeout=30)


# ---- the command line, as a user runs it -----------------------------------------------------------------------
def _serve(*args):
    proc = subprocess.Popen([sys.executable, "-m", "ragen", "serve-env", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:\d+", line)
    if m is None:
        proc.kill()
        pytest.fail(f"serve-env printed {line!r}; stderr: {proc.stderr.read()[-2000:]}")
    return proc, m.group(0)


def test_serve_env_cli_errors_are_one_line():
    r = subprocess.run([sys.executable, "-m", "ragen", "serve-env", "frozenlak", "--port", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip() == "Error: unknown env 'frozenlak'; did you mean 'frozenlake'?"
    r = subprocess.run([sys.executable, "-m", "ragen", "serve-env", ENV, "-o", "max_turns=0", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and "max_turns" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_train_against_a_served_env_and_check_env(tmp_path):
    from conftest import run_two_steps

    proc, url = _serve(ENV, "--port", "0")
    try:
        r = subprocess.run([sys.executable, "-m", "ragen", "check-env", "remote", "-o", f"url={url}"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "all 6 checks passed" in r.stdout, r.stdout + r.stderr
        run, rows = run_two_steps("remote", tmp_path, f"env.options.url={url}", "--no-warmstart")
        assert rows[-1]["step"] == 2 and rows[-1]["rollout/failed_envs"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_cli_run_remote_with_the_default_model_and_warm_start(tmp_path):
    """`ragen run --env remote` as a user runs it: the default (built-in) model, so a warm start whose expert demos open
    one remote env per episode. The server accepts 4 connections (waitress's 100, scaled down): one connection per
    env stalled it; the shared pool keeps to one."""
    s = Served("sokoban", connection_limit=6)  # waitress counts its listener and trigger: 4 client connections
    try:
        with PeakConnections(s) as conns:
            r = subprocess.run(
                [sys.executable, "-m", "ragen", "run", "--env", "remote", f"env.options.url={s.url}",
                 "env.options.timeout_s=20",
                 "warmstart.episodes=12", "warmstart.epochs=1", "trainer.steps=1", "rollout.n_groups=2",
                 "rollout.group_size=2", "rollout.n_val_groups=2", "rollout.n_paired_levels=2",
                 "trainer.short_run_steps=0", "rollout.response_length=16", "trainer.test_freq=0",
                 "logging.progress=false", f"logging.run_dir={tmp_path}", "logging.name=r"],
                capture_output=True, text=True, timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines() if x]
        assert rows[-1]["step"] == 1 and rows[-1]["rollout/failed_envs"] == 0
        record = tmp_path / "r" / "model-source" / "warmstart" / "warmstart.json"
        assert json.loads(record.read_text())["metrics"]["sft/demos"] == 12
        assert 1 <= conns.peak <= 4, conns.peak
        assert conns.settle(0) == 0
    finally:
        s.stop()


@pytest.mark.slow
def test_cli_run_reports_episodes_lost_when_the_server_dies(tmp_path):
    proc, url = _serve(ENV, "--port", "0")
    run = subprocess.Popen(
        [sys.executable, "-m", "ragen", "run", "--env", "remote", "--algo", "grpo", "--model", "tiny", "--no-warmstart",
         f"env.options.url={url}", "trainer.steps=50", "rollout.n_groups=2", "rollout.group_size=2",
         "rollout.n_val_groups=2", "rollout.n_paired_levels=2", "rollout.response_length=24", "trainer.test_freq=0",
         "logging.progress=false",
         f"logging.run_dir={tmp_path}", "logging.name=r"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "r" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and run.poll() is None:
            lines = metrics.read_text().splitlines() if metrics.is_file() else []
            if any(json.loads(x).get("step", 0) >= 1 for x in lines if x):
                break
            time.sleep(0.5)
        proc.kill()  # the env server dies mid-run
        proc.wait(timeout=30)
        _, err = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(r"Error: step \d+: every env failed \(\d+ failures\); see the warnings above", last), last
    assert "lost the env server" in err  # each dropped episode's warning names the cause (with its traceback)
