"""Experts of FrozenLake: shortest safe path on ice that obeys, finite-horizon value iteration on slippery ice.

Both read the env's live state (oracle access): its map, the player's state index, gymnasium's transition table
(as a dense ``T[s, a, s']`` matrix) and the actions left in the episode.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from ragen import Expert

if TYPE_CHECKING:  # pragma: no cover
    from ragen_frozenlake.env import FrozenLakeEnv

ACTIONS = ("Left", "Down", "Right", "Up")  # gymnasium's 0..3; also the tie-break order


def transition_matrix(P: dict, n_states: int, n_actions: int = 4) -> np.ndarray:
    """gymnasium's ``P[s][a] = [(prob, s', reward, terminated), ...]`` as a dense ``T[s, a, s']``."""
    T = np.zeros((n_states, n_actions, n_states))
    for s in range(n_states):
        for a in range(n_actions):
            for prob, nxt, _reward, _term in P[s][a]:
                T[s, a, nxt] += prob
    return T


def horizon_values(T: np.ndarray, goal: np.ndarray, holes: np.ndarray, horizon: int) -> np.ndarray:
    """``V[h, s]``: the best probability of reaching the goal from ``s`` within ``h`` actions, ``h = 0..horizon``.

    ``V_0 = 1[s = G]``; ``V_h(s) = max_a sum_s' T[s, a, s'] V_{h-1}(s')`` with the goal fixed at 1 and holes at 0.
    """
    V = np.zeros((horizon + 1, T.shape[0]))
    V[0] = goal
    for h in range(1, horizon + 1):
        V[h] = (T @ V[h - 1]).max(axis=1)
        V[h][goal] = 1.0
        V[h][holes] = 0.0
    return V


def _first_best(q: np.ndarray, tol: float = 1e-12) -> int:
    """Index of the first entry within ``tol`` of the maximum (ties go to Left, Down, Right, Up)."""
    return int(np.flatnonzero(q >= q.max() - tol)[0])


def goal_distances(T: np.ndarray, goal: np.ndarray, holes: np.ndarray) -> np.ndarray:
    """Fewest actions from each state to the goal under deterministic ``T`` (``inf``: unreachable), by reverse BFS."""
    n_states, n_actions, _ = T.shape
    preds: list[set[int]] = [set() for _ in range(n_states)]
    for s in range(n_states):
        if goal[s] or holes[s]:
            continue  # terminal: nothing leaves it
        for a in range(n_actions):
            for nxt in np.flatnonzero(T[s, a] > 0):
                preds[int(nxt)].add(s)
    dist = np.full(n_states, np.inf)
    queue = deque(int(g) for g in np.flatnonzero(goal))
    for g in queue:
        dist[g] = 0
    while queue:
        s = queue.popleft()
        for prev in preds[s]:
            if dist[prev] == np.inf:
                dist[prev] = dist[s] + 1
                queue.append(prev)
    return dist


class ShortestPathExpert(Expert):
    """Deterministic ice: the shortest path around the holes (BFS; ties Left, Down, Right, Up), replanned per call."""

    def plan(self, env: FrozenLakeEnv) -> list[str]:
        if not env.is_running:
            return []
        T = env.transition_matrix
        goal, holes = env.goal_mask, env.hole_mask
        dist = goal_distances(T, goal, holes)
        s, path = env.state, []
        if dist[s] == np.inf:
            return []
        while dist[s] > 0:
            for a in range(T.shape[1]):
                nxt = int(np.argmax(T[s, a]))
                if dist[nxt] == dist[s] - 1:
                    path.append(ACTIONS[a])
                    s = nxt
                    break
            else:  # pragma: no cover - impossible for a BFS distance table
                return []
        return path

    def next_actions(self, env: FrozenLakeEnv, k: int) -> list[str]:
        return self.plan(env)[: max(k, 0)]

    def rationale(self, env: FrozenLakeEnv) -> str:
        path = self.plan(env)
        if not path:
            return "The goal cannot be reached from here."
        moves = ", ".join(path)
        return (
            f"The player is at {env.position} and the goal is at {env.lake.goal}. "
            f"The shortest path around the holes takes {len(path)} move{'s' if len(path) != 1 else ''}: {moves}."
        )


class ValueIterationExpert(Expert):
    """Slippery ice: greedy on finite-horizon value iteration over gymnasium's ``P`` with the remaining budget.

    One action per call: the outcome of a move is random, so the next choice depends on where the player lands.
    """

    def best(self, env: FrozenLakeEnv) -> tuple[int, float, int] | None:
        """``(action index, success probability, horizon)`` of the greedy action, or None when there is none."""
        horizon = env.actions_left
        if not env.is_running or horizon < 1:
            return None
        T = env.transition_matrix
        V = horizon_values(T, env.goal_mask, env.hole_mask, horizon)
        q = T[env.state] @ V[horizon - 1]
        if q.max() <= 0.0:  # the goal is out of reach within the budget: head for it anyway
            long = horizon_values(T, env.goal_mask, env.hole_mask, 4 * T.shape[0])
            return _first_best(T[env.state] @ long[-2]), 0.0, horizon
        a = _first_best(q)
        return a, float(q[a]), horizon

    def next_actions(self, env: FrozenLakeEnv, k: int) -> list[str]:
        choice = self.best(env) if k >= 1 else None
        return [ACTIONS[choice[0]]] if choice is not None else []

    def rationale(self, env: FrozenLakeEnv) -> str:
        choice = self.best(env)
        if choice is None:
            return "No actions are left."
        a, prob, horizon = choice
        return (
            f"The ice is slippery. The player is at {env.position} and the goal is at {env.lake.goal}. "
            f"Moving {ACTIONS[a]} gives the best chance ({prob:.2f}) to reach the goal within {horizon} "
            f"action{'s' if horizon != 1 else ''}."
        )
