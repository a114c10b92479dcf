"""OpenEnv (docs/openenv.md): ragen envs served through OpenEnv's own server, and OpenEnv envs trained
through the `ragen-openenv` plugin. Needs the `openenv` package (the ragen[openenv] extra): CI runs these in
.venv-openenv (bash .ci/openenv-venv.sh); elsewhere the whole module skips with that reason."""

import inspect
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.env_server",
                    reason="the openenv package is not installed "
                           "(pip install 'ragen[openenv]'; bash .ci/openenv-venv.sh)")

import requests  # noqa: E402
from openenv import GenericEnvClient  # noqa: E402
from openenv_helpers import served_ragen, served_scaffold, uvicorn_app, write_scaffold  # noqa: E402

import ragen  # noqa: E402
from ragen.serve.hosts import json_safe  # noqa: E402
from ragen.testing import ragen_cmd, run_two_steps  # noqa: E402

pytestmark = pytest.mark.openenv
OPENENV_CLI = str(Path(sys.executable).parent / "openenv")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "openenv.md"


def docs_block(after: str, lang: str) -> str:
    """The first ```LANG block of docs/openenv.md after the text ``after``."""
    text = DOCS.read_text()
    m = re.search(rf"```{lang}\n(.*?)```", text[text.index(after):], re.S)
    assert m, f"docs/openenv.md has no {lang} block after {after!r}"
    return m.group(1)


def validate(url: str) -> dict:
    """`openenv validate --url URL --json`, OpenEnv's own conformance check of a running server."""
    r = subprocess.run([OPENENV_CLI, "validate", "--url", url, "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["passed"] and all(c["passed"] for c in report["criteria"]), report
    return report


# ---- serving a ragen env as OpenEnv -----------------------------------------------------------------------------
def test_openenv_validate_passes_against_a_served_ragen_env():
    with served_ragen("frozenlake") as server:
        report = validate(server.url)
    assert report["mode"] == "simulation"
    assert {c["id"] for c in report["criteria"]} >= {"health_endpoint", "metadata_endpoint", "schema_endpoint",
                                                     "mode_endpoint_consistency"}


def test_serve_env_protocol_openenv_on_the_command_line():
    help_text = subprocess.run(ragen_cmd("serve-env", "--help"), capture_output=True, text=True, timeout=120).stdout
    if "--protocol" not in help_text:
        pytest.skip("`ragen serve-env` has no --protocol option yet (the CLI wiring of docs/openenv.md)")
    proc = subprocess.Popen(ragen_cmd("serve-env", "frozenlake", "--protocol", "openenv", "--port", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert m, f"serve-env printed {line!r}; stderr: {proc.stderr.read()[-2000:] if proc.poll() is not None else ''}"
        validate(m.group(0))
        r = subprocess.run(ragen_cmd("check-env", "openenv", "-o", f"url={m.group(0)}", "-o", "procedural=true"),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "all 6 checks passed" in r.stdout, r.stdout + r.stderr
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C stops it
        proc.wait(timeout=60)


def test_the_module_takes_the_same_launch_path_and_token_rule():
    """`python -m ragen.serve.openenv` is `ragen serve-env --protocol openenv`: no server beyond loopback without a
    token, no token on the command line (one line each, as the CLI says it)."""
    env = {k: v for k, v in os.environ.items() if k != "RAGEN_ENV_TOKEN"}
    for args, fragments in [(["--host", "0.0.0.0"], ("needs a token", "0.0.0.0", "--insecure")),
                            (["--token", "X"], ("--token", "visible", "$RAGEN_ENV_TOKEN"))]:
        r = subprocess.run([sys.executable, "-m", "ragen.serve.openenv", "frozenlake", "--port", "0", *args],
                           capture_output=True, text=True, timeout=120, env=env)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), r.stderr[-2000:]
        assert all(f in lines[0] for f in fragments), lines[0]


def play_expert_episode(client, name: str, seed: int) -> bool:
    """One episode of ``name``'s expert, played in process and through OpenEnv's client side by side: every reset and
    step must answer exactly what the in-process env returns. Returns whether it was won."""
    local = ragen.make_env(name)
    try:
        obs, info = local.reset(seed=seed, options={"split": "val", "rollout_index": 1})
        first = client.reset(seed=seed, split="val", rollout_index=1)
        got = first.observation
        assert (got["text"], first.reward, first.done, first.metadata) == (obs, None, False, json_safe(info))
        assert got["instructions"] == local.instructions and got["action_names"] == local.action_names
        assert got["action_separator"] == local.action_separator
        assert got["symbol_legend"] == (json_safe(local.symbol_legend) or None)
        for _ in range(200):
            plan = local.expert.next_actions(local, local.config.max_actions_per_turn)
            assert plan, f"{name} seed {seed}: the expert has no plan"
            for action in plan:
                o, r, term, trunc, inf = local.step(action)
                step = client.step({"action": action})
                s = step.observation
                assert (s["text"], step.reward, step.done, step.metadata) == (o, r, term or trunc, json_safe(inf))
                assert (s["terminated"], s["truncated"], s["success"]) == (term, trunc, inf["success"])
                if term or trunc:
                    state = client.state()
                    assert state["done"] and state["seed"] == seed and state["split"] == "val"
                    assert state["task_id"] == local.task_id and state["env"] == name
                    return bool(inf["success"])
        raise AssertionError(f"{name} seed {seed}: the expert episode did not end")
    finally:
        local.close()


@pytest.mark.parametrize("name", ["frozenlake", "sokoban", "bandit"])
def test_openenvs_own_client_plays_expert_episodes_exactly_like_the_in_process_env(name):
    with served_ragen(name) as server, GenericEnvClient(base_url=server.url).sync() as client:
        wins = [play_expert_episode(client, name, seed) for seed in range(6)]
    assert all(wins), wins  # deterministic envs: their experts win every episode


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_several_concurrent_openenv_clients_get_the_in_process_episodes(name):
    def worker(i):
        with GenericEnvClient(base_url=url).sync() as client:
            return [play_expert_episode(client, name, 100 + 10 * i + k) for k in range(3)]

    with served_ragen(name, max_sessions=8) as server:
        url = server.url
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(worker, range(8)))
    assert all(all(w) for w in results), results


def test_token_session_cap_idle_timeout_and_http_errors():
    with served_ragen("frozenlake", token="s3cret", max_sessions=2, episode_timeout_s=1.0) as server:
        url, auth = server.url, {"Authorization": "Bearer s3cret"}
        assert requests.get(f"{url}/health").json() == {"status": "healthy"}  # the one open endpoint
        for path in ("/schema", "/metadata", "/state"):
            r = requests.get(url + path)
            assert r.status_code == 401 and "token" in r.json()["detail"]
        assert requests.get(f"{url}/schema", headers=auth).status_code == 200
        with pytest.raises(ConnectionError, match="403"):  # the WebSocket handshake is refused
            GenericEnvClient(base_url=url).sync().connect()
        # HTTP /reset and /step are stateless (a fresh env per request): 4xx with a reason, never a 500
        r = requests.post(f"{url}/step", json={"action": {"action": "Left"}}, headers=auth)
        assert r.status_code == 409 and "stateless" in r.json()["detail"]
        r = requests.post(f"{url}/reset", json={"seed": 1, "split": "bogus"}, headers=auth)
        assert r.status_code == 400 and "split" in r.json()["detail"]
        assert requests.post(f"{url}/reset", json={"seed": 1}, headers=auth).json()["observation"]["text"]
        # the plugin with the token; two sessions are the cap, a third is refused, an idle one is closed
        a = ragen.make_env("openenv", url=url, token="s3cret")
        b = ragen.make_env("openenv", url=url, token="s3cret")
        c = GenericEnvClient(base_url=url, headers=auth).sync()
        try:
            a.reset(seed=1)
            b.reset(seed=2)
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                c.reset(seed=3)
            c.close()
            deadline = time.monotonic() + 30
            while True:  # the reaper checks every 5 s at the least: a and b, idle for over 1 s, are closed
                try:
                    with GenericEnvClient(base_url=url, headers=auth).sync() as d:
                        assert d.reset(seed=3).observation["text"]
                    break
                except RuntimeError:
                    assert time.monotonic() < deadline, "idle sessions were never closed"
                    time.sleep(1)
            with pytest.raises(ragen.EnvError, match="closed"):  # a's session was closed under it: the episode fails
                a.step("Left")
        finally:
            a.close()
            b.close()


def test_half_sent_requests_deny_no_service_and_are_closed_at_their_deadline():
    """uvicorn alone closes only idle keep-alive connections: 150 connections sending half a POST (no token needed:
    auth never runs before the body), silent ones and a one-byte-every-0.5-s trickle were held for ever. Now an
    authorised call (HTTP and a WebSocket session) is answered at once and the server closes every one of them at
    the request deadline; a body over 1 MiB is a 413; one peer address holds at most its share of the sessions."""
    from crafted_server import HalfSentFlood
    from websockets.sync.client import connect

    auth = {"Authorization": "Bearer t0ken-abuse"}
    with served_ragen("frozenlake", token="t0ken-abuse", max_sessions=4, max_client_sessions=1,
                      request_deadline_s=2.0) as server:
        with HalfSentFlood(server.port, "/reset", half=150, silent=20) as flood:
            t0 = time.monotonic()
            r = requests.post(f"{server.url}/reset", json={"seed": 1}, headers=auth, timeout=10)
            assert r.status_code == 200 and time.monotonic() - t0 < 5, r.text
            env = ragen.make_env("openenv", url=server.url, token="t0ken-abuse", timeout_s=10)
            try:
                assert env.reset(seed=1)[0] and time.monotonic() - t0 < 10
                # the same peer address holds its one session: a second waits for room, then fails
                other = ragen.make_env("openenv", url=server.url, token="t0ken-abuse", timeout_s=1)
                try:
                    with pytest.raises(ragen.EnvError, match="CAPACITY_REACHED"):
                        other.reset(seed=2)
                finally:
                    other.close()
                # another address is another client (every 127.x.y.z is this machine)
                ws_url = server.url.replace("http://", "ws://") + "/ws"
                with connect(ws_url, additional_headers=auth, source_address=("127.0.0.2", 0),
                             open_timeout=10) as ws:
                    ws.send(json.dumps({"type": "reset", "data": {"seed": 3}}))
                    assert json.loads(ws.recv(timeout=10))["type"] == "observation"
            finally:
                env.close()
            big = requests.post(f"{server.url}/reset", data=b"{" + b" " * (2 << 20) + b"}", headers={
                **auth, "Content-Type": "application/json"}, timeout=10)
            assert big.status_code == 413, big.text
            deadline = time.monotonic() + 10
            for c in flood.connections:
                try:
                    while True:  # a half-sent request may get the token gate's 401 first, then the close
                        c.settimeout(max(0.1, deadline - time.monotonic()))
                        if not c.recv(4096):  # closed by the server, not by our time-out
                            break
                except ConnectionResetError:
                    pass
            assert time.monotonic() < deadline


# ---- training on OpenEnv envs through the plugin ----------------------------------------------------------------
@pytest.mark.slow
def test_openenvs_scaffold_env_passes_check_env_and_trains_two_steps(tmp_path):
    with served_scaffold(tmp_path / "env", max_sessions=16) as url:
        r = subprocess.run(ragen_cmd("check-env", "openenv", "-o", f"url={url}"), capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0 and "all 6 checks passed" in r.stdout, r.stdout + r.stderr
        _, rows = run_two_steps("openenv", tmp_path, f"env.options.url={url}", response_length=24)
    train = [row for row in rows if "rollout/failed_envs" in row]
    assert train[-1]["step"] == 2 and all(row["rollout/failed_envs"] == 0 for row in train)


def _computed(row: dict) -> dict:
    """A metrics row without what depends on the clock."""
    return {k: v for k, v in row.items() if not (k.startswith(("timing", "perf/")) or "/time/" in k)}


@pytest.mark.slow
def test_round_trip_frozenlake_served_as_openenv_trains_like_in_process(tmp_path):
    """frozenlake in process, then served as OpenEnv and trained through the plugin, from the same initial model:
    the same metrics rows (the prompt, every observation, reward and info cross the wire unchanged)."""
    local_run, local = run_two_steps("frozenlake", tmp_path / "local", response_length=24)
    # the built-in model the in-process run built for frozenlake (RUN/model-source/tiny-model); from a path, the
    # learning rate is given as the built-in model's (trainer.actor_lr's default differs for a path)
    model = next(local_run.glob("**/tiny-model/config.json")).parent
    with served_ragen("frozenlake") as server:
        _, remote = run_two_steps("openenv", tmp_path / "remote", f"env.options.url={server.url}",
                                  "env.options.max_tokens=120", f"model.name={model}", "trainer.actor_lr=0.0001",
                                  response_length=24)
    # per-env metrics carry the env's name: val/frozenlake/success is val/openenv/success there
    renamed = [{k.replace("/openenv/", "/frozenlake/"): v for k, v in _computed(r).items()} for r in remote]
    assert renamed == [_computed(r) for r in local]
    train = [r for r in local if "rollout/failed_envs" in r]
    assert train[-1]["step"] == 2 and all(r["rollout/failed_envs"] == 0 for r in train)
    assert any(k.startswith("val/frozenlake/") for k in local[0])


# ---- the docs' worked examples, as written ------------------------------------------------------------------------
def _no_drops(rows: list[dict], passes: bool = True) -> None:
    """2 steps trained and no episode dropped in any pass: training, validation, the greedy passes (``passes``
    False: a short run as a user types it, which plays no validation and no greedy pass)."""
    train = [r for r in rows if "rollout/failed_envs" in r]
    assert [r["step"] for r in train] == [1, 2] and all(r["rollout/failed_envs"] == 0 for r in train), train
    vals = [r for r in rows if "val/failed_envs" in r]
    assert bool(vals) == passes and all(r["val/failed_envs"] == 0 for r in vals), vals
    assert all(not k.startswith(("rollout/failed/", "val/failed/")) for r in rows for k in r)
    final = rows[-1]
    assert final.get("paired/levels_dropped", 0) == 0 and final.get("paired/levels") == final.get(
        "paired/levels_planned"), final


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the docs' run at default rollout sizes: 2 steps of 32 (a short run: no evaluation pass)
def test_the_docs_scaffold_example_runs_as_written_under_real_uvicorn(tmp_path):
    """docs/openenv.md's scaffold example, line by line: the scaffold `openenv init` writes, the docs' edits of it,
    its app under real uvicorn, then `ragen check-env` and the docs' `ragen run` (only its run folder added): 2 steps,
    nothing dropped."""
    lines = [line.split(" #")[0].strip() for line in docs_block("OpenEnv's own scaffold", "sh").splitlines()]
    lines = [line for line in lines if line]
    assert lines[0] == "openenv init echo_env && cd echo_env", lines
    env_dir = write_scaffold(tmp_path, "echo_env")  # `openenv init` would also run `uv lock` (the network)
    for line in lines[1:]:
        if line.startswith("sed "):
            subprocess.run(["bash", "-c", line], cwd=env_dir, check=True)
    serve = next(x for x in lines if x.startswith("uvicorn "))
    app, port = re.fullmatch(r"uvicorn (\S+) --port (\d+) &", serve).groups()
    commands = [shlex.split(x) for x in lines if x.startswith("ragen ")]
    assert [c[1] for c in commands] == ["check-env", "run"], commands
    run_dir = tmp_path / "runs"
    with uvicorn_app(env_dir, app) as url:
        for argv in commands:
            argv = [a.replace(f"http://127.0.0.1:{port}", url) for a in argv]
            extra = ([f"logging.run_dir={run_dir}", "logging.name=r", "logging.progress=false"] if argv[1] == "run"
                     else [])
            r = subprocess.run(ragen_cmd(*argv[1:], *extra), capture_output=True, text=True, timeout=3300,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})
            assert r.returncode == 0, f"{argv}: {r.stdout[-2000:]}{r.stderr[-3000:]}"
            if argv[1] == "check-env":
                assert "all 6 checks passed" in r.stdout, r.stdout
    _no_drops([json.loads(line) for line in (run_dir / "r" / "metrics.jsonl").read_text().splitlines()], passes=False)


@pytest.mark.slow
def test_the_scaffold_at_its_default_cap_of_one_session_trains_with_nothing_dropped(tmp_path):
    """The template's app exactly as `openenv init` writes it (max_concurrent_envs=1) under real uvicorn: its echo env
    never ends an episode, so ragen's budget ends each one and frees the one session for the next; `check-env` plays
    its two instances one after the other."""
    env_dir = write_scaffold(tmp_path, "echo_env")
    assert "max_concurrent_envs=1," in (env_dir / "server" / "app.py").read_text()
    with uvicorn_app(env_dir) as url:
        r = subprocess.run(ragen_cmd("check-env", "openenv", "-o", f"url={url}"), capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0 and "all 6 checks passed" in r.stdout, r.stdout + r.stderr
        _, rows = run_two_steps("openenv", tmp_path / "run", f"env.options.url={url}", response_length=24)
    _no_drops(rows)


def test_the_docs_trl_environment_factory_plays_a_served_ragen_env_as_grpotrainer_does():
    """docs/openenv.md's TRL class against `ragen serve-env --protocol openenv`, used the way TRL's GRPOTrainer uses an
    `environment_factory` (built without arguments; `reset(**row)`; every other public method but `get_reward` is a
    tool, its schema from transformers' `get_json_schema`; `get_reward()` per rollout). TRL's trainer itself is not
    run: it needs a tool-calling model from the Hub."""
    from transformers.utils import get_json_schema

    code = docs_block("## TRL on a ragen env", "python")
    with served_ragen("frozenlake") as server:
        namespace: dict = {}
        exec(compile(code.replace("http://127.0.0.1:8000", server.url), str(DOCS), "exec"), namespace)
        env = namespace["RagenEnv"]()
        members = dict(inspect.getmembers(env, predicate=inspect.ismethod))
        tools = [m for n, m in members.items() if n not in ("reset", "get_reward") and not n.startswith("_")]
        assert {"reset", "get_reward"} <= set(members) and [t.__name__ for t in tools] == ["act"]
        fn = get_json_schema(tools[0])["function"]
        assert fn["name"] == "act" and fn["parameters"]["required"] == ["action"]
        assert fn["parameters"]["properties"]["action"]["type"] == "string" and fn["description"]
        local = ragen.make_env("frozenlake")
        try:
            for seed in (3, 4, 5):
                text = env.reset(prompt=[{"role": "user", "content": "Solve it."}], seed=seed)  # a dataset row
                obs, _ = local.reset(seed=seed)
                assert text.endswith(obs) and local.instructions in text and "Left" in text
                total, over = 0.0, False
                while not over:
                    (action,) = local.expert.next_actions(local, 1)
                    o, r, term, trunc, info = local.step(action)
                    answer, total, over = env.act(action), total + r, term or trunc
                    assert answer.startswith(o) and answer.endswith("The episode is over.") == over
                assert info["success"] and env.get_reward() == pytest.approx(total) and total > 0
                with pytest.raises(ValueError, match="over"):
                    env.act("Left")
            env.reset(seed=6)
            assert env.act("Jump").startswith("'Jump' is not an action.")
        finally:
            local.close()
    try:
        import trl
    except ImportError:
        return
    assert "environment_factory" in inspect.signature(trl.GRPOTrainer.__init__).parameters
