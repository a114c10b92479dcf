"""The environment contract: ``Env`` (a text ``gymnasium.Env``), its budget config, and the expert protocol.

Subclasses implement ``_reset(seed, options)`` and ``_step(action)``; the base class does the bookkeeping the
contract requires of every env (seeding, ``task_id``/``seed``/``split`` in reset info, bools for ``terminated``,
``truncated`` and the three info bools, ``RuntimeError`` after the end, ``render()`` = last observation, idempotent
``close()``).
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

import attrs
import gymnasium
import numpy as np
from gymnasium import spaces

from ragen.config.fields import AT_LEAST_1, option
from ragen.errors import ConfigError, PluginError

INFO_BOOLS = ("success", "action_is_valid", "action_is_effective")
SPLITS = ("train", "val", "test")


def env_who(env: Any) -> str:
    """``env 'tiny-coin' of ragen-tinyenv``: the name ``make_env`` gave the env and its distribution, else its name and
    class, for a one-line contract breach."""
    named = getattr(env, "component_name", None)
    if named:
        return named
    cls = type(env)
    return f"env {getattr(env, 'name', cls.__name__)!r} ({cls.__module__}.{cls.__qualname__})"


def check_step_types(env: Any, terminated: Any, truncated: Any, info: Any) -> None:
    """``terminated``, ``truncated`` and the info bools (``INFO_BOOLS``) of one step are bools (Python's or numpy's),
    never coerced: ``bool("no")`` is True, so an env answering ``info["success"] = "no"`` would be read as a success.
    A breach is one ``PluginError`` line naming the env and its distribution."""
    if not isinstance(info, dict):
        raise PluginError(f"{env_who(env)} broke its contract: step() returned info of type {type(info).__name__}, "
                          "expected a dict")
    pairs = [("terminated", terminated), ("truncated", truncated), *((f"info[{k!r}]", info.get(k)) for k in INFO_BOOLS
                                                                     if k in info)]
    for what, value in pairs:
        if not isinstance(value, (bool, np.bool_)):
            shown = repr(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise PluginError(f"{env_who(env)} broke its contract: step() returned {what} = {shown} "
                              f"({type(value).__name__}), expected a bool (True or False)")


def _tuple(value: Any) -> tuple:
    return tuple(value)


@attrs.frozen(kw_only=True)
class EnvConfig:
    """Settings common to every environment: the episode budget the core reads from the env."""

    max_turns: int = option(5, "Model turns per episode (RAGEN `max_turn`: 5).", range=AT_LEAST_1)
    max_actions_per_turn: int = option(
        2, "Actions parsed from one response; extras are dropped (RAGEN: 2).", range=AT_LEAST_1
    )
    max_actions_per_episode: int = option(
        10, "Actions the env executes per episode (RAGEN `max_actions_per_traj`: 10).", range=AT_LEAST_1
    )
    max_tokens: int = option(
        400, "The 'Max response length' hint printed in the prompt, in words/tokens.", range=AT_LEAST_1
    )
    response_length: int = option(
        400, "Generation cap in tokens per turn (RAGEN `response_length`: 400).", range=AT_LEAST_1
    )
    noise: str = option(
        "per_rollout",
        "Transition noise seeding: 'per_rollout' seeds by (seed, rollout_index); 'shared' by seed (RAGEN).",
        choices=("per_rollout", "shared"),
    )
    allow_unreachable: bool = option(
        False, "Accept budgets too small for any episode to succeed (off: a config error)."
    )

    #: the fewest executed actions any solved episode needs; subclasses raise it where they know more
    min_actions_to_solve: ClassVar[int] = 1

    def __attrs_post_init__(self) -> None:
        self.check_budget()

    def check_budget(self) -> None:
        """Reject budgets with which no episode can succeed (spec 1.2 FIX), unless ``allow_unreachable``."""
        need = self.required_actions()
        have = min(self.max_actions_per_episode, self.max_turns * self.max_actions_per_turn)
        if have < need and not self.allow_unreachable:
            raise ConfigError(
                f"max_actions_per_episode/max_turns*max_actions_per_turn: a solved episode needs >= {need} actions "
                f"but the budget allows {have}; raise the budget or set allow_unreachable=true"
            )

    def required_actions(self) -> int:
        return self.min_actions_to_solve


class TextSpace(spaces.Text):
    """A ``gymnasium.spaces.Text`` that holds any string up to ``max_length`` (observations use arbitrary symbols)."""

    def __init__(self, max_length: int = 100_000, *, seed: Any = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class Expert:
    """An oracle policy: ``next_actions(env, k)`` gives up to ``k`` next actions from the env's current state.

    ``[]`` means no known plan. ``rationale(env)`` fills the ``<think>`` of warm-start demonstrations.
    """

    def next_actions(self, env: Env, k: int) -> list[str]:
        """Up to ``k`` next actions (action names as the model would write them) from the env's current state; ``[]``
        = no known plan. Warm start (`ragen sft`), `ragen check-env` and the expert rollout engine call it before each
        turn, with ``k`` = ``max_actions_per_turn``."""
        raise NotImplementedError

    def rationale(self, env: Env) -> str:
        """The reasoning a warm-start demonstration writes inside ``<think>`` before the expert's answer this turn
        (called right after ``next_actions``, in the same state), e.g. ``"The goal is left of me, so I move Left."``;
        it also enters the built-in models' tokenizer corpus. Default ``""``: the demonstrations teach an empty think
        block. Unused with a parser whose ``enable_think`` is False, and on a turn whose actions warm-start noise
        replaced (that turn thinks ``Exploring: trying <answer>.``)."""
        return ""

    def optimal_actions(self, env: Env) -> set[str] | None:
        """The actions (names as in ``env.action_names``) that lie on an optimal path from the env's current state,
        or None when unknown (the default) or undefined (no action can still reach the goal). The core calls it
        before each executed action, in the state that action is applied to, to measure whether a policy reads its
        state: ``optimal_action_rate`` (the share of executed actions in this set) beside its chance level
        ``|set| / |action_names|`` for the same states (docs/report.md, "State dependence"). None produces no metric,
        never a 0. It must not change the env or the expert's plan (``next_actions`` may be called right after); cache
        per state if the search is slow: it runs on every executed action of every rollout."""
        return None


@attrs.frozen(kw_only=True)
class EpisodeWeight:
    """What one open episode of an env holds on the machine that serves it; ``ragen serve-env`` charges episodes by
    it (docs/remote-envs.md, "What an episode costs").

    The default (nothing beyond Python objects) suits most envs. An env whose instance starts an OS process (a prover,
    a browser, a sandbox) declares it as a class attribute, e.g. ``episode_weight = EpisodeWeight(processes=1,
    memory_mb=280, max_open=32)`` (or ``attrs.evolve(Env.episode_weight, ...)`` without another import). Serving such
    an env, the server requires a token, keeps at most ``max_open`` episodes open (half of them per client), admits a
    new one only while the host has ``memory_mb`` available above a reserve, and closes abandoned ones after 120 s
    instead of 600 s.
    """

    #: OS processes one open episode holds (a prover, a browser, a sandbox); > 0 makes the env "heavy"
    processes: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    #: resident memory one open episode holds, roughly, in MB (measured: the Coq prover of ragen-lean, ~280)
    memory_mb: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    #: open episodes one server keeps at most (None: the server's ``--max-episodes``, 1024)
    max_open: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))

    @property
    def heavy(self) -> bool:
        """Whether an episode holds more than Python objects (a process or declared memory)."""
        return self.processes > 0 or self.memory_mb > 0


class Env(gymnasium.Env):
    """Base class of every ragen environment: text observations, text actions, a config, an optional expert.

    A plugin's env implements ``_reset`` and ``_step`` (and ``_close`` when it holds resources), sets the attributes
    the prompt is built from in ``__init__`` (``instructions``, ``action_names``, ``symbol_legend``, ``expert``) and
    overrides class attributes where its env differs from the defaults. The table lists every member a plugin sets,
    overrides or calls; gymnasium's own (``np_random``, ``unwrapped``, ...) work as in gymnasium."""

    #: gymnasium's render metadata: ragen envs render text (``render()`` is the last observation)
    metadata: ClassVar[dict] = {"render_modes": ["ansi"], "render_fps": 4}
    #: the env's config class (an ``EnvConfig`` subclass with its own fields); registration uses it when
    #: ``register(...)`` names no ``config=``
    config_cls: ClassVar[type[EnvConfig]] = EnvConfig
    #: False for envs with stochastic transitions (draw the noise from ``noise_rng()``): then ``ragen check-env`` does
    #: not demand that every expert episode wins
    deterministic: bool = True
    #: whether different seeds give different initial states; ``ragen check-env``'s determinism check demands at least
    #: two distinct initial observations when it is True. Set it False for data-backed envs whose instances may repeat
    #: across seeds and for a variant with one fixed instance (a single task, a fixed board), or the check fails
    procedural: bool = True
    #: what one open episode holds on the machine serving it (``ragen serve-env`` caps and admits episodes by it):
    #: envs that start a process per instance declare it (``EpisodeWeight``)
    episode_weight: ClassVar[EpisodeWeight] = EpisodeWeight()
    #: whether separate instances may be stepped at the same time (``rollout.env_workers`` > 1): "none" (stepped one
    #: at a time in the trainer's thread), "thread" (a thread pool: envs that wait on subprocesses or sockets and keep
    #: no module-level state), "process" (each instance in a worker process: CPU-bound Python envs)
    concurrency: ClassVar[str] = "none"
    #: the ``reset(options=...)`` keys the env understands besides ``split`` and ``rollout_index`` (which the base
    #: class consumes), e.g. ``("task_index",)``: any other key is refused with a ``ConfigError`` before ``_reset``
    #: runs. None (the default) passes every key on to ``_reset`` unchecked.
    reset_options: ClassVar[tuple[str, ...] | None] = None
    #: the reward every executed action adds (Sokoban: gym-sokoban's -0.1), 0.0 for none. Declaring it tells the
    #: trainer that unsuccessful episodes of this env can differ by their action count alone: with the algorithm's
    #: ``success_gate`` on ``auto`` their all-fail groups are left out of group-relative updates (docs/algorithms.md,
    #: "The step cost cannot be farmed")
    step_cost: ClassVar[float] = 0.0
    #: the text that separates several actions in one answer (``split_actions`` splits on it; the prompt names
    #: " || "); None: each answer is one action
    action_separator: str | None = "||"

    def __init__(self, config: EnvConfig | None = None, render_mode: str | None = "ansi"):
        #: the live config (``config_cls``, options applied): build the instance from it, never from the defaults
        self.config: EnvConfig = config if config is not None else self.config_cls()
        #: gymnasium's render mode, "ansi"
        self.render_mode: str | None = render_mode
        #: any text (``TextSpace``)
        self.observation_space: TextSpace = TextSpace()
        #: any text up to 200 characters (``TextSpace``); the core sends one primitive action per ``step``
        self.action_space: TextSpace = TextSpace(max_length=200)
        #: the registered variant name (``make_env`` sets it; default the class name); metrics are keyed by it
        self.name: str = getattr(self, "name", type(self).__name__)
        #: the task described to the model, first in the system prompt (built from the live config)
        self.instructions: str = ""
        #: the primitive actions as the model writes them, listed in the prompt; with them ``validate_action`` and
        #: ``canonical_action`` match case-insensitively. None: free text (the env judges each action)
        self.action_names: list[str] | None = None
        #: observation symbol -> meaning, listed in the full prompt (e.g. ``{"P": "you", "G": "goal"}``); None: none
        self.symbol_legend: dict[str, str] | None = None
        #: the oracle policy (``ragen.Expert``) for ``ragen check-env``, the warm start and the expert engine; None:
        #: no expert (no warm start, no expert checks)
        self.expert: Expert | None = None
        #: the seed of the current episode (set by ``reset`` before ``_reset`` runs)
        self.current_seed: int | None = None
        #: "train", "val" or "test", from ``reset(options={"split": ...})`` (set before ``_reset`` runs): a dataset env
        #: picks the matching part, a procedural one may ignore it
        self.split: str = "train"
        #: which member of a group plays this episode (``reset(options={"rollout_index": ...})``); ``noise_rng`` seeds
        #: by it so members of one group see different transition noise
        self.rollout_index: int = 0
        #: the current instance's id, set by ``_reset`` (e.g. ``"corridor/7/s123"``); returned in the reset info
        self.task_id: str | None = None
        self._last_obs: str | None = None
        self._done = False
        self._closed = False

    # ---- to implement -------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        """Build the initial state from ``(self.config, seed, self.split)``; set ``self.task_id``. ``options`` holds
        the reset options left after ``split`` and ``rollout_index`` (only keys of ``reset_options`` when it is set)."""
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Apply one primitive action (stripped text, already accepted by ``validate_action``): ``(observation,
        reward, terminated, truncated, info)`` with the info bools ``success``, ``action_is_valid`` and
        ``action_is_effective``. Text the env cannot apply is a no-op with ``action_is_valid`` False, never a crash."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release processes, sockets, files. Called once."""

    # ---- the contract -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Start an episode (the core calls it; do not override): seeds gymnasium's RNG, takes ``split`` and
        ``rollout_index`` from ``options``, refuses keys outside ``reset_options``, calls ``_reset`` and adds
        ``task_id``, ``seed`` and ``split`` to its info."""
        super().reset(seed=seed)
        if seed is None:  # a derived seed keeps `reset()` after `reset(seed=s)` deterministic (gymnasium checks it)
            seed = int(self.np_random.integers(0, 2**31 - 1))
        options = dict(options or {})
        split = options.pop("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"options.split: expected one of {', '.join(SPLITS)}, got {split!r}")
        self.current_seed, self.split = int(seed), split
        self.rollout_index = int(options.pop("rollout_index", 0))
        unknown = [] if self.reset_options is None else sorted(set(options) - set(self.reset_options))
        if unknown:
            raise ConfigError(f"{self.name}: unknown reset options {unknown}")
        self._done = False
        obs, info = self._reset(self.current_seed, options)
        self._last_obs = obs
        return obs, {"task_id": self.task_id, "seed": self.current_seed, "split": self.split, **info}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """One primitive action (the core calls it; do not override): ``_step`` on the stripped text, its info bools
        checked; ``RuntimeError`` before ``reset`` and after the episode ended."""
        if self._last_obs is None:
            raise RuntimeError(f"{self.name}: call reset() before step()")
        if self._done:
            raise RuntimeError(f"{self.name}: the episode is over; call reset() before step()")
        obs, reward, terminated, truncated, info = self._step(str(action).strip())
        missing = [k for k in INFO_BOOLS if k not in info]
        if missing:
            raise RuntimeError(f"{self.name}: step info lacks {', '.join(missing)}")
        check_step_types(self, terminated, truncated, info)
        for key in INFO_BOOLS:
            info[key] = bool(info[key])  # a numpy bool becomes a Python one
        self._done = bool(terminated or truncated)
        self._last_obs = obs
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        """The last observation (None before the first ``reset``)."""
        return self._last_obs

    def potential(self) -> float | None:
        """Phi of the current state for potential-based turn credit, or None (the default: no potential). Higher is
        closer to the goal, e.g. minus the optimal number of moves left (Sokoban, FrozenLake). It must be finite,
        depend only on the state (never on the step count, or the shaped credit no longer telescopes), and be 0 on
        solved states with every other state below it, so that a solved ending always beats an unsolved one after
        shaping. The core records it at every turn boundary (``TurnRecord.info`` ``potential_start`` /
        ``potential_end``); the ``potential`` shaper turns it into gamma * Phi(s') - Phi(s) per turn. It must not
        change the env."""
        return None

    def end_episode(self) -> None:
        """Called by the rollout when an episode is over for ragen, however it ended: the env's own end, ragen's
        budget (``max_turns``, ``max_actions_per_episode``), the context cap, or a failure that dropped it. An env
        whose open episode holds something outside this process (a session on an env server) frees it here, so a
        pool of instances never holds more than the episodes it is playing; the instance stays usable and the next
        ``reset()`` starts a new episode. Default: nothing (the next ``reset()`` or ``close()`` frees it)."""

    def close(self) -> None:
        """Release the env (idempotent: ``_close`` runs once). The core closes every instance it made."""
        if not self._closed:
            self._closed = True
            self._close()
        super().close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run."""
        return self._closed

    def validate_action(self, text: str) -> bool:
        """Syntactic check the core runs on each piece of ``split_actions`` before executing it: with
        ``action_names``, a case-insensitive match; without, any text. A rejected piece is not executed, uses no
        budget and costs the turn's format penalty. Override it for free-text actions with a syntax (an equation, a
        coordinate)."""
        if self.action_names is None:
            return True
        return text.strip().lower() in {a.lower() for a in self.action_names}

    def split_actions(self, answer: str) -> list[str]:
        """The primitive actions of one answer (the parser's answer text, verbatim): split on ``action_separator``,
        stripped, empty pieces dropped; the core keeps the first ``max_actions_per_turn``. Override it for answers
        that are not separator-joined actions."""
        if self.action_separator is None:
            return [answer.strip()] if answer.strip() else []
        return [p.strip() for p in answer.split(self.action_separator) if p.strip()]

    def noise_rng(self) -> np.random.Generator:
        """A generator for transition noise (slips, random opponents): seeded by (seed, rollout_index), or by seed
        alone when the config says ``noise="shared"``. Draw from it, never from a global RNG, so episodes replay
        exactly. Each call starts the sequence anew: make one per episode in ``_reset``."""
        if self.config.noise == "shared":
            return np.random.default_rng([self.current_seed, 0x5EED])
        return np.random.default_rng([self.current_seed, self.rollout_index, 0x5EED])

    def canonical_action(self, text: str) -> str | None:
        """The entry of ``action_names`` that ``text`` names, case-insensitively and ignoring surrounding whitespace,
        or None (always None without ``action_names``). ``_step`` uses it to read the action the model wrote
        (``"left"`` -> ``"Left"``); the core uses it to compare actions with the expert's ``optimal_actions``."""
        for name in self.action_names or ():
            if name.lower() == text.strip().lower():
                return name
        return None
