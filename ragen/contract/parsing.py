"""Response parsing (spec 1.4): pick the answer out of a response. Parsing never rewrites training tokens.

Every scan here is linear in the response length: a policy can emit megabytes of repeated tags, and a lazy regex
search restarted from every ``<think>`` was quadratic (2.3 s for ``'<think>' * 4000``).
"""

from __future__ import annotations

import re

import attrs

from ragen.contract.env import option

# a literal-prefixed pattern: re tries it only at "</think>" and \s* cannot run past the next tag, so search is linear
_CLOSE_THINK_ANSWER = re.compile(r"</think>\s*<answer>")
_TAGS = re.compile(r"</?(?:think|answer)>")
_SPECIAL = re.compile(r"<\|[^|<>]{1,40}\|>")  # chat special tokens such as <|im_end|>


@attrs.frozen
class Parsed:
    """What a parser found: ``matched`` is False when the response does not follow the format."""

    matched: bool = option(doc="bool: the response follows the parser's format; False makes the turn a format failure "
                               "(format penalty, no action executed).")
    think: str = option("", "str: the reasoning found (empty when the format has none).")
    answer: str = option("", "str: the answer text, split into actions by Env.split_actions (e.g. 'Up || Left').")


def _clean(text: str) -> str:
    return _SPECIAL.sub("", _TAGS.sub("", text)).strip()


def _answer_after(text: str, start: int) -> tuple[int, int] | None:
    """Span of the answer of the first ``<answer>`` at or after ``start`` that is closed by a ``</answer>``."""
    open_at = text.find("<answer>", start)
    if open_at < 0:
        return None
    close_at = text.find("</answer>", open_at + len("<answer>"))
    return None if close_at < 0 else (open_at + len("<answer>"), close_at)


def _nothing_after(text: str, close_at: int) -> bool:
    """Whether only whitespace and chat special tokens follow the ``</answer>`` at ``close_at``."""
    return not _SPECIAL.sub("", text[close_at + len("</answer>"):]).strip()


def _think_answer(text: str, allow_trailing: bool = True) -> Parsed:
    """What ``<think>(.*?)</think>\\s*<answer>(.*?)</answer>`` finds with ``re.search``, without its nested lazy
    search: the first ``<think>``, then the first ``</think>`` after it that whitespace and an ``<answer>`` follow,
    provided a ``</answer>`` closes that answer (a later candidate's ``<answer>`` lies further right, so if this one is
    unclosed every later one is too)."""
    start = text.find("<think>")
    if start < 0:
        return Parsed(False)
    m = _CLOSE_THINK_ANSWER.search(text, start + len("<think>"))
    if m is None:
        return Parsed(False)
    close_at = text.find("</answer>", m.end())
    if close_at < 0 or not (allow_trailing or _nothing_after(text, close_at)):
        return Parsed(False)
    return Parsed(True, _clean(text[start + len("<think>"):m.start()]), _clean(text[m.end():close_at]))


def parse_response(response: str, enable_think: bool = True, allow_trailing: bool = True) -> Parsed:
    """Parse a response. With ``enable_think`` (the default) the text is ``"<think>" + response``, or the response as
    it is when it already starts with ``<think>`` (after whitespace; the rollout passes the prefilled ``<think>``), and
    must hold ``...</think>``, optional whitespace, then ``<answer>...</answer>``; a lone ``<answer>...</answer>`` does
    NOT match then (its ``<think>`` is never closed). Only with ``enable_think=False`` is the first closed
    ``<answer>...</answer>`` alone enough. Tags and chat special tokens inside the think and answer are removed.

    ``allow_trailing=False``: the response must end with that ``</answer>`` (whitespace and chat special tokens such
    as ``<|im_end|>`` may follow, nothing else), as the prompt asks ("with no extra text"). RAGEN's regex takes the
    first match and ignores what follows, which is this function's default."""
    if enable_think:
        text = response if response.lstrip().startswith("<think>") else "<think>" + response
        return _think_answer(text, allow_trailing)
    span = _answer_after(response, 0)
    if span is None or not (allow_trailing or _nothing_after(response, span[1])):
        return Parsed(False)
    return Parsed(True, "", _clean(response[span[0]:span[1]]))
