"""The `remote` env trusts nothing a server sends: every answer is bounded in size, time and depth and checked
against its declared type; a breach is one line naming the server (a RemoteEnvError: the rollout drops the episode),
never a RecursionError, an OverflowError, a truthy "no" or a prompt of 99 MiB."""

import os
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
from crafted_server import Answer, CraftedServer

import ragen
from ragen.errors import ConfigError, RemoteEnvError
from ragen.serve.hosts import env_info

INFO = {"success": False, "action_is_valid": True, "action_is_effective": True}


@pytest.fixture(scope="module")
def info():
    env = ragen.make_env("frozenlake")
    try:
        return env_info(env)
    finally:
        env.close()


def _serve(info, step=None, reset=None, info_answer=None):
    return CraftedServer({
        "/info": info_answer or Answer(info),
        "/episodes": reset or Answer({"episode": "e1", "obs": "a board", "info": {}}, 201),
        "/episodes/e1/step": step or Answer({"obs": "b", "reward": 0.0, "terminated": False, "truncated": False,
                                             "info": INFO}),
        "/episodes/e1": Answer({"closed": True}),
    })


def _step_with(info, answer, **options):
    server = _serve(info, step=answer)
    env = ragen.make_env("remote", url=server.url, **options)
    try:
        env.reset(seed=0)
        t0 = time.monotonic()
        with pytest.raises(RemoteEnvError) as raised:
            env.step("Left")
        assert time.monotonic() - t0 < 8
        return str(raised.value)
    finally:
        env.close()
        server.stop()


def test_an_honest_answer_is_taken(info):
    server = _serve(info)
    env = ragen.make_env("remote", url=server.url)
    try:
        assert env.reset(seed=0)[0] == "a board"
        obs, reward, terminated, truncated, _ = env.step("Left")
        assert (obs, reward, terminated, truncated) == ("b", 0.0, False, False)
    finally:
        env.close()
        server.stop()


@pytest.mark.parametrize("field, value, message", [
    ("terminated", "no", "terminated='no', not a boolean"),
    ("truncated", 0, "truncated=0, not a boolean"),
    ("reward", 1e308, "beyond"),
    ("reward", True, "not a number"),
    ("reward", "1.0", "not a number"),
    ("obs", ["a"], "not a string"),
])
def test_a_field_of_the_wrong_type_or_size_is_refused(info, field, value, message):
    body = {"obs": "b", "reward": 0.0, "terminated": False, "truncated": False, "info": {}, field: value}
    text = _step_with(info, Answer(body))
    assert message in text and "\n" not in text


def test_a_4000_digit_reward_is_one_line_not_an_overflow(info):
    raw = b'{"obs": "b", "terminated": false, "truncated": false, "reward": ' + b"9" * 4000 + b"}"
    text = _step_with(info, Answer(raw))
    assert "an integer of 4000 digits" in text and "\n" not in text


def test_an_observation_over_max_observation_chars_is_refused(info):
    body = {"obs": "x" * 5000, "reward": 0.0, "terminated": False, "truncated": False}
    text = _step_with(info, Answer(body), max_observation_chars=4000)
    assert "5000 characters, over env.options.max_observation_chars=4000" in text


def test_a_deep_or_oversize_or_trickled_answer_is_refused(info):
    deep = b'{"obs": "b", "info": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert "nested deeper than 64 levels" in _step_with(info, Answer(deep))
    oversize = Answer(b'{"obs": "' + b"x" * (9 << 20) + b'"}')
    assert "over the 8388608-byte cap" in _step_with(info, oversize)
    trickle = Answer({"obs": "b" * 100, "reward": 0.0, "terminated": False, "truncated": False}, chunk=1,
                     every_s=0.3)
    assert "did not arrive whole before its deadline" in _step_with(info, trickle, timeout_s=1)


def test_a_trickled_status_line_and_headers_fail_at_the_deadline_of_the_whole_answer(info):
    """One byte of the status line and headers every 0.4 s: each socket read succeeds within the per-read time-out,
    so only a deadline for the whole answer stops it (the client used to wait for as long as the server trickled).
    The pool is not poisoned: the next request on a fresh connection is answered."""
    server = _serve(info, step=Answer({"obs": "b", "reward": 0.0, "terminated": False, "truncated": False,
                                       "info": INFO}, head_every_s=0.4))
    env = ragen.make_env("remote", url=server.url, timeout_s=1.5)
    try:
        env.reset(seed=0)
        t0 = time.monotonic()
        with pytest.raises(RemoteEnvError) as raised:
            env.step("Left")
        assert time.monotonic() - t0 < 5
        text = str(raised.value)
        assert "did not arrive whole before its deadline (1.5 s)" in text and server.url[7:] in text, text
        assert "\n" not in text
        assert env.reset(seed=0)[0] == "a board"
    finally:
        env.close()
        server.stop()
    server = _serve(info, info_answer=Answer(info, head_every_s=0.4))
    try:
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="GET /info.*did not arrive whole before its deadline"):
            ragen.make_env("remote", url=server.url, timeout_s=1.5)
        assert time.monotonic() - t0 < 5
    finally:
        server.stop()


def test_headers_over_their_cap_are_refused(info):
    """200 KB of headers (25 lines of 8,000 bytes: under http.client's own limits of 100 lines of 64 KiB)."""
    honest = {"obs": "b", "reward": 0.0, "terminated": False, "truncated": False, "info": INFO}
    text = _step_with(info, Answer(honest, head_padding=200_000))
    assert "status line and headers are over the 65536-byte cap" in text and "POST /episodes/e1/step" in text


def test_a_servers_error_message_is_clipped_and_stripped(info):
    message = "\x1b]0;owned\x07\x1b[2J" + "y" * 100_000
    text = _step_with(info, Answer({"error": message, "kind": "env"}, 422))
    assert "\x1b" not in text and "\x07" not in text and len(text) < 500 and "answered 422" in text


@pytest.mark.parametrize("answer, shown", [
    (Answer(b"", 502), "answered 502: no error message (an empty body)"),
    (Answer({"error": ""}, 500), "answered 500: no error message ({'error': ''})"),
    (Answer(b"<html>bad gateway</html>", 502), "answered 502: <html>bad gateway</html>"),
])
def test_an_error_answer_without_a_message_says_what_came(info, answer, shown):
    """An error answer with an empty or no JSON body used to read "answered 502: " with nothing after it."""
    text = _step_with(info, answer)
    assert shown in text and not text.rstrip().endswith(":"), text


def test_instructions_and_action_names_are_bounded(info):
    many = dict(info, action_space=dict(info["action_space"], action_names=[f"a{i}" for i in range(100_000)]))
    server = _serve(info, info_answer=Answer(many))
    try:
        with pytest.raises(ConfigError, match="over 1000 action names"):
            ragen.make_env("remote", url=server.url)
    finally:
        server.stop()
    long = dict(info, instructions="i" * 200_000)
    server = _serve(info, info_answer=Answer(long))
    try:
        with pytest.raises(ConfigError, match="instructions of 200000 characters"):
            ragen.make_env("remote", url=server.url)
    finally:
        server.stop()


def test_a_token_in_the_url_is_never_printed(info):
    server = _serve(info, step=Answer({"error": "boom", "kind": "env"}, 422))
    env = ragen.make_env("remote", url=server.url.replace("http://", "http://user:pw-s3cret@"))
    try:
        env.reset(seed=0)
        with pytest.raises(RemoteEnvError, match="answered 422: boom") as raised:
            env.step("Left")
        assert "s3cret" not in str(raised.value) and "<redacted>@127.0.0.1" in str(raised.value)
    finally:
        env.close()
        server.stop()
    with pytest.raises(ConfigError) as raised:
        ragen.make_env("remote", url="ftp://user:pw-s3cret@127.0.0.1:1/?token=q-s3cret")
    assert "s3cret" not in str(raised.value)
