"""The `openenv` env against a hostile OpenEnv server: every answer is bounded in size, time and depth and checked
against its declared type before it is used. `/schema` is read within `timeout_s` for the whole answer (a server
trickling one byte at a time holds nothing), frames are at most 8 MiB and 64 levels deep, `done` and the info flags
are booleans, rewards finite numbers within 1e6, observations within `max_observation_chars`; every breach is one
line (ConfigError at start-up, OpenEnvError during an episode: the rollout drops it)."""

import json
import threading
import time

import pytest
from crafted_server import Answer, CraftedServer
from ragen_openenv import OpenEnvError

import ragen
from ragen import ConfigError

SCHEMA = {"action": {"type": "object", "required": ["move"], "properties": {"move": {"type": "string"}}},
          "observation": {"type": "object", "properties": {"board": {"type": "string"}}}}
METADATA = {"name": "hostile", "description": "A server that lies."}


def _observation(board="P___G", **fields):
    return {"observation": {"board": board, "metadata": {}}, "reward": None, "done": False, **fields}


class HostileServer:
    """OpenEnv's protocol (``/schema``, ``/metadata``, ``/ws``) whose reset answers ``reset`` and whose step answers
    the raw text ``step`` (a frame's JSON, crafted)."""

    def __init__(self, step: str | bytes, reset: dict | None = None):
        from websockets.sync.server import serve

        self.step, self.reset = step, reset or _observation()
        self.server = serve(self.session, "127.0.0.1", 0, process_request=self.http, max_size=None)
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def http(self, conn, request):
        if request.path in ("/schema", "/metadata"):
            return conn.respond(200, json.dumps(SCHEMA if request.path == "/schema" else METADATA))
        return None

    def session(self, conn):
        try:
            for raw in conn:
                kind = json.loads(raw).get("type")
                if kind == "close":
                    return
                if kind == "reset":
                    conn.send(json.dumps({"type": "observation", "data": self.reset}))
                else:
                    conn.send(self.step)
        except Exception:  # noqa: BLE001 - the client went away (or refused the frame)
            pass

    def stop(self):
        self.server.shutdown()


def _step_fails(step, reset=None, **options):
    server = HostileServer(step, reset)
    env = ragen.make_env("openenv", url=server.url, timeout_s=5, **options)
    try:
        env.reset(seed=0)
        t0 = time.monotonic()
        with pytest.raises(OpenEnvError) as raised:
            env.step("Right")
        assert time.monotonic() - t0 < 8
        text = str(raised.value)
        assert "\n" not in text and len(text) < 600, text
        return text
    finally:
        env.close()
        server.stop()


def _frame(data):
    return json.dumps({"type": "observation", "data": data})


def test_an_honest_frame_is_taken():
    server = HostileServer(_frame(_observation("_P__G", reward=0.5)))
    env = ragen.make_env("openenv", url=server.url)
    try:
        assert env.reset(seed=0)[0] == "P___G"
        assert env.step("Right")[:4] == ("_P__G", 0.5, False, False)
    finally:
        env.close()
        server.stop()


@pytest.mark.parametrize("fields, message", [
    ({"done": "no"}, "done='no', not a boolean"),
    ({"done": 1}, "done=1, not a boolean"),
    ({"reward": 1e308}, "beyond"),
    ({"reward": True}, "not a number"),
    ({"reward": "0.5"}, "not a number"),
    ({"metadata": {"action_is_valid": "yes"}}, "action_is_valid='yes', not a boolean"),
])
def test_a_field_of_the_wrong_type_is_refused(fields, message):
    assert message in _step_fails(_frame(_observation(**fields)))


def test_a_success_that_is_no_bool_is_refused():
    data = _observation()
    data["observation"]["won"] = "no"
    assert "won='no', not a boolean" in _step_fails(_frame(data), success_key="won")


def test_a_4000_digit_reward_is_one_line_not_an_overflow():
    raw = _frame(_observation()).replace('"reward": null', '"reward": ' + "9" * 4000)
    assert "a huge integer" in _step_fails(raw)


def test_a_200000_deep_frame_is_one_line_not_a_recursion_error():
    raw = '{"type": "observation", "data": ' + "[" * 200_000 + "]" * 200_000 + "}"
    assert "nested deeper than 64 levels" in _step_fails(raw)


def test_a_huge_observation_is_refused():
    assert "over env.options.max_observation_chars=1000" in _step_fails(_frame(_observation("x" * 5000)),
                                                                       max_observation_chars=1000)
    # past the frame cap (8 MiB) the connection is refused before the frame is held whole
    assert "lost the OpenEnv server" in _step_fails(_frame(_observation("x" * (9 << 20))))


def test_huge_instructions_and_100000_action_names_are_refused():
    reset = _observation()
    reset["observation"]["instructions"] = "i" * 200_000
    server = HostileServer(_frame(_observation()), reset)
    env = ragen.make_env("openenv", url=server.url)
    try:
        with pytest.raises(OpenEnvError, match="instructions of 200000 characters"):
            env.reset(seed=0)
    finally:
        env.close()
        server.stop()
    reset = _observation()
    reset["observation"]["action_names"] = [f"a{i}" for i in range(100_000)]
    server = HostileServer(_frame(_observation()), reset)
    env = ragen.make_env("openenv", url=server.url)
    try:
        with pytest.raises(OpenEnvError, match="over 1000 action names"):
            env.reset(seed=0)
    finally:
        env.close()
        server.stop()


def test_an_error_message_is_clipped_and_stripped_before_it_is_logged():
    message = "\x1b]0;owned\x07\x1b[2J" + "y" * 100_000
    text = _step_fails(json.dumps({"type": "error", "data": {"message": message, "code": "EXECUTION_ERROR"}}))
    assert "EXECUTION_ERROR" in text and "\x1b" not in text and "\x07" not in text


@pytest.mark.parametrize("frame, shown", [
    ({"type": "error", "data": "Invalid JSON"}, "Invalid JSON"),  # the reason as a bare string, not an object
    ({"type": "error"}, '{"type": "error"}'),
    ({"type": "error", "data": {"code": "", "message": ""}}, '"code": ""'),
])
def test_an_error_frame_without_code_or_message_says_what_came(frame, shown):
    """Such a frame used to read "answered UNKNOWN: " with nothing after it (the reason, sent as a string, was
    dropped); now the message names what is missing and shows the frame, clipped."""
    text = _step_fails(json.dumps(frame))
    assert "answered UNKNOWN: " in text and "an error frame without a code or a message" in text, text
    assert shown in text and not text.rstrip().endswith(":"), text


def test_a_trickled_schema_times_out_at_the_whole_read_deadline():
    """One byte every 0.4 s: each socket read succeeds, so a per-read time-out never fires; the deadline does."""
    server = CraftedServer({"/schema": Answer(SCHEMA, chunk=1, every_s=0.4)})
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="no whole answer within 1.5 s|before its deadline") as raised:
            ragen.make_env("openenv", url=server.url, timeout_s=1.5)
        assert time.monotonic() - t0 < 5 and "\n" not in str(raised.value)
    finally:
        server.stop()


def test_a_trickled_or_oversize_head_of_schema_is_one_line():
    """The status line and headers count against the same deadline as the body, and are capped at 64 KiB."""
    server = CraftedServer({"/schema": Answer(SCHEMA, head_every_s=0.4)})
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="no whole answer within 1.5 s") as raised:
            ragen.make_env("openenv", url=server.url, timeout_s=1.5)
        assert time.monotonic() - t0 < 5 and "\n" not in str(raised.value)
    finally:
        server.stop()
    server = CraftedServer({"/schema": Answer(SCHEMA, head_padding=200_000)})
    try:
        with pytest.raises(ConfigError, match="status line and headers are over the 65536-byte cap"):
            ragen.make_env("openenv", url=server.url, timeout_s=10)
    finally:
        server.stop()


def test_an_oversize_schema_is_one_line_not_an_incomplete_read():
    """The server announces 300 MB; the client stops at its cap (8 MiB) with one line."""
    body = b'{"action": "' + b"x" * (9 << 20) + b'"}'
    server = CraftedServer({"/schema": Answer(body, content_length=300_000_000)})
    try:
        with pytest.raises(ConfigError, match="over the 8388608-byte cap") as raised:
            ragen.make_env("openenv", url=server.url, timeout_s=10)
        assert "\n" not in str(raised.value)
    finally:
        server.stop()


def test_a_deep_schema_is_one_line():
    server = CraftedServer({"/schema": Answer(b"[" * 200_000 + b"]" * 200_000)})
    try:
        with pytest.raises(ConfigError, match="nested deeper than 64 levels"):
            ragen.make_env("openenv", url=server.url, timeout_s=10)
    finally:
        server.stop()
