"""Components the core provides itself: the default action parsers."""

from __future__ import annotations

import attrs

from ragen.config.fields import option
from ragen.contract.hookspecs import hookimpl
from ragen.contract.parsing import parse_response


@attrs.frozen(kw_only=True)
class ParserConfig:
    """Options of the built-in parsers."""

    enable_think: bool = option(True, "Expect <think>...</think> before <answer> (the core prefills <think>).")
    allow_trailing_text: bool = option(
        False, "Accept text after the closing </answer> (RAGEN's first-match parse does; configs/ragen.yaml sets it). "
        "False (ragen): a turn that writes more than whitespace and end-of-turn tokens after </answer> is a format "
        "failure, as the prompt says 'with no extra text'. Unpenalised, such tails grew from 0 to ~50 tokens a turn in "
        "80 GRPO steps on frozenlake (the group-mean loss dilutes a long failed response's per-token push) and tripled "
        "the step time (docs/algorithms.md, 'Text after the answer').")


def make_parser(config: ParserConfig):
    """`<think>...</think><answer>...</answer>` (or `<answer>` alone without think)."""
    return lambda response: parse_response(response, enable_think=config.enable_think,
                                           allow_trailing=config.allow_trailing_text)


@hookimpl
def register_action_parsers(register):
    register(
        "think-answer", make_parser, config=ParserConfig, description="<think>…</think><answer>a || b</answer> (RAGEN)"
    )
    register(
        "answer",
        make_parser,
        config=ParserConfig,
        defaults={"enable_think": False},
        description="<answer>a || b</answer> without a think block",
    )
