"""An env's step() answers bools for ``terminated``, ``truncated`` and the info bools, or the contract refuses it.

A third-party plugin written from docs/writing-plugins.md answered ``info["success"] = "no"`` after a wrong guess;
``bool("no")`` is True, so the step was read as a success: ``check-env`` passed 6/6 and ``ragen play`` showed success.
The fixture plugin ragen-liar does the same (``liar-coin``) and answers ``terminated = "no"`` (``liar-coin-done``).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, ragen_cmd

import ragen
from ragen.envs.episode import Episode

FIXTURES = ROOT / "tests" / "fixture_plugins"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(FIXTURES / "ragen-liar")], check=True, capture_output=True)
    return target


def run(site, *args, code=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", code] if code else ragen_cmd(*args)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


#: a wrong guess through the public path: an Episode over the registered env
EPISODE = """
import ragen
from ragen.envs.episode import Episode
env = ragen.make_env({name!r})
ep = Episode(env)
ep.reset(seed=0)
wrong = "Tails" if env.side == "Heads" else "Heads"
try:
    ep.step_turn(wrong)
except ragen.RagenError as exc:
    print("REFUSED", type(exc).__name__, exc)
else:
    print("ACCEPTED success", ep.success)
"""


@pytest.mark.parametrize(("name", "what", "value"), [("liar-coin", "info['success']", "'no'"),
                                                     ("liar-coin-done", "terminated", "'no'")])
def test_a_string_for_a_bool_is_refused_naming_the_env_and_its_distribution(site, name, what, value):
    res = run(site, code=EPISODE.format(name=name))
    assert res.returncode == 0, res.stderr
    line = res.stdout.strip()
    assert line == (f"REFUSED PluginError env {name!r} of ragen-liar broke its contract: step() returned "
                    f"{what} = {value} (str), expected a bool (True or False)"), line


def test_check_env_fails_an_env_that_answers_strings_for_bools(site):
    res = run(site, "check-env", "liar-coin")
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "all 6 checks passed" not in out
    assert "env 'liar-coin' of ragen-liar broke its contract: step() returned info['success'] = " in out, out


class NumpyBools(ragen.Env):
    """numpy's bools are bools: an env computing its outcome with numpy is not refused."""

    def _reset(self, seed, options):
        self.task_id = f"numpy/{seed}"
        return "state", {}

    def _step(self, action):
        won = np.array([1, 2]).sum() == 3
        return "done", 1.0, won, np.bool_(False), {"success": won, "action_is_valid": np.True_,
                                                    "action_is_effective": True}


class IntSuccess(NumpyBools):
    def _step(self, action):
        return "done", 0.0, True, False, {"success": 0, "action_is_valid": True, "action_is_effective": True}


def test_numpy_bools_pass_and_come_back_as_python_bools():
    ep = Episode(NumpyBools(ragen.EnvConfig()))
    ep.reset(seed=0)
    res = ep.step_turn("x")
    assert ep.success is True and res.done
    assert all(type(res.info[k]) is bool for k in ("success", "action_is_valid", "action_is_effective"))


def test_an_int_for_a_bool_is_refused_naming_the_class_when_not_registered():
    env = IntSuccess(ragen.EnvConfig())
    env.reset(seed=0)
    with pytest.raises(ragen.RagenError, match=r"^env 'IntSuccess' \([\w.]*IntSuccess\) broke its contract: "
                                               r"step\(\) returned info\['success'\] = 0 \(int\), expected a bool"):
        env.step("x")
