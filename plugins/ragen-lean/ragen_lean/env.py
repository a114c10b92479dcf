"""The theorem-proving environment (RAGEN's Lean env, spec 11) over a prover backend: Coq by default, or Lean 4.

An episode is one theorem. Each action is one tactic; the prover accepts it (the proof state advances) or rejects it
(the state is unchanged, the error is shown); a tactic that runs past ``tactic_timeout_s`` restarts the prover. When
no goals remain the proof is closed (Coq: ``Qed.``) and the episode ends with success.

Rewards (RAGEN): per tactic ``step_penalty`` (-0.1), plus ``valid_step_reward`` (+1) when accepted or
``invalid_step_reward`` (-1) when rejected, plus ``timeout_penalty`` (-1) on a prover timeout and ``success_reward``
(+10) on completion; reaching ``max_actions_per_episode`` tactics unsolved adds ``max_steps_penalty`` (-2) and
truncates (**FIX**: RAGEN's 100-step limit exceeds its 30-action budget, so its -2 never fires).

**FIX** (no-op and cycling tactics farmed it), the progress reward cannot be farmed: ``valid_step_reward`` pays only a
tactic that changes the goals themselves, reaching goals not seen before in the episode, and at most
``max_progress_reward`` (5) per episode in all; the tactic that completes the proof is paid whatever is left of it. So
every proof earns the same progress reward whatever junk it carries.

What counts as progress is read from the goals' conclusions (the text under each goal's bar, or after Lean's turnstile),
never from the hypotheses: a new hypothesis (``pose proof I as h1.``, ``assert (h : True) by trivial.``, ``set``) is
not progress on the goal, and one a turn for 8 turns earned +4.2 when hypotheses counted. A tactic that keeps every
conclusion it found, only wrapping it or adding goals beside it (``cut (1 = 1).``, ``assert (h : 1 = 1).``, ``revert
n.``), is not progress either: the proof is no closer. Cycles (``pose (x := 0). || clear x.``) return to goals already
seen and earn nothing. What is left to a determined policy (rewriting a goal back and forth with identities) is bounded
by ``max_progress_reward`` < ``success_reward``.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import attrs

from ragen import ConfigError, Env, EnvConfig, option
from ragen_lean.backend import ProblemLoadError, ProofState, ProverBackend, ProverUnavailable, StepResult
from ragen_lean.coq import DEFAULT_PRELUDE, CoqBackend
from ragen_lean.curriculum import CURRICULUM
from ragen_lean.expert import KnownProofExpert
from ragen_lean.problems import DataError, Problem, known_unloadable, load_lean_jsonl, load_minif2f, partition
from ragen_lean.tactics import COQ_ALLOWED_QUERIES, split_tactics

BACKENDS = ("coq", "lean4")
PROBLEM_SOURCES = ("curriculum", "minif2f", "jsonl")
#: this checkout's root (plugins/ragen-lean/ragen_lean/env.py -> the repository): relative data paths are tried here
PROJECT_ROOT = Path(__file__).resolve().parents[3]


@attrs.frozen(kw_only=True)
class LeanConfig(EnvConfig):
    """Theorem proving: prover backend, problem source, timeouts, RAGEN's rewards, observation limits."""

    backend: str = option("coq", "Prover: 'coq' (coqtop, the default) or 'lean4' (a Lean REPL or a Kimina server).")
    problems: str = option(
        "curriculum",
        "'curriculum' (built-in easy Coq lemmas with known proofs), 'minif2f' (miniF2F-rocq .v files under data_path) "
        "or 'jsonl' (Lean 4 problems, one JSON object per line, in the file data_path).",
    )
    data_path: str | None = option(
        None,
        "miniF2F-rocq folder (valid/ = train, test/ = val and test) for problems=minif2f, or a JSONL file for "
        "problems=jsonl. A relative path is tried against the working directory, then this checkout's root.",
    )
    val_size: int | None = option(
        None, "Items of a single list (curriculum, JSONL) held out as the val/test split; None = min(500, 10 %)."
    )
    tactic_timeout_s: float = option(30.0, "Seconds one tactic may run before the prover is killed and restarted.")
    load_timeout_s: float = option(120.0, "Seconds allowed to load a theorem (its imports) into a fresh prover.")
    coq_prelude: str = option(
        DEFAULT_PRELUDE,
        "Coq sentences loaded before every header: the decision procedures (lia, lra, nia, nra, psatz), which a model "
        "cannot Require itself and many miniF2F headers do not import.",
    )
    coqtop: str = option("coqtop", "The coqtop executable (Debian package coq; Coquelicot from libcoq-coquelicot).")
    memory_limit_mb: int = option(4096, "Address-space limit of each coqtop process in MiB (0 = no limit).")
    lean_repl_path: str | None = option(
        None,
        "Lean REPL: a Mathlib project folder (runs `lake exe repl` there) or an executable; None = $RAGEN_LEAN_REPL.",
    )
    kimina_url: str | None = option(
        None, "Kimina Lean server URL (used when no REPL is set); None = $RAGEN_KIMINA_URL."
    )
    kimina_api_key: str | None = option(None, "Kimina server API key; None = $RAGEN_KIMINA_API_KEY (or none).")
    skip_unloadable: bool = option(
        True,
        "Skip statements the prover cannot load (moving to the next index): detected at reset and cached per process, "
        "plus a bundled list for Coq 8.16. False: such a reset raises.",
    )
    step_penalty: float = option(-0.1, "Reward added to every tactic (RAGEN: -0.1).")
    valid_step_reward: float = option(1.0, "Reward added when the prover accepts the tactic (RAGEN: +1).")
    invalid_step_reward: float = option(
        -1.0, "Reward added when the prover (or the tactic policy) rejects it (RAGEN: -1)."
    )
    success_reward: float = option(10.0, "Reward added when the tactic completes the proof (RAGEN: +10).")
    timeout_penalty: float = option(
        -1.0, "Reward added when the tactic times out, on top of the rejection (RAGEN: -1)."
    )
    max_steps_penalty: float = option(
        -2.0, "Reward added when max_actions_per_episode tactics leave it unproved (RAGEN: -2)."
    )
    reward_noop: bool = option(
        False,
        "Whether accepted tactics that make no progress on the goals earn valid_step_reward. False (FIX): only a "
        "tactic whose goals' conclusions (hypotheses ignored) differ from every state seen so far in the episode, and "
        "which changes or closes a goal rather than only wrapping it or adding one, earns it; new hypotheses (pose "
        "proof I as h1.), no-ops (idtac) and returns to an earlier state earn only the step penalty. True is RAGEN's "
        "setting (every accepted tactic earns it: 30 idtac. earn ~+25 against ~+15 for a real proof).",
    )
    max_progress_reward: float | None = option(
        5.0,
        "Most valid_step_reward one episode earns in all; the tactic that completes the proof is paid what is left, so "
        "every proof earns the same and tactics added to farm it earn nothing. Must stay below success_reward, so an "
        "unproved episode never out-earns a proof. None = no cap (RAGEN).",
    )
    goals_chars: int = option(2000, "Characters of the current goals shown in the observation.")
    feedback_chars: int = option(1000, "Characters of the last prover feedback shown in the observation.")

    def __attrs_post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend: expected one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.problems not in PROBLEM_SOURCES:
            raise ConfigError(f"problems: expected one of {', '.join(PROBLEM_SOURCES)}, got {self.problems!r}")
        if (self.backend == "coq") != (self.problems in ("curriculum", "minif2f")):
            raise ConfigError(
                f"problems: {self.problems!r} does not go with backend {self.backend!r} "
                "(coq: curriculum or minif2f; lean4: jsonl)"
            )
        for key in ("tactic_timeout_s", "load_timeout_s"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0, got {getattr(self, key)}")
        for key in ("goals_chars", "feedback_chars", "memory_limit_mb"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be >= 0, got {getattr(self, key)}")
        if self.val_size is not None and self.val_size < 0:
            raise ConfigError(f"val_size: must be >= 0 or None, got {self.val_size}")
        cap = self.max_progress_reward
        if cap is not None and (cap < 0 or (self.valid_step_reward > 0 and cap >= self.success_reward)):
            raise ConfigError(
                f"max_progress_reward: must be >= 0 and below success_reward ({self.success_reward}) so that progress "
                f"never pays more than a proof, got {cap} (None: no cap, RAGEN)"
            )
        super().__attrs_post_init__()


# ---- shared state ---------------------------------------------------------------------------------------------------
#: (prover and version, problem key) -> why it does not load; shared by the envs of this process
_UNLOADABLE: dict[tuple[str, str], str] = {}
_UNLOADABLE_LOCK = threading.Lock()


def resolve_path(value: str) -> Path:
    """An absolute path as is; a relative one against the working directory, then this checkout's root."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    for base in (Path.cwd(), PROJECT_ROOT):
        if (base / path).exists():
            return (base / path).resolve()
    return Path.cwd() / path


def make_backend(cfg: LeanConfig) -> ProverBackend:
    """The configured prover, checked to be usable here; a ``ConfigError`` naming the key says how to fix it."""
    if cfg.backend == "coq":
        backend: ProverBackend = CoqBackend(cfg.coqtop, cfg.memory_limit_mb, cfg.load_timeout_s, cfg.coq_prelude)
        key = "coqtop"
    else:
        # the Lean 4 backends (urllib.request, uuid) load when one is asked for: Coq is the default
        from ragen_lean.lean4 import NOT_AVAILABLE, KiminaBackend, LeanReplBackend

        repl = cfg.lean_repl_path or os.environ.get("RAGEN_LEAN_REPL")
        url = cfg.kimina_url or os.environ.get("RAGEN_KIMINA_URL")
        if repl:
            backend, key = LeanReplBackend(repl, cfg.load_timeout_s), "lean_repl_path"
        elif url:
            api_key = cfg.kimina_api_key or os.environ.get("RAGEN_KIMINA_API_KEY")
            backend, key = KiminaBackend(url, api_key), "kimina_url"
        else:
            raise ConfigError(
                f"lean_repl_path/kimina_url: {NOT_AVAILABLE}; set lean_repl_path (or RAGEN_LEAN_REPL) to a Lean "
                "REPL in "
                "a Mathlib project, or kimina_url (or RAGEN_KIMINA_URL) to a running Kimina Lean server"
            )
    ok, reason = backend.available()
    if not ok:
        raise ConfigError(f"{key}: {reason}")
    return backend


# ---- the env ---------------------------------------------------------------------------------------------------------
class LeanEnv(Env):
    """Prove one theorem per episode, one tactic per action, with a real prover (RAGEN's Lean env)."""

    config_cls = LeanConfig
    reset_options = ("task_index",)
    name = "lean"
    procedural = False  # data-backed: initial states come from a list
    episode_weight = attrs.evolve(Env.episode_weight, processes=1, memory_mb=280, max_open=32)  # coqtop: ~265 MB each
    config: LeanConfig

    def __init__(self, config: LeanConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        self.backend = make_backend(cfg)
        self._splits: dict[str, list[Problem]] = {}
        train = self.problems_for("train")  # fails early on missing data
        # the checker demands that every expert episode wins only when the expert knows every train proof
        self.deterministic = all(p.proof for p in train)
        self.action_separator = "||"
        self.expert = KnownProofExpert()
        self.instructions = self._instructions()
        self.problem: Problem | None = None
        self.proof_state: ProofState | None = None
        self.steps = 0
        self.log: list[tuple[str, bool]] = []  #: (tactic, accepted) per step
        self.feedback: list[tuple[str, str]] = []  #: (severity, text) of the last step
        self.seen_states: set[tuple[str, ...]] = set()  #: goal conclusions reached in this episode (_goal_key)
        self.progress_paid = 0.0  #: valid_step_reward paid in this episode
        # load failures depend on the prover release: the cache is keyed by it, the bundled list is for Coq 8.16.1
        version = self.backend.version() if isinstance(self.backend, CoqBackend) else None
        self._prover_key = f"{self.backend.name} {version or ''}".strip()
        self._bundled_unloadable = known_unloadable().get(version, {}) if version else {}

    # ---- problems -------------------------------------------------------------------------------------------------
    def problems_for(self, split: str) -> list[Problem]:
        """The split's problems in order (train: miniF2F valid/; val and test: test/; lists: a fixed partition)."""
        if split not in self._splits:
            self._splits[split] = self._load(split)
        return self._splits[split]

    def _load(self, split: str) -> list[Problem]:
        cfg = self.config
        if cfg.problems != "curriculum" and not cfg.data_path:
            what = "a miniF2F-rocq folder" if cfg.problems == "minif2f" else "a JSONL file of Lean 4 problems"
            raise ConfigError(f"data_path: problems={cfg.problems} needs {what} (-o data_path=...)")
        try:
            if cfg.problems == "curriculum":
                problems = partition(list(CURRICULUM), split, cfg.val_size)
            elif cfg.problems == "minif2f":
                problems = load_minif2f(resolve_path(cfg.data_path), split)
            else:
                problems = partition(load_lean_jsonl(resolve_path(cfg.data_path)), split, cfg.val_size)
        except DataError as exc:
            raise ConfigError(f"data_path: {exc}") from None
        if not problems:
            raise ConfigError(f"val_size: the {split} split of {cfg.problems} is empty")
        return problems

    def canonical_tactic(self, tactic: str) -> str:
        """The form the prover records an accepted tactic in (Coq: its sentences joined by one space)."""
        checked = self.backend.check_tactic(tactic)
        return " ".join(checked.pieces) if checked.ok else tactic.strip()

    # ---- text -----------------------------------------------------------------------------------------------------
    def _instructions(self) -> str:
        cfg = self.config
        if cfg.backend == "coq":
            return (
                "You are proving a theorem in Coq 8.16 (the Coquelicot library is installed). Each action is one Coq "
                "tactic sentence ending with a period, such as intros n. or lia.; give several actions separated by "
                "\" || \", for example <answer>intros x y h. || subst. || lra.</answer>. Coq's own || tactical works "
                "inside parentheses: (lia || lra). A bullet or brace may precede the tactic (- split.). A tactic the "
                "prover rejects leaves the proof unchanged and its error is shown. Do not use admit, give_up, Admitted "
                "or vernacular commands such as Require or Set; the queries "
                f"{', '.join(COQ_ALLOWED_QUERIES)} and the command Unshelve are allowed. "
                "When no goals remain the proof is closed automatically "
                f"(Qed). You have {cfg.max_actions_per_episode} tactics in all."
            )
        return (
            "You are proving a theorem in Lean 4 with Mathlib. Each action is one tactic, such as intro x or "
            "nlinarith [sq_nonneg (a - b)]; give several actions separated by \" || \", for example "
            "<answer>intro x || simp || linarith</answer>. A tactic the prover rejects leaves the proof unchanged and "
            "its error is shown. Do not use sorry or admit. When no goals remain the proof is complete. "
            f"You have {cfg.max_actions_per_episode} tactics in all."
        )

    def _render(self) -> str:
        cfg, problem, state = self.config, self.problem, self.proof_state
        accepted = list(state.accepted) if state else []
        lines = [f"Steps taken: {self.steps}/{cfg.max_actions_per_episode} | accepted tactics: {len(accepted)}", ""]
        if problem.header.strip():
            lines += ["Context:", *("  " + ln for ln in problem.header.strip().splitlines() if ln.strip()), ""]
        lines += ["Theorem:", *("  " + ln for ln in problem.statement.strip().splitlines()), ""]
        lines.append("Proof so far:")
        shown = accepted[-40:]
        if len(accepted) > len(shown):
            lines.append(f"  ... ({len(accepted) - len(shown)} earlier tactics omitted)")
        first = len(accepted) - len(shown) + 1
        lines += [f"  {first + i}. {t}" for i, t in enumerate(shown)] or ["  (no tactics yet)"]
        lines += ["", "Current goals:"]
        if state is not None and state.complete:
            lines.append("  No goals: the proof is complete.")
        else:
            goals = _clip(state.goals() if state else "", cfg.goals_chars) or "(none shown)"
            lines += [("  " + ln).rstrip() for ln in goals.splitlines()]
        if self.log:
            lines += ["", "Proof log (latest 5 steps):"]
            lines += [f"  [{'ok' if ok else 'fail'}] {' '.join(t.split())}" for t, ok in self.log[-5:]]
        if self.feedback:
            lines += ["", "Last prover feedback:"]
            text = "\n".join(f"{i:02d}. [{sev}] {msg}" for i, (sev, msg) in enumerate(self.feedback, 1))
            lines += ["  " + ln for ln in _clip(text, cfg.feedback_chars).splitlines()]
        return "\n".join(lines)

    # ---- the contract ---------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        task_index = options.pop("task_index", None)
        problems = self.problems_for(self.split)
        start = (seed if task_index is None else int(task_index)) % len(problems)
        index, problem, state = self._open_first_loadable(problems, start)
        self.problem, self.proof_state = problem, state
        self.steps, self.log, self.feedback = 0, [], []
        self.seen_states, self.progress_paid = {_goal_key(state.goals())}, 0.0
        self.task_id = f"lean/{self.config.backend}/{problem.source}/{problem.name}"
        return self._render(), {"task_index": index, "problem": problem.name}

    def _open_first_loadable(self, problems: list[Problem], start: int) -> tuple[int, Problem, ProofState]:
        """Open ``problems[start]``, or (``skip_unloadable``) the next one that loads; unloadable ones are cached."""
        errors = []
        recycle, self.proof_state = self.proof_state, None  # the backend reuses its prover when the header matches
        for offset in range(len(problems)):
            index = (start + offset) % len(problems)
            problem = problems[index]
            reason = self._known_unloadable(problem)
            if reason is None:
                try:
                    return index, problem, self.backend.open(problem.header, problem.statement, recycle)
                except ProblemLoadError as exc:
                    reason = str(exc)
                    with _UNLOADABLE_LOCK:
                        _UNLOADABLE[(self._prover_key, f"{problem.source}/{problem.name}")] = reason
                except ProverUnavailable as exc:
                    raise ConfigError(f"{self.config.backend}: {exc}") from None
                finally:
                    recycle = None  # consumed by the first open, whatever its outcome
            errors.append(f"{problem.name}: {reason}")
            if not self.config.skip_unloadable:
                break
        if recycle is not None:
            recycle.close()
        raise ConfigError(f"data_path: no loadable statement ({'; '.join(errors[:3])})")

    def _known_unloadable(self, problem: Problem) -> str | None:
        """Why ``problem`` is known not to load with this prover (seen in this process, or bundled), else None."""
        seen = _UNLOADABLE.get((self._prover_key, f"{problem.source}/{problem.name}"))
        folder = problem.source.rsplit("/", 1)[-1]  # miniF2F items are listed as valid/<name> and test/<name>
        return seen or self._bundled_unloadable.get(f"{folder}/{problem.name}")

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        cfg = self.config
        self.steps += 1
        before = self.proof_state.goals()
        result = self._run(action)
        accepted, timeout, complete = result.accepted, result.status == "timeout", result.complete
        effective = accepted and (complete or result.goals != before)
        reward = cfg.step_penalty
        if accepted:
            reward += self._progress_reward(before, result.goals, complete)
        else:
            reward += cfg.invalid_step_reward
        if timeout:
            reward += cfg.timeout_penalty
        if complete:
            reward += cfg.success_reward
        truncated = not complete and self.steps >= cfg.max_actions_per_episode
        if truncated:
            reward += cfg.max_steps_penalty
        self.log.append((action, accepted))
        severity = "INFO" if accepted else "TIMEOUT" if timeout else "ERROR"
        self.feedback = [(severity, m) for m in result.messages]
        info = {
            "success": complete,
            "action_is_valid": accepted,
            "action_is_effective": effective,
            "prover_timeout": int(timeout),
        }
        return self._render(), float(reward), complete, truncated, info

    def _progress_reward(self, before: str, goals: str, complete: bool) -> float:
        """``valid_step_reward`` for an accepted tactic: paid for progress on the goals (``_progress``; any accepted
        tactic with ``reward_noop``), within ``max_progress_reward`` per episode; the proof's completion is paid the
        rest of that cap, so a proof's progress reward does not depend on the tactics it took."""
        cfg = self.config
        key = _goal_key(goals)
        new = key not in self.seen_states and _progress(_goal_key(before), key)
        self.seen_states.add(key)
        pay = cfg.valid_step_reward if (complete or new or cfg.reward_noop) else 0.0
        cap = cfg.max_progress_reward
        if cap is None or cfg.valid_step_reward <= 0:
            return pay
        left = max(cap - self.progress_paid, 0.0)
        pay = left if complete else min(pay, left)
        self.progress_paid += pay
        return pay

    def _run(self, action: str) -> StepResult:
        if not action:
            return StepResult("rejected", self.proof_state.goals(), ("Empty tactic.",))
        try:
            return self.proof_state.run(action, self.config.tactic_timeout_s)
        except ProverUnavailable as exc:  # the prover could not be restored: report it, the episode continues unsolved
            return StepResult("rejected", self.proof_state.goals(), (f"Prover failure: {exc}",))

    def split_actions(self, answer: str) -> list[str]:
        """Split on ``||`` at bracket depth 0 only, so ``(lia || lra).`` stays one tactic (spec 11)."""
        return split_tactics(answer, self.backend.language)

    def _close_proof(self) -> None:
        if self.proof_state is not None:
            self.proof_state.close()
            self.proof_state = None

    def _close(self) -> None:
        self._close_proof()
        self.backend.close()


#: Coq's bar between a goal's hypotheses and its conclusion, and the header of each further goal
_COQ_BAR = re.compile(r"^\s*={4,}\s*$")
_COQ_GOAL = re.compile(r"^\s*goal \d+ (?:\(ID \d+\) )?is:\s*$")


def _goal_key(goals: str) -> tuple[str, ...]:
    """The conclusions of a goal display, in order, white space normalised; hypotheses are left out, so a tactic that
    only adds or changes hypotheses reaches the same key. Coq shows the first goal's hypotheses above a bar and the
    further goals as ``goal N is:`` and their conclusion; Lean shows each goal's hypotheses, then ``⊢`` and its
    conclusion, goals separated by blank lines. A display in neither form is one conclusion."""
    lines = goals.splitlines()
    if any(_COQ_BAR.match(line) for line in lines):
        out: list[list[str]] = []
        current: list[str] | None = None
        for line in lines:
            if _COQ_BAR.match(line) or _COQ_GOAL.match(line):
                current = []
                out.append(current)
            elif current is not None:
                current.append(line)
        return tuple(" ".join(" ".join(part).split()) for part in out)
    if "\u22a2" in goals:
        return tuple(" ".join(block.split("\u22a2", 1)[1].split()) for block in re.split(r"\n\s*\n", goals)
                     if "\u22a2" in block)
    text = " ".join(goals.split())
    return (text,) if text else ()


def _progress(before: tuple[str, ...], after: tuple[str, ...]) -> bool:
    """Whether the goals ``after`` a tactic are progress from those ``before``: some conclusion it found was closed or
    changed. When every earlier conclusion is still there, whole, inside the new ones, the tactic only wrapped a goal
    (``cut P.``: ``P -> G``; ``revert n.``) or added goals beside it (``assert (h : P).``): the proof is no closer."""
    return before != after and not all(any(old in new for new in after) for old in before)


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: max(limit - 15, 0)] + "\n... (truncated)"
