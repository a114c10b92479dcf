"""Reproducible run folders: config.yaml names every component with all its options, run.json every version, and
`ragen run --config RUN/config.yaml` repeats the run; --filter keeps the filter options the user gave."""

import json
import subprocess

import pytest
import yaml
from conftest import ROOT, ragen_cmd, run_two_steps

from ragen.errors import ConfigError


def _computed(row: dict) -> dict:
    """A metrics row without what depends on the clock (timing/*, timing_s/*, perf/*, */time/*)."""
    return {k: v for k, v in row.items() if not (k.startswith(("timing", "perf/")) or "/time/" in k)}


def test_filter_flag_keeps_its_options():
    from ragen.cli.train import run_config
    from ragen.train.provenance import resolved_preset

    cfg = run_config(None, ["algo.options.filter_options.value=0.5"], filter_name="top-p")
    preset = resolved_preset(cfg)
    assert preset["filter"] == "top-p" and preset["filter_options"]["value"] == 0.5
    assert resolved_preset(run_config(None, [], filter_name="top-p"))["filter_options"]["value"] == 0.9  # its default


def test_misspelt_filter_option_is_one_line_naming_it():
    res = subprocess.run(ragen_cmd("run", "--env", "frozenlake", "--filter", "top-p", "model.name=tiny",
                                   "algo.options.filter_options.valu=0.5"), capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == \
        "Error: algo.options.filter_options.valu: unknown key; did you mean 'value'?"


def test_component_options_checked_before_anything_loads():
    from ragen.cli.train import run_config

    with pytest.raises(
        ConfigError, match=r"^rollout\.parser_options\.enable_thnk: unknown key; did you mean 'enable_think'"
    ):
        run_config(None, ["rollout.parser_options.enable_thnk=false"])
    with pytest.raises(ConfigError, match=r"^algo\.options\.estimator_options\.gama: unknown key"):
        run_config(None, ["algo.options.estimator_options.gama=1"])
    with pytest.raises(ConfigError, match=r"^env\.options\.sizee: unknown key"):
        run_config(None, ["env.name=frozenlake", "env.options.sizee=3"])


def test_resolved_config_loads_back_to_the_same_run():
    from ragen.cli.train import run_config
    from ragen.config import RunConfig, structure
    from ragen.train.provenance import resolved_config

    cfg = run_config(None, ["env.name=sokoban-large", "algo.name=starpo-s", "algo.options.kl_coef=0.01"])
    data = resolved_config(cfg)
    again = structure(RunConfig, yaml.safe_load(yaml.safe_dump(data)))
    assert resolved_config(again) == data
    assert data["env"]["options"]["num_boxes"] == 2  # the variant's defaults, written out
    assert data["algo"]["options"]["kl_coef"] == 0.01 and data["algo"]["options"]["estimator"]
    # the default model (small) answers without <think> (rollout.parser=auto): its parser's options, written out
    assert data["rollout"]["parser"] == "answer" and data["rollout"]["parser_options"] == {"enable_think": False,
                                                                                 "allow_trailing_text": False}


def test_run_folder_names_everything_and_reruns_identically(tmp_path):
    run, rows = run_two_steps("frozenlake", tmp_path, "--filter", "top-p", "algo.options.filter_options.value=0.5",
                              "trainer.steps=1", "trainer.threads=1")
    config = yaml.safe_load((run / "config.yaml").read_text())
    options = config["algo"]["options"]
    assert options["filter"] == "top-p" and options["filter_options"]["value"] == 0.5
    assert options["estimator"] == "grpo" and "epsilon" in options["estimator_options"]
    assert config["env"]["options"]["size"] and config["rollout"]["parser_options"] == {"enable_think": True,
                                                                                    "allow_trailing_text": False}
    info = json.loads((run / "run.json").read_text())
    assert info["ragen"] and info["plugins"]["ragen-frozenlake"] and info["plugins"]["ragen-algos"]
    assert info["components"]["filter:top-p"].startswith("ragen-algos ")
    assert info["seed"] == 0 and info["device"].startswith("cpu")
    assert {"torch", "transformers", "deepspeed"} <= set(info["libraries"])
    assert info["python"] and (info["git_commit"] is None or len(info["git_commit"]) >= 40)
    if (ROOT / ".git").exists():
        assert info["git_commit"]

    rerun = subprocess.run(ragen_cmd("run", "--config", str(run / "config.yaml"), "logging.name=again"),
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    again = [json.loads(line) for line in (tmp_path / "again" / "metrics.jsonl").read_text().splitlines()]
    first = [_computed(row) for row in rows if row["step"] == 1]
    assert first == [_computed(row) for row in again if row["step"] == 1] and "reward/mean" in first[0]
    assert yaml.safe_load((tmp_path / "again" / "config.yaml").read_text())["algo"] == config["algo"]


def test_rerun_from_config_yaml_finds_the_same_warm_start():
    """The warm-start cache is keyed by the resolved env and parser options, so `--config RUN/config.yaml` (every option
    written out) reuses the run's warm start, and a changed option does not."""
    from ragen.cli.train import run_config
    from ragen.config import RunConfig, structure
    from ragen.train.provenance import resolved_config
    from ragen.warmstart.cache import cache_key

    cfg = run_config(None, ["env.name=frozenlake"])
    assert cache_key(structure(RunConfig, resolved_config(cfg))) == cache_key(cfg)
    assert cache_key(run_config(None, ["env.name=frozenlake", "env.options.max_turns=3"])) != cache_key(cfg)
    assert cache_key(run_config(None, ["env.name=frozenlake", "rollout.parser=think-answer"])) != cache_key(cfg)
    think = run_config(None, ["env.name=frozenlake", "rollout.parser=think-answer"])
    assert cache_key(run_config(None, ["env.name=frozenlake", "rollout.parser=think-answer",
                                       "rollout.parser_options.enable_think=false"])) != cache_key(think)
