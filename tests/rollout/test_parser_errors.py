"""A parser that raises: the response counts as malformed, every such turn is counted in the rollout's
``parser_errors`` metric, the first error of each parser is logged once naming the component and its distribution,
and ``ragen play`` treats it the same way instead of printing a traceback."""

import structlog.testing
from click.testing import CliRunner

from ragen import hookimpl
from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.plugins.components import make_component
from ragen.plugins.loader import register_plugin, unregister_plugin
from ragen.rollout import ChatFormat, EnvGroups, GroupSpec, RolloutSettings, SamplingParams, run_rollout, runner
from ragen.rollout.expert import ExpertEngine


class _Raising:
    @hookimpl
    def register_action_parsers(self, register):
        def make(config):
            def parse(response):
                raise ZeroDivisionError("this parser always fails")
            return parse

        register("always-raises", make, description="raises on every response")


def test_a_raising_parser_is_counted_and_warned_once(fresh_plugins, tmp_path):
    register_plugin(_Raising(), "raising", dist="ragen-raising")
    try:
        tok = load_model_and_tokenizer(build_tiny_model(tmp_path / "tiny", ["bandit"], corpus_seeds=2), "unused")[1]
        fmt = ChatFormat(tok)
        engine = ExpertEngine(tok, fmt.eos_id, fmt.enable_think)
        parser = make_component("parser", "always-raises")
        runner._parsers_warned.clear()
        groups = EnvGroups([GroupSpec("bandit", 2)], group_size=2)
        with structlog.testing.capture_logs() as events:
            res = run_rollout(engine, groups, SamplingParams(temperature=0.0, seed=0),
                              RolloutSettings(chat_format=fmt, parser=parser))
        groups.close()
        turns = sum(t.num_turns for t in res.trajectories)
        assert res.failed_envs == 0 and turns >= 4
        assert res.metrics["parser_errors"] == turns and res.metrics["valid_format_rate"] == 0.0
        warned = [e for e in events if e["event"] == "parser_raised"]
        assert len(warned) == 1  # once per parser, not once per turn
        assert warned[0]["parser"] == "parser 'always-raises' of ragen-raising"
        assert warned[0]["error"] == "ZeroDivisionError: this parser always fails"
    finally:
        unregister_plugin("raising")


def test_play_reads_a_raising_parser_as_malformed(fresh_plugins):
    from ragen.cli import cli

    register_plugin(_Raising(), "raising", dist="ragen-raising")
    try:
        res = CliRunner().invoke(
            cli, ["play", "frozenlake", "--seed", "3", "--parser", "always-raises"], input="Up\nq\n"
        )
        assert res.exit_code == 0 and res.exception is None, res.output
        assert "always-raises: parser raised ZeroDivisionError: this parser always fails" in res.output
        assert "format penalty: -1.0" in res.output  # the run's penalty (trainer.format_penalty), as in training
    finally:
        unregister_plugin("raising")


def test_play_takes_the_format_penalty_it_is_given():
    from ragen.cli import cli

    res = CliRunner().invoke(
        cli, ["play", "frozenlake", "--seed", "3", "--format-penalty", "-0.1"], input="<answer>\nq\n"
    )
    assert res.exit_code == 0, res.output
    assert "format penalty: -0.1" in res.output
