"""The prompt frame's two styles (ragen/envs/prompt.py, ``rollout.prompt``): what compact keeps and drops, that it
changes the tokens and not the game, how 'auto' resolves, and how a model folder and an old run folder record it."""

import json

import pytest

import ragen
from ragen.config import RunConfig, load_config, to_dict
from ragen.envs.prompt import system_prompt, turn_text
from ragen.models.load import save_parser, trained_parser, trained_prompt
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout
from ragen.rollout.expert import ExpertEngine


def test_compact_keeps_the_actions_the_state_and_the_budget_and_drops_the_rest():
    env = ragen.make_env("sokoban")
    full, compact = system_prompt(env), system_prompt(env, style="compact")
    assert compact == 'Actions: Up, Down, Left, Right\nUp to 2 actions per turn, separated by " || "'
    assert "helpful assistant" in full and "meaning of each symbol" in full and len(compact) < len(full) / 5
    turn = turn_text(2, "<grid>", 7, 120, warning=True, style="compact")
    assert turn == "\nTurn 2:\nState:\n<grid>\nNo valid action provided previously. Environment state remains the " \
                   "same. Please try again.\nYou have 7 actions left.\n"
    assert "Always output" in turn_text(2, "<grid>", 7, 120) and "Always output" not in turn
    one = ragen.make_env("frozenlake", max_actions_per_turn=1)
    assert system_prompt(one, style="compact") == "Actions: Left, Down, Right, Up"


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from ragen.models.load import load_model_and_tokenizer

    return load_model_and_tokenizer("tiny", tmp_path_factory.mktemp("m"), ["sokoban"], dtype="float32", device="cpu")[1]


def _demos(tok, style):
    fmt = ChatFormat(tok, enable_think=False)
    groups = EnvGroups([GroupSpec("sokoban", 12, {})], group_size=1, split="val")
    try:
        return run_rollout(ExpertEngine(tok, fmt.eos_id, False), groups, SamplingParams(temperature=0.0),
                           RolloutSettings(chat_format=fmt, prompt=style)).trajectories
    finally:
        groups.close()


def test_compact_changes_the_tokens_not_the_game(tok):
    full, compact = _demos(tok, "full"), _demos(tok, "compact")
    assert [t.seed for t in full] == [t.seed for t in compact]
    assert [[x.executed for x in t.turns] for t in full] == [[x.executed for x in t.turns] for t in compact]
    assert all(t.success for t in compact) and [t.reward for t in full] == [t.reward for t in compact]
    ratio = sum(len(t.input_ids) for t in compact) / sum(len(t.input_ids) for t in full)
    assert ratio < 0.65  # about 0.55 on sokoban with the built-in tokenizer
    text = tok.decode(compact[0].input_ids)
    assert "Strictly follow" not in text and "Player:" in text and "actions left." in text


def test_auto_is_compact_for_small_only_and_config_yaml_holds_the_resolved_style():
    assert RunConfig().rollout.prompt == "compact"  # the default model is `small`
    assert load_config(overrides=["model.name=tiny"]).rollout.prompt == "full"
    assert load_config(overrides=["model.name=/some/real/model"]).rollout.prompt == "full"
    assert load_config(overrides=["rollout.prompt=full"]).rollout.prompt == "full"
    assert to_dict(RunConfig())["rollout"]["prompt"] == "compact"
    with pytest.raises(ragen.ConfigError, match="rollout.prompt"):
        load_config(overrides=["rollout.prompt=short"])


def test_a_model_folder_records_its_style_and_an_older_record_means_full(tmp_path):
    save_parser(tmp_path, "answer", {}, prompt="compact")
    assert trained_prompt(str(tmp_path)) == "compact" and trained_parser(str(tmp_path)) == ("answer", {})
    (tmp_path / "ragen-parser.json").write_text(json.dumps({"parser": "answer", "parser_options": {}}))
    assert trained_prompt(str(tmp_path)) == "full"  # saved before styles existed: trained on the full frame
    (tmp_path / "ragen-parser.json").write_text("not json")
    assert trained_prompt(str(tmp_path)) is None and trained_prompt(str(tmp_path / "missing")) is None


def test_a_run_folder_from_before_prompt_styles_resumes_on_the_full_frame(tmp_path):
    import yaml

    from ragen.runs.loop import _run_folder

    data = to_dict(RunConfig())
    del data["rollout"]["prompt"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    run, run_dir = _run_folder(None, tmp_path)  # the resumed run's config, resolved
    cfg = run.cfg
    assert run_dir == tmp_path and cfg.rollout.prompt == "full" and cfg.model.name == "small"
