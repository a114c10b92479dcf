"""A run folder is data: files are never written through a symbolic link, rewrites are atomic, and
secrets never reach config.yaml, run.json or wandb."""

import json
import os

import pytest
import yaml

from ragen.errors import RagenError
from ragen.train.runlog import REDACTED, RunWriter, redact, write_atomic


def test_secrets_are_redacted_everywhere_the_config_goes(tmp_path):
    config = {"env": {"name": "remote", "options": {"url": "http://127.0.0.1:1", "token": "s3cret", "max_turns": 3},
                      "train": [{"name": "remote", "options": {"token": "other", "api_key": "k"}}]},
              "logging": {"name": "x"}}
    writer = RunWriter(tmp_path / "run", config, info={"env": {"RAGEN_ENV_TOKEN": "s3cret", "user": "me"}})
    text = (tmp_path / "run" / "config.yaml").read_text() + (tmp_path / "run" / "run.json").read_text()
    assert "s3cret" not in text and "other" not in text and '"k"' not in text
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["env"]["options"] == {"url": "http://127.0.0.1:1", "token": REDACTED, "max_turns": 3}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["env"]["user"] == "me"
    writer.close()
    assert redact({"token": "", "password": None}) == {"token": "", "password": None}  # nothing to hide
    counts = {"max_tokens": 400, "micro_batch_tokens": 0, "tokenizer": "x", "hf_token": "h", "RAGEN_ENV_TOKEN": "t",
              "per_token": 0.001}
    assert redact(counts) == {**counts, "hf_token": REDACTED, "RAGEN_ENV_TOKEN": REDACTED}


def test_appends_refuse_a_symbolic_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    writer = RunWriter(run, {})
    (run / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(RagenError, match="metrics.jsonl' is a symbolic link"):
        writer.metrics(1, {"loss": 0.5})
    (run / "trajectories.jsonl").symlink_to(victim)
    with pytest.raises(RagenError, match="symbolic link"):
        writer.trajectories("trajectories.jsonl", [{"step": 1}])
    assert victim.read_text() == "precious\n"


def test_resume_truncation_never_empties_a_link_target(tmp_path):
    victim = tmp_path / "victim.jsonl"
    victim.write_text('{"step": 9}\n')
    run = tmp_path / "run"
    writer = RunWriter(run, {})
    writer.metrics(1, {"a": 1.0})
    (run / "trajectories.jsonl").symlink_to(victim)
    with pytest.raises(RagenError, match="symbolic link"):
        writer.truncate_after(0)
    assert victim.read_text() == '{"step": 9}\n'


def test_write_atomic_replaces_a_link_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim.yaml"
    victim.write_text("keep: me\n")
    link = tmp_path / "config.yaml"
    link.symlink_to(victim)
    write_atomic(link, "new: file\n")
    assert not link.is_symlink() and link.read_text() == "new: file\n"
    assert victim.read_text() == "keep: me\n"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_resumed_config_sends_no_placeholder_as_a_secret():
    from ragen.runs.loop import unredact

    saved = {"env": {"options": {"token": REDACTED, "url": "http://x"}, "train": [{"options": {"token": REDACTED}}]}}
    assert unredact(saved) == {
        "env": {"options": {"token": "", "url": "http://x"}, "train": [{"options": {"token": ""}}]}
    }


def test_an_unwritable_run_dir_is_one_line_before_anything_is_built(tmp_path):
    import subprocess

    from conftest import ragen_cmd

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = subprocess.run(ragen_cmd("run", "--env", "bandit", "--model", "tiny", "--no-warmstart",
                                   f"logging.run_dir={blocker}", "logging.name=r"),
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (f"Error: logging.run_dir: cannot create the run folder "
                                                   f"'{blocker}/r': Not a directory")
    assert "Traceback" not in res.stderr and not list(tmp_path.glob("**/tiny-model"))


def test_a_secret_on_the_command_line_or_in_a_url_never_reaches_the_run_folder(tmp_path, monkeypatch):
    """config.yaml redacted `env.options.token=...` but run.json kept the command line verbatim, and a token in a URL's
    userinfo or query was kept everywhere."""
    import sys

    import torch

    from ragen.config import RunConfig
    from ragen.train.provenance import run_info

    url = "http://user:s3cret-b@127.0.0.1:1/?token=s3cret-c&x=1"
    monkeypatch.setattr(sys, "argv", ["ragen", "run", "--env", "remote", "env.options.token=s3cret-a",
                                      f"env.options.url={url}", "--api-key", "s3cret-d", "--password=s3cret-e",
                                      "trainer.steps=1"])
    info = run_info(RunConfig(), torch.device("cpu"))
    writer = RunWriter(tmp_path / "run", {"env": {"name": "remote", "options": {"url": url}}}, info=info)
    writer.close()
    text = (tmp_path / "run" / "config.yaml").read_text() + (tmp_path / "run" / "run.json").read_text()
    assert "s3cret" not in text
    command = json.loads((tmp_path / "run" / "run.json").read_text())["command"]
    assert "env.options.token=<redacted>" in command and "trainer.steps=1" in command
    assert "127.0.0.1:1" in command and "x=1" in command  # what is no secret stays readable
