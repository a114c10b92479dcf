"""The plugin of docs/writing-plugins.md, built from the page's own code blocks and pip-installed, trains one step with
its parser, shaper, estimator and filter; `ragen play --parser` and `ragen eval --parser` use its parser."""

import json
import os
import re
import subprocess
import sys

import attrs
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, TINY
from plugins.test_entry_points import pip_install_target

DOC = ROOT / "docs" / "writing-plugins.md"
#: a fenced block whose first line names the file it is: "# ragen_corridor/env.py", "# pyproject.toml"
BLOCK = re.compile(r"^```(?:python|toml)\n# (?P<path>[\w/.-]+)\n(?P<code>.*?)^```", re.M | re.S)
KINDS = ("parser", "shaper", "estimator", "filter")
NAMES = {"parser": "corridor-lenient", "shaper": "corridor-length-penalty", "estimator": "corridor-mean-baseline",
         "filter": "corridor-spread"}


def package_from_docs(dest):
    """ragen-corridor as the page writes it; a file shown twice is the later (extended) version."""
    files = {m["path"]: m["code"] for m in BLOCK.finditer(DOC.read_text())}
    assert {
        "pyproject.toml",
        "ragen_corridor/env.py",
        "ragen_corridor/__init__.py",
        "ragen_corridor/components.py",
    } <= set(files)
    for path, code in files.items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_text(code)
    return dest


@pytest.fixture(scope="module")
def corridor_pkg(tmp_path_factory):
    return package_from_docs(tmp_path_factory.mktemp("ragen-corridor"))


@pytest.fixture(scope="module")
def corridor_site(corridor_pkg, tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    pip_install_target(
        site, corridor_pkg
    )  # a real install: metadata and the entry point come from the page's pyproject.toml
    return site


@pytest.fixture
def corridor(corridor_site, monkeypatch, fresh_plugins):
    """ragen-corridor visible to this process, its four components counting their calls."""
    monkeypatch.syspath_prepend(str(corridor_site))
    calls = {kind: 0 for kind in KINDS}
    for kind in KINDS:
        reg = fresh_plugins.get_registry(kind)
        item = reg.get(NAMES[kind])
        assert item.dist == "ragen-corridor"
        reg._items[item.name] = attrs.evolve(item, factory=_counting(item.factory, kind, calls))
    return calls


def _counting(factory, kind, calls):
    def make(config):
        component = factory(config)

        def call(*args, **kwargs):
            calls[kind] += 1
            return component(*args, **kwargs)

        return call

    return make


def test_walkthrough_plugin_trains_a_step_with_all_its_components(corridor, tmp_path):
    from ragen.cli.train import run_config
    from ragen.runs.loop import train

    assert corridor  # the fixture installed it
    from ragen.testing import check_env

    assert all(c.ok for c in check_env("corridor")), "the page's env fails its own check"
    cfg = run_config(None, [*TINY, "trainer.steps=1", "rollout.n_groups=2", "rollout.group_size=2",
                             "rollout.n_val_groups=2", "rollout.response_length=48", "trainer.ppo_mini_batch_size=4",
                             "trainer.micro_batch_size=4", "trainer.threads=1", "logging.progress=false",
                             f"logging.run_dir={tmp_path}", "logging.name=r", "collapse.enabled=false"],
                      env_name="corridor", algo_name="corridor-pg", parser_name="corridor-lenient")
    run = train(cfg)
    assert (
        corridor["parser"] > 0 and corridor["filter"] == 1 and corridor["estimator"] == 1 and corridor["shaper"] == 1
    ), corridor
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step1 = next(r for r in rows if r["step"] == 1)
    assert step1["rollout/spread_kept"] == 1.0 and "actor/pg_loss" in step1
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["algo"]["options"]["shaper_options"] == {"corridor-length-penalty": {"per_token": 0.001}}
    assert config["algo"]["options"]["filter_options"] == {"min_spread": 0.0}
    info = json.loads((run / "run.json").read_text())
    assert info["plugins"]["ragen-corridor"] == "0.1.0"
    assert {k: v for k, v in info["components"].items() if "corridor" in k} == {
        f"{kind}:{name}": "ragen-corridor 0.1.0" for kind, name in
        [("env", "corridor"), ("algorithm", "corridor-pg"), *((k, NAMES[k]) for k in KINDS)]}


def test_play_uses_the_custom_parser(corridor):
    from ragen.cli import cli

    # the lenient parser reads an answer with no closing tag; think-answer would call it a format failure
    res = CliRunner().invoke(cli, ["play", "corridor", "--parser", "corridor-lenient"],
                             input="nothing</think><answer>Right\nq\n")
    assert "corridor-lenient: parsed -> 'Right'" in res.output, res.output
    assert corridor["parser"] >= 1
    default = CliRunner().invoke(cli, ["play", "corridor"], input="nothing</think><answer>Right\nq\n")
    assert "think-answer: no match" in default.output


def test_eval_uses_the_custom_parser(corridor, tmp_path):
    from ragen.cli import cli

    res = CliRunner().invoke(cli, ["eval", "--env", "corridor", "--parser", "corridor-lenient", "--model", "tiny",
                                   "--seeds", "2", "--out", str(tmp_path / "e"), "-o", "response_length=16"])
    assert res.exit_code == 0, res.output
    assert corridor["parser"] >= 2  # one call per turn of each of the 2 episodes at least
    bad = CliRunner().invoke(cli, ["eval", "--env", "corridor", "--parser", "corridor-lenient",
                                   "--parser-option", "enable_thnk=false"])
    assert bad.exit_code == 1 and "enable_thnk: unknown key; did you mean 'enable_think'" in bad.output


def test_the_pages_tests_pass_through_ragen_testing(corridor_pkg, corridor_site, tmp_path):
    """The page's tests/ (env and component contracts of ragen.testing, no conftest) pass against the installed plugin;
    the training run they also hold is the one test_walkthrough_plugin_trains_a_step_with_all_its_components makes."""
    assert {p.name for p in (corridor_pkg / "tests").iterdir()} == {"test_corridor.py", "test_components.py"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not trains_two_steps",
                          str(corridor_pkg / "tests")], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(corridor_site)}, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "10 passed, 1 deselected" in res.stdout, res.stdout[-2000:]  # 2 x 2 env checks, 6 component checks
