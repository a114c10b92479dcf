"""The scripted WebShop expert's decisions (environments.md §10), pure functions of the goal and the page; the thin
``WebShopExpert`` (``ragen_webshop.env``) reads the env's live page and the goal's oracle view and applies them.

It searches ``{goal query} {first attribute}``; scans up to 3 result pages for the goal ASIN, otherwise goes back and
searches once more by the goal product's title (WebShop's synthetic goals name a product by its title); opens the
product, clicks each wanted option value, then ``click[buy now]``. Only actions on the item page are planned ahead
(their outcome is known); elsewhere it gives the single next action.
"""

from __future__ import annotations

from ragen_webshop_server.reward import fuzzy
from ragen_webshop_server.search import keywords_of

MAX_PAGES = 3
MAX_SEARCHES = 2


def wanted_options(goal: dict) -> dict[str, str]:
    """``{dimension: value}`` to click. Synthetic goals name them directly; human goals give free-text options,
    each mapped to the product's closest option value (exact, else token-set ratio > 85)."""
    product_options: dict[str, list[str]] = goal["product_options"]
    if isinstance(goal["goal_options"], dict):
        return {d: v for d, v in goal["goal_options"].items() if v in product_options.get(d, ())}
    wanted: dict[str, str] = {}
    for text in goal["goal_options"]:
        text = str(text).lower()
        best = max(((text == v, fuzzy(text, v), d, v) for d, vs in product_options.items() for v in vs), default=None)
        if best is not None and (best[0] or best[1] > 85) and best[2] not in wanted:
            wanted[best[2]] = best[3]
    return wanted


def search_query(goal: dict, searches_done: int) -> str:
    if searches_done == 0:
        first = goal["attributes"][0] if goal["attributes"] else ""
        return " ".join(keywords_of(f"{goal['query']} {first}"))
    return " ".join(keywords_of(goal["title"]))


def next_actions(goal: dict, kind: str, clickables, searches: int, page_number: int | None, asin: str | None,
                 chosen: dict[str, str], k: int) -> list[str]:
    """The expert's next actions on a page of ``kind`` offering ``clickables``, after ``searches`` searches this
    episode; ``page_number``, ``asin`` and ``chosen`` are the result page, product and option values the browser is
    on (or came from). Up to ``k`` actions on an item page (their outcome is known), one elsewhere, ``[]`` for none."""
    target = goal["asin"].lower()
    if kind == "search":
        return [f"search[{search_query(goal, searches)}]"] if searches < MAX_SEARCHES else []
    if kind == "results":
        if target in clickables:
            return [f"click[{target}]"]
        first_search_scanned = searches == 1 and (page_number or 1) >= MAX_PAGES
        if "next >" in clickables and not first_search_scanned:
            return ["click[next >]"]
        return ["click[back to search]"] if searches < MAX_SEARCHES else []
    if kind == "sub_page":
        return ["click[< prev]"]
    if kind == "item":
        if asin != goal["asin"]:
            return ["click[< prev]"]
        plan = [f"click[{v}]" for d, v in wanted_options(goal).items() if chosen.get(d) != v]
        return (plan + ["click[buy now]"])[: max(k, 1)]
    return []


def explain(goal: dict, searches: int, action: str) -> str:
    """The reasoning behind ``action``, the expert's next action after ``searches`` searches."""
    if action.startswith("search["):
        if searches == 0:
            return f"I need {goal['name']}; I search for the product type and its first wanted attribute."
        return "The product was not in the first results; I search again with a more specific query."
    if action == f"click[{goal['asin'].lower()}]":
        return f"{goal['asin']} matches the instruction; I open it."
    if action == "click[buy now]":
        return "The product and its options match the instruction and the price is within the limit; I buy it."
    if action in ("click[next >]", "click[back to search]", "click[< prev]"):
        return "The right product is not on this page; I keep looking."
    return f"I select the option the instruction asks for: {action[6:-1]}."
