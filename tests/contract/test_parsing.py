"""parse_response: linear time on adversarial responses, and the same answers as the regex it replaced."""

import random
import re
import time

import pytest

from ragen.contract.parsing import Parsed, parse_response
from ragen.testing import component_contract_tests

# the previous implementation (quadratic on repeated tags), kept as the oracle of what a response parses to
_THINK_ANSWER = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TAGS = re.compile(r"</?(?:think|answer)>")
_SPECIAL = re.compile(r"<\|[^|<>]{1,40}\|>")


def _oracle(response: str, enable_think: bool) -> Parsed:
    def clean(t):
        return _SPECIAL.sub("", _TAGS.sub("", t)).strip()

    if enable_think:
        text = response if response.lstrip().startswith("<think>") else "<think>" + response
        m = _THINK_ANSWER.search(text)
        return Parsed(False) if m is None else Parsed(True, clean(m.group(1)), clean(m.group(2)))
    m = _ANSWER.search(response)
    return Parsed(False) if m is None else Parsed(True, "", clean(m.group(1)))


PIECES = ["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "Up", "x", "<|im_end|>", "<", ">", "||"]


@pytest.mark.parametrize("enable_think", [True, False])
def test_same_result_as_the_regex_on_random_tag_soup(enable_think):
    rng = random.Random(0)
    for _ in range(20_000):
        response = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 14)))
        assert parse_response(response, enable_think) == _oracle(response, enable_think), response


@pytest.mark.parametrize(
    "response",
    [
        "<think>" * 150_000,  # ~1 MB: each <think> used to start a lazy search to the end
        "</think>" * 130_000,
        "</think><answer>" * 65_000,
        "<answer>" * 130_000,
        "<think>a</think> " * 60_000 + "<answer>" * 1000,
        "</think>" + " " * 1_000_000,
    ],
    ids=["think", "close-think", "close-think-answer", "answer", "mixed", "spaces"],
)
@pytest.mark.parametrize("enable_think", [True, False])
def test_one_megabyte_of_repeated_tags_parses_in_under_50ms(response, enable_think):
    best = min(_timed(response, enable_think) for _ in range(3))  # best of 3: the machine is shared and noisy
    assert best < 0.05, f"{best * 1000:.1f} ms"


def _timed(response, enable_think):
    t = time.perf_counter()
    parse_response(response, enable_think)
    return time.perf_counter() - t


def test_a_lone_answer_matches_only_without_think():
    assert parse_response("<answer>Up</answer>") == Parsed(False)
    assert parse_response("<answer>Up</answer>", enable_think=False) == Parsed(True, "", "Up")


#: the core's parsers keep the parser contract a plugin's parser is checked against (ragen.testing)
test_parser_contract = component_contract_tests(
    "parser", ["think-answer", "answer", ("think-answer", {"enable_think": False})]
)


@pytest.mark.parametrize("name,response", [("answer", "Right || Up</answer>Up \nTurn 3\nReward:\n0 hole 3, 3"),
                                           ("think-answer", "I go up.</think><answer>Up</answer> Then I go left.")])
def test_the_built_in_parsers_reject_text_after_the_answer_unless_allowed(name, response):
    """A policy grew junk tails after </answer> (frozenlake GRPO, 2026-11-27: ~50 tokens a turn after 80 steps, all
    of them valid turns): the prompt says 'with no extra text', so the built-in parsers count such a turn as a format
    failure; whitespace and end-of-turn tokens may follow; RAGEN's first-match behaviour is an option."""
    from ragen.plugins.components import make_component

    prefix = "<answer>" if name == "answer" else ""
    strict = make_component("parser", name)
    assert strict(prefix + response) == Parsed(False)
    clean = response.split("</answer>")[0] + "</answer> \n<|im_end|>"
    assert strict(prefix + clean).matched
    lenient = make_component("parser", name, allow_trailing_text=True)
    assert lenient(prefix + response) == lenient(prefix + clean) == strict(prefix + clean)
