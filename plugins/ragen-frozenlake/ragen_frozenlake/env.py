"""The FrozenLake environment: RAGEN's random lakes, gymnasium's dynamics, a plain-text renderer.

Dynamics are gymnasium's: each reset builds a real ``gymnasium.envs.toy_text.frozen_lake.FrozenLakeEnv`` on the
generated map and resets it with the episode's noise seed (``Env.noise_rng``). Steps read that env's ``P`` table and
its ``np_random`` the way its own ``step`` does (one uniform draw, the first outcome whose cumulative probability
exceeds it), so slips follow ``P`` exactly: the intended direction with probability ``success_rate``, each
perpendicular one with ``(1 - success_rate) / 2``. Stepping without gymnasium's per-step numpy work and rendering
from a per-cell cache makes a step faster than gymnasium's own step + ansi render (``bench/frozenlake_step.py``).
"""

from typing import Any

import attrs
import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

from ragen import ConfigError, Env, EnvConfig, Expert, option
from ragen_frozenlake.mapgen import GOAL, HOLE, LakeMap, generate_map
from ragen_frozenlake.solver import (
    ACTIONS,
    goal_distances,
    greedy_action,
    greedy_actions,
    shortest_path,
    shortest_path_actions,
    transition_matrix,
)

OBSERVATION_FORMATS = ("grid", "coord", "grid_coord")


@attrs.frozen(kw_only=True)
class FrozenLakeConfig(EnvConfig):
    """FrozenLake settings: map size and density, slipperiness, observation format, optional step limit."""

    size: int = option(4, "Side of the square lake (RAGEN `size`: 4).")
    p: float = option(0.9, "Probability that a cell is frozen rather than a hole (RAGEN CoordFrozenLake: 0.9).")
    success_rate: float = option(
        1.0,
        "Probability a move goes the intended way; the rest splits evenly over the two perpendicular ones "
        "(1 = no slips).",
    )
    observation_format: str = option(
        "grid_coord", "'grid' (symbol grid), 'coord' (coordinate lines) or 'grid_coord' (both)."
    )
    max_steps: int | None = option(None, "Steps after which the env truncates the episode; None = no internal limit.")

    def __attrs_post_init__(self) -> None:
        if self.size < 2:
            raise ConfigError(f"size: must be >= 2, got {self.size}")
        if not 0.0 < self.p <= 1.0:
            raise ConfigError(f"p: must be in (0, 1], got {self.p}")
        if not 0.0 <= self.success_rate <= 1.0:
            raise ConfigError(f"success_rate: must be in [0, 1], got {self.success_rate}")
        if self.observation_format not in OBSERVATION_FORMATS:
            raise ConfigError(
                f"observation_format: expected one of {', '.join(OBSERVATION_FORMATS)}, got {self.observation_format!r}"
            )
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps: must be >= 1 or None, got {self.max_steps}")
        super().__attrs_post_init__()


# ---- rendering ----------------------------------------------------------------------------------------------------
SYMBOLS = {"player": "P", "frozen": "_", "hole": "O", "goal": "G", "player_in_hole": "X", "player_on_goal": "√"}


class LakeText:
    """The observation text of one lake in one format. The rows of symbols and the coordinate lines without the player
    are built once per lake; an observation only places the player (the env renders on every step)."""

    def __init__(self, lake: LakeMap, observation_format: str = "grid_coord") -> None:
        self.lake, self.observation_format = lake, observation_format
        self.rows = [
            "".join(
                SYMBOLS["hole"] if ch == HOLE else SYMBOLS["goal"] if ch == GOAL else SYMBOLS["frozen"] for ch in row
            )
            for row in lake.desc
        ]
        n = lake.size
        self.head = (
            f"Board size: {n} rows x {n} cols (zero-indexed).\nStart: {_fmt(lake.start)}\nGoal: {_fmt(lake.goal)}\n"
        )
        self.tail = "\nHoles: " + ", ".join(_fmt(h) for h in lake.holes) if lake.holes else ""

    def grid(self, player: tuple[int, int]) -> str:
        """Rows of symbols, no spaces: ``P`` player, ``_`` frozen (start too), ``O`` hole, ``G`` goal, ``X``/``√``."""
        r, c = player
        ch = self.lake.desc[r][c]
        symbol = SYMBOLS["player_in_hole" if ch == HOLE else "player_on_goal" if ch == GOAL else "player"]
        row = self.rows[r]
        return "\n".join([*self.rows[:r], row[:c] + symbol + row[c + 1 :], *self.rows[r + 1 :]])

    def coord(self, player: tuple[int, int]) -> str:
        """``Board size``, ``Start``, ``Goal``, the player line, then ``Holes`` (omitted when there are none)."""
        ch = self.lake.desc[player[0]][player[1]]
        label = "Player in hole" if ch == HOLE else "Player on goal" if ch == GOAL else "Player"
        return f"{self.head}{label}: {_fmt(player)}{self.tail}"

    def __call__(self, player: tuple[int, int]) -> str:
        if self.observation_format == "grid":
            return self.grid(player)
        if self.observation_format == "coord":
            return self.coord(player)
        return "Coordinates: \n" + self.coord(player) + "\nGrid Map: \n" + self.grid(player)


def render_grid(lake: LakeMap, player: tuple[int, int]) -> str:
    return LakeText(lake).grid(player)


def render_coord(lake: LakeMap, player: tuple[int, int]) -> str:
    return LakeText(lake).coord(player)


def render_observation(lake: LakeMap, player: tuple[int, int], observation_format: str) -> str:
    return LakeText(lake, observation_format)(player)


def _fmt(cell: tuple[int, int]) -> str:
    return f"({cell[0]}, {cell[1]})"


# ---- the experts: thin readers of the env's live state around the pure solver -------------------------------------
class ShortestPathExpert(Expert):
    """Deterministic ice: the shortest path around the holes (BFS; ties Left, Down, Right, Up), replanned per call."""

    def plan(self, env: "FrozenLakeEnv") -> list[str]:
        if not env.is_running:
            return []
        return shortest_path(env.transition_matrix, env.goal_mask, env.hole_mask, env.state)

    def next_actions(self, env: "FrozenLakeEnv", k: int) -> list[str]:
        return self.plan(env)[: max(k, 0)]

    def optimal_actions(self, env: "FrozenLakeEnv") -> set[str] | None:
        """Every action that starts a shortest path around the holes (all ties, not only the one ``plan`` takes)."""
        if not env.is_running:
            return None
        found = shortest_path_actions(env.transition_matrix, env.goal_distances, env.state)
        return None if found is None else {ACTIONS[a] for a in found}

    def rationale(self, env: "FrozenLakeEnv") -> str:
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

    def best(self, env: "FrozenLakeEnv") -> tuple[int, float, int] | None:
        """``(action index, success probability, horizon)`` of the greedy action, or None when there is none."""
        horizon = env.actions_left
        if not env.is_running or horizon < 1:
            return None
        a, prob = greedy_action(env.transition_matrix, env.goal_mask, env.hole_mask, env.state, horizon)
        return a, prob, horizon

    def next_actions(self, env: "FrozenLakeEnv", k: int) -> list[str]:
        choice = self.best(env) if k >= 1 else None
        return [ACTIONS[choice[0]]] if choice is not None else []

    def optimal_actions(self, env: "FrozenLakeEnv") -> set[str] | None:
        """On slippery ice a move has no single outcome, so 'optimal' is what this expert maximises: the actions with
        the highest probability of reaching the goal within the actions left (every tie; a long horizon when that
        probability is 0 for all, as ``best``). None when the goal is unreachable or the episode is over."""
        if not env.is_running:
            return None
        found = greedy_actions(env.transition_matrix, env.goal_mask, env.hole_mask, env.state, env.actions_left)
        return None if found is None else {ACTIONS[a] for a in found}

    def rationale(self, env: "FrozenLakeEnv") -> str:
        choice = self.best(env)
        if choice is None:
            return "No actions are left."
        a, prob, horizon = choice
        return (
            f"The ice is slippery. The player is at {env.position} and the goal is at {env.lake.goal}. "
            f"Moving {ACTIONS[a]} gives the best chance ({prob:.2f}) to reach the goal within {horizon} "
            f"action{'s' if horizon != 1 else ''}."
        )


# ---- the env ------------------------------------------------------------------------------------------------------
class FrozenLakeEnv(Env):
    """Walk across a random frozen lake to the goal without falling into a hole (RAGEN CoordFrozenLake)."""

    config_cls = FrozenLakeConfig
    reset_options = ("task_index",)
    name = "frozenlake"
    config: FrozenLakeConfig

    def __init__(self, config: FrozenLakeConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        # one class serves both variants: the checker reads `env.deterministic` to demand that every expert episode wins
        self.deterministic = cfg.success_rate >= 1.0
        self.action_names = list(ACTIONS)
        self.symbol_legend = self._legend(cfg)
        self.instructions = self._instructions(cfg)
        self.expert = ShortestPathExpert() if self.deterministic else ValueIterationExpert()
        self.lake: LakeMap | None = None
        self.steps = 0  #: env.step calls since reset (the core spends one unit of budget on each)
        self._gym: GymFrozenLake | None = None
        self._T: np.ndarray | None = None
        self._dist: np.ndarray | None = None
        self._s = 0  #: the player's state index (row * size + col)
        self._obs: dict[int, str] = {}  #: state index -> observation, filled as the player visits cells
        self._action_index = {name.lower(): i for i, name in enumerate(ACTIONS)}

    # ---- text from the live config ------------------------------------------------------------------------------
    @staticmethod
    def _legend(cfg: FrozenLakeConfig) -> dict[str, str] | None:
        if cfg.observation_format == "coord":
            return None  # no symbol grid in the observation
        legend = {
            "P": "player",
            "_": "frozen (safe)",
            "O": "hole",
            "G": "goal",
            "X": "player in hole",
            "√": "player on goal",
        }
        if cfg.p >= 1.0:  # no holes can appear
            del legend["O"], legend["X"]
        return legend

    @staticmethod
    def _instructions(cfg: FrozenLakeConfig) -> str:
        n = cfg.size
        shows = {
            "grid": "a symbol grid of the lake (row 0 at the top, column 0 on the left)",
            "coord": "zero-indexed (row, col) coordinates of the start, goal, player and any holes",
            "grid_coord": "both a symbol grid and zero-indexed (row, col) coordinates of the start, goal, player and "
            "any holes",
        }[cfg.observation_format]
        parts = [
            f"You are solving the FrozenLake puzzle on a {n}x{n} lake: move the player to the goal without falling "
            "into a hole. Falling into a hole or reaching the goal ends the episode.",
            f"The observation shows {shows}; coordinates run from (0, 0) top-left to ({n - 1}, {n - 1}) "
            "bottom-right. Up and Down change the row, Left and Right the column; moving into the edge leaves the "
            "player in place.",
        ]
        if cfg.success_rate < 1.0:
            slip = (1.0 - cfg.success_rate) / 2
            parts.append(
                f"Beware: the ice is slippery, so the player may slide to an unintended tile. A move goes the intended "
                f"way with probability {cfg.success_rate:.2g} and to each perpendicular side with probability "
                f"{slip:.2g}."
            )
        parts.append("Respond with a sequence of actions such as <answer>Left || Up || Up</answer>.")
        return " ".join(parts)

    # ---- state the expert and tests read ------------------------------------------------------------------------
    @property
    def state(self) -> int:
        """gymnasium's state index of the player (row * size + col)."""
        self._require()
        return self._s

    @state.setter
    def state(self, s: int) -> None:
        """Put the player on state ``s`` (oracle access for experts' tests)."""
        self._require()
        self._s = int(s)

    @property
    def position(self) -> tuple[int, int]:
        return divmod(self.state, self.lake.size)

    @property
    def is_running(self) -> bool:
        """Reset and neither in a hole nor on the goal (nor truncated)."""
        return (
            self._gym is not None
            and not self._done
            and self.lake.desc[self.position[0]][self.position[1]] not in (HOLE, GOAL)
        )

    @property
    def actions_left(self) -> int:
        """Actions the episode can still execute: the per-episode budget (and ``max_steps``) minus steps taken."""
        cap = self.config.max_actions_per_episode
        if self.config.max_steps is not None:
            cap = min(cap, self.config.max_steps)
        return max(cap - self.steps, 0)

    @property
    def gym_env(self) -> GymFrozenLake:
        """The inner gymnasium env (its ``P`` is the transition table)."""
        return self._require()

    @property
    def transition_matrix(self) -> np.ndarray:
        """``T[s, a, s']`` from gymnasium's ``P`` for the current map."""
        if self._T is None:
            gym = self._require()
            self._T = transition_matrix(gym.P, gym.observation_space.n)
        return self._T

    @property
    def goal_distances(self) -> np.ndarray:
        """Fewest moves from each state to the goal around the holes (``inf``: unreachable, holes included), per map.
        On slippery ice too: a slip only moves to another neighbour, so this is the distance if the ice holds."""
        if self._dist is None:
            self._dist = goal_distances(self.transition_matrix, self.goal_mask, self.hole_mask)
        return self._dist

    def potential(self) -> float | None:
        """Minus the fewest moves left to the goal (0 on it); holes and cells cut off from the goal count as
        ``-size**2``, below every cell that can still reach it (any path has fewer than size**2 moves)."""
        if self._gym is None:
            return None
        d = self.goal_distances[self._s]
        return -float(d) if d < np.inf else -float(self.lake.size ** 2)

    @property
    def goal_mask(self) -> np.ndarray:
        return (self._require().desc == b"G").ravel()

    @property
    def hole_mask(self) -> np.ndarray:
        return (self._require().desc == b"H").ravel()

    def _require(self) -> GymFrozenLake:
        if self._gym is None:
            raise RuntimeError(f"{self.name}: call reset() first")
        return self._gym

    # ---- the contract -------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        options.pop("task_index", None)  # procedural: the seed alone picks the map
        cfg = self.config
        self.lake = generate_map(cfg.size, cfg.p, seed)
        self.task_id = f"frozenlake/{cfg.size}x{cfg.size}/p{cfg.p:g}/s{seed}"
        if self._gym is not None:
            self._gym.close()
        self._gym = GymFrozenLake(
            render_mode=None,
            desc=list(self.lake.desc),
            is_slippery=cfg.success_rate < 1.0,
            success_rate=cfg.success_rate,
        )
        self._gym.reset(seed=int(self.noise_rng().integers(2**63 - 1)))  # also gymnasium's draw of the start
        self._s = int(self._gym.s)
        self._goal = self.lake.goal[0] * cfg.size + self.lake.goal[1]
        self._obs, self._text = {}, LakeText(self.lake, cfg.observation_format)
        self._T = self._dist = None
        self.steps = 0
        assert self.position == self.lake.start, "gymnasium started elsewhere than the 'S' cell"
        return self._render(), {}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        a = self._action_index.get(action.lower())
        truncated = self.config.max_steps is not None and self.steps >= self.config.max_steps
        if a is None:  # unknown text: a no-op that earns nothing
            info = {"success": False, "action_is_valid": False, "action_is_effective": False}
            return self._render(), 0.0, False, truncated, info
        before = self._s
        _, after, reward, terminated = self._sample(self._gym.P[before][a])
        self._s = after
        info = {"success": after == self._goal, "action_is_valid": True, "action_is_effective": after != before}
        return self._render(), float(reward), bool(terminated), truncated and not terminated, info

    def _sample(self, outcomes: list[tuple]) -> tuple:
        """gymnasium's ``categorical_sample`` on ``P[s][a]``: one uniform draw from its ``np_random``, the first
        outcome whose cumulative probability exceeds it (none: the first, as ``argmax`` of all-False). A single
        outcome needs no draw (no later outcome depends on the stream: the map has no other randomness)."""
        if len(outcomes) == 1:
            return outcomes[0]
        u, total = self._gym.np_random.random(), 0.0
        for outcome in outcomes:
            total += outcome[0]
            if total > u:
                return outcome
        return outcomes[0]

    def _render(self) -> str:
        obs = self._obs.get(self._s)
        if obs is None:
            obs = self._obs[self._s] = self._text(divmod(self._s, self.lake.size))
        return obs

    def _close(self) -> None:
        if self._gym is not None:
            self._gym.close()
            self._gym = None
            self._T = self._dist = None
