"""Components the core provides itself: the default action parsers."""

from __future__ import annotations

import attrs

from ragen.config.fields import option
from ragen.contract.parsing import parse_response
from ragen.contract.hookspecs import hookimpl


@attrs.frozen(kw_only=True)
class ParserConfig:
    """Options of the built-in parsers."""

    enable_think: bool = option(True, "Expect <think>...</think> before <answer> (the core prefills <think>).")


def make_parser(config: ParserConfig):
    """`<think>...</think><answer>...</answer>` (or `<answer>` alone without think)."""
    return lambda response: parse_response(response, enable_think=config.enable_think)


@hookimpl
def register_action_parsers(register):
    register("think-answer", make_parser, config=ParserConfig, description="<think>…</think><answer>a || b</answer> (RAGEN)")
    register(
        "answer",
        make_parser,
        config=ParserConfig,
        defaults={"enable_think": False},
        description="<answer>a || b</answer> without a think block",
    )
