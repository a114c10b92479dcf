"""Catalogues: products and goals (instructions) in WebShop's field layout (``products``), generated here or loaded
from WebShop's files (``loader``); ``CatalogueSpec`` is the recipe that picks one.

The generated catalogue (the offline default) is a pure function of ``catalogue_seed`` and ``num_products``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

# the catalogue's builders (and rapidfuzz under the reward) load when a catalogue is made: the webshop env imports
# this module for its recipe (``CatalogueSpec``) to list itself
if TYPE_CHECKING:
    from ragen_webshop_server.products import Catalogue

SOURCES = ("generated", "items")


# ---- the catalogue and its recipe ----------------------------------------------------------------------------------
@attrs.frozen
class CatalogueSpec:
    """Everything that determines a catalogue; servers are shared between envs with equal specs."""

    source: str = "generated"
    catalogue_seed: int = 0
    num_products: int | None = 1000
    max_goals_per_product: int = 4  #: 0 = one goal per option combination (WebShop)
    items_file: str | None = None
    instructions_file: str | None = None
    reviews_file: str | None = None
    noun_extractor: str = "auto"

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CatalogueSpec:
        return cls(**json.loads(text))

    @property
    def tag(self) -> str:
        """Short stable name used in task ids."""
        if self.source == "generated":
            return f"generated/c{self.catalogue_seed}/n{self.num_products}"
        return f"items/{Path(self.items_file or '').stem}"

    def build(self) -> Catalogue:
        from ragen_webshop_server.loader import load_items

        if self.source == "generated":
            return generate_catalogue(self.catalogue_seed, self.num_products or 1000, self.max_goals_per_product)
        return load_items(self.items_file, self.instructions_file, self.reviews_file, seed=self.catalogue_seed,
                          num_products=self.num_products, max_goals_per_product=self.max_goals_per_product)


# ---- the generated catalogue ---------------------------------------------------------------------------------------
@attrs.frozen
class ProductType:
    name: str  #: the product's `name` and the noun phrase of its instructions ("shampoo")
    path: tuple[str, ...]  #: category levels below the root
    price: tuple[float, float]  #: range of list prices
    options: dict[str, tuple[str, ...]]  #: option dimension -> candidate values, in display order
    attributes: tuple[str, ...]  #: attribute phrases this type draws 2-5 from
    title: str = ""  #: display form in titles (default: name.title())


SIZES_CLOTHES = ("small", "medium", "large", "x-large", "xx-large")
SCENTS = ("lavender", "coconut", "eucalyptus", "citrus", "unscented")
HAIR_SIZES = ("8 fl oz", "12 fl oz", "16 fl oz", "33.8 fl oz")

#: category -> (root of product_category, product types); five WebShop categories, >= 6 types and >= 12 attributes each
CATEGORIES: dict[str, tuple[str, tuple[ProductType, ...]]] = {
    "beauty": ("Beauty & Personal Care", (
        ProductType("shampoo", ("Hair Care", "Shampoo & Conditioner", "Shampoos"), (6, 28),
                    {"size": HAIR_SIZES, "scent": SCENTS},
                    ("sulfate free", "paraben free", "cruelty free", "natural ingredients", "dry hair", "color safe")),
        ProductType("conditioner", ("Hair Care", "Shampoo & Conditioner", "Conditioners"), (6, 28),
                    {"size": HAIR_SIZES, "scent": SCENTS},
                    ("sulfate free", "paraben free", "cruelty free", "deep conditioning", "dry hair", "color safe")),
        ProductType("face moisturizer", ("Skin Care", "Face", "Moisturizers"), (10, 45),
                    {"size": ("1 fl oz", "1.7 fl oz", "2.5 fl oz", "3.4 fl oz")},
                    ("hyaluronic acid", "sensitive skin", "fragrance free", "anti aging", "non comedogenic",
                     "dermatologist tested", "cruelty free")),
        ProductType("lipstick", ("Makeup", "Lips", "Lipstick"), (5, 30),
                    {"color": ("red", "pink", "nude", "coral", "plum", "berry")},
                    ("long lasting", "cruelty free", "matte finish", "paraben free", "natural ingredients")),
        ProductType("nail polish", ("Foot, Hand & Nail Care", "Nail Art & Polish", "Nail Polish"), (4, 18),
                    {"color": ("red", "pink", "black", "white", "purple", "gold")},
                    ("long lasting", "quick drying", "cruelty free", "chip resistant", "high gloss")),
        ProductType("hair dryer", ("Hair Care", "Styling Tools & Appliances", "Hair Dryers"), (20, 120),
                    {"color": ("black", "white", "pink", "purple", "silver")},
                    ("fast drying", "low noise", "travel size", "ionic technology", "easy to use",
                     "lightweight design")),
        ProductType("body lotion", ("Skin Care", "Body", "Lotions"), (5, 25),
                    {"size": ("8 fl oz", "13.5 fl oz", "16 fl oz", "32 fl oz"), "scent": SCENTS},
                    ("dry skin", "sensitive skin", "fragrance free", "non greasy", "natural ingredients",
                     "shea butter")),
    )),
    "electronics": ("Electronics", (
        ProductType("bluetooth speaker", ("Portable Audio & Video", "Portable Speakers & Docks"), (15, 150),
                    {"color": ("black", "blue", "red", "gray", "green")},
                    ("water resistant", "long battery life", "stereo sound", "easy to carry", "hands free",
                     "deep bass")),
        ProductType("wireless earbuds", ("Headphones", "Earbud Headphones"), (12, 200),
                    {"color": ("black", "white", "blue", "pink")},
                    ("noise cancelling", "long battery life", "water resistant", "hands free", "fast charging",
                     "wireless charging")),
        ProductType("usb c cable", ("Computers & Accessories", "Cables", "USB Cables"), (5, 25),
                    {"length": ("3 ft", "6 ft", "10 ft"), "color": ("black", "white", "gray")},
                    ("fast charging", "high speed", "heavy duty", "braided nylon", "plug and play"),
                    title="USB C Cable"),
        ProductType("power bank", ("Cell Phones & Accessories", "Chargers & Power Adapters", "Portable Power Banks"),
                    (15, 70), {"size": ("10000mah", "20000mah", "26800mah"), "color": ("black", "white", "blue")},
                    ("fast charging", "usb port", "easy to carry", "wireless charging", "led display")),
        ProductType("hdmi cable", ("Television & Video", "Accessories", "Cables", "HDMI Cables"), (6, 30),
                    {"length": ("3 ft", "6 ft", "10 ft", "15 ft")},
                    ("high speed", "high definition", "gold plated", "plug and play", "heavy duty", "braided nylon"),
                    title="HDMI Cable"),
        ProductType("wireless mouse", ("Computers & Accessories", "Keyboards, Mice & Accessories", "Mice"), (8, 45),
                    {"color": ("black", "white", "gray", "blue", "pink")},
                    ("plug and play", "long battery life", "easy to carry", "ergonomic design", "silent click")),
        ProductType("laptop stand", ("Computers & Accessories", "Laptop Accessories", "Stands"), (15, 60),
                    {"color": ("silver", "black", "gray")},
                    ("heavy duty", "easy to carry", "adjustable height", "aluminum alloy", "non slip", "easy install")),
    )),
    "garden": ("Patio, Lawn & Garden", (
        ProductType("garden hose", ("Gardening & Lawn Care", "Watering Equipment", "Garden Hoses"), (20, 80),
                    {"size": ("25 ft", "50 ft", "75 ft", "100 ft"), "color": ("green", "blue", "black")},
                    ("heavy duty", "leak proof", "kink free", "lightweight design", "easy to use", "brass fittings")),
        ProductType("planter pot", ("Gardening & Lawn Care", "Pots, Planters & Container Accessories", "Planters"),
                    (10, 50), {"size": ("6 inch", "8 inch", "10 inch", "12 inch"), "color": ("white", "black", "gray")},
                    ("drainage hole", "weather resistant", "indoor outdoor", "easy clean", "eco friendly")),
        ProductType("bird feeder", ("Birding & Wildlife", "Bird Feeders"), (12, 45),
                    {"color": ("green", "brown", "red", "black")},
                    ("weather resistant", "squirrel proof", "easy to assemble", "rust proof", "easy clean")),
        ProductType("solar lamp", ("Outdoor Lighting", "Pathway Lights"), (15, 60),
                    {"size": ("2 pack", "4 pack", "6 pack", "8 pack"), "color": ("black", "bronze", "silver")},
                    ("solar powered", "waterproof", "auto on off", "easy install", "stainless steel")),
        ProductType("pruning shears", ("Gardening & Lawn Care", "Hand Tools", "Pruning Shears"), (10, 40),
                    {"color": ("red", "orange", "green", "black")},
                    ("stainless steel", "non slip", "rust proof", "heavy duty", "ergonomic handle")),
        ProductType("patio cushion", ("Patio Furniture & Accessories", "Cushions"), (20, 90),
                    {"size": ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch"),
                     "color": ("beige", "navy", "gray", "red", "teal")},
                    ("weather resistant", "uv protection", "fade resistant", "easy clean", "machine washable")),
    )),
    "fashion": ("Clothing, Shoes & Jewelry", (
        ProductType("running shoes", ("Men", "Shoes", "Athletic", "Running"), (30, 120),
                    {"size": ("7", "8", "9", "10", "11", "12"), "color": ("black", "white", "gray", "blue", "red")},
                    ("rubber sole", "lace up", "breathable mesh", "arch support", "non slip", "lightweight design")),
        ProductType("t-shirt", ("Men", "Clothing", "Shirts", "T-Shirts"), (12, 35),
                    {"size": SIZES_CLOTHES, "color": ("black", "white", "navy", "gray", "green")},
                    ("machine wash", "short sleeve", "relaxed fit", "slim fit", "moisture wicking", "cotton blend"),
                    title="T-Shirt"),
        ProductType("hoodie", ("Men", "Clothing", "Fashion Hoodies & Sweatshirts"), (25, 60),
                    {"size": SIZES_CLOTHES, "color": ("black", "gray", "navy", "maroon")},
                    ("machine wash", "long sleeve", "relaxed fit", "fleece lined", "drawstring closure")),
        ProductType("yoga pants", ("Women", "Clothing", "Active", "Active Pants"), (18, 50),
                    {"size": ("x-small", "small", "medium", "large", "x-large"),
                     "color": ("black", "navy", "gray", "purple", "teal")},
                    ("high waist", "moisture wicking", "tummy control", "elastic waist", "quick dry", "machine wash")),
        ProductType("jeans", ("Men", "Clothing", "Jeans"), (25, 80),
                    {"size": ("28w x 30l", "30w x 30l", "32w x 32l", "34w x 32l", "36w x 34l"),
                     "color": ("dark wash", "light wash", "black", "medium wash")},
                    ("slim fit", "button closure", "machine wash", "straight leg", "relaxed fit")),
        ProductType("baseball cap", ("Men", "Accessories", "Hats & Caps", "Baseball Caps"), (10, 30),
                    {"color": ("black", "navy", "khaki", "red", "white")},
                    ("adjustable strap", "sun protection", "hand wash", "breathable mesh", "curved brim")),
        ProductType("socks", ("Men", "Clothing", "Socks", "Athletic Socks"), (8, 25),
                    {"size": ("medium", "large", "x-large"), "color": ("black", "white", "gray")},
                    ("moisture wicking", "cushioned sole", "arch support", "machine wash", "no show")),
    )),
    "grocery": ("Grocery & Gourmet Food", (
        ProductType("green tea", ("Beverages", "Tea", "Green Tea"), (5, 25),
                    {"size": ("20 count", "40 count", "100 count"),
                     "flavor name": ("original", "jasmine", "mint", "lemon", "ginger")},
                    ("usda organic", "non gmo", "gluten free", "kosher certified", "sugar free",
                     "individually wrapped")),
        ProductType("coffee beans", ("Beverages", "Coffee", "Whole Coffee Beans"), (8, 35),
                    {"size": ("12 ounce", "2 pound", "5 pound"),
                     "flavor name": ("dark roast", "medium roast", "light roast", "espresso")},
                    ("usda organic", "non gmo", "fair trade", "kosher certified", "low acid")),
        ProductType("granola bars", ("Snack Foods", "Bars", "Granola Bars"), (4, 20),
                    {"size": ("6 count", "12 count", "24 count"),
                     "flavor name": ("peanut butter", "maple oat", "blueberry", "cinnamon")},
                    ("gluten free", "high protein", "non gmo", "low sugar", "individually wrapped", "whole grain")),
        ProductType("olive oil", ("Pantry Staples", "Cooking Oils", "Olive Oils"), (8, 40),
                    {"size": ("16.9 fl oz", "25.5 fl oz", "33.8 fl oz", "68 fl oz")},
                    ("extra virgin", "cold pressed", "usda organic", "non gmo", "kosher certified", "glass bottle")),
        ProductType("candy bar", ("Candy & Chocolate", "Candy Bars"), (4, 25),
                    {"size": ("3.5 ounce", "pack of 6", "pack of 12"),
                     "flavor name": ("sea salt", "almond", "orange", "raspberry")},
                    ("dairy free", "gluten free", "low sugar", "fair trade", "keto friendly", "plant based")),
        ProductType("protein powder", ("Sports Nutrition", "Protein", "Whey Protein"), (20, 70),
                    {"size": ("1 pound", "2 pound", "5 pound"),
                     "flavor name": ("vanilla", "cocoa", "strawberry", "unflavored")},
                    ("high protein", "gluten free", "keto friendly", "low carb", "sugar free", "plant based")),
        ProductType("honey", ("Pantry Staples", "Jams, Jellies & Sweet Spreads", "Honey"), (6, 30),
                    {"size": ("12 ounce", "16 ounce", "32 ounce")},
                    ("raw unfiltered", "usda organic", "non gmo", "kosher certified", "gluten free", "glass jar")),
    )),
}

BRANDS = (
    "Lumora", "Brava", "Kestrel", "Verano", "Altura", "Nimbus", "Corvid", "Tessera", "Halcyon", "Marlow", "Quillon",
    "Sablewood", "Orison", "Velia", "Brisa", "Calder", "Fennick", "Larkspur", "Mirelle", "Northvale", "Ostara",
    "Pellucid", "Quorra", "Ravelin", "Solenne", "Thistle", "Vantor", "Wrenfield", "Yarrow", "Zephyrine",
)
LINES = ("Classic", "Pro", "Essential", "Ultra", "Daily", "Premium", "Select", "Prime", "Nova", "Pure", "Active",
         "Signature")
ATTRIBUTE_BULLETS = (
    "{ATTR}: this {name} is {attr}, made for everyday use",
    "{ATTR}: a {attr} {name} you can rely on",
    "{ATTR}: built to be {attr} without compromise",
    "{ATTR}: customers choose it because it is {attr}",
)
GENERIC_BULLETS = (
    "EASY RETURNS: contact the {brand} team with any question about your {name}",
    "QUALITY CHECKED: every {name} is inspected before it ships",
    "GIFT IDEA: a practical {name} for friends and family",
    "WHAT YOU GET: one {name} and a thank you note from {brand}",
)
DESCRIPTION_TAILS = (
    "It is backed by the {brand} quality promise.",
    "Order today and enjoy it for years.",
    "Our team tests every batch before it leaves the warehouse.",
    "Loved by customers who want a simple, honest {name}.",
)
REVIEW_TITLES = ("Great value", "Works as described", "Pretty good", "Love it", "Would buy again", "Could be better")
REVIEW_BODIES = (
    "The {name} arrived quickly and does what I need.",
    "Good quality for the price.",
    "I use this {name} every day.",
    "It is fine but I expected more.",
    "Exactly as described in the listing.",
)
ASIN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def all_types() -> list[tuple[str, str, ProductType]]:
    return [(cat, root, t) for cat, (root, types) in CATEGORIES.items() for t in types]


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _texts(product: dict) -> list[str]:
    return [product["Title"].lower(), " ".join(product["BulletPoints"]).lower(), product["Description"].lower()]


def _pick_options(t: ProductType, texts: list[str], rng: random.Random) -> dict[str, list[str]]:
    """2-4 values per dimension, keeping only values that a wrong choice cannot pass for: none occurs in the product's
    texts (WebShop's substring fallback) and no two match each other under the option-matching rule."""
    from ragen_webshop_server.reward import normalize_color, option_matches

    kept: list[tuple[str, str]] = []
    options: dict[str, list[str]] = {}
    for dim, values in t.options.items():
        k = rng.randint(2, min(4, len(values)))
        chosen = [values[i] for i in sorted(rng.sample(range(len(values)), k))]
        ok = []
        for v in chosen:
            norm = normalize_color(v)
            if any(v in text or norm in text for text in texts):
                continue
            if any(option_matches(dim, v, [u]) or option_matches(d, u, [v]) for d, u in kept):
                continue
            ok.append(v)
        if len(ok) >= 2:
            options[dim] = ok
            kept.extend((dim, v) for v in ok)
    return options


def _product(cat: str, root: str, t: ProductType, rng: random.Random, titles: set[str]) -> dict:
    display = t.title or t.name.title()
    attributes = rng.sample(t.attributes, rng.randint(2, min(5, len(t.attributes))))
    while True:  # unique titles: the expert's fallback search is by title
        brand, line = rng.choice(BRANDS), rng.choice(LINES)
        title = f"{brand} {line} {display}, " + ", ".join(a.title() for a in attributes[:2])
        if title not in titles:
            titles.add(title)
            break
        rng.shuffle(attributes)
    fmt = {"name": t.name, "brand": brand}
    bullets = [rng.choice(ATTRIBUTE_BULLETS).format(ATTR=a.upper(), attr=a, **fmt) for a in attributes[:4]]
    generic = rng.sample(GENERIC_BULLETS, len(GENERIC_BULLETS))
    target = rng.randint(3, 5)
    while len(bullets) < target:
        bullets.append(generic.pop().format(**fmt))
    description = (f"The {brand} {line} {t.name} is {_join(attributes)}. "
                   + rng.choice(DESCRIPTION_TAILS).format(**fmt))
    reviews = [{"title": rng.choice(REVIEW_TITLES), "score": rng.choice((2, 3, 4, 4, 5, 5)),
                "body": rng.choice(REVIEW_BODIES).format(**fmt)} for _ in range(rng.randint(0, 3))]
    low, high = t.price
    first = round(rng.uniform(low, high), 2)
    pricing = [first, round(first * rng.uniform(1.1, 1.4), 2)] if rng.random() < 0.2 else [first]
    product = {
        "asin": "",
        "Title": title,
        "name": t.name,
        "query": t.name,
        "category": cat,
        "product_category": " › ".join((root, *t.path)),
        "BulletPoints": bullets,
        "Description": description,
        "Reviews": reviews,
        "Rating": f"{sum(r['score'] for r in reviews) / len(reviews):.1f}" if reviews else "N.A.",
        "pricing": pricing,
        "Price": " to ".join(f"${x:.2f}" for x in pricing),
        "Attributes": attributes,
    }
    product["options"] = _pick_options(t, _texts(product), rng)
    from ragen_webshop_server.products import sample_price

    product["price"] = sample_price(pricing, rng)
    return product


def generate_catalogue(seed: int = 0, num_products: int = 1000, max_goals_per_product: int = 4) -> Catalogue:
    """``num_products`` products of random types over the five categories, each with 1-4 goals (1-3 of its attributes,
    one option combination each, a WebShop price cap); everything from ``random.Random(seed)``."""
    from ragen_webshop_server.products import Catalogue, synthetic_goals

    rng = random.Random(seed)
    types = all_types()
    products, goals, titles, asins = [], [], set(), set()
    for i in range(num_products):
        cat, root, t = rng.choice(types)
        product = _product(cat, root, t, rng, titles)
        asin = "B" + "".join(rng.choice(ASIN_CHARS) for _ in range(9))
        while asin in asins:
            asin = "B" + "".join(rng.choice(ASIN_CHARS) for _ in range(9))
        asins.add(asin)
        product["asin"] = asin
        products.append(product)
        wanted = rng.sample(product["Attributes"], rng.randint(1, min(3, len(product["Attributes"]))))
        goals += synthetic_goals(product, f"Find {_join(wanted)} {t.name}", wanted, rng, max_goals_per_product)
    return Catalogue(products, goals, {p["asin"]: p["price"] for p in products})


def to_webshop_files(catalogue: Catalogue, out_dir: str | Path, stem: str = "generated") -> tuple[Path, Path]:
    """Write a catalogue as WebShop's ``items_shuffle_{stem}.json`` and ``items_ins_v2_{stem}.json`` (the format
    ``webshop-items`` reads); the instruction of a product is that of its first goal, without options and price."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items, ins = [], {}
    first_goal: dict[str, dict] = {}
    for g in catalogue.goals:
        first_goal.setdefault(g["asin"], g)
    for p in catalogue.products:
        items.append({
            "asin": p["asin"], "name": p["Title"], "full_description": p["Description"],
            "small_description": p["BulletPoints"], "pricing": "".join(f"${x:.2f}" for x in p["pricing"]),
            "customization_options": {k: [{"value": v, "image": None} for v in vals]
                                      for k, vals in p["options"].items()},
            "category": p["category"], "query": p["query"], "product_category": p["product_category"],
        })
        entry: dict[str, Any] = {"attributes": p["Attributes"]}
        goal = first_goal.get(p["asin"])
        if goal is not None:
            entry.update(instruction=goal["instruction"], instruction_attributes=goal["attributes"])
        ins[p["asin"]] = entry
    items_path, ins_path = out / f"items_shuffle_{stem}.json", out / f"items_ins_v2_{stem}.json"
    items_path.write_text(json.dumps(items, indent=1))
    ins_path.write_text(json.dumps(ins, indent=1))
    return items_path, ins_path
