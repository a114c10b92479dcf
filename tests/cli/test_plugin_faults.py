"""Faulty plugins as a user meets them through the CLI: a preset naming components nobody registered is flagged when
listed and refused at run start naming every missing part; a plugin refused whole for a name clash in one hook is
refused in every command, whichever hooks that command reads."""

import json
import os
import subprocess
import textwrap

import pytest
from conftest import ragen_cmd

#: a preset that names an estimator and a shaper no plugin registers, beside registered ones
FAULTY = '''
from ragen import AlgorithmPreset, hookimpl


@hookimpl
def register_algorithms(register):
    register("faulty-preset", AlgorithmPreset(estimator="faulty-adv", filter="top-p",
                                              shapers=("faulty-shape", "reward-norm")))
'''

#: a working env whose plugin also registers the core's preset name `grpo`: the plugin is refused whole
INTRUDER = '''
from ragen import AlgorithmPreset, Env, Expert, hookimpl


class StepExpert(Expert):
    def next_actions(self, env, k):
        return ["Step"]


class WalkEnv(Env):
    """One step to the goal."""

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Step"]
        self.expert = StepExpert()

    def _reset(self, seed, options):
        self.task_id = f"walk/s{seed}"
        return f"Level {seed}: one step to go.", {}

    def _step(self, action):
        ok = self.canonical_action(action) is not None
        return "done", float(ok), ok, False, {"success": ok, "action_is_valid": ok, "action_is_effective": ok}


@hookimpl
def register_envs(register):
    register("intruder-walk", WalkEnv)


@hookimpl
def register_algorithms(register):
    register("grpo", AlgorithmPreset(estimator="grpo"))
'''


def write_plugin(site, dist: str, module: str, source: str) -> None:
    """An installed plugin without pip: its module and a dist-info folder with its entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[ragen]\n{module} = {module}\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    write_plugin(site, "ragen-faulty", "ragen_faulty", FAULTY)
    write_plugin(site, "ragen-intruder", "ragen_intruder", INTRUDER)
    return site


def ragen(site, *args):
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(ragen_cmd(*args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path})


def test_algos_warns_naming_the_preset_and_every_missing_part(site):
    res = ragen(site, "algos")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "faulty-preset" in res.stdout  # still listed
    assert ("warning: preset 'faulty-preset' of ragen-faulty names components that are not registered: estimator "
            "'faulty-adv', shaper 'faulty-shape'; `ragen run --algo faulty-preset` fails until they are") in res.stderr
    assert "preset 'grpo'" not in res.stderr  # the shipped presets are whole


def test_a_run_of_the_preset_fails_at_start_naming_it_and_every_missing_part(site, tmp_path):
    res = ragen(site, "run", "--env", "frozenlake", "--algo", "faulty-preset", "--model", "tiny", "--no-warmstart",
                f"logging.run_dir={tmp_path}")
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: algo.name: the preset 'faulty-preset' of ragen-faulty names components that are "
                           "not registered: estimator 'faulty-adv', shaper 'faulty-shape' ("), res.stderr[-3000:]
    assert "Traceback" not in res.stderr and not any(tmp_path.iterdir())  # refused before any run folder


def test_a_misspelt_estimator_option_names_the_preset_with_a_suggestion(site, tmp_path):
    res = ragen(site, "run", "--env", "frozenlake", "--algo", "grpo", "--model", "tiny", "--no-warmstart",
                "algo.options.estimator=grpoo", f"logging.run_dir={tmp_path}")
    assert res.returncode == 1
    assert ("the preset 'grpo' of ragen-algos names components that are not registered: estimator 'grpoo' (did you "
            "mean 'grpo'?)") in res.stderr


@pytest.mark.parametrize("command", [["envs"], ["envs", "--json"]])
def test_a_plugin_refused_in_its_algorithm_hook_is_absent_from_the_env_listings(site, command):
    res = ragen(site, *command)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "intruder-walk" not in res.stdout
    assert "warning: ragen plugin 'ragen-intruder' is broken and was skipped: it registers the algorithm 'grpo', " \
           "which belongs to 'ragen-algos'" in res.stderr


def test_plugins_lists_the_refused_plugin_as_broken_with_none_of_its_components(site):
    res = ragen(site, "plugins", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert not any(p["distribution"] == "ragen-intruder" for p in data["plugins"])
    assert not any("intruder-walk" in names for p in data["plugins"] for names in p["components"].values())
    broken = {b["distribution"]: b["error"] for b in data["broken"]}
    assert broken["ragen-intruder"].startswith("it registers the algorithm 'grpo', which belongs to 'ragen-algos'")


def test_check_env_refuses_an_env_of_a_refused_plugin(site):
    res = ragen(site, "check-env", "intruder-walk")
    assert res.returncode != 0
    assert "all 6 checks passed" not in res.stdout
    assert "Error: unknown env 'intruder-walk'" in res.stderr
    assert "ragen plugin 'ragen-intruder' is broken" in res.stderr
