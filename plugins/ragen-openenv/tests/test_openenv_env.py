"""ragen-openenv: the `openenv` env against an OpenEnv server, without the `openenv` package.

The server here is a small OpenEnv protocol server written with `websockets` alone (the message formats of OpenEnv
0.10's http_server: `/schema`, `/metadata`, `/ws` with reset/step/state/close and error frames with their codes).
Where `openenv` is installed, the last tests also run against OpenEnv's own server (its scaffold env)."""

import json
import threading
import time

import pytest
from ragen_openenv import OpenEnvError
from ragen_openenv.env import OpenEnvBusy, endpoints, pick_field

import ragen
from ragen import ConfigError
from ragen.errors import EnvBusy
from ragen.testing import check_env

# ---- a small OpenEnv server -------------------------------------------------------------------------------------
#: the schemas as pydantic writes them for an OpenEnv Action/Observation subclass
SCHEMA = {
    "action": {"additionalProperties": False, "type": "object", "title": "ReachAction", "required": ["move"],
               "properties": {"metadata": {"type": "object", "additionalProperties": True, "title": "Metadata"},
                              "move": {"type": "string", "title": "Move", "description": "Left or Right"}}},
    "observation": {"additionalProperties": False, "type": "object", "title": "ReachObservation",
                    "properties": {"done": {"type": "boolean", "default": False},
                                   "reward": {"anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"},
                                                        {"type": "null"}], "default": None},
                                   "metadata": {"type": "object", "additionalProperties": True},
                                   "board": {"type": "string", "default": ""},
                                   "won": {"type": "boolean", "default": False},
                                   "moves": {"type": "integer", "default": 0}}},
    "state": {"type": "object", "additionalProperties": True,
              "properties": {"episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                             "step_count": {"type": "integer", "minimum": 0}}},
}
METADATA = {"name": "reach", "description": "Walk along a line of cells to the goal cell G."}


class Reach:
    """The served env: a line of cells, the player at 0 or 1 (by seed), the goal at the end; Left/Right."""

    length = 5
    never_done = False  # an env that never ends an episode itself: ragen's budget ends every one

    def reset(self, data):
        self.pos, self.moves = int(data.get("seed") or 0) % 2, 0
        return self.observation(reward=None, done=False)

    def step(self, data):
        move = str(data.get("move", "")).strip().lower()
        valid = move in ("left", "right")
        if valid:
            self.pos = max(0, min(self.length - 1, self.pos + (1 if move == "right" else -1)))
        self.moves += 1
        won = self.pos == self.length - 1
        return self.observation(reward=1.0 if won else None,
                                done=not self.never_done and (won or self.moves >= 20),
                                metadata={"action_is_valid": valid, "moves": self.moves})

    def observation(self, reward, done, metadata=None):
        board = "".join("P" if i == self.pos else "G" if i == self.length - 1 else "_" for i in range(self.length))
        won = self.pos == self.length - 1
        return {"observation": {"board": board, "won": won, "moves": self.moves, "metadata": metadata or {}},
                "reward": reward, "done": done, **({"metadata": metadata} if metadata else {})}


class StubServer:
    """OpenEnv's protocol on a free loopback port, one session per WebSocket connection; knobs for failures."""

    def __init__(self, token=None, max_sessions=64, schema=SCHEMA, fail_reset=None, silent_step=False,
                 drop_on_step=False, never_done=False, refuse=None):
        """``refuse(reset data)``: answer that reset with CAPACITY_REACHED and close (another client's sessions fill
        the server just then); ``peak``: the most sessions open at once."""
        from websockets.sync.server import serve

        self.token, self.max_sessions, self.schema = token, max_sessions, schema
        self.fail_reset, self.silent_step, self.drop_on_step = fail_reset, silent_step, drop_on_step
        self.never_done, self.refuse, self.peak = never_done, refuse, 0
        self.sessions, self.resets, self.lock, self.stopping = 0, [], threading.Lock(), threading.Event()
        self.server = serve(self.session, "127.0.0.1", 0, process_request=self.http)
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def http(self, conn, request):
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return conn.respond(401, json.dumps({"detail": "missing or wrong token"}))
        if request.path in ("/schema", "/metadata"):
            return conn.respond(200, json.dumps(self.schema if request.path == "/schema" else METADATA))
        return None if request.path == "/ws" else conn.respond(404, json.dumps({"detail": "Not Found"}))

    def session(self, conn):
        with self.lock:
            full = self.sessions >= self.max_sessions
            self.sessions += 0 if full else 1
            self.peak = max(self.peak, self.sessions)
        if full:  # as OpenEnv: an error frame with the counts, then the connection closes
            conn.send(json.dumps({"type": "error", "data": {"message": "Server at capacity", "code": "CAPACITY_REACHED",
                                                            "active_sessions": self.max_sessions,
                                                            "max_sessions": self.max_sessions}}))
            return
        env = Reach()
        env.never_done = self.never_done
        try:
            for raw in conn:
                msg = json.loads(raw)
                kind, data = msg.get("type"), msg.get("data") or {}
                if kind == "close":
                    break
                if kind == "reset":
                    self.resets.append(data)
                    if self.refuse and self.refuse(data):
                        conn.send(json.dumps({"type": "error", "data": {"message": "Server at capacity",
                                                                        "code": "CAPACITY_REACHED"}}))
                        break
                    if self.fail_reset and self.fail_reset(data):
                        conn.send(json.dumps({"type": "error", "data": {"message": "reset failed",
                                                                        "code": "EXECUTION_ERROR"}}))
                        continue
                    answer = {"type": "observation", "data": env.reset(data)}
                elif kind == "step":
                    if self.silent_step:
                        self.stopping.wait(30)
                        continue
                    if self.drop_on_step:
                        conn.socket.close()  # the server process dies mid-episode: no close frame
                        return
                    answer = {"type": "observation", "data": env.step(data)}
                elif kind == "state":
                    answer = {"type": "state", "data": {"episode_id": "e1", "step_count": env.moves}}
                else:
                    answer = {"type": "error", "data": {"message": f"Unknown message type: {kind}",
                                                        "code": "UNKNOWN_TYPE"}}
                conn.send(json.dumps(answer))
        except Exception:  # noqa: BLE001 - the client went away
            pass
        finally:
            with self.lock:
                self.sessions -= 1

    def stop(self):
        self.stopping.set()
        self.server.shutdown()


@pytest.fixture
def stub():
    s = StubServer()
    yield s
    s.stop()


def reach(url, **options):
    return ragen.make_env("openenv", url=url, **{"success_key": "won", "action_names": "Left,Right", **options})


# ---- the protocol ---------------------------------------------------------------------------------------------
def test_plays_an_episode_with_fields_from_the_schema_and_frees_the_session_at_the_end(stub):
    env = reach(stub.url, timeout_s=10)
    try:
        assert (env.action_field, env.observation_field) == ("move", "board")
        assert env.instructions == METADATA["description"]  # no instructions option: the server's /metadata
        obs, info = env.reset(seed=3)
        assert obs == "_P__G" and info["task_id"] == "openenv/s3" and stub.sessions == 1
        assert stub.resets[-1] == {"seed": 3, "split": "train", "rollout_index": 0}
        assert env.state() == {"episode_id": "e1", "step_count": 0}
        obs, reward, terminated, truncated, info = env.step("Left")
        assert (obs, reward, terminated, truncated) == ("P___G", 0.0, False, False)  # no reward sent: 0.0
        assert info == {"action_is_valid": True, "moves": 1, "success": False, "action_is_effective": True}
        for _ in range(3):
            obs, reward, terminated, truncated, info = env.step("Right")
        assert not terminated and env.step("Right")[1:4] == (1.0, True, False)
        assert env.render() == "____P" and env.step.__self__._conn is None
        time.sleep(0.2)
        assert stub.sessions == 0  # the finished episode's session is closed at once
        with pytest.raises(RuntimeError):
            env.step("Right")
    finally:
        env.close()


def test_success_key_and_prompt_options():
    s = StubServer()
    try:
        env = reach(s.url, success_key="won", instructions="Go right.", action_separator="none")
        env.reset(seed=1)
        *_, info = env.step("Right")
        *_, info = env.step("Right")
        *_, info = env.step("Right")
        assert info["success"] is True and env.instructions == "Go right." and env.action_separator is None
        assert env.validate_action("right") and not env.validate_action("Up")  # action_names: case-insensitive
        env.close()
        plain = ragen.make_env("openenv", url=s.url, pass_split=False)
        plain.reset(seed=0, options={"split": "val"})
        assert s.resets[-1] == {"seed": 0} and plain.action_names is None and plain.action_separator == "||"
        *_, info = plain.step("Right")
        assert info["success"] is False  # no `success` field in this env's observations: never a success
        plain.close()
    finally:
        s.stop()


def test_check_env_passes_against_the_stub(stub):
    checks = check_env("openenv", url=stub.url, success_key="won", action_names="Left,Right", procedural=True,
                       seeds=4)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


# ---- configuration errors: one ConfigError naming the option ---------------------------------------------------
def test_config_errors_name_the_option(stub):
    with pytest.raises(ConfigError, match="env.options.url: the openenv env needs"):
        ragen.make_env("openenv")
    with pytest.raises(ConfigError, match="env.options.url: expected http"):
        ragen.make_env("openenv", url="ftp://x")
    with pytest.raises(ConfigError, match="env.options.url: cannot use the OpenEnv server"):
        ragen.make_env("openenv", url="http://127.0.0.1:1", timeout_s=2)
    two = json.loads(json.dumps(SCHEMA))
    two["observation"]["properties"]["legend"] = {"type": "string"}
    two["action"]["required"].append("player")
    two["action"]["properties"]["player"] = {"type": "integer"}
    s = StubServer(schema=two)
    try:
        with pytest.raises(
            ConfigError, match=r"env.options.observation_field: .* several string fields \(board, legend\)"
        ):
            ragen.make_env("openenv", url=s.url)
        with pytest.raises(ConfigError, match="env.options.action_field: the server's actions also require player"):
            ragen.make_env("openenv", url=s.url, observation_field="board")
    finally:
        s.stop()


def test_pick_field_and_endpoints():
    assert (
        pick_field({"properties": {"metadata": {"type": "object"}, "message": {"type": "string"}}}, (), "action")
        == "message"
    )
    opt = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert pick_field({"properties": {"prompt": opt, "text": {"type": "string"}}}, ("text",), "observation") == "text"
    assert endpoints("https://host.hf.space/") == ("https://host.hf.space", "wss://host.hf.space/ws")
    assert endpoints("ws://127.0.0.1:8000/ws") == ("http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws")


def test_token_is_sent_on_every_request(monkeypatch):
    s = StubServer(token="s3cret")
    try:
        with pytest.raises(ConfigError, match=r"answered 401 \(env.options.token\)"):
            ragen.make_env("openenv", url=s.url)
        env = reach(s.url, token="s3cret")
        assert env.reset(seed=0)[0] == "P___G"
        env.close()
        monkeypatch.setenv("RAGEN_ENV_TOKEN", "s3cret")
        env = reach(s.url)
        assert env.reset(seed=1)[0] == "_P__G"
        env.close()
    finally:
        s.stop()


# ---- failures: an OpenEnvError (the rollout drops and counts the episode), never a hang -----------------------
def test_server_failures_are_openenv_errors_and_never_hang():
    cases = [
        (StubServer(fail_reset=lambda d: True), "reset", "EXECUTION_ERROR: reset failed"),
        (StubServer(max_sessions=0), "reset", "CAPACITY_REACHED: Server at capacity"),
        (StubServer(silent_step=True), "step", "no answer within 1 s"),
        (StubServer(drop_on_step=True), "step", "lost the OpenEnv server"),
    ]
    for server, where, message in cases:
        env = reach(server.url, timeout_s=1)
        t0 = time.monotonic()
        try:
            with pytest.raises(OpenEnvError, match=message) as raised:
                env.reset(seed=0)
                assert where == "step"
                env.step("Right")
            assert isinstance(raised.value, ragen.EnvError) and time.monotonic() - t0 < 8
            if where == "step":  # the lost session is dropped; the next episode opens a fresh one
                assert env.reset(seed=1)[0] == "_P__G"
        finally:
            env.close()
            server.stop()
    gone = StubServer()
    env = reach(gone.url, timeout_s=2)
    gone.stop()
    with pytest.raises(OpenEnvError, match="cannot open an OpenEnv session"):
        env.reset(seed=0)
    env.close()


def settle(condition, within=5.0):
    """Whether ``condition()`` holds within ``within`` seconds (the server sees a closed session a moment later)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def outside_session(server):
    """A session another client holds on ``server`` (a raw WebSocket), until it is closed."""
    from websockets.sync.client import connect

    conn = connect(server.url.replace("http://", "ws://") + "/ws", proxy=None)
    assert settle(lambda: server.sessions >= 1)
    return conn


def test_ragens_budget_frees_the_session_and_a_full_server_is_waited_for():
    s = StubServer(max_sessions=1, never_done=True)
    a, b, c = reach(s.url, timeout_s=5), reach(s.url, timeout_s=5), reach(s.url, timeout_s=1)
    try:
        a.reset(seed=0)
        assert a.step("Right")[2:4] == (False, False) and s.sessions == 1  # this server never says done
        # the server's one session is this process's: refused at once (the rollout starts it when one of its own ends)
        refused = r"CAPACITY_REACHED: Server at capacity \(cap 1\); 1 of its sessions"
        with pytest.raises(OpenEnvBusy, match=refused) as busy:
            b.reset(seed=1)
        assert isinstance(busy.value, EnvBusy) and busy.value.code == "CAPACITY_REACHED"
        a.end_episode()  # ragen's budget ended a's episode: its session is freed now, not at a's next reset
        assert settle(lambda: s.sessions == 0) and a._conn is None
        assert b.reset(seed=1)[0] == "_P__G"
        b.end_episode()
        assert settle(lambda: s.sessions == 0)
        # another client fills the server: the next reset waits for its session to close, within timeout_s
        other = outside_session(s)
        threading.Timer(1.0, other.close).start()
        t0 = time.monotonic()
        assert b.reset(seed=0)[0] == "P___G" and 0.5 < time.monotonic() - t0 < 5
        b.end_episode()
        other = outside_session(s)
        with pytest.raises(OpenEnvError, match=r"CAPACITY_REACHED: .*still full after 1 s") as full:
            c.reset(seed=0)
        assert not isinstance(full.value, EnvBusy) and c._conn is None
        other.close()
        assert s.peak == 1
    finally:
        for env in (a, b, c):
            env.close()
        s.stop()


@pytest.mark.slow
def test_a_never_done_server_at_a_small_cap_trains_and_every_drop_is_counted(tmp_path):
    """`ragen run` against a server that never ends an episode (ragen's budget ends each one) and holds 2 sessions:
    each step's 4 episodes play in waves, nothing is dropped for the cap. Level 124 finds the server full of other
    clients' sessions whenever it resets: it is dropped in validation and in both greedy passes, and each drop is
    counted by its reason, in the metrics and in the summary."""
    from ragen.runs.summary import format_summary, run_summary
    from ragen.testing import run_two_steps

    s = StubServer(max_sessions=2, never_done=True, refuse=lambda d: d.get("seed") == 124)
    try:
        run, rows = run_two_steps("openenv", tmp_path, f"env.options.url={s.url}", "env.options.success_key=won",
                                  "env.options.action_names=[Left, Right]", "env.options.timeout_s=2",
                                  "rollout.group_size=2", response_length=24)
        train = [r for r in rows if "rollout/failed_envs" in r]
        assert [r["step"] for r in train] == [1, 2] and all(r["rollout/failed_envs"] == 0 for r in train), train
        assert s.peak == 2 and settle(lambda: s.sessions == 0)  # never above the cap; nothing held after the run
        vals = [r for r in rows if "val/failed_envs" in r]
        assert vals and all(r["val/failed_envs"] == 1 and r["val/failed/CAPACITY_REACHED"] == 1 for r in vals)
        final = rows[-1]
        assert (final["paired/levels_planned"], final["paired/levels"], final["paired/levels_dropped"]) == (2, 1, 1)
        assert final["paired/failed_before/CAPACITY_REACHED"] == final["paired/failed_after/CAPACITY_REACHED"] == 1
        text = format_summary(run_summary(run))
        assert "greedy success on 1 of 2 held-out levels (1 dropped: CAPACITY_REACHED): " in text, text
        assert "(s.e., 1 episodes; 1 dropped: CAPACITY_REACHED)" in text, text
    finally:
        s.stop()


@pytest.mark.slow
def test_train_two_steps_and_failed_episodes_are_dropped_and_counted(tmp_path):
    """`ragen run` on the stub: every episode with rollout_index 1 fails at reset (half of each group of two); the run
    goes on, its metrics count them."""
    from ragen.testing import run_two_steps

    s = StubServer(fail_reset=lambda d: d.get("rollout_index") == 1)
    try:
        run, rows = run_two_steps("openenv", tmp_path, f"env.options.url={s.url}", "env.options.success_key=won",
                                  "env.options.action_names=[Left, Right]", "env.options.max_actions_per_turn=2",
                                  "rollout.group_size=2", response_length=24)
        train = [r for r in rows if "rollout/failed_envs" in r]
        assert [r["step"] for r in train][-1] == 2 and all(r["rollout/failed_envs"] == 2 for r in train), train
        assert all(d["rollout_index"] in (0, 1) for d in s.resets) and s.sessions == 0
    finally:
        s.stop()


# ---- OpenEnv's own server, where the openenv package is installed ------------------------------------------------
@pytest.fixture
def echo_server(tmp_path):
    """The scaffold env that `openenv init` writes (shipped inside the openenv wheel), served by OpenEnv's
    create_app."""
    pytest.importorskip(
        "openenv.core.env_server", reason="the openenv package is not installed (bash .ci/openenv-venv.sh)"
    )
    from openenv_helpers import served_scaffold

    with served_scaffold(tmp_path, max_sessions=4) as url:
        yield url


@pytest.mark.openenv
def test_real_openenv_server_check_env_and_capacity(echo_server):
    checks = check_env("openenv", url=echo_server, seeds=3)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    envs = [ragen.make_env("openenv", url=echo_server, timeout_s=10) for _ in range(5)]
    try:
        assert (envs[0].action_field, envs[0].observation_field) == ("message", "echoed_message")
        for env in envs[:4]:
            assert env.reset(seed=0)[0].endswith("environment ready!")
        with pytest.raises(OpenEnvError, match="CAPACITY_REACHED"):
            envs[4].reset(seed=0)
        envs[0].close()
        time.sleep(0.3)
        assert envs[4].reset(seed=0)[0].endswith("environment ready!")  # a closed session frees its slot
        obs, reward, terminated, truncated, info = envs[4].step("hello")
        assert (obs, reward, terminated, truncated) == ("hello", 0.5, False, False)
        assert info["original_message"] == "hello" and info["success"] is False
    finally:
        for env in envs:
            env.close()

