"""Small CLI behaviours a new user meets first: a missing local model path fails at once, the default env
is stated, and `ragen eval` never overwrites an earlier evaluation."""

import resource
import subprocess
import sys
import time

import pytest
from conftest import ragen_cmd


def ragen(*args, cwd=None, timeout=300):
    return subprocess.run(ragen_cmd(*args), capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize(
    "command", [["run", "--env", "sokoban"], ["sft", "--env", "sokoban"], ["eval", "--env", "sokoban"]]
)
def test_a_missing_local_model_path_fails_at_once_naming_it(command):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = ragen(*command, "--model", "/nope")
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert res.returncode == 1
    assert res.stderr.strip() == "Error: model.name: local path '/nope' does not exist"
    # the command's own CPU time (wall time on a shared, loaded machine measures the other processes); 0.4 s idle
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 5 and elapsed < 60, f"{cpu:.1f} CPU s, {elapsed:.1f} s wall"


def test_a_hub_id_is_not_taken_for_a_path():
    from ragen.models.load import looks_like_path

    assert not looks_like_path("Qwen/Qwen2.5-0.5B-Instruct") and not looks_like_path("gpt2")
    assert looks_like_path("./m") and looks_like_path("~/m") and looks_like_path("runs/sft/final")


def _config_stderrs(*calls: str) -> list[str]:
    """stderr of each ``run_config(call_args)`` (what `ragen run` does before it imports torch), in order, in one fresh
    process (one start-up, plugins loaded once, instead of one process per call)."""
    mark = "--- next call ---"
    code = "import sys\nfrom ragen.cli.train import run_config\n" + "".join(
        f"run_config({args})\nprint({mark!r}, file=sys.stderr, flush=True)\n" for args in calls)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stderr.split(mark + "\n")[: len(calls)]


def test_run_without_env_states_the_default_first_and_only_then():
    default, named, overridden = _config_stderrs("None, ()", "None, (), env_name='frozenlake'",
                                                 "None, ('env.name=frozenlake',)")
    assert default.splitlines()[0] == "env: sokoban (the default; --env NAME picks another)"  # first in the process
    assert "env:" not in named and "env:" not in overridden


@pytest.mark.slow
def test_eval_writes_a_fresh_folder_per_call(tmp_path):
    for _ in range(2):
        # 48-token answers: the random tiny model writes its whole cap every turn; the folders are what is checked
        res = ragen("eval", "--env", "frozenlake", "--model", "tiny", "--seeds", "1", "-o", "response_length=48",
                    cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.name.startswith("eval-frozenlake-"))
    assert len(folders) == 2, folders
    assert all((tmp_path / "runs" / f / "metrics.json").is_file() for f in folders)


@pytest.mark.parametrize("command", [["plugins"], ["algos"], ["envs"], ["envs", "sokoban"]])
def test_listings_fit_100_columns_unless_wide(command):
    lines = ragen(*command).stdout.splitlines()
    assert lines and max(map(len, lines)) <= 100, max(lines, key=len)
    if command == ["algos"]:  # the preset table is 262 columns on one line per preset
        wide = ragen(*command, "--wide").stdout.splitlines()
        assert max(map(len, wide)) > 100 and len(wide) < len(lines)
