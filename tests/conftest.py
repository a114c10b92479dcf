import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# tests never read or fill the user's warm-start cache (~/.cache/ragen); a test that wants one sets its own
os.environ.setdefault("RAGEN_CACHE_DIR", os.path.join(__import__("tempfile").mkdtemp(prefix="ragen-test-cache-")))

ROOT = Path(__file__).resolve().parents[1]
#: the run settings of tests: the built-in tiny model as initialised, no warm start (the product default is the
#: warm-started `small` model: minutes of CPU per run)
TINY = ["model.name=tiny", "warmstart.mode=never"]
SHARED = ROOT.parent / "shared"


@pytest.fixture
def fresh_plugins():
    """Rediscover plugins before and after the test, so throwaway registrations never leak."""
    from ragen.plugins import loader as plugins

    plugins.reset()
    yield plugins
    plugins.reset()


def ragen_cmd(*args: str) -> list[str]:
    """The ragen CLI of this interpreter's environment."""
    return [sys.executable, "-m", "ragen", *args]


def run_two_steps(env: str, tmp_path: Path, *extra: str, response_length: int | None = 48) -> tuple[Path, list[dict]]:
    """Train `ragen run --env ENV --algo grpo` for two small steps in a subprocess, as a user would.

    The plugins' smoke tests share this. Two groups of two, short answers: the random tiny model otherwise
    writes the full response length every turn, minutes of CPU for no extra coverage. `extra` overrides come
    last, so they win. Fails the test with the run's stderr tail on a non-zero exit or a missing final/ model;
    returns the run folder and its metrics.jsonl rows.
    """
    length = [] if response_length is None else [f"rollout.response_length={response_length}"]
    proc = subprocess.run(
        ragen_cmd("run", "--env", env, "--algo", "grpo", *TINY, "trainer.steps=2", "rollout.n_groups=2", "rollout.group_size=2",
                  "rollout.n_val_groups=2", "trainer.ppo_mini_batch_size=4", "trainer.micro_batch_size=4",
                  "logging.progress=false", f"logging.run_dir={tmp_path}", "logging.name=r", *length, *extra),
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "r"
    assert (run / "final").is_dir()
    return run, [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


#: gymnasium warns that a text env declares no render modes besides "ansi": expected for every ragen env
NO_SPEC_WARNING = "ignore:.*alternative render modes:UserWarning"


def env_contract_tests(variants: list[str]):
    """A plugin's env contract as two parametrised tests over its variants, ragen's ``check_env`` and Gymnasium's;
    a test module binds them to module-level ``test_*`` names so pytest collects them there."""
    import ragen
    from gymnasium.utils import env_checker as gym_checker
    from ragen.envs.checker import check_env

    @pytest.mark.filterwarnings(NO_SPEC_WARNING)
    @pytest.mark.parametrize("name", variants)
    def test_ragen_check_env(name):
        checks = check_env(name)
        assert all(c.ok for c in checks), [c for c in checks if not c.ok]

    @pytest.mark.filterwarnings(NO_SPEC_WARNING)
    @pytest.mark.parametrize("name", variants)
    def test_gymnasium_check_env(name):
        env = ragen.make_env(name)
        gym_checker.check_env(env, skip_close_check=False)
        env.close()

    return test_ragen_check_env, test_gymnasium_check_env
