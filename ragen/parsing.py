"""Response parsing (spec 1.4): pick the answer out of a response. Parsing never rewrites training tokens."""

from __future__ import annotations

import re

import attrs

_THINK_ANSWER = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TAGS = re.compile(r"</?(?:think|answer)>")
_SPECIAL = re.compile(r"<\|[^|<>]{1,40}\|>")  # chat special tokens such as <|im_end|>


@attrs.frozen
class Parsed:
    """What a parser found: ``matched`` is False when the response does not follow the format."""

    matched: bool
    think: str = ""
    answer: str = ""


def _clean(text: str) -> str:
    return _SPECIAL.sub("", _TAGS.sub("", text)).strip()


def parse_response(response: str, enable_think: bool = True) -> Parsed:
    """Parse ``"<think>" + response`` (the core prefills ``<think>``) or ``<answer>...</answer>`` alone."""
    if enable_think:
        text = response if response.lstrip().startswith("<think>") else "<think>" + response
        m = _THINK_ANSWER.search(text)
        if m is None:
            return Parsed(False)
        return Parsed(True, _clean(m.group(1)), _clean(m.group(2)))
    m = _ANSWER.search(response)
    if m is None:
        return Parsed(False)
    return Parsed(True, "", _clean(m.group(1)))
