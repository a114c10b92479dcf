"""Envs whose open episode holds a session on a server with a session cap (the `openenv` env): the rollout frees an
episode's session as soon as the episode is over for ragen (its budget, not only the env's own end), and an episode
whose server is full waits for one of the rollout's own episodes to end instead of being dropped."""

import threading

import pytest

import ragen
from ragen.errors import EnvBusy
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.rollout import ChatFormat, EnvSlot, Generation, RolloutSettings, SamplingParams, run_rollout


class Server:
    """A session cap shared by env instances: what an OpenEnv server's ``max_concurrent_envs`` is to its clients."""

    def __init__(self, cap: int, taken_by_others: int = 0):
        self.cap, self.open, self.peak, self.lock = cap, taken_by_others, taken_by_others, threading.Lock()
        self.ours = 0  # sessions held by this process's instances

    def take(self) -> None:
        with self.lock:
            if self.open >= self.cap:
                raise EnvBusy("the server is full") if self.ours else RuntimeError("full, none of it ours")
            self.open += 1
            self.ours += 1
            self.peak = max(self.peak, self.open)

    def give_back(self) -> None:
        with self.lock:
            self.open -= 1
            self.ours -= 1


class SessionEnv(ragen.Env):
    """Never ends on its own, so ragen's turn budget ends every episode; holds a server session per open episode."""

    concurrency = "thread"

    def __init__(self, server: Server, config=None):
        super().__init__(config or ragen.EnvConfig(max_turns=3))
        self.server, self.holding = server, False
        self.action_names, self.instructions = ["Go"], "Say Go."

    def _reset(self, seed, options):
        self.end_episode()
        self.server.take()
        self.holding = True
        self.task_id = f"session/s{seed}"
        return f"level {seed}", {}

    def _step(self, action):
        assert self.holding, "stepped without a session"
        return "still here", 0.0, False, False, {"success": False, "action_is_valid": True,
                                                 "action_is_effective": True}

    def end_episode(self):
        if self.holding:
            self.holding = False
            self.server.give_back()


class FixedEngine:
    """Answers every prompt with the same ids."""

    logprobs_exact = False

    def __init__(self, eos_id, ids):
        self.eos, self.ids = eos_id, list(ids)

    @property
    def eos_token_ids(self):
        return [self.eos]

    def generate_for_envs(self, envs, prompts, params):
        return [Generation(list(self.ids), [-1.0] * len(self.ids), "stop") for _ in prompts]


@pytest.fixture(scope="module")
def fmt(tmp_path_factory):
    tok = load_model_and_tokenizer(build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", ["bandit"],
                                                    corpus_seeds=2), "unused")[1]
    return ChatFormat(tok)


def play(fmt, server, n_groups=2, group_size=3, workers=1):
    ids = fmt.tokenizer(" x</think><answer>Go</answer>", add_special_tokens=False)["input_ids"] + [fmt.eos_id]
    slots = [EnvSlot(SessionEnv(server), "session", 100 + g, g, i, "train")
             for g in range(n_groups) for i in range(group_size)]
    res = run_rollout(FixedEngine(fmt.eos_id, ids), slots, SamplingParams(),
                      RolloutSettings(chat_format=fmt, env_workers=workers))
    return slots, res


@pytest.mark.parametrize("workers", [1, 4])
def test_a_capped_server_plays_every_episode_in_waves_with_the_same_trajectories(fmt, workers):
    free = Server(cap=100)
    _, unlimited = play(fmt, free, workers=workers)
    capped = Server(cap=2)
    slots, res = play(fmt, capped, workers=workers)
    assert res.failed_envs == 0 and len(res.trajectories) == 6
    assert capped.peak == 2 and free.peak == 6  # never more sessions than the cap; without one, all at once
    assert capped.open == free.open == 0  # every episode ended by the budget gave its session back at once
    assert not any(s.env.holding for s in slots)
    # slot order and the same episodes as without a cap (the fixed engine answers alike in any round)
    assert [(t.group_id, t.rollout_index) for t in res.trajectories] == [(g, i) for g in range(2) for i in range(3)]
    assert [t.input_ids for t in res.trajectories] == [t.input_ids for t in unlimited.trajectories]
    assert all(t.num_turns == 3 and t.truncation_reason == "max_turns" for t in res.trajectories)


def test_a_server_full_of_other_sessions_drops_the_episodes_and_counts_them_by_reason(fmt):
    server = Server(cap=2, taken_by_others=2)
    _, res = play(fmt, server)
    assert res.failed_envs == 6 and not res.trajectories
    assert res.metrics["failed/RuntimeError"] == 6.0 and res.failure_reasons == {"RuntimeError": 6}
    assert all("full, none of it ours" in e for e in res.errors)


def test_end_episode_is_a_no_op_on_an_env_that_holds_nothing():
    env = ragen.make_env("bandit")
    env.reset(seed=1)
    env.end_episode()  # the default: nothing to free, the episode's state stays readable
    assert env.render()
    env.close()
