"""Load a catalogue from WebShop-format files the user supplies (the ``webshop-items`` variant).

* ``items_file`` — WebShop's ``items_shuffle*.json``: a JSON list (or JSON lines) of items with ``asin``, ``name``,
  ``full_description``, ``small_description`` (a string or a list of bullet points), ``pricing`` (``"$a"`` or
  ``"$a$b"``, a range), ``customization_options`` (``{name: [{"value": ...}, ...]}`` or null), ``category``,
  ``query`` and ``product_category``. As WebShop: items whose ``asin`` is ``nan`` or longer than 10 characters and
  repeated ASINs are skipped; option names and values are lower-cased and ``/`` in values becomes `` | ``; missing
  pricing means $100.0.
* ``instructions_file`` — WebShop's ``items_ins_v2*.json``: ``{asin: {"attributes": [...], "instruction": str,
  "instruction_attributes": [...]}}``. ``attributes`` become the product's ``Attributes``; an entry with an
  instruction and instruction attributes yields one synthetic goal per option combination (``instruction`` +
  ``with {dim}: {value}, and ...`` + a price cap). An entry may instead be a list of human instructions
  (``items_human_ins.json``: ``[{"instruction", "instruction_attributes", "instruction_options"}]``), each one goal.
  Products without an entry are browsable only.
* ``reviews_file`` (optional) — WebShop's review file: a list of ``{"asin", "reviews": [{"title", "score" or
  "stars", "body" or "review"}], "average_rating"}``.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ragen_webshop_server.products import (
    Catalogue,
    CatalogueError,
    make_goal,
    price_cap,
    price_tag,
    sample_price,
    synthetic_goals,
)

REQUIRED_ITEM_KEYS = ("asin", "name", "category", "query", "product_category")


def _read_json(path: str | Path, key: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise CatalogueError(f"{key}: {str(p)!r} is not a file")
    text = p.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        try:  # JSON lines: one object per line
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise CatalogueError(f"{key}: {p} is neither JSON nor JSON lines ({exc})") from None


def parse_pricing(pricing: Any) -> list[float]:
    """WebShop's ``"$a"`` / ``"$a$b"`` (commas and other characters ignored); [100.0] when missing or unreadable."""
    if not isinstance(pricing, str) or not pricing:
        return [100.0]
    prices = []
    for part in pricing.split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            prices.append(float(Decimal(digits)))
        except InvalidOperation:
            continue
    return prices[:2] or [100.0]


def _options(raw: Any) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for name, contents in (raw or {}).items():
        if not contents:
            continue
        values = [str(c["value"] if isinstance(c, dict) else c).strip().replace("/", " | ").lower() for c in contents]
        options[str(name).lower()] = list(dict.fromkeys(v for v in values if v))
    return {k: v for k, v in options.items() if v}


def _reviews(path: str | None) -> dict[str, tuple[list[dict], Any]]:
    if not path:
        return {}
    out = {}
    for entry in _read_json(path, "reviews_file"):
        reviews = [{"title": r.get("title", ""), "score": r.get("score", r.get("stars", "")),
                    "body": r.get("body", r.get("review", ""))} for r in entry.get("reviews", [])]
        out[str(entry["asin"])] = (reviews, entry.get("average_rating", "N.A."))
    return out


def _product(item: dict, index: int, reviews: dict) -> dict:
    missing = [k for k in REQUIRED_ITEM_KEYS if k not in item]
    if missing:
        raise CatalogueError(f"items_file: item {index} lacks {', '.join(missing)}")
    bullets = item.get("small_description") or []
    pricing = parse_pricing(item.get("pricing"))
    asin = str(item["asin"])
    item_reviews, rating = reviews.get(asin, ([], "N.A."))
    return {
        "asin": asin,
        "Title": str(item["name"]),
        "name": str(item["name"]),
        "query": str(item["query"]).lower().strip(),
        "category": str(item["category"]),
        "product_category": str(item["product_category"]),
        "BulletPoints": [str(b) for b in bullets] if isinstance(bullets, list) else [str(bullets)],
        "Description": str(item.get("full_description") or ""),
        "Reviews": item_reviews,
        "Rating": rating,
        "pricing": pricing,
        "Price": price_tag(pricing),
        "options": _options(item.get("customization_options")),
        "Attributes": [],
    }


def _human_goals(product: dict, entries: list, rng: random.Random) -> tuple[list[dict], int]:
    goals, skipped = [], 0
    for e in entries:
        attributes = list(e.get("instruction_attributes") or [])
        if not attributes or not e.get("instruction"):
            skipped += 1
            continue
        upper, price_text = price_cap(product["price"], rng)
        text = str(e["instruction"]).strip(".") + price_text
        opts = e.get("instruction_options") or []
        goals.append(make_goal(product, str(e["instruction"]).strip("."), text, attributes, upper, opts, None))
    return goals, skipped


def load_items(items_file: str, instructions_file: str, reviews_file: str | None = None, *, seed: int = 0,
               num_products: int | None = None, max_goals_per_product: int = 0) -> Catalogue:
    """Products of ``items_file`` (the first ``num_products``), goals from ``instructions_file``; price draws and
    price caps from ``random.Random(seed)``, in file order."""
    items = _read_json(items_file, "items_file")
    if not isinstance(items, list):
        raise CatalogueError(f"items_file: expected a JSON list of items, got {type(items).__name__}")
    instructions = _read_json(instructions_file, "instructions_file")
    if not isinstance(instructions, dict):
        raise CatalogueError(
            f"instructions_file: expected a JSON object keyed by ASIN, got {type(instructions).__name__}")
    reviews = _reviews(reviews_file)
    rng = random.Random(seed)
    if num_products is not None:
        items = items[:num_products]
    products, seen = [], set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise CatalogueError(f"items_file: item {i} is not an object")
        asin = str(item.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        product = _product(item, i, reviews)
        entry = instructions.get(asin)
        if isinstance(entry, dict):
            product["Attributes"] = [str(a) for a in entry.get("attributes") or []]
        product["price"] = sample_price(product["pricing"], rng)
        products.append(product)
    goals, skipped = [], 0
    for product in products:
        entry = instructions.get(product["asin"])
        if isinstance(entry, list):
            more, bad = _human_goals(product, entry, rng)
            goals += more
            skipped += bad
        elif isinstance(entry, dict):
            attributes = list(entry.get("instruction_attributes") or [])
            if not attributes or not entry.get("instruction"):
                skipped += 1
                continue
            base = str(entry["instruction"]).strip(".")
            goals += synthetic_goals(product, base, attributes, rng, max_goals_per_product)
    skipped += sum(1 for asin in instructions if asin not in seen)
    if not goals:
        raise CatalogueError(f"instructions_file: no goals: none of the {len(instructions)} entries names a loaded "
                             "product with an instruction and instruction_attributes")
    return Catalogue(products, goals, {p["asin"]: p["price"] for p in products}, skipped_goals=skipped)
