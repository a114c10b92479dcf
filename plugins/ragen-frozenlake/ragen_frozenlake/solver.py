"""The FrozenLake solver, pure functions of a transition table: the shortest safe path on ice that obeys, the greedy
action of finite-horizon value iteration on slippery ice. The experts (``ragen_frozenlake.env``) feed it the env's
live state (oracle access): gymnasium's transition table as a dense ``T[s, a, s']`` matrix, the goal and hole masks,
the player's state index and the actions left in the episode.
"""

from __future__ import annotations

from collections import deque

import numpy as np

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


def first_best(q: np.ndarray, tol: float = 1e-12) -> int:
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


def shortest_path(T: np.ndarray, goal: np.ndarray, holes: np.ndarray, s: int) -> list[str]:
    """The shortest path from ``s`` around the holes under deterministic ``T`` (BFS; ties Left, Down, Right, Up);
    ``[]`` when the goal is unreachable."""
    dist = goal_distances(T, goal, holes)
    path: list[str] = []
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


def greedy_action(T: np.ndarray, goal: np.ndarray, holes: np.ndarray, s: int, horizon: int) -> tuple[int, float]:
    """``(action index, success probability)`` of the greedy action from ``s`` with ``horizon >= 1`` actions left.
    When the goal is out of reach within the horizon the action heads for it anyway (probability 0)."""
    V = horizon_values(T, goal, holes, horizon)
    q = T[s] @ V[horizon - 1]
    if q.max() <= 0.0:
        long = horizon_values(T, goal, holes, 4 * T.shape[0])
        return first_best(T[s] @ long[-2]), 0.0
    a = first_best(q)
    return a, float(q[a])


def shortest_path_actions(T: np.ndarray, dist: np.ndarray, s: int) -> list[int] | None:
    """Every action that starts a shortest path from ``s`` under deterministic ``T`` (``dist``: ``goal_distances``);
    None when ``s`` is the goal or the goal is unreachable (no action is better than another)."""
    if not 0 < dist[s] < np.inf:
        return None
    return [a for a in range(T.shape[1]) if dist[int(np.argmax(T[s, a]))] == dist[s] - 1]


def greedy_actions(T: np.ndarray, goal: np.ndarray, holes: np.ndarray, s: int, horizon: int,
                   tol: float = 1e-9) -> list[int] | None:
    """Every action ``greedy_action`` could pick (ties within ``tol``): the actions maximising the probability of
    reaching the goal within ``horizon`` actions, or, when that probability is 0 for all, within a long horizon;
    None when the goal cannot be reached at all or no action is left."""
    if horizon < 1 or goal[s] or holes[s]:
        return None
    q = T[s] @ horizon_values(T, goal, holes, horizon)[horizon - 1]
    if q.max() <= 0.0:
        q = T[s] @ horizon_values(T, goal, holes, 4 * T.shape[0])[-2]
    if q.max() <= 0.0:
        return None
    return [int(a) for a in np.flatnonzero(q >= q.max() - tol)]
