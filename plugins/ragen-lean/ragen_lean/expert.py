"""The expert: replays the known proof of the current theorem (curriculum proofs, proofs shipped with the data).

It has oracle access to the problem's proof and the tactics the prover accepted so far. While the accepted tactics
are exactly a prefix of the known proof it returns the next ones; once the episode left that path (another tactic was
accepted) or the theorem has no known proof, it returns ``[]`` (no plan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragen import Env, Expert


def proof_plan(proof: Sequence[str], accepted: Sequence[str], canonical: Callable[[str], str]) -> list[str]:
    """The tactics of ``proof`` still to run when the prover has accepted ``accepted`` (canonical forms): the rest of
    the proof while ``accepted`` is a prefix of it (compared through ``canonical``), else ``[]``."""
    done = list(accepted)
    if [canonical(t) for t in proof][: len(done)] != done:
        return []
    return list(proof[len(done) :])


class KnownProofExpert(Expert):
    """Replay the problem's known proof from where the episode is. It reads a ``LeanEnv``'s ``problem``,
    ``proof_state``, ``canonical_tactic`` and ``config`` (this module does not import the env: no cycle)."""

    def plan(self, env: Env) -> list[str]:
        problem, state = env.problem, env.proof_state
        if problem is None or state is None or not problem.proof or state.complete:
            return []
        return proof_plan(problem.proof, state.accepted, env.canonical_tactic)

    def next_actions(self, env: Env, k: int) -> list[str]:
        return self.plan(env)[: max(k, 0)]

    def rationale(self, env: Env) -> str:
        plan = self.plan(env)
        if not plan:
            return "I do not know a proof from this state."
        problem = env.problem
        head = problem.hint or f"I know a proof of {problem.name} in {len(problem.proof)} tactics."
        k = max(env.config.max_actions_per_turn, 1)
        remain = f"{len(plan)} tactic{'s remain' if len(plan) != 1 else ' remains'}"
        return f"{head} {remain}; next: {' '.join(plan[:k])}"
