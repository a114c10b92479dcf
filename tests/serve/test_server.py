"""`ragen serve-env` under load and abuse: malformed input, the token policy, episodes charged by weight
(caps, memory admission, per-client cap, idle time-out) and worker processes for envs not declared concurrency-safe."""

import os
import subprocess
import sys
import threading
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import requests

import ragen
from ragen.contract.env import EpisodeWeight
from ragen.serve.hosts import EnvFactory
from ragen.serve.http import make_server, wsgi_app
from ragen.serve.table import EpisodeTable

ENV = "frozenlake"


class Serving:
    """A real waitress server on a free loopback port over an ``EpisodeTable`` (or ``make_server``), in a thread."""

    def __init__(self, table=None, token=None, **kw):
        import waitress

        if table is None:
            kw.setdefault("workers", 1)
            self.server = make_server(ENV, {}, host="127.0.0.1", port=0, token=token, **kw)
        else:
            self.server = waitress.create_server(wsgi_app(table, token), host="127.0.0.1", port=0, threads=16)
            self.server.table = table
        self.table = self.server.table
        self.url = f"http://127.0.0.1:{self.server.effective_port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def request(self, method, path, data=None, raw=None, client=None, timeout=30):
        headers = {"Content-Type": "application/json"}
        if client is not None:
            headers["X-Ragen-Client"] = client
        return requests.request(method, self.url + path, json=data, data=raw, headers=headers, timeout=timeout)

    def stop(self):
        self.server.close()
        self.table.close()
        self.thread.join(timeout=5)


# ---- every malformed input is a 4xx ---------------------------------------------------------------------------
def test_malformed_input_is_always_a_4xx():
    s = Serving()
    try:
        eid = s.request("POST", "/episodes", {"seed": 1}).json()["episode"]
        bodies = [
            b'{"seed": ' + b"9" * 5000 + b"}",  # the 500: Python refuses to parse > 4,300 digits
            b'{"seed": 1, "options": {"rollout_index": ' + b"7" * 5000 + b"}}",
            b'{"seed": NaN}', b'{"seed": Infinity}', b'{"seed": -Infinity}', b'{"seed": 1e400}', b'{"seed": 1.0}',
            b'{"seed": 9223372036854775808}', b'{"seed": null}', b'{"seed": [1]}', b'{"seed": {"a": 1}}',
            b'{"seed": 1, "options": {"split": ["train"]}}', b'{"seed": 1, "options": {"split": {}}}',
            b'{"seed": 1, "options": {"split": "TRAIN"}}', b'{"seed": 1, "options": {"rollout_index": "x"}}',
            b'{"seed": 1, "options": {"rollout_index": -1}}', b'{"seed": 1, "options": {"rollout_index": 1.5}}',
            b'{"seed": 1, "options": {"rollout_index": NaN}}', b'{"seed": 1, "options": {"rollout_index": true}}',
            b'{"seed": 1, "options": {"rollout_index": 99999999999999999999}}',
            b'{"seed": 1, "options": {"no_such_option": 1}}', b'{"seed": 1, "options": null}',
            b"\xff\xfe\x00", b'{"seed": 1', b'"seed"', b"1", b"null x",
            b'{"seed": 1, "options": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
            b'{"seed": 1, "options": {"a": ' + b'{"a": ' * 20_000 + b"1" + b"}" * 20_000 + b"}}",
        ]
        episode_bodies = [
            b'{"action": ' + b"1" * 5000 + b"}", b'{"action": NaN}', b'{"action": null}', b'{"action": ["Left"]}',
            b'{"action": "' + b"x" * 200_000 + b'"}', b'{"k": ' + b"5" * 5000 + b"}",
        ]
        cases = [("POST", "/episodes", b) for b in bodies]
        cases += [("POST", f"/episodes/{eid}/{op}", b) for b in episode_bodies for op in ("step", "validate", "split")]
        cases += [("POST", f"/episodes/{eid}/expert", b)
                  for b in (b'{"k": -1}', b'{"k": 1001}', b'{"k": "2"}', b'{"k": 1e3}')]
        cases += [("PUT", "/episodes", b"{}"), ("PATCH", f"/episodes/{eid}", b"{}"), ("GET", "/" + "x" * 5000, b""),
                  ("POST", "/episodes/" + "9" * 5000 + "/step", b'{"action": "Left"}'),
                  ("DELETE", "/episodes/%00", b"")]
        codes = []
        for method, path, raw in cases:
            r = s.request(method, path, raw=raw)
            codes.append(r.status_code)
            assert 400 <= r.status_code < 500, (method, path[:40], raw[:60], r.status_code, r.text[:300])
            body = r.json()
            assert set(body) == {"error", "kind"} and "\n" not in body["error"] and len(body["error"]) < 400, body
        assert s.request("GET", "/health").json()["ok"] is True  # and the server still serves
        assert s.request("POST", f"/episodes/{eid}/step", {"action": "Left"}).status_code == 200
    finally:
        s.stop()


# ---- the token ------------------------------------------------------------------------------------------------
class HeavyLake:
    """A frozenlake whose episodes declare a process and 100 MB each, at most 4 open (module-level: it pickles)."""

    def __call__(self):
        env = ragen.make_env(ENV)
        env.__class__ = _heavy_class(type(env))
        return env


def _heavy_class(cls, cache={}):  # noqa: B006 - one subclass per class
    weight = EpisodeWeight(processes=1, memory_mb=100, max_open=4)
    return cache.setdefault(cls, type("Heavy" + cls.__name__, (cls,), {"episode_weight": weight}))


def test_token_policy_of_make_server():
    from ragen.serve.http import check_token

    light, heavy = EpisodeWeight(), EpisodeWeight(processes=1, memory_mb=280, max_open=32)
    assert check_token(None, name="x", host="127.0.0.1", weight=light) is None
    assert check_token(None, name="x", host="localhost", weight=light) is None
    for host, weight, why in [("0.0.0.0", light, "listens on 0.0.0.0"), ("127.0.0.1", heavy, "holds a process"),
                              ("::", heavy, r"listens on :: \(beyond this machine\), and each episode")]:
        with pytest.raises(ragen.ConfigError, match=f"needs a token: .*{why}.*--insecure"):
            check_token(None, name="x", host=host, weight=weight)
        assert check_token(None, name="x", host=host, weight=weight, insecure=True) is None
    for bad in ("", " ", "\t", " tok", "tok\n", "tök"):
        with pytest.raises(ragen.ConfigError, match="token: "):
            check_token(bad, name="x", host="127.0.0.1", weight=light)
    assert check_token("s3cret-T0ken", name="x", host="0.0.0.0", weight=heavy) == "s3cret-T0ken"
    with pytest.raises(ragen.ConfigError, match="token: empty"):
        make_server(ENV, {}, host="127.0.0.1", port=0, token="", workers=0)  # was: auth silently off
    with pytest.raises(ragen.ConfigError, match="listens on 0.0.0.0"):
        make_server(ENV, {}, host="0.0.0.0", port=0, workers=0)  # was: a warning, then served to the network


def _serve_env(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "ragen", "serve-env", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def _one_line_error(r, *fragments):
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr[-2000:]
    for f in fragments:
        assert f in lines[0], lines[0]


def test_serve_env_cli_token_rules():
    """No `--token X` (visible in ps), no empty $RAGEN_ENV_TOKEN, no unauthenticated network server: one line each."""
    env = {k: v for k, v in os.environ.items() if k != "RAGEN_ENV_TOKEN"}
    r = _serve_env(ENV, "--port", "0", "--token", "X")
    _one_line_error(r, "--token", "visible", "$RAGEN_ENV_TOKEN")
    r = _serve_env(ENV, "--port", "0", env={"RAGEN_ENV_TOKEN": ""})
    _one_line_error(r, "$RAGEN_ENV_TOKEN is set but empty")
    r = subprocess.run([sys.executable, "-m", "ragen", "serve-env", ENV, "--port", "0", "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=120, env={**env, "HF_HUB_OFFLINE": "1"})
    _one_line_error(r, "needs a token", "0.0.0.0", "--insecure")


# ---- episodes charged by weight -------------------------------------------------------------------------------
def test_heavy_env_caps_open_episodes_per_server_and_per_client():
    from ragen.serve.table import client_cap, open_cap

    heavy, light = EpisodeWeight(processes=1, memory_mb=100, max_open=4), EpisodeWeight()
    assert (open_cap(heavy, 1024), client_cap(heavy, 1024), client_cap(heavy, 2)) == (4, 2, 1)
    assert (open_cap(light, 1024), client_cap(light, 1024)) == (1024, 1024)
    table = EpisodeTable(HeavyLake(), min_free_mb=0, max_client_episodes=client_cap(heavy, 1024))
    try:
        assert (table.max_open, table.max_client, table.timeout_s) == (4, 2, 120.0)
        reset = lambda client: table.dispatch("POST", "/episodes", {"seed": 1}, client=client)  # noqa: E731
        a = [reset("a") for _ in range(3)]
        assert [c for c, _ in a] == [201, 201, 429] and "max_client_episodes 2" in a[2][1]["error"]
        b = [reset("b") for _ in range(2)]
        assert [c for c, _ in b] == [201, 201]
        code, err = reset("c")  # 4 open: the env's cap
        assert code == 429 and "episode_weight.max_open" in err["error"], err
        assert table.dispatch("DELETE", f"/episodes/{a[0][1]['episode']}", None, client="a")[0] == 200
        assert reset("c")[0] == 201
    finally:
        table.close()


def test_heavy_env_needs_free_memory_for_a_new_episode():
    free = {"mb": 5000.0}
    table = EpisodeTable(HeavyLake(), min_free_mb=1000, memory=lambda: free["mb"])
    try:
        assert table.dispatch("POST", "/episodes", {"seed": 1}, client="a")[0] == 201
        free["mb"] = 1050.0  # 100 MB per episode would leave less than the 1000 MB reserve
        code, err = table.dispatch("POST", "/episodes", {"seed": 2}, client="b")
        assert code == 429 and "1050 MB available" in err["error"] and "--min-free-memory" in err["error"], err
        light = EpisodeTable(lambda: ragen.make_env(ENV), min_free_mb=1000, memory=lambda: 1.0)
        assert light.dispatch("POST", "/episodes", {"seed": 1})[0] == 201  # envs holding nothing are not checked
        light.close()
    finally:
        table.close()


def test_heavy_env_idle_instances_are_closed_after_the_timeout():
    table = EpisodeTable(HeavyLake(), min_free_mb=0, episode_timeout_s=0.2)
    try:
        opened = [table.dispatch("POST", "/episodes", {"seed": i}, client=str(i))[1]["episode"] for i in range(3)]
        envs = [table._episodes[e].env.env for e in opened]
        time.sleep(0.4)
        assert table.reap() == 3 and table.host.idle_count() == 0  # closed, not kept for the next episode
        assert all(e.closed for e in envs)
    finally:
        table.close()


def test_a_reap_racing_a_slow_reap_sees_the_episodes_counted():
    """The reaper thread and a caller both reap while closing is slow (a coqtop takes seconds to stop): each episode
    is counted once, and counted as soon as it leaves the table, not after its env has closed (CI saw 0 == 4)."""
    table = EpisodeTable(HeavyLake(), min_free_mb=0, episode_timeout_s=0.1)
    release = table.host.release

    def slow_release(env, keep):
        time.sleep(1.0)
        release(env, keep=keep)

    table.host.release = slow_release
    try:
        for i in range(2):
            assert table.dispatch("POST", "/episodes", {"seed": i}, client=str(i))[0] == 201
        time.sleep(0.2)
        first = threading.Thread(target=table.reap)
        first.start()
        time.sleep(0.3)  # the first reap has taken both and is closing the first
        assert table.reap() == 0 and table.reaped == 2
        first.join()
        assert table.reaped == 2
    finally:
        table.close()


# ---- worker processes: one slow client does not stall the others ---------------------------------------------
class SlowLake:
    """A frozenlake (concurrency "none") whose action "slow" sleeps 3 s first (module-level: it pickles)."""

    def __call__(self):
        env = ragen.make_env(ENV)
        step = env.step

        def slow_step(action):
            if action == "slow":
                time.sleep(3.0)
                action = "Left"
            return step(action)

        env.step = slow_step
        return env


def _stall(workers):
    """Seconds client B's cheap step waits while client A's episode takes a 3 s step."""
    s = Serving(EpisodeTable(SlowLake(), workers=workers))
    try:
        if workers:
            assert s.table.host.wait_ready() == workers
        a = s.request("POST", "/episodes", {"seed": 1}, client="a").json()["episode"]
        b = s.request("POST", "/episodes", {"seed": 2}, client="b").json()["episode"]
        slow = threading.Thread(target=s.request, args=("POST", f"/episodes/{a}/step", {"action": "slow"}))
        slow.start()
        time.sleep(0.5)  # A's slow step is running
        t0 = time.perf_counter()
        r = s.request("POST", f"/episodes/{b}/step", {"action": "Left"})
        waited = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        # a third client's new episode goes to a worker that is not busy either
        t0 = time.perf_counter()
        c = s.request("POST", "/episodes", {"seed": 3}, client="c")
        waited_new = time.perf_counter() - t0
        assert c.status_code == 201
        slow.join(timeout=30)
        return waited, waited_new
    finally:
        s.stop()


def test_a_slow_step_does_not_stall_other_clients():
    waited, waited_new = _stall(workers=2)
    assert waited < 1.5 and waited_new < 1.5, (waited, waited_new)


def test_worker_processes_serve_the_env_and_go_away():
    s = Serving(EpisodeTable(EnvFactory(ENV, {}), workers=2))
    try:
        assert s.table.host.wait_ready() == 2
        pids = {w.proc.pid for w in s.table.host.workers}
        assert len(pids) == 2 and os.getpid() not in pids
        local = ragen.make_env(ENV)
        r = s.request("POST", "/episodes", {"seed": 7}).json()
        assert r["obs"] == local.reset(seed=7)[0]
        step = s.request("POST", f"/episodes/{r['episode']}/step", {"action": "Down"}).json()
        assert step["obs"] == local.step("Down")[0]
        local.close()
        procs = [w.proc for w in s.table.host.workers]
    finally:
        s.stop()
    assert not any(p.is_alive() for p in procs)


def test_a_dead_worker_fails_its_episodes_and_is_replaced():
    s = Serving(EpisodeTable(EnvFactory(ENV, {}), workers=1))
    try:
        eid = s.request("POST", "/episodes", {"seed": 1}).json()["episode"]
        s.table.host.workers[0].proc.kill()
        s.table.host.workers[0].proc.join(timeout=10)
        r = s.request("POST", f"/episodes/{eid}/step", {"action": "Left"})
        assert r.status_code == 422 and "worker process" in r.json()["error"], r.text
        r = s.request("POST", "/episodes", {"seed": 2})
        assert r.status_code == 201, r.text  # a fresh worker took its place
    finally:
        s.stop()


# ---- a real heavy env: lean-easy, one coqtop per episode ------------------------------------------------------
def _coqtops():
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if p.name().startswith("coqtop")]


@pytest.mark.coq
def test_lean_easy_is_served_by_weight():
    """lean-easy declares a process per episode: a token is required, open episodes are capped (per client: half),
    and abandoned episodes take their coqtop with them when reaped."""
    with pytest.raises(ragen.ConfigError, match="needs a token: each episode of lean-easy holds a process"):
        make_server("lean-easy", {}, host="127.0.0.1", port=0, workers=1)
    server = make_server("lean-easy", {}, host="127.0.0.1", port=0, token="t0ken-for-the-test", workers=1,
                         # 8 s: six resets start coqtops on a busy CI machine
                         max_episodes=4, episode_timeout_s=8.0, min_free_mb=0)
    table = server.table
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.effective_port}"
    auth = {"Authorization": "Bearer t0ken-for-the-test"}

    def reset(client):  # a client is its address: "a" and "b" post from two loopback addresses
        source = {"a": "127.0.0.2", "b": "127.0.0.3"}[client]
        return _post_from(server.effective_port, source, {"seed": 1}, token="t0ken-for-the-test", timeout=120)

    try:
        info = requests.get(url + "/info", headers=auth, timeout=30).json()
        assert info["episode_weight"] == {"processes": 1, "memory_mb": 280, "max_open": 32}
        assert (table.max_open, table.max_client) == (4, 2)
        assert requests.post(url + "/episodes", json={"seed": 1}, timeout=30).status_code == 401
        codes = [reset("a") for _ in range(3)] + [reset("b") for _ in range(3)]
        assert codes == [201, 201, 429, 201, 201, 429], codes
        assert len(_coqtops()) == 4
        time.sleep(8.5)  # every client gone: the episodes are abandoned
        table.reap()  # the reaper thread may have been first: either way they are gone, counted once
        assert table.reaped == 4
        deadline = time.monotonic() + 30
        while _coqtops() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _coqtops() == []
    finally:
        server.close()
        table.close()
        thread.join(timeout=5)


# ---- abuse of the connection: half-sent requests, a client choosing its own id ----------------------------------
def _post_from(port, source, body, token=None, timeout=30):
    """POST /episodes from the loopback address ``source`` (every 127.x.y.z is this machine): another peer."""
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, source_address=(source, 0), timeout=timeout)
    try:
        conn.request("POST", "/episodes", body=json.dumps(body), headers={
            "Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
        return conn.getresponse().status
    finally:
        conn.close()


def test_half_sent_requests_deny_no_service_and_are_closed_at_their_deadline():
    """150 connections that send a POST's headers and half its body (no token needed: auth never runs) used to take
    every connection slot (waitress's 100) until its 120 s idle time-out; a trickle of one byte every 0.5 s never
    went idle. Now an authorised call goes through at once and the server closes them at the request deadline."""

    from crafted_server import HalfSentFlood

    s = Serving(token="t0ken-abuse", request_deadline_s=2.0)
    try:
        with HalfSentFlood(s.server.effective_port, "/episodes") as flood:
            t0 = time.monotonic()
            r = requests.post(s.url + "/episodes", json={"seed": 1},
                              headers={"Authorization": "Bearer t0ken-abuse"}, timeout=10)
            assert r.status_code == 201 and time.monotonic() - t0 < 5, r.text
            deadline = time.monotonic() + 10
            for c in flood.connections:
                c.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    assert c.recv(1) == b""  # closed by the server, not by our time-out
                except ConnectionResetError:
                    pass
            assert time.monotonic() < deadline
    finally:
        s.stop()


def test_the_per_client_cap_is_keyed_on_the_peer_address_not_on_a_header():
    """A client cannot take more than its share by sending a fresh X-Ragen-Client id with each request; another
    address is another client."""
    s = Serving(max_client_episodes=2)
    try:
        codes = [s.request("POST", "/episodes", {"seed": i}, client=f"id-{i}").status_code for i in range(3)]
        assert codes == [201, 201, 429], codes
        assert _post_from(s.server.effective_port, "127.0.0.2", {"seed": 5}) == 201
        assert _post_from(s.server.effective_port, "127.0.0.2", {"seed": 6}) == 201
        assert _post_from(s.server.effective_port, "127.0.0.2", {"seed": 7}) == 429
    finally:
        s.stop()
