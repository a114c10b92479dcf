"""The multi-turn rollout loop (algorithms.md §1, §6.1 step 1; environments.md §1.2–1.4).

Per round, every active episode's ids go to the engine in one batch (bucketed by ``response_length``); each
response is parsed (``prefill + decoded ids``), applied through ``Episode.step_turn`` and recorded; unfinished episodes
get ``[EOS fill] + D_{t+1}`` appended (reward text + next turn text) and stay in the next round. Malformed responses
only earn the format penalty. An env raising in reset/step drops that one trajectory (counted in ``failed_envs``).
An episode whose next turn would not fit ``max_model_len`` ends truncated with reason ``context_overflow``.

However an episode ends (the env's end, the budget, the context cap, a failure), the rollout calls the env's
``end_episode()`` at once, so an env holding a server session frees it while the other episodes play on. An env whose
server is full while this rollout holds sessions on it raises ``EnvBusy`` at reset: that episode starts when one of
the rollout's own episodes ends (later rounds), instead of being dropped.
"""

from __future__ import annotations

import functools
import math
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import attrs

from ragen.config.fields import option
from ragen.config.schema import PROMPTS
from ragen.contract.parsing import Parsed
from ragen.contract.trajectory import (
    ACTIONS_CHANCE,
    ACTIONS_JUDGED,
    ACTIONS_OPTIMAL,
    DIAGNOSTIC_KEYS,
    Trajectory,
    TurnRecord,
)
from ragen.envs.episode import FORMAT_PENALTY, Episode
from ragen.envs.prompt import reward_text, system_prompt, turn_text
from ragen.envs.resolved import ResolvedRun, env_parsers
from ragen.errors import ConfigError, EnvBusy
from ragen.log import log
from ragen.plugins.components import make_component, parser_thinks
from ragen.rollout.context import ChatContext, ChatFormat
from ragen.rollout.engine import Generation, RolloutEngine, SamplingParams
from ragen.rollout.groups import EnvGroups, EnvSlot, GroupSpec, default_factory
from ragen.rollout.stepping import EnvStepper, PooledFactory, group_chunks, run_job

TRUNCATION_KEYS = ("max_turns", "budget", "context_overflow", "env")


@attrs.define
class RolloutResult:
    """The trajectories of one rollout (slot order, failed ones left out), the failure count and metrics."""

    trajectories: list[Trajectory]
    failed_envs: int = 0
    errors: list[str] = attrs.Factory(list)  #: one line per failed env
    metrics: dict[str, float] = attrs.Factory(dict)
    #: failed episodes by reason (``failure_reason``): the ``failed/<reason>`` counts of the metrics
    failure_reasons: dict[str, int] = attrs.Factory(dict)


@attrs.define
class _Running:
    slot: EnvSlot
    episode: Episode
    ctx: ChatContext
    traj: Trajectory
    parser: Callable[[str], Parsed]
    fmt: ChatFormat
    done: bool = False


def _numeric_info(info: dict) -> dict[str, float]:
    out = {}
    for key, value in info.items():
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, (int, float)) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


#: the turn-info flag of a reward that was NaN or infinite (counted as rollout/nonfinite_rewards)
NONFINITE_FLAG = "nonfinite_reward"
#: turn info flag: the action parser raised on this response (counted in ``rollout/parser_errors``)
PARSER_ERROR_FLAG = "parser_error"
_parsers_warned: set[str] = set()


def parse_safely(parser: Callable[[str], Parsed], text: str) -> tuple[Parsed, str | None]:
    """``parser(text)``; a parser that raises reads as no match, with its error returned (the turn is penalised like
    any malformed response, never a crash). The first error of each parser is logged once per process, naming the
    parser, so a broken parser is not a silent 0% valid format."""
    try:
        return parser(text), None
    except Exception as exc:  # noqa: BLE001 - any parser failure: the response does not parse
        error = f"{type(exc).__name__}: {exc}"
        name = getattr(parser, "component_name", None) or getattr(parser, "__qualname__", repr(parser))
        if name not in _parsers_warned:
            _parsers_warned.add(name)
            log.warning("parser_raised", parser=name, error=error,
                        note="the response counts as malformed; every such turn is counted in parser_errors")
        return Parsed(False), error


def _finite_reward(env: Any, reward: Any, info: dict[str, float]) -> tuple[float, dict[str, float]]:
    """The turn's reward, or the env's failure score when the env returned NaN/inf: one bad reward must not poison
    the advantages of its whole group and end the run. An env may set ``failure_reward`` (default 0.0, what a turn
    that achieves nothing earns); the replacement is flagged in the turn's info."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        value = math.nan
    if math.isfinite(value):
        return value, info
    log.warning("nonfinite_reward_replaced", reward=repr(reward), env=getattr(env, "name", str(env)),
                note="replaced by the env's failure score")
    return float(getattr(env, "failure_reward", 0.0)), {**info, NONFINITE_FLAG: 1.0}


def _cap(env: Any, override: int) -> int:
    """Generation cap of one turn: the override when > 0, else the env's ``response_length``."""
    return int(override) if override and override > 0 else int(env.config.response_length)


def _truncation_reason(ep: Episode) -> str | None:
    if not ep.truncated:
        return None
    if getattr(ep.env, "_done", False):  # the env ended the episode itself (its own max_steps)
        return "env"
    if ep.actions_used >= ep.env.config.max_actions_per_episode:
        return "budget"
    return "max_turns"


def _decode(tokenizer: Any, ids: list[int]) -> str:
    try:
        return tokenizer.decode(ids, skip_special_tokens=False)
    except Exception:  # ids the tokenizer cannot decode: an unparseable response
        return ""


@attrs.frozen(kw_only=True)
class RolloutSettings:
    """How a run plays its episodes: fixed for the run, built once (``Rollout`` builds it from the config) and handed
    to every ``run_rollout`` call."""

    chat_format: ChatFormat = option(doc="The chat template study (``ChatFormat``): the tokenizer, the prefill "
                                         "(``<think>`` or ``<answer>``) and the end-of-turn token.")
    parser: Callable[[str], Parsed] | None = option(None, "A registered action parser (``make_component('parser', "
                                                          "name)``), called on prefill + decoded ids (the closing "
                                                          "end-of-turn id left out); None = the built-in "
                                                          "``think-answer`` parser with the chat format's think "
                                                          "setting.")
    parsers: dict[str, tuple[Callable[[str], Parsed], ChatFormat]] = option(
        factory=dict, doc="Env name -> (parser, chat format) for envs whose parser differs from ``parser`` (several "
                          "envs in one run).")
    max_model_len: int = option(3600, "Context cap in tokens; an episode that would exceed it ends truncated.")
    compat: str | None = option(None, "'ragen' prints RAGEN's system-prompt action count and raw reward sums.")
    prompt: str = option("full", "The prompt frame's style (ragen/envs/prompt.py): 'full' (RAGEN's) or 'compact'.",
                         validator=attrs.validators.in_(PROMPTS))
    format_penalty: float = option(FORMAT_PENALTY, "Added to the score once per turn with a format violation.")
    response_length: int = option(0, "Generation cap per turn in tokens; 0 = each env's own response_length.")
    max_context_window: int = option(0, "Past turns each prompt holds (0 = all; ``ChatContext``).")
    env_workers: int = option(1, "The env stepping pool (``stepping.EnvStepper``); trajectories do not depend on it.")
    overlap_chunks: int = option(1, "Generate a round in this many chunks of whole groups, stepping each chunk's envs "
                                    "while the next one generates (docs/async-rollout.md).")


def run_rollout(engine: RolloutEngine, envs: EnvGroups | Sequence[EnvSlot], sampling: SamplingParams,
                settings: RolloutSettings, *, step: int = 0, policy_version: int = 0,
                progress: Any = None) -> RolloutResult:
    """Play one episode per slot to the end; returns ``RolloutResult(trajectories, failed_envs, errors, metrics)``.

    ``envs``: an ``EnvGroups`` (its ``slots(step)`` are played) or explicit slots. ``sampling``: temperature/top_p and
    the base seed (each round derives its own); ``max_new_tokens`` per turn is each env's ``response_length``.
    ``settings``: how episodes are played (``RolloutSettings``). ``policy_version`` is recorded on each trajectory.
    ``progress``: a tqdm bar, set to the episodes' turn budget and advanced as turns are played (an ended episode
    counts its unused turns as done).
    """
    fmt, tokenizer = settings.chat_format, settings.chat_format.tokenizer
    parsers, compat, format_penalty, style = settings.parsers, settings.compat, settings.format_penalty, settings.prompt
    max_model_len, response_length = settings.max_model_len, settings.response_length
    overlap_chunks = settings.overlap_chunks
    max_context_window, env_workers = settings.max_context_window, settings.env_workers
    stepper = EnvStepper(env_workers)
    parser = settings.parser
    if parser is None:
        parser = make_component("parser", "think-answer", enable_think=fmt.enable_think)  # the built-in parser
    eos_ids = set(int(i) for i in engine.eos_token_ids)
    if fmt.eos_id not in eos_ids:
        raise ConfigError(
            f"the engine does not stop on the chat template's end-of-turn token {fmt.eos_text!r} (id {fmt.eos_id}); "
            f"its EOS ids are {sorted(eos_ids)}"
        )
    slots = envs.slots(step) if isinstance(envs, EnvGroups) else list(envs)
    errors: list[str] = []
    running: list[_Running] = []
    timing = defaultdict(float)

    reasons: Counter = Counter()

    def fail(slot: EnvSlot, where: str, exc: BaseException) -> None:
        msg = (f"{slot.env_name} seed {slot.seed} member {slot.rollout_index}: {where} raised "
               f"{type(exc).__name__}: {exc}")
        log.warning("env_failed_trajectory_dropped", error=msg, traceback="".join(traceback.format_exception(exc)))
        errors.append(msg)
        reasons[failure_reason(exc)] += 1
        end_episode(slot.env)  # whatever the episode held (a server session) is freed for the others

    def start(slot: EnvSlot) -> bool:
        """Reset ``slot``'s env and add its episode to ``running`` (or drop it, counted); False: the env's server
        is full while episodes of this rollout are open, so the slot waits for one of them to end."""
        the_split = slot.split
        try:
            ep = Episode(slot.env, format_penalty=format_penalty)
            ep.reset(slot.seed, {"split": the_split, "rollout_index": slot.rollout_index})
            cfg = slot.env.config
            user = turn_text(1, ep.obs, ep.actions_left, cfg.max_tokens, warning=False, enable_think=fmt.enable_think,
                             style=style)
            system = system_prompt(slot.env, compat, style)
        except EnvBusy as exc:
            if any(not r.done for r in running):
                return False
            fail(slot, "reset", exc)  # nothing of this rollout will free a session: the server is someone else's
            return True
        except Exception as exc:
            fail(slot, "reset", exc)
            return True
        the_parser, the_fmt = (parsers or {}).get(slot.env_name, (parser, fmt))
        if the_fmt is not fmt:  # this env's parser has its own prefill: its prompt is rendered with it
            user = turn_text(1, ep.obs, ep.actions_left, cfg.max_tokens, warning=False,
                             enable_think=the_fmt.enable_think, style=style)
        ctx = ChatContext(the_fmt, system, user, window=max_context_window)
        traj = Trajectory(
            env_name=slot.env_name,
            seed=slot.seed,
            group_id=slot.group_id,
            rollout_index=slot.rollout_index,
            split=the_split,
            policy_version=policy_version,
            input_ids=ctx.input_ids,
            loss_mask=ctx.loss_mask,
            rollout_logprobs=ctx.logprobs,
            segments=ctx.segments,
            task_id=slot.env.task_id,
        )
        run = _Running(slot, ep, ctx, traj, the_parser, the_fmt)
        if len(ctx) + _cap(slot.env, response_length) > max_model_len:
            _finish(run, overflow=True)
        running.append(run)
        return True

    waiting: list[EnvSlot] = list(slots)

    def admit() -> None:
        """Start the waiting slots in order; behind a slot whose server is full, the later slots of its env wait
        too (they would only be refused)."""
        nonlocal waiting
        still: list[EnvSlot] = []
        for slot in waiting:
            if any(w.env_name == slot.env_name for w in still) or not start(slot):
                still.append(slot)
        waiting = still

    t0 = time.perf_counter()
    admit()
    timing["env_s"] += time.perf_counter() - t0

    failed: set[int] = set()
    rnd = 0
    active = [r for r in running if not r.done]
    if progress is not None:  # counted in turns: most episodes end in the last rounds, a bar of episodes would sit at 0
        progress.reset(total=sum(_turn_budget(r) for r in running)
                       + sum(int(getattr(w.env.config, "max_turns", 1) or 1) for w in waiting))
    while active:
        rnd += 1
        buckets: dict[int, list[_Running]] = defaultdict(list)
        for r in active:
            buckets[_cap(r.slot.env, response_length)].append(r)
        results: list[tuple[_Running, Any]] = []  # (run, its turn: a job to run, or a Future already running)
        t0 = time.perf_counter()
        for length, members in sorted(buckets.items()):
            for c, chunk in enumerate(group_chunks(members, overlap_chunks)):
                params = sampling.derive(rnd, length, max_new_tokens=length)
                params = params.derive(c) if overlap_chunks > 1 else params
                prompts = [m.ctx.prompt() for m in chunk]
                gens = engine.generate_for_envs([m.slot.env for m in chunk], prompts, params)
                if len(gens) != len(chunk):
                    raise RuntimeError(f"engine returned {len(gens)} generations for {len(chunk)} prompts")
                for m, g in zip(chunk, gens):
                    job = functools.partial(_apply, m, g, length, tokenizer, m.parser, m.fmt, eos_ids, max_model_len,
                                            compat, style)
                    # with a pool, these envs step while the engine generates the next chunk (stepping.py)
                    results.append((m, stepper.submit(m.slot.env, job) if stepper.workers > 1 else job))
        timing["generate_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for run, turn in results:  # slot order, whatever order the pool finished in
            exc = turn.exception() if isinstance(turn, Future) else run_job(turn)
            if exc is not None:
                fail(run.slot, f"turn {run.episode.turn}", exc)
                failed.add(id(run))
                run.done = True
        active = [r for r in active if not r.done]
        if waiting:  # episodes that ended this round freed their sessions: start the episodes waiting for one
            admit()
            active = [r for r in running if not r.done]
        timing["env_s"] += time.perf_counter() - t0
        if progress is not None:
            progress.update(_turns_done(running) - progress.n)
    stepper.close()

    order = {id(slot): i for i, slot in enumerate(slots)}  # episodes that waited for a session started late
    running.sort(key=lambda r: order[id(r.slot)])
    trajectories = [r.traj for r in running if id(r) not in failed]
    result = RolloutResult(trajectories, failed_envs=len(errors), errors=errors, failure_reasons=dict(reasons))
    result.metrics = rollout_metrics(trajectories, failed_envs=len(errors), failure_reasons=reasons)
    result.metrics.update({f"time/{k}": v for k, v in timing.items()})
    return result


def _turn_budget(run: _Running) -> int:
    return int(getattr(run.slot.env.config, "max_turns", 1) or 1)


def _turns_done(running: list[_Running]) -> int:
    return sum(_turn_budget(r) if r.done else min(r.episode.turn, _turn_budget(r)) for r in running)


def _apply(
    run: _Running,
    gen: Generation,
    length: int,
    tokenizer: Any,
    parser: Callable[[str], Parsed],
    fmt: ChatFormat,
    eos_ids: set[int],
    max_model_len: int,
    compat: str | None,
    style: str = "full",
) -> None:
    ids = [int(i) for i in gen.token_ids]
    logprobs = [float(x) for x in gen.logprobs]
    if len(logprobs) != len(ids):
        raise RuntimeError(f"engine returned {len(ids)} ids but {len(logprobs)} log-probs")
    if len(ids) > length:  # an engine overrunning its cap: keep the first `length` ids, like a length stop
        ids, logprobs = ids[:length], logprobs[:length]
    stopped = bool(ids) and ids[-1] in eos_ids
    # a turn that stopped on the message-opening token (the policy began writing the next message) is not closed:
    # it is parsed whole (so it is malformed) and gets the EOS fill, like a turn cut at the length cap
    ended_with_eos = stopped and ids[-1] != fmt.start_id
    span = run.ctx.add_response(ids, logprobs)
    text = _decode(tokenizer, ids)
    # the parser reads the turn without the end-of-turn id that closed it: not every family's EOS text looks like
    # "<|im_end|>" ("</s>", "<end_of_turn>"), and the built-in parsers reject text after </answer>
    body = _decode(tokenizer, ids[:-1]) if ended_with_eos else text
    parsed, parse_error = parse_safely(parser, fmt.prefill + body)
    answer = parsed.answer if parsed.matched else None
    ep = run.episode
    res = ep.step_turn(answer)
    reward, info = _finite_reward(ep.env, res.reward, {**_numeric_info(res.info), **res.diagnostics})
    if parse_error is not None:
        info = {**info, PARSER_ERROR_FLAG: 1.0}
    run.traj.turns.append(
        TurnRecord(
            response_text=text,
            answer=answer,
            executed=list(res.executed),
            invalid=list(res.invalid),
            reward=reward,
            penalty=float(res.penalty),
            format_ok=res.penalty == 0,
            info=info,
            truncated_response=not stopped,
            span=span,
            finish_reason="stop" if ended_with_eos else "new_message" if stopped else "length",
        )
    )
    run.traj.reward += reward
    run.traj.penalty += float(res.penalty)
    if res.done:
        _finish(run)
        return
    cfg = ep.env.config
    user = reward_text(reward, compat) + turn_text(
        ep.turn + 1, ep.obs, ep.actions_left, cfg.max_tokens, warning=not res.executed, enable_think=fmt.enable_think,
        style=style,
    )
    pieces = run.ctx.next_user(user, ended_with_eos)
    if run.ctx.next_prompt_len(pieces) + length > max_model_len:
        _finish(run, overflow=True)  # the delta is not appended: the trajectory still ends with A_t
        return
    run.ctx.extend(pieces)


def _finish(run: _Running, overflow: bool = False) -> None:
    ep, traj = run.episode, run.traj
    traj.success = bool(ep.success)
    if overflow:
        traj.truncated, traj.truncation_reason = True, "context_overflow"
    else:
        traj.truncated, traj.truncation_reason = bool(ep.truncated), _truncation_reason(ep)
    traj.blocks = list(run.ctx.blocks)
    run.done = True
    end_episode(ep.env)


def end_episode(env: Any) -> None:
    """``env.end_episode()``: the episode is over for ragen (``Env.end_episode``). A failure to free it is logged,
    never raised: the episode's outcome is already recorded."""
    release = getattr(env, "end_episode", None)
    if release is None:  # not an ``Env`` (a test double): nothing to free
        return
    try:
        release()
    except Exception as exc:  # noqa: BLE001
        log.warning("env_end_episode_failed", env=getattr(env, "name", str(env)), error=f"{type(exc).__name__}: {exc}")


def failure_reason(exc: BaseException) -> str:
    """A failed episode's reason as a metric key part: the error's ``code`` when it carries one (an OpenEnv server's
    ``CAPACITY_REACHED``...), else the exception's class name."""
    code = getattr(exc, "code", None)
    reason = str(code) if isinstance(code, str) and code else type(exc).__name__
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in reason)[:64]


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def rollout_metrics(trajectories: Sequence[Trajectory], failed_envs: int = 0,
                    failure_reasons: dict[str, int] | None = None) -> dict[str, float]:
    """Batch metrics (un-prefixed; the trainer adds ``rollout/`` or ``val/``), plus per-variant ``<env>/<key>`` and,
    when episodes failed, ``failed/<reason>`` (their count by ``failure_reason``)."""
    trajs = list(trajectories)
    turns = [t for tr in trajs for t in tr.turns]
    m: dict[str, float] = {
        "num_trajectories": float(len(trajs)),
        "failed_envs": float(failed_envs),
        "success": _mean([float(t.success) for t in trajs]),
        "score": _mean([t.score for t in trajs]),
        "reward_mean": _mean([t.reward for t in trajs]),
        "penalty_mean": _mean([t.penalty for t in trajs]),
        "turns_mean": _mean([float(t.num_turns) for t in trajs]),
        "valid_format_rate": _mean([float(t.format_ok) for t in turns]),
        # a policy paying a per-action cost can earn reward by acting less (docs/diagnosis.md, step-cost-farming)
        "actions_per_turn": _mean([float(len(t.executed)) for t in turns]),
        "parse_match_rate": _mean([float(t.answer is not None) for t in turns]),
        "response_length_mean": _mean([float(t.response_length) for t in trajs]),
        "turn_length_clip_rate": _mean([float(t.truncated_response) for t in turns]),
        "turn_new_message_rate": _mean([float(t.finish_reason == "new_message") for t in turns]),
        "sequence_length_mean": _mean([float(len(t.input_ids)) for t in trajs]),
        "sequence_length_max": float(max((len(t.input_ids) for t in trajs), default=0)),
        "truncated_rate": _mean([float(t.truncated) for t in trajs]),
        "nonfinite_rewards": float(sum(t.info.get(NONFINITE_FLAG, 0.0) for t in turns)),
        "parser_errors": float(sum(t.info.get(PARSER_ERROR_FLAG, 0.0) for t in turns)),
    }
    for key in TRUNCATION_KEYS:
        m[f"truncated/{key}"] = float(sum(t.truncation_reason == key for t in trajs))
    for reason, count in sorted((failure_reasons or {}).items()):
        m[f"failed/{reason}"] = float(count)
    m.update(state_dependence(trajs))
    by_env: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_env[t.env_name].append(t)
    for name, group in by_env.items():
        m[f"{name}/success"] = _mean([float(t.success) for t in group])
        m[f"{name}/score"] = _mean([t.score for t in group])
        values: dict[str, list[float]] = defaultdict(list)
        for t in group:
            for turn in t.turns:
                for key, value in turn.info.items():
                    values[key].append(value)
        for key, vals in values.items():
            if key not in ("success", "score", NONFINITE_FLAG, PARSER_ERROR_FLAG, *DIAGNOSTIC_KEYS):
                m[f"{name}/{key}"] = _mean(vals)
        m.update({f"{name}/{k}": v for k, v in state_dependence(group).items()})
    return m


def first_answer(traj: Trajectory) -> str | None:
    """The first turn's parsed answer without whitespace and case (``Up || Left`` = ``up||left``), None if it had
    none."""
    answer = traj.turns[0].answer if traj.turns else None
    return None if answer is None else "".join(answer.split()).lower()


def state_dependence(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Whether a policy reads its state (docs/report.md, "State dependence"): ``optimal_action_rate``, the share of
    executed actions the env's expert judged optimal in the state they were applied to, beside
    ``optimal_action_chance``, what a uniformly random choice among the action names scores on the same states (both
    only where the expert could judge: absent, not 0, otherwise); and ``distinct_first_answers``, how many different
    first answers the episodes gave (a policy that ignores the state gives one answer on every level at low
    temperature)."""
    turns = [t for tr in trajs for t in tr.turns]
    judged = sum(t.info.get(ACTIONS_JUDGED, 0.0) for t in turns)
    m: dict[str, float] = {}
    if judged > 0:
        m["optimal_action_rate"] = sum(t.info.get(ACTIONS_OPTIMAL, 0.0) for t in turns) / judged
        m["optimal_action_chance"] = sum(t.info.get(ACTIONS_CHANCE, 0.0) for t in turns) / judged
        m["judged_actions"] = judged
    firsts = {first_answer(t) for t in trajs} - {None}
    if any(t.turns for t in trajs):
        m["distinct_first_answers"] = float(len(firsts))
    return m


class Rollout:
    """The trainer's handle on rollouts: train and validation env pools built from a ``RunConfig``.

    ``train_batch(step, ...)`` plays ``n_groups × group_size`` episodes with the train seeds of ``step``;
    ``val_batch(...)`` plays ``n_val_groups`` single-member groups with the fixed validation seeds (split ``val``,
    ``val_temperature``, top_p 1). ``factory(name, options)`` builds envs (default ``make_env``).
    """

    def __init__(self, engine: RolloutEngine, tokenizer: Any, cfg: Any, parser: Callable[[str], Parsed] | None = None,
                 factory: Callable[[str, dict], Any] | None = None, shard: tuple[int, int] = (0, 1),
                 run: ResolvedRun | None = None):
        """``run``: the run's resolved plans, parsers and seed rules (a trainer's); without it they come from
        ``cfg`` here (a handle built from a bare config, whose envs need not be registered)."""
        self.engine, self.tokenizer, self.cfg = engine, tokenizer, cfg
        r = cfg.rollout
        if run is None:
            from ragen.envs.env_lists import train_plan, val_plan

            train, self._val_plan = train_plan(cfg), val_plan(cfg)
            thinks = parser_thinks(r.parser, getattr(r, "parser_options", None))
            own_parsers = env_parsers([*train, *self._val_plan])
            self._seeds: dict[str, Any] = {}
        else:
            train, self._val_plan, thinks, own_parsers = run.train_plan, run.val_plan, run.thinks, run.env_parsers
            self._seeds = {"train": run.train_seeds, "val": run.val_seeds}
        self.chat_format = ChatFormat(tokenizer, enable_think=thinks)
        # envs declaring concurrency='process' are built in worker processes when env_workers > 1 (stepping.py)
        self._pooled = PooledFactory(factory or default_factory, int(getattr(r, "env_workers", 1) or 1))
        self._factory = {"factory": self._pooled, "shard": shard}
        self.settings = RolloutSettings(
            chat_format=self.chat_format, parser=parser,
            parsers={name: (p, ChatFormat(tokenizer, enable_think=t)) for name, (p, t) in own_parsers.items()},
            max_model_len=int(r.max_model_len), compat=getattr(r, "compat", "") or None,
            prompt=str(getattr(r, "prompt", "full")),
            format_penalty=float(getattr(getattr(cfg, "trainer", None), "format_penalty", FORMAT_PENALTY)),
            response_length=int(getattr(r, "response_length", 0) or 0),
            max_context_window=int(getattr(r, "max_context_window", 0) or 0),
            env_workers=int(getattr(r, "env_workers", 1) or 1),
            overlap_chunks=int(getattr(r, "overlap_chunks", 1) or 1),
        )
        # env by env, in list order: a group never mixes envs (each GroupSpec fills its own groups)
        self.specs = [GroupSpec(p.name, p.n_groups, dict(p.options)) for p in train]
        self.spec = self.specs[0]
        self.train_groups = EnvGroups(self.specs, group_size=int(r.group_size),
                                      levels=int(getattr(r, "train_levels", 0)), seeds=self._seeds.get("train"),
                                      **self._factory)
        self._val_groups: EnvGroups | None = None

    @property
    def val_groups(self) -> EnvGroups:
        if self._val_groups is None:
            specs = [GroupSpec(p.name, p.n_groups, dict(p.options)) for p in self._val_plan]
            self._val_groups = EnvGroups.validation(specs, seeds=self._seeds.get("val"), **self._factory)
        return self._val_groups

    def _run(self, groups: EnvGroups, step: int, sampling: SamplingParams, policy_version: int,
             progress: Any = None) -> RolloutResult:
        return run_rollout(self.engine, groups, sampling, self.settings, policy_version=policy_version, step=step,
                           progress=progress)

    def train_batch(self, step: int, policy_version: int = 0, seed: int | None = None) -> RolloutResult:
        r = self.cfg.rollout
        params = SamplingParams(temperature=float(r.temperature), top_p=float(r.top_p), seed=seed)
        return self._run(self.train_groups, step, params, policy_version)

    def val_batch(self, policy_version: int = 0, seed: int | None = None, progress: Any = None) -> RolloutResult:
        params = SamplingParams(temperature=float(self.cfg.rollout.val_temperature), top_p=1.0, seed=seed)
        return self._run(self.val_groups, 0, params, policy_version, progress=progress)

    def paired_batch(self, n_levels: int, policy_version: int = 0, progress: Any = None) -> RolloutResult:
        """``n_levels`` validation levels of each validation env (seeds 123..), one greedy episode each: the
        before/after comparison of a run (ragen/runs/paired.py). Its own pool, closed after the pass: it runs twice
        per run."""
        specs = [GroupSpec(p.name, int(n_levels), dict(p.options)) for p in self._val_plan]
        with EnvGroups.validation(specs, seeds=self._seeds.get("val"), **self._factory) as groups:
            return self._run(groups, 0, SamplingParams(temperature=0.0, top_p=1.0), policy_version, progress=progress)

    def close(self) -> None:
        for groups in (self.train_groups, self._val_groups):
            if groups is not None:
                groups.close()
        self._pooled.close()
