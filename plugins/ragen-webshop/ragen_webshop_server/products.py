"""The catalogue record and WebShop's pricing and goal rules: what the generator (``catalogue``) and the loader of
WebShop files (``loader``) both build, so neither imports the other back.

A product is a dict with WebShop's keys: ``asin``, ``Title``, ``name``, ``query``, ``category``,
``product_category`` (``A › B › C``), ``BulletPoints``, ``Description``, ``Reviews``, ``Rating``, ``Price`` (the
shown tag), ``pricing`` (one price or a range), ``options`` (``{dimension: [values]}``) and ``Attributes``.
A goal holds ``asin``, ``category``, ``query``, ``name``, ``product_category``, ``instruction_text``,
``attributes``, ``price_upper`` and ``goal_options`` (a dict for synthetic goals, a list for human ones).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import attrs

from ragen_webshop_server.reward import vocabulary

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # WebShop's price caps: the multiples of 10 in [10, 990]
NO_PRICE_CAP = 1_000_000.0


class CatalogueError(ValueError):
    """A catalogue cannot be built from its files; the message starts with the config key at fault."""


@attrs.frozen
class Catalogue:
    products: list[dict]
    goals: list[dict]
    prices: dict[str, float]  #: the price a purchase is charged (one draw per product from a price range)
    skipped_goals: int = 0  #: instruction entries that could not become goals (no attributes, unknown product)
    by_asin: dict[str, dict] = attrs.field(init=False)
    vocab: frozenset[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "by_asin", {p["asin"]: p for p in self.products})
        object.__setattr__(self, "vocab", frozenset(vocabulary(self.products)))


# ---- pricing and goals (shared by the generator and the loader) ----------------------------------------------------
def price_tag(pricing: list[float]) -> str:
    return f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"


def sample_price(pricing: list[float], rng: random.Random) -> float:
    """The charged price: the single price, or a uniform draw from a ``[low, high]`` range (once per product)."""
    return pricing[0] if len(pricing) == 1 else rng.uniform(pricing[0], pricing[1])


def price_cap(price: float, rng: random.Random) -> tuple[float, str]:
    """WebShop's cap: of the multiples of 10 above the price take the first 4; with >= 2 keep the larger of two drawn
    at random, else no cap (1,000,000) and no price clause."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) >= 2:
        upper = max(rng.sample(above, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return NO_PRICE_CAP, ""


def option_combinations(options: dict[str, list[str]]) -> list[dict[str, str]]:
    names = sorted(options)  # WebShop orders the dimensions by name
    return [dict(zip(names, combo)) for combo in itertools.product(*(options[n] for n in names))]


def synthetic_goals(product: dict, instruction: str, attributes: list[str], rng: random.Random,
                    max_goals: int, name: str | None = None) -> list[dict]:
    """One goal per option combination of ``product`` (at most ``max_goals``, drawn at random; 0 = all), all with the
    instruction's attributes and one price cap; text ``{instruction} with {dim}: {value}, and ... , and price ...``."""
    upper, price_text = price_cap(product["price"], rng)
    combos = option_combinations(product["options"])
    if max_goals and len(combos) > max_goals:
        keep = sorted(rng.sample(range(len(combos)), max_goals))
        combos = [combos[i] for i in keep]
    goals = []
    for combo in combos:
        option_text = ", and ".join(f"{k}: {v}" for k, v in combo.items())
        option_text = f" with {option_text}" if option_text else ""
        text = f"{instruction}{option_text}{price_text}"
        goals.append(make_goal(product, instruction, text, attributes, upper, combo, name))
    return goals


def make_goal(product: dict, base: str, text: str, attributes: list[str], upper: float, goal_options: Any,
              name: str | None) -> dict:
    """A goal for ``product``: ``base`` is the instruction without options and price, ``text`` the full one."""
    return {
        "instruction": base,
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "name": name if name is not None else product["name"],
        "product_category": product["product_category"],
        "instruction_text": text,
        "attributes": list(attributes),
        "price_upper": upper,
        "goal_options": goal_options,
    }
