"""The two-armed bandit (RAGEN Bandit / BanditTest): arm names hint at how each arm pays.

One arm is "low risk" (a steady job: pays ``low_reward`` every time), the other "high risk" (a risky career: pays
``high_reward`` with probability ``high_prob``, else 0). With RAGEN's numbers the risky arm is better on average
(0.25 > 0.1), which the model can only infer from the names. One pull ends the episode.
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs
import numpy as np

from ragen import ConfigError, Env, EnvConfig, Expert, option

#: RAGEN's training arm-name pairs, (low-risk, high-risk)
TRAIN_PAIRS: tuple[tuple[str, str], ...] = (
    ("Teacher", "Trader"),
    ("Nurse", "StartupFounder"),
    ("Librarian", "Investor"),
    ("Accountant", "StockBroker"),
    ("Engineer", "RealEstateAgent"),
    ("Pharmacist", "Musician"),
    ("Clerk", "Freelancer"),
    ("Technician", "Youtuber"),
    ("Planner", "Artist"),
    ("Postman", "Pilot"),
    ("Banker", "VentureCapitalist"),
    ("Gardener", "Cryptominer"),
)
#: RAGEN's held-out pairs (BanditTest), disjoint from the training names
TEST_PAIRS: tuple[tuple[str, str], ...] = (
    ("Receptionist", "Explorer"),
    ("Archivist", "Filmmaker"),
    ("Bookkeeper", "Consultant"),
    ("SocialWorker", "Photographer"),
    ("Mechanic", "GameDesigner"),
    ("Secretary", "Entrepreneur"),
    ("Cashier", "DataScientist"),
    ("CivilServant", "StartupAccelerator"),
)
PAIR_SETS = {"train": TRAIN_PAIRS, "test": TEST_PAIRS}

PROMPT = (
    "You are playing a bandit game. Goal: maximize your total reward by choosing which arm to pull.\n"
    "Rules:\n"
    "1. There are 2 arms, named {a} and {b}.\n"
    "2. Each arm has its own reward distribution, related to its name.\n"
    "3. Reason about what each name suggests about how its rewards behave.\n"
    "4. Choose the arm you expect to pay more on average, answering like <answer> {a} </answer> or "
    "<answer> {b} </answer>."
)


@attrs.frozen(kw_only=True)
class BanditConfig(EnvConfig):
    """Bandit settings: which arm-name pairs, and each arm's payout."""

    pair_set: str = option(
        "train", "Arm-name pairs: 'train' (RAGEN Bandit, 12 pairs) or 'test' (held-out BanditTest, 8)."
    )
    low_reward: float = option(0.1, "Payout of the low-risk arm, every pull (RAGEN V2: 0.1; V1 used 0.15).")
    high_reward: float = option(1.0, "Payout of the high-risk arm when it pays (RAGEN: 1.0).")
    high_prob: float = option(
        0.25, "Probability the high-risk arm pays `high_reward`, else 0 (RAGEN: 0.25, mean 0.25)."
    )

    def __attrs_post_init__(self) -> None:
        if self.pair_set not in PAIR_SETS:
            raise ConfigError(f"pair_set: expected one of {', '.join(PAIR_SETS)}, got {self.pair_set!r}")
        for key in ("low_reward", "high_reward"):
            if not math.isfinite(getattr(self, key)):
                raise ConfigError(f"{key}: must be a finite number, got {getattr(self, key)}")
        if not 0.0 <= self.high_prob <= 1.0:
            raise ConfigError(f"high_prob: must be in [0, 1], got {self.high_prob}")
        super().__attrs_post_init__()


@attrs.frozen
class ArmDraw:
    """The episode's arms: the pair and the order they are shown in."""

    low: str
    high: str
    shown: tuple[str, str]  #: display order, also ``action_names``


def draw_arms(pairs: tuple[tuple[str, str], ...], seed: int) -> ArmDraw:
    """A pair picked uniformly and shown in swapped order with probability 0.5, from ``Random(seed)`` alone.

    FIX (spec 4): RAGEN mixes a per-instance counter into this draw, so members of one group saw different prompts;
    here the draw depends on the seed only and a whole group shares one prompt.
    """
    rng = random.Random(seed)
    low, high = rng.choice(pairs)
    shown = (high, low) if rng.random() < 0.5 else (low, high)
    return ArmDraw(low, high, shown)


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


class HighRiskExpert(Expert):
    """Always pulls the high-risk arm (spec 4); with RAGEN's payouts its mean, 0.25 x 1.0, beats the low-risk 0.1."""

    def next_actions(self, env: BanditEnv, k: int) -> list[str]:
        if k < 1 or env.arms is None or env.pulled is not None:
            return []
        return [env.arms.high]

    def rationale(self, env: BanditEnv) -> str:
        if env.arms is None:
            return ""
        low, high = env.arms.low, env.arms.high
        return (
            f"{_article(low).capitalize()} {low} suggests a steady job with a small but reliable payout, while "
            f"{_article(high)} {high} suggests a risky career "
            f"that pays nothing most of the time but a lot when it pays off. The rare big wins should make {high} "
            f"pay more on average, so I pull {high}."
        )


class BanditEnv(Env):
    """Pull one of two arms whose names hint at their payout distribution (RAGEN Bandit); one pull per episode."""

    config_cls = BanditConfig
    reset_options = ("task_index",)
    name = "bandit"
    config: BanditConfig
    # payouts are random, but success (= chose the high-risk arm) is a function of the action alone, so the
    # expert wins every episode and the checker may demand it
    deterministic = True

    def __init__(self, config: BanditConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        self.instructions = ""  # RAGEN: the rules are in the observation; the system text lists the two arms
        self.expert = HighRiskExpert()
        self.arms: ArmDraw | None = None
        self.pulled: str | None = None  #: the arm pulled this episode (None before the pull)
        self._prompt = ""
        self._noise: np.random.Generator | None = None

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        options.pop("task_index", None)  # procedural: the seed alone picks the arms
        self.arms = draw_arms(PAIR_SETS[self.config.pair_set], seed)
        a, b = self.arms.shown
        self.action_names = [a, b]
        self.task_id = f"bandit/{self.config.pair_set}/{a}-{b}/s{seed}"
        self.pulled = None
        # payout noise: by (seed, rollout_index) under noise='per_rollout', by seed under 'shared' (RAGEN)
        self._noise = self.noise_rng()
        self._prompt = PROMPT.format(a=a, b=b)
        return self._prompt, {"high_risk_arm": self.arms.high}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        name = self.canonical_action(action)
        if name is None:  # the core rejects this through validate_action; called directly it is a no-op
            a, b = self.arms.shown
            obs = f"{self._prompt}\nInvalid action {action!r}: answer with exactly one arm name, {a} or {b}."
            return obs, 0.0, False, False, {"success": False, "action_is_valid": False, "action_is_effective": False}
        self.pulled = name
        reward = self._payout(name)
        info = {"success": name == self.arms.high, "action_is_valid": True, "action_is_effective": True}
        return f"{name}: {reward} points", reward, True, False, info

    def _payout(self, name: str) -> float:
        cfg = self.config
        if name == self.arms.low:
            return float(cfg.low_reward)
        return float(cfg.high_reward) if self._noise.random() < cfg.high_prob else 0.0
