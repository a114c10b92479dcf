"""rollout.parser='auto' and `--parser auto`: answer-only for the built-in small model, the recorded parser of a
ragen-trained folder for `ragen eval`, think-answer otherwise."""

import json

import pytest

from ragen.cli.options import resolved_parser
from ragen.config import RunConfig, load_config, to_dict
from ragen.models.load import save_parser, trained_parser


def test_auto_resolves_once_by_model_and_an_explicit_parser_wins():
    assert RunConfig().rollout.parser == "answer"  # the default model is `small`
    assert load_config(overrides=["model.name=tiny"]).rollout.parser == "think-answer"
    assert load_config(overrides=["model.name=/some/real/model"]).rollout.parser == "think-answer"
    assert load_config(overrides=["rollout.parser=think-answer"]).rollout.parser == "think-answer"
    assert to_dict(RunConfig())["rollout"]["parser"] == "answer"  # config.yaml holds the resolved name


def test_eval_reads_the_parser_a_folder_records(tmp_path):
    save_parser(tmp_path, "think-answer", {"enable_think": False})
    assert trained_parser(str(tmp_path)) == ("think-answer", {"enable_think": False})
    assert resolved_parser("auto", (), str(tmp_path)) == ("think-answer", ("enable_think=False",))
    assert resolved_parser("auto", ("enable_think=True",), str(tmp_path)) == ("think-answer", ("enable_think=True",))
    assert resolved_parser("answer", (), str(tmp_path)) == ("answer", ())  # --parser NAME always wins


@pytest.mark.parametrize("record", [None, "not json", json.dumps({"no": "parser"})])
def test_a_folder_without_a_good_record_falls_back_to_the_model_default(tmp_path, record):
    if record is not None:
        (tmp_path / "ragen-parser.json").write_text(record)
    assert trained_parser(str(tmp_path)) is None
    assert resolved_parser("auto", (), str(tmp_path)) == ("think-answer", ())
    assert resolved_parser("auto", (), "small") == ("answer", ())
    assert resolved_parser("auto", ()) == ("think-answer", ())  # `ragen play` has no model


def test_a_run_from_a_ragen_trained_folder_reads_its_parser_and_prompt(tmp_path):
    """`ragen run --model FOLDER` plays the folder's model the way it was trained (parser, options, prompt frame);
    explicit settings win, and a record from before prompt styles means the full frame."""
    save_parser(tmp_path, "think-answer", {"enable_think": False}, prompt="compact")
    r = load_config(overrides=[f"model.name={tmp_path}"]).rollout
    assert (r.parser, r.parser_options, r.prompt) == ("think-answer", {"enable_think": False}, "compact")
    r = load_config(overrides=[f"model.name={tmp_path}", "rollout.parser=answer", "rollout.prompt=full"]).rollout
    assert (r.parser, r.parser_options, r.prompt) == ("answer", {}, "full")
    (tmp_path / "ragen-parser.json").write_text(json.dumps({"parser": "answer", "parser_options": {}}))
    assert load_config(overrides=[f"model.name={tmp_path}"]).rollout.prompt == "full"
    (tmp_path / "ragen-parser.json").write_text("not json")
    r = load_config(overrides=[f"model.name={tmp_path}"]).rollout
    assert (r.parser, r.prompt) == ("think-answer", "full")  # a path's defaults


def test_run_from_a_folder_whose_record_is_dev_zero_is_one_line_at_once(tmp_path):
    """`ragen run --model FOLDER` with `ragen-parser.json -> /dev/zero` read until the host ran out of memory."""
    import subprocess
    import time

    from conftest import ragen_cmd

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "ragen-parser.json").symlink_to("/dev/zero")
    t0 = time.monotonic()
    r = subprocess.run(ragen_cmd("run", "--model", str(tmp_path), f"logging.run_dir={tmp_path / 'runs'}"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and time.monotonic() - t0 < 60
    assert "ragen-parser.json" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([line for line in r.stderr.splitlines() if "Error" in line]) == 1, r.stderr


def test_a_folder_records_its_history_window_and_an_older_record_means_all_turns(tmp_path):
    from ragen.models.load import trained_window

    save_parser(tmp_path, "answer", {}, prompt="compact", window=1)
    assert trained_window(str(tmp_path)) == 1
    (tmp_path / "ragen-parser.json").write_text(json.dumps({"parser": "answer", "parser_options": {}}))
    assert trained_window(str(tmp_path)) == 0  # saved before windows were recorded: trained on every turn
    for bad in (-1, "1", True, 1.5):
        (tmp_path / "ragen-parser.json").write_text(json.dumps({"parser": "answer", "window": bad}))
        assert trained_window(str(tmp_path)) is None
    assert trained_window(str(tmp_path / "missing")) is None


@pytest.mark.slow
def test_eval_plays_with_the_window_the_folder_records(tmp_path):
    """A model trained with rollout.max_context_window=1 scored 73.4% through `ragen eval` (whole history) against
    78.9% in its run's own greedy pass (window 1): eval must play it as trained, and `--window N` wins."""
    import subprocess

    from conftest import ragen_cmd

    from ragen.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny", tmp_path / "src", ["frozenlake"], dtype="float32", device="cpu")
    folder = tmp_path / "windowed"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    save_parser(folder, "answer", {}, prompt="compact", window=1)
    blocks = {}
    for label, extra in (("auto", []), ("all", ["--window", "0"])):
        out = tmp_path / f"eval-{label}"
        r = subprocess.run(ragen_cmd("eval", "--env", "frozenlake", "--model", str(folder), "--seeds", "2",
                                     "-o", "max_actions_per_turn=1", "-o", "max_turns=4", "-o", "response_length=8",
                                     "--out", str(out), *extra),
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        trajs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
        blocks[label] = [(t["num_turns"], len(t["blocks"])) for t in trajs]
    # window 1: from turn 3 on each prompt drops the oldest turn and opens a block; the whole history opens none
    assert any(n >= 3 and b >= 1 for n, b in blocks["auto"]) and all(b == 0 for _, b in blocks["all"]), blocks
    r = subprocess.run(ragen_cmd("eval", "--env", "frozenlake", "--model", str(folder), "--window", "one"),
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0 and "--window" in r.stderr and "Traceback" not in r.stderr, r.stderr
