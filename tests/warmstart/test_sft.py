"""Expert warm start as a user runs it: `ragen sft` then `ragen eval` on the same fixed seeds, against the very
weights the fine-tune started from (a reduced demo budget keeps this to a few minutes on CPU)."""

import json
import subprocess

import pytest
from conftest import ragen_cmd


def ragen(*args, cwd):
    res = subprocess.run(ragen_cmd(*args), capture_output=True, text=True, timeout=900, cwd=cwd)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def evaluate(model, tmp_path, name):
    ragen(
        "eval",
        "--env",
        "frozenlake",
        "--model",
        str(model),
        "--seeds",
        "32",
        "--out",
        str(tmp_path / name),
        # both passes at 160 tokens a turn, not frozenlake's 400: the fine-tuned model's turns are 55 tokens on
        # average (99 the longest measured), and the untrained one writes the whole cap every turn
        "-o",
        "response_length=160",
        cwd=tmp_path,
    )
    return json.loads((tmp_path / name / "metrics.json").read_text())


@pytest.mark.slow
def test_sft_then_eval_beats_the_untrained_model(tmp_path):
    out = tmp_path / "sft"
    stdout = ragen("sft", "--env", "frozenlake", "--model", "tiny", "--out", str(out), "warmstart.episodes=192",
                   "warmstart.epochs=4", cwd=tmp_path)
    assert f"model: {out / 'final'}" in stdout
    sft_metrics = json.loads(stdout[stdout.index("{\n") : stdout.rindex("}") + 1])  # after the log lines
    assert sft_metrics["sft/demos"] == 192 and sft_metrics["sft/demo_success"] == 1.0
    # the folder records its parser, so `ragen eval --parser auto` (the default) reads it the way it was trained
    assert json.loads((out / "final" / "ragen-parser.json").read_text()) == {
        "parser": "think-answer",
        "parser_options": {},
        "prompt": "full",
        "window": 0,
    }

    before = evaluate(out / "model-source" / "tiny-model", tmp_path, "before")
    after = evaluate(out / "final", tmp_path, "after")
    assert before["failed_envs"] == after["failed_envs"] == 0
    # the untrained model almost never writes a well-formed <think>..</think><answer>..</answer> turn
    assert before["valid_format_rate"] < 0.2 and after["valid_format_rate"] > 0.8, (before, after)
    assert after["success_rate"] > before["success_rate"], (before, after)
    assert after["reward_mean"] > before["reward_mean"], (before, after)


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_noisy_demos_never_contradict_their_reasoning(noise):
    import ragen
    from ragen.rollout.expert import ExpertEngine

    engine = ExpertEngine(tokenizer=None, eos_id=0, noise=noise, seed=1)
    kinds = set()
    for seed in range(40):
        env = ragen.make_env("frozenlake-slippery")
        env.reset(seed=seed)
        expert = env.expert.next_actions(env, env.config.max_actions_per_turn)
        think, answer = engine.response_text(env).removesuffix("</answer>").split("</think><answer>")
        if answer.split(" || ") == expert:
            assert think == env.expert.rationale(env)
            kinds.add("expert")
        else:
            assert noise > 0 and think == f"Exploring: trying {answer}."
            kinds.add("explore")
    assert kinds == ({"expert"} if noise == 0 else {"expert", "explore"})


def test_the_demos_play_with_the_runs_history_window(tmp_path):
    """A run with ``rollout.max_context_window`` plays every turn from a windowed prompt; its warm start's demos must
    show the model those prompts, not the whole history (a window-1 recipe measured on windowed demos trained on
    full-history ones through `ragen run --warmstart`)."""
    from ragen.config import load_config
    from ragen.envs.resolved import as_resolved
    from ragen.models.load import load_model_and_tokenizer
    from ragen.rollout import ChatFormat
    from ragen.warmstart.sft import _run_demos

    _, tok = load_model_and_tokenizer("tiny", tmp_path / "model", ["frozenlake"], dtype="float32", device="cpu")
    fmt = ChatFormat(tok, enable_think=False)
    blocks = {}
    for window in (0, 1):
        cfg = load_config(overrides=["env.name=frozenlake", "model.name=tiny", "warmstart.episodes=16",
                                     "env.options.max_actions_per_turn=1", "env.options.max_turns=10",  # long ones
                                     f"rollout.max_context_window={window}"])
        trajs = _run_demos(as_resolved(cfg), tok, fmt).trajectories
        long = [t for t in trajs if t.num_turns >= 3]  # window 1: from turn 3 on a prompt drops the oldest turn
        assert long, [t.num_turns for t in trajs]
        blocks[window] = [len(t.blocks) for t in long]
    assert blocks[0] == [0] * len(blocks[0])
    assert all(n >= 1 for n in blocks[1]), blocks[1]
