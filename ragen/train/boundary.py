"""The plugin boundary of the step: the trainer calls its filters, shapers and estimator through these functions, which
build each component's input and check its output where the trainer receives it (shape, count, known group ids,
finite values). A breach is one ``PluginError`` naming the component and its distribution, instead of an IndexError
deep in the update or a silently empty step (``ragen.testing`` ships the same contracts for plugin authors)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from ragen.contract.algorithm import (
    AdvantageInput,
    AdvantageOutput,
    FilterInput,
    FilterResult,
    ShapeInput,
    ShapeOutput,
)
from ragen.errors import PluginError


def call_filter(component: Any, into: dict | None = None, **inputs: Any) -> FilterResult:
    """``component(FilterInput(**inputs))``, checked; the metrics it wrote into its input go to ``into``."""
    inp = FilterInput(**inputs)
    result = filter_result(component, component(inp), inputs["group_ids"])
    own_metrics(component, inp.metrics, into)
    return result


def call_shaper(component: Any, into: dict | None = None, **inputs: Any) -> tuple[list[float], list[list[float]]]:
    """``component(ShapeInput(**inputs))``: one score per trajectory and, from a ``ShapeOutput``, new turn scores (one
    per turn of each trajectory), checked; a plain list of scores leaves ``inputs["turn_scores"]`` as they were."""
    inp = ShapeInput(**inputs)
    out = component(inp)
    n = len(inputs["scores"])
    before = inputs.get("turn_scores")
    if isinstance(out, ShapeOutput):
        if before is None:  # a caller without turn rewards: the trajectories' own turns are the reference
            before = [[t.reward + t.penalty for t in traj.turns] for traj in inputs.get("trajectories", ())]
        scores = shaped_scores(component, out.scores, n)
        turns = shaped_turns(component, out.turn_scores, before)
    else:
        scores, turns = shaped_scores(component, out, n), before
    own_metrics(component, inp.metrics, into)
    return scores, turns


def shaped_turns(component: Any, turns: Any, before: list[list[float]]) -> list[list[float]]:
    """A ``ShapeOutput``'s turn scores: one row per trajectory, one finite number per turn."""
    try:
        rows = [[float(x) for x in row] for row in turns]
    except (TypeError, ValueError):
        raise _breach(component, "turn_scores is not a list of lists of numbers") from None
    if len(rows) != len(before) or any(len(r) != len(b) for r, b in zip(rows, before)):
        raise _breach(component, f"turn_scores has {[len(r) for r in rows][:4]}... turns for trajectories of "
                                 f"{[len(b) for b in before][:4]}... turns")
    if not all(math.isfinite(x) for row in rows for x in row):
        raise _breach(component, "turn_scores holds non-finite values")
    return rows


def call_estimator(component: Any, needs_returns: bool, into: dict | None = None, **inputs: Any) -> AdvantageOutput:
    """``component(AdvantageInput(**inputs))``: ``[N, L]`` advantages (and returns for a critic), checked."""
    inp = AdvantageInput(**inputs)
    out = advantages(component, component(inp), tuple(inputs["mask"].shape), needs_returns)
    own_metrics(component, inp.metrics, into)
    return out


def own_metrics(component: Any, metrics: dict, into: dict | None) -> None:
    """The numbers a component wrote into its input's ``metrics``, checked and logged as ``<kind>/<name>/<key>``."""
    if not metrics:
        return
    _finite_metrics(component, metrics)
    if into is not None:
        key = getattr(component, "component_key", None) or f"component/{who(component)}"
        into.update({f"{key}/{k}": float(v) for k, v in metrics.items()})


def who(component: Any) -> str:
    """``estimator 'grpo' of ragen-algos``: the name ``make_component`` gave the component, else its Python name."""
    return getattr(component, "component_name", None) or getattr(component, "__qualname__", type(component).__name__)


def _breach(component: Any, what: str) -> PluginError:
    return PluginError(f"{who(component)} broke its contract: {what}")


def filter_result(component: Any, result: Any, group_ids: Iterable[int]) -> FilterResult:
    """A filter returns a ``FilterResult`` whose kept groups are among the groups it was shown and whose metrics are
    finite numbers."""
    if not isinstance(result, FilterResult):
        raise _breach(component, f"returned {type(result).__name__}, expected a ragen.FilterResult")
    known = set(group_ids)
    try:
        kept = list(result.kept_groups)
    except TypeError:
        raise _breach(
            component, f"kept_groups is {type(result.kept_groups).__name__}, expected a list of group ids"
        ) from None
    unknown = sorted({g for g in kept if g not in known}, key=repr)
    if unknown:
        raise _breach(component, f"kept unknown group ids {unknown[:5]} (the groups it was shown: "
                                 f"{sorted(known)[:8]}{', ...' if len(known) > 8 else ''})")
    _finite_metrics(component, result.metrics)
    return result


def shaped_scores(component: Any, scores: Any, n: int) -> list[float]:
    """A shaper returns one number per trajectory it was shown (a NaN or inf stays: the trainer neutralises and counts
    it, like an env's non-finite reward)."""
    try:
        out = [float(s) for s in scores]
    except (TypeError, ValueError):
        raise _breach(component, f"returned {type(scores).__name__}, expected a list of {n} scores") from None
    if len(out) != n:
        raise _breach(component, f"returned {len(out)} scores for {n} trajectories")
    return out


def advantages(component: Any, out: Any, shape: tuple[int, int], needs_returns: bool) -> AdvantageOutput:
    """An estimator returns an ``AdvantageOutput`` of finite ``[N, L]`` advantages (and, for a critic, returns)."""
    if not isinstance(out, AdvantageOutput):
        raise _breach(component, f"returned {type(out).__name__}, expected a ragen.AdvantageOutput")
    _tensor(component, "advantages", out.advantages, shape)
    if needs_returns:
        if out.returns is None:
            raise _breach(component, "returned no value targets (returns) though the preset trains a critic")
        _tensor(component, "returns", out.returns, shape)
    return out


def _tensor(component: Any, name: str, value: Any, shape: tuple[int, int]) -> None:
    if not isinstance(value, torch.Tensor):
        raise _breach(component, f"{name} is {type(value).__name__}, expected a tensor of shape {list(shape)}")
    if tuple(value.shape) != tuple(shape):
        raise _breach(
            component, f"{name} has shape {list(value.shape)}, expected {list(shape)} (trajectories x tokens)"
        )
    if not bool(torch.isfinite(value).all()):
        raise _breach(component, f"{name} holds {int((~torch.isfinite(value)).sum())} non-finite values")


def _finite_metrics(component: Any, metrics: Any) -> None:
    if not isinstance(metrics, dict):
        raise _breach(component, f"metrics is {type(metrics).__name__}, expected a dict of numbers")
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise _breach(component, f"metric {key!r} is {value!r}, expected a finite number")
