"""The contract checks of parsers, reward shapers, advantage estimators and rollout filters: what the core relies on
when it calls a registered component (docs/plugin-hooks.md, docs/api.md), run on synthetic rollouts
(``ragen.testing.batches``). ``check_component(kind, name, **options)`` returns one ``Check`` per property, like
``check_env`` does for an env; ``assert_checks_pass`` turns failures into one readable assertion.
"""

from __future__ import annotations

import math
import numbers
import random
import string
import time
from collections.abc import Callable
from typing import Any

import attrs

from ragen.contract.algorithm import AdvantageOutput, FilterResult, ShapeOutput
from ragen.contract.parsing import Parsed
from ragen.envs.checker import Check, CheckFailed, run_checks
from ragen.plugins.components import component_config, make_component, parser_thinks
from ragen.plugins.loader import get_registry
from ragen.testing.batches import advantage_input, filter_input, reordered, scenarios, shape_input

#: the component kinds these checks cover (envs: ``check_env``; algorithm presets are plain data)
KINDS = ("parser", "shaper", "estimator", "filter")
#: how long one adversarial response of ~100k characters may take to parse; a quadratic parser takes minutes
PARSE_SECONDS = 10.0


def check_component(kind: str, name: str, **options: Any) -> list[Check]:
    """Run every contract check of the registered ``kind`` component ``name`` (with ``options``); one ``Check`` each.

    Each check builds a fresh component. Bad ``options`` (an unknown key, a value out of range) or an unknown name
    raise before any check runs, as with ``check_env``."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    component_config(get_registry(kind).get(name), options, path=name)

    def new() -> Any:
        return make_component(kind, name, **options)

    return run_checks(_CHECKS[kind], new, name=name, options=options)


def check_parser(name: str, **options: Any) -> list[Check]:
    """``check_component("parser", name, **options)``."""
    return check_component("parser", name, **options)


def check_shaper(name: str, **options: Any) -> list[Check]:
    """``check_component("shaper", name, **options)``."""
    return check_component("shaper", name, **options)


def check_estimator(name: str, **options: Any) -> list[Check]:
    """``check_component("estimator", name, **options)``."""
    return check_component("estimator", name, **options)


def check_filter(name: str, **options: Any) -> list[Check]:
    """``check_component("filter", name, **options)``."""
    return check_component("filter", name, **options)


def assert_checks_pass(checks: list[Check], what: str = "") -> None:
    """Raise one ``AssertionError`` listing every failed check (name and detail), or return."""
    failed = [c for c in checks if not c.ok]
    if failed:
        head = f"{what}: " if what else ""
        raise AssertionError(head + f"{len(failed)} of {len(checks)} checks failed:\n"
                             + "\n".join(f"  {c.name}: {c.detail}" for c in failed))


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


# ---- parsers ---------------------------------------------------------------------------------------------------------
def _responses(prefill: str) -> list[str]:
    """What a policy may write after the prefill: well-formed, half-formed, empty, unicode, special tokens, noise."""
    rng = random.Random(0)
    noise = ["".join(rng.choice(string.printable + "<>/|") for _ in range(rng.randint(1, 80))) for _ in range(8)]
    texts = ["", " ", "Up", "I move up.</think><answer>Up || Left</answer>", "<answer>Up</answer>",
             "<think>x</think><answer>a</answer><answer>b</answer>", "</think>", "<answer>", "</answer><answer>",
             "<think><think></think></think><answer></answer>", "ünïcødé → <answer>✓</answer>", "<|im_end|>",
             "Up</answer><|im_end|>", "\n\n\t", *noise]
    return [prefill + t for t in texts] + texts


def _parser_returns_parsed(new, name, options) -> str:
    parse = new()
    prefill = "<think>" if parser_thinks(name, options) else "<answer>"
    texts = _responses(prefill)
    for text in texts:
        try:
            p = parse(text)
        except Exception as exc:
            raise CheckFailed(f"parse({text[:60]!r}) raised {type(exc).__name__}: {exc} (a rollout would count it as "
                              "a format failure)") from None
        _expect(isinstance(p, Parsed), f"parse({text[:60]!r}) returned {type(p).__name__}, not ragen.Parsed")
        _expect(isinstance(p.matched, bool), f"parse({text[:60]!r}).matched is {type(p.matched).__name__}, not bool")
        _expect(isinstance(p.think, str) and isinstance(p.answer, str),
                f"parse({text[:60]!r}): think and answer must be str, got {type(p.think).__name__}, "
                f"{type(p.answer).__name__}")
    return f"{len(texts)} responses parsed"


def _parser_deterministic(new, name, options) -> str:
    a, b = new(), new()
    for text in _responses("<think>"):
        _expect(a(text) == a(text) == b(text), f"parse({text[:60]!r}) differs between calls")
    return "same result on every call"


def _parser_prompted_format(new, name, options) -> str:
    """The format the prompt asks for, as warm-start demonstrations write it, after the core's prefill."""
    parse = new()
    thinks = parser_thinks(name, options)
    prefill = "<think>" if thinks else "<answer>"
    body = "I should move up, then left.</think><answer>Up || Left</answer>" if thinks else "Up || Left</answer>"
    for text in (prefill + body, prefill + body + "<|im_end|>", prefill + " " + body.replace("<answer>", "\n<answer>")):
        p = parse(text)
        _expect(p.matched and p.answer.strip() == "Up || Left",
                f"parse({text!r}) = {p!r}: the format the prompt asks for (enable_think={thinks}) does not give the "
                "answer 'Up || Left'")
    return f"enable_think={thinks}: prefill {prefill!r} + the prompted format gives the answer"


def _parser_linear_time(new, name, options) -> str:
    parse = new()
    n = 12_000
    worst = 0.0
    for text in ("<think>" * n, "<answer>" * n, "</think><answer>" * n, "<think>a</think>" * n + "<answer>",
                 "<|im_end|>" * n, "x" * (8 * n)):
        t0 = time.perf_counter()
        parse(text)
        worst = max(worst, time.perf_counter() - t0)
        _expect(worst < PARSE_SECONDS, f"parse of {len(text):,} characters ({text[:20]!r}...) took {worst:.1f} s "
                f"(limit {PARSE_SECONDS:g} s): parsing must be linear in the response length")
    return f"~100k-character responses of repeated tags parse in {worst * 1000:.0f} ms at most"


# ---- shapers ---------------------------------------------------------------------------------------------------------
def _scores(out: Any, n: int, where: str) -> list[float]:
    if isinstance(out, ShapeOutput):  # a shaper that credits turns: its scores are checked like a plain shaper's
        out = out.scores
    try:
        scores = list(out)
    except TypeError:
        raise CheckFailed(f"{where}: returned {type(out).__name__}, not a list of floats") from None
    _expect(len(scores) == n, f"{where}: {len(scores)} scores for {n} trajectories")
    for s in scores:
        _expect(isinstance(s, numbers.Real) and not isinstance(s, bool), f"{where}: score {s!r} is not a number")
        _expect(math.isfinite(float(s)), f"{where}: non-finite score {s!r}")
    return [float(s) for s in scores]


def _shaper_scores(new, **_) -> str:
    shape = new()
    for label, trajs in scenarios().items():
        out = shape(shape_input(trajs))
        _scores(out, len(trajs), label)
        if isinstance(out, ShapeOutput):
            _turn_scores(out.turn_scores, trajs, label)
    return f"one finite score per trajectory (and per turn, for a ShapeOutput) on {len(scenarios())} batches"


def _turn_scores(rows: Any, trajs: list, where: str) -> None:
    """A ShapeOutput's turn scores: one row per trajectory, one finite number per turn record."""
    rows = list(rows)
    _expect(len(rows) == len(trajs), f"{where}: {len(rows)} turn-score rows for {len(trajs)} trajectories")
    for row, t in zip(rows, trajs):
        _expect(len(row) == len(t.turns), f"{where}: {len(row)} turn scores for {len(t.turns)} turns")
        _expect(all(isinstance(x, numbers.Real) and math.isfinite(float(x)) for x in row),
                f"{where}: a turn score is not a finite number")


def _snapshot(inp: Any) -> Any:
    """A deep, comparable copy of a component input (tensors cloned, trajectories as dicts)."""
    out = {}
    for field in attrs.fields(type(inp)):
        if field.name == "metrics":  # the one field a component may write: its own numbers
            continue
        value = getattr(inp, field.name)
        if hasattr(value, "clone"):
            out[field.name] = value.clone()
        elif isinstance(value, list | tuple):
            out[field.name] = [v.to_dict() if hasattr(v, "to_dict") else v for v in value]
        else:
            out[field.name] = value
    return out


def _same(a: dict, b: dict) -> bool:
    for key in a:
        x, y = a[key], b[key]
        if hasattr(x, "clone"):
            import torch

            if not (x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def _shaper_input_unchanged(new, **_) -> str:
    shape = new()
    for label, trajs in scenarios().items():
        inp = shape_input(trajs)
        before = _snapshot(inp)
        shape(inp)
        _expect(_same(before, _snapshot(inp)), f"{label}: the shaper changed its ShapeInput (scores or trajectories)")
    return "ShapeInput left as it was"


def _shaper_deterministic(new, **_) -> str:
    a, b = new(), new()
    for label, trajs in scenarios().items():
        first = _scores(a(shape_input(trajs)), len(trajs), label)
        _expect(
            first
            == _scores(a(shape_input(trajs)), len(trajs), label)
            == _scores(b(shape_input(trajs)), len(trajs), label),
            f"{label}: different scores for the same input",
        )
    return "same scores on every call"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _shaper_order(new, **_) -> str:
    shape = new()
    for label, trajs in scenarios().items():
        order = random.Random(1).sample(range(len(trajs)), len(trajs))
        base = _scores(shape(shape_input(trajs)), len(trajs), label)
        moved = _scores(shape(reordered(shape_input(trajs), order)), len(trajs), label)
        _expect(all(_close(moved[k], base[i]) for k, i in enumerate(order)),
                f"{label}: reordering the trajectories changed their scores (a score must follow its trajectory; "
                "group by group_ids, not by position)")
    return "scores follow their trajectories when reordered"


# ---- estimators ------------------------------------------------------------------------------------------------------
def _advantages(out: Any, inp: Any, where: str) -> None:
    import torch

    _expect(isinstance(out, AdvantageOutput), f"{where}: returned {type(out).__name__}, not ragen.AdvantageOutput")
    adv = out.advantages
    _expect(isinstance(adv, torch.Tensor) and adv.is_floating_point(),
            f"{where}: advantages is {type(adv).__name__}{'' if not hasattr(adv, 'dtype') else ' ' + str(adv.dtype)}, "
            "not a float tensor")
    _expect(
        tuple(adv.shape) == tuple(inp.mask.shape),
        f"{where}: advantages {tuple(adv.shape)}, mask {tuple(inp.mask.shape)}",
    )
    _expect(bool(torch.isfinite(adv).all()), f"{where}: non-finite advantages")
    off = adv.detach().cpu()[inp.mask.cpu() == 0]
    _expect(
        bool((off == 0).all()), f"{where}: advantages off the mask are not 0 (largest {off.abs().max().item():.3g})"
    )
    if out.returns is not None:
        ret = out.returns
        _expect(isinstance(ret, torch.Tensor) and tuple(ret.shape) == tuple(inp.mask.shape),
                f"{where}: returns must be None or a tensor shaped like the mask")
        _expect(bool(torch.isfinite(ret).all()), f"{where}: non-finite returns")


def _estimator_inputs() -> dict[str, Any]:
    """Every scenario under both placements, with a critic; and one with a KL-in-reward part."""
    out = {}
    for label, trajs in scenarios().items():
        for placement in ("trajectory", "turn"):
            out[f"{label}, {placement} placement"] = advantage_input(trajs, placement=placement)
    out["4 groups of 4, KL in the reward"] = advantage_input(scenarios()["4 groups of 4"], kl=True)
    return out


def _estimator_advantages(new, **_) -> str:
    estimate = new()
    inputs = _estimator_inputs()
    for label, inp in inputs.items():
        _advantages(estimate(inp), inp, label)
    return f"float [N, L] advantages, finite, 0 off the mask, on {len(inputs)} batches"


def _estimator_critic(new, **_) -> str:
    """Without critic values (use_critic=false) an estimator works or refuses; a refusing one needs values, so with
    them it must return the critic's value targets."""
    estimate = new()
    trajs = scenarios()["4 groups of 4"]
    bare = advantage_input(trajs, critic=False)
    try:
        out = estimate(bare)
    except Exception as exc:
        with_values = advantage_input(trajs)
        out = estimate(with_values)
        _advantages(out, with_values, "with critic values")
        _expect(out.returns is not None, "it refuses to run without critic values, but with them it returns no "
                "`returns` (the critic's value targets)")
        return f"a critic estimator: needs values ({type(exc).__name__}: {str(exc)[:80]}), returns value targets"
    _advantages(out, bare, "without critic values")
    return "runs without critic values"


def _estimator_input_unchanged(new, **_) -> str:
    estimate = new()
    for label, inp in _estimator_inputs().items():
        before = _snapshot(inp)
        estimate(inp)
        _expect(
            _same(before, _snapshot(inp)), f"{label}: the estimator changed a tensor of its AdvantageInput in place"
        )
    return "AdvantageInput tensors left as they were"


def _estimator_deterministic(new, **_) -> str:
    import torch

    a, b = new(), new()
    for label, inp in _estimator_inputs().items():
        first = a(inp).advantages
        _expect(torch.equal(first, a(inp).advantages) and torch.equal(first, b(inp).advantages),
                f"{label}: different advantages for the same input")
    return "same advantages on every call"


def _estimator_order(new, **_) -> str:
    import torch

    estimate = new()
    for label, inp in _estimator_inputs().items():
        n = inp.mask.shape[0]
        order = random.Random(2).sample(range(n), n)
        base = estimate(inp).advantages.detach().cpu()
        moved = estimate(reordered(inp, order)).advantages.detach().cpu()
        _expect(torch.allclose(moved, base[torch.as_tensor(order)], rtol=1e-4, atol=1e-5),
                f"{label}: reordering the rows changed their advantages (group by group_ids, never by row order)")
    return "advantages follow their rows when reordered"


def _estimator_all_masked(new, **_) -> str:

    estimate = new()
    trajs = scenarios()["one group of 5"][:1]
    for placement in ("trajectory", "turn"):
        inp = advantage_input(trajs, placement=placement, dummy=True)
        out = estimate(inp)
        _advantages(out, inp, f"one masked-out row, {placement} placement")
        _expect(bool((out.advantages == 0).all()), "a masked-out row got advantages")
    return "a masked-out row (a data-parallel rank with no kept group) gets advantage 0"


# ---- filters ---------------------------------------------------------------------------------------------------------
def _filter_inputs(apply: Callable) -> dict[str, Any]:
    entropies = bool(getattr(apply, "needs_entropy", False))
    return {label: filter_input(trajs, entropies=entropies) for label, trajs in scenarios().items()}


def _kept(res: Any, inp: Any, where: str) -> tuple[set, dict]:
    _expect(isinstance(res, FilterResult), f"{where}: returned {type(res).__name__}, not ragen.FilterResult")
    kept = list(res.kept_groups)
    groups = set(inp.group_ids)
    _expect(all(isinstance(g, numbers.Integral) and not isinstance(g, bool) for g in kept),
            f"{where}: kept_groups {kept!r} are not all int group ids")
    _expect(set(kept) <= groups, f"{where}: kept_groups {sorted(set(kept) - groups)} are not group ids of the input")
    _expect(isinstance(res.metrics, dict), f"{where}: metrics is {type(res.metrics).__name__}, not a dict")
    for key, value in res.metrics.items():
        _expect(isinstance(key, str), f"{where}: metric name {key!r} is not a str")
        _expect(isinstance(value, numbers.Real) and math.isfinite(float(value)),
                f"{where}: metric {key!r} = {value!r} is not a finite number")
    return set(kept), {k: float(v) for k, v in res.metrics.items()}


def _filter_result(new, **_) -> str:
    apply = new()
    inputs = _filter_inputs(apply)
    sizes = []
    for label, inp in inputs.items():
        kept, _ = _kept(apply(inp), inp, label)
        sizes.append(f"{len(kept)}/{len(set(inp.group_ids))}")
    return f"kept groups of the input, finite metrics; kept {', '.join(sizes)} groups"


def _filter_input_unchanged(new, **_) -> str:
    apply = new()
    for label, inp in _filter_inputs(apply).items():
        before = _snapshot(inp)
        apply(inp)
        _expect(_same(before, _snapshot(inp)), f"{label}: the filter changed its FilterInput")
    return "FilterInput left as it was"


def _filter_deterministic(new, **_) -> str:
    a, b = new(), new()
    for label, inp in _filter_inputs(a).items():
        first = _kept(a(inp), inp, label)
        _expect(first == _kept(a(inp), inp, label) == _kept(b(inp), inp, label), f"{label}: different results for the "
                "same input")
    return "same kept groups and metrics on every call"


def _filter_order(new, **_) -> str:
    apply = new()
    for label, inp in _filter_inputs(apply).items():
        n = len(inp.group_ids)
        order = random.Random(3).sample(range(n), n)
        kept, metrics = _kept(apply(inp), inp, label)
        kept2, metrics2 = _kept(apply(reordered(inp, order)), inp, label)
        _expect(kept == kept2, f"{label}: reordering the trajectories changed the kept groups ({sorted(kept)} -> "
                f"{sorted(kept2)}); group by group_ids, not by position")
        _expect(metrics.keys() == metrics2.keys() and all(_close(metrics[k], metrics2[k]) for k in metrics),
                f"{label}: reordering the trajectories changed the metrics")
    return "kept groups and metrics do not depend on the trajectories' order"


_CHECKS: dict[str, list[tuple[str, Callable[..., str]]]] = {
    "parser": [("returns Parsed", _parser_returns_parsed), ("deterministic", _parser_deterministic),
               ("prompted format", _parser_prompted_format), ("linear time", _parser_linear_time)],
    "shaper": [("scores", _shaper_scores), ("input unchanged", _shaper_input_unchanged),
               ("deterministic", _shaper_deterministic), ("order", _shaper_order)],
    "estimator": [("advantages", _estimator_advantages), ("critic values", _estimator_critic),
                  ("input unchanged", _estimator_input_unchanged), ("deterministic", _estimator_deterministic),
                  ("order", _estimator_order), ("masked-out row", _estimator_all_masked)],
    "filter": [("result", _filter_result), ("input unchanged", _filter_input_unchanged),
               ("deterministic", _filter_deterministic), ("order", _filter_order)],
}
