"""The WebShop environment: an agent shops on a real (local) web shop through a text browser (environments.md §10).

The env starts a shop server for its catalogue (shared, reference-counted; or uses ``server_url``), opens one
*visit* per episode and turns every page into WebShop's simple text observation followed by RAGEN's hint lines and
the list of available actions. ``search[...]`` / ``click[...]`` that the page does not offer are executed but
invalid: nothing changes and they earn nothing. ``click[buy now]`` purchases and ends the episode with WebShop's
score, binarised as RAGEN does (1.0 iff the raw score is 1.0).
"""

from __future__ import annotations

import json
import random
import re
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
from ragen_webshop_server.catalogue import SOURCES, CatalogueSpec
from ragen_webshop_server.search import keywords_of

from ragen import ConfigError, Env, EnvConfig, Expert, option

if TYPE_CHECKING:  # the server and the browser (requests, BeautifulSoup) load when an env is made, not listed
    from ragen_webshop import service
    from ragen_webshop.browser import TextBrowser

SPLIT_SCHEMES = ("fraction", "ragen")
NOUN_EXTRACTORS = ("auto", "simple", "spacy")
ACTION = re.compile(r"\s*(search|click)\s*\[(.*)\]", re.IGNORECASE | re.DOTALL)
SUCCESS_EPS = 1e-9  #: raw scores are ratios of small integers; this only guards against float rounding


def _path_or_none(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


@attrs.frozen(kw_only=True)
class WebShopConfig(EnvConfig):
    """WebShop settings: the catalogue, goal splits, observation hints, reward binarisation, the server."""

    source: str = option("generated", "'generated' (seeded synthetic catalogue) or 'items' (WebShop-format files).",
                         validator=attrs.validators.in_(SOURCES))
    catalogue_seed: int = option(0, "Seed of the generated catalogue; with 'items', of the price draws and caps.")
    num_products: int | None = option(1000, "Products generated, or the first N items read (None: all items).")
    max_goals_per_product: int = option(
        4, "Goals per product, one per option combination drawn at random; 0 = every combination (WebShop).")
    items_file: str | None = option(None, "WebShop items_shuffle*.json (source=items).", converter=_path_or_none)
    instructions_file: str | None = option(None, "WebShop items_ins_v2*.json or items_human_ins.json (source=items).",
                                           converter=_path_or_none)
    reviews_file: str | None = option(None, "Optional WebShop reviews JSON (source=items).", converter=_path_or_none)
    split_scheme: str = option(
        "fraction", "'fraction': Random(42) permutation, test first 10 %, val next 10 %, train the rest; "
        "'ragen': RAGEN's index ranges (test 500, val 1000, train the rest; needs >= 2,000 goals).",
        validator=attrs.validators.in_(SPLIT_SCHEMES))
    hints: bool = option(True, "Add RAGEN's hint lines (own wording) to every observation.")
    binarize: bool = option(True, "Reward 1.0 iff WebShop's raw score is 1.0, else 0 (RAGEN); False: the raw score.")
    max_steps: int = option(9, "Actions after which the env truncates the episode (RAGEN: 9).")
    server_url: str | None = option(None, "Use a shop server already running there instead of starting one.",
                                    converter=_path_or_none)
    startup_timeout_s: float = option(30.0, "Seconds a started server has to answer GET /health.")
    request_timeout_s: float = option(30.0, "Seconds per HTTP request to the shop.")
    noun_extractor: str = option(
        "auto", "Nouns for the type reward: 'spacy' (en_core_web_lg, WebShop), 'simple' (no dependency), 'auto'.",
        validator=attrs.validators.in_(NOUN_EXTRACTORS))

    #: search, click the product, buy now
    min_actions_to_solve: ClassVar[int] = 3

    def __attrs_post_init__(self) -> None:
        if self.num_products is not None and self.num_products < 1:
            raise ConfigError(f"num_products: must be >= 1 or None, got {self.num_products}")
        if self.max_goals_per_product < 0:
            raise ConfigError(f"max_goals_per_product: must be >= 0, got {self.max_goals_per_product}")
        if self.max_steps < 1:
            raise ConfigError(f"max_steps: must be >= 1, got {self.max_steps}")
        for key in ("startup_timeout_s", "request_timeout_s"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0, got {getattr(self, key)}")
        super().__attrs_post_init__()

    def check_files(self) -> None:
        """With source=items, the files must be given and exist (checked when an env is built, so that the variant's
        options can be listed without them)."""
        if self.source != "items" or self.server_url:
            return
        for key in ("items_file", "instructions_file"):
            if getattr(self, key) is None:
                raise ConfigError(f"{key}: source=items needs WebShop-format files: set items_file (items_shuffle"
                                  "*.json) and instructions_file (items_ins_v2*.json)")
        for key in ("items_file", "instructions_file", "reviews_file"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{key}: {path!r} is not a file")

    def catalogue_spec(self) -> CatalogueSpec:
        """What the server builds; files as absolute paths so equal catalogues share one server."""
        def absolute(p: str | None) -> str | None:
            return str(Path(p).resolve()) if p else None

        return CatalogueSpec(
            source=self.source, catalogue_seed=self.catalogue_seed,
            num_products=self.num_products if self.source == "items" else (self.num_products or 1000),
            max_goals_per_product=self.max_goals_per_product, items_file=absolute(self.items_file),
            instructions_file=absolute(self.instructions_file), reviews_file=absolute(self.reviews_file),
            noun_extractor=self.noun_extractor,
        )


# ---- goal splits ----------------------------------------------------------------------------------------------------
_permutations: dict[int, list[int]] = {}


def goal_permutation(n: int) -> list[int]:
    perm = _permutations.get(n)
    if perm is None:
        perm = list(range(n))
        random.Random(42).shuffle(perm)
        _permutations[n] = perm
    return perm


def split_goals(n: int, split: str, scheme: str) -> list[int]:
    """Goal indices of ``split``, in order. 'fraction': test = the first 10 % of the Random(42) permutation, val the
    next 10 % (at least one goal each when n >= 3), train the rest; 'ragen': test 500, val 1,000, train the rest."""
    perm = goal_permutation(n)
    if scheme == "ragen":
        if n < 2000:
            raise ConfigError(f"split_scheme: 'ragen' needs >= 2,000 goals, the catalogue has {n}")
        bounds = {"test": (0, 500), "val": (500, 1500), "train": (1500, n)}
    elif n >= 3:
        k = max(1, n // 10)
        bounds = {"test": (0, k), "val": (k, 2 * k), "train": (2 * k, n)}
    else:
        if split != "train":
            raise ConfigError(f"split: the catalogue has only {n} goal(s), too few for disjoint val/test splits")
        bounds = {"train": (0, n)}
    lo, hi = bounds[split]
    return perm[lo:hi]


def parse_action(text: str) -> tuple[str, str] | None:
    """``(kind, argument)`` of ``search[...]`` / ``click[...]`` (kind case-insensitive, argument stripped and
    lower-cased as WebShop does); the argument ends at the last ``]`` and text after it is ignored (as WebShop's
    ``re.match``, so ``click[buy now].`` works); None for anything else or an empty argument."""
    m = ACTION.match(text)
    if m is None or not m.group(2).strip():
        return None
    return m.group(1).lower(), m.group(2).strip().lower()


def hint_lines(budget: int) -> str:
    """RAGEN's nine hint lines, in our own words."""
    return "\n".join([
        "Hints:",
        f"- Buy a product within {budget} actions; a close match bought in time beats a perfect one never bought.",
        "- Leave details such as size and color out of the search query.",
        "- Search at most 2 times.",
        "- Prefer a product on the current page over a new search or the next page.",
        "- Almost never click next > more than twice; click < prev only to return to a product you saw.",
        "- With fewer than 3 actions left, buy the first product on the current page.",
        "- On a product page click the size, then the color, one at a time, then buy now.",
        "- Never click description.",
    ])


# ---- the expert -----------------------------------------------------------------------------------------------------
class WebShopExpert(Expert):
    """The scripted expert: the decisions of ``ragen_webshop.solver`` on the live page (oracle access to the goal)."""

    def next_actions(self, env: WebShopEnv, k: int) -> list[str]:
        # the solver (rapidfuzz under its reward) loads when the expert acts: listing the env needs none of it
        from ragen_webshop.solver import next_actions

        if env.goal is None or env.closed or env._done or env.browser.page is None:
            return []
        page = env.browser.page
        return next_actions(env.goal, page.kind, page.clickables, env.searches, env.page_number(), env.current_asin(),
                            env.current_options(), k)

    def rationale(self, env: WebShopEnv) -> str:
        from ragen_webshop.solver import explain

        plan = self.next_actions(env, 1)
        return explain(env.goal, env.searches, plan[0]) if plan else ""


# ---- the env --------------------------------------------------------------------------------------------------------
class WebShopEnv(Env):
    """Find and buy the product an instruction describes on a local WebShop (RAGEN WebShop)."""

    config_cls = WebShopConfig
    reset_options = ("task_index",)
    name = "webshop"
    config: WebShopConfig
    concurrency = "thread"  # a step waits on the shop server; each env has its own browser session and visit

    def __init__(self, config: WebShopConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        from ragen_webshop import service
        from ragen_webshop.browser import ShopError, TextBrowser

        cfg = self.config
        cfg.check_files()
        self.procedural = cfg.source == "generated"  # user files may hold a handful of goals
        self.instructions = self._instructions(cfg)
        self.expert = WebShopExpert()
        self._spec = cfg.catalogue_spec()
        self._server: service.ShopServer | None = None
        self._release = None
        self.browser: TextBrowser | None = None
        self.visit: str | None = None
        self.goal: dict | None = None  #: the oracle view of the episode's goal (target ASIN, options, ...)
        self.goal_index: int | None = None
        self.instruction = ""
        self.steps = 0
        self.searches = 0  #: searches executed this episode (the expert's fallback reads it)
        self.found = False  #: the goal product's page was visited
        self.purchase: dict | None = None
        if cfg.server_url:
            base = cfg.server_url
        else:
            self._server = service.acquire(self._spec, cfg.startup_timeout_s)
            # released by close(), or when the env is garbage-collected without one
            self._release = weakref.finalize(self, service.release, self._server)
            base = self._server.url
        self.browser = TextBrowser(base, cfg.request_timeout_s)
        try:
            health = self.browser.api("GET", "/health")
        except ShopError:
            self.close()
            raise
        self.num_goals = int(health["num_goals"])
        if cfg.split_scheme == "ragen" and self.num_goals < 2000:
            self.close()
            raise ConfigError(f"split_scheme: 'ragen' needs >= 2,000 goals, the catalogue has {self.num_goals}")

    # ---- text from the live config -------------------------------------------------------------------------------
    @staticmethod
    def _instructions(cfg: WebShopConfig) -> str:
        per_turn = ("one action per turn" if cfg.max_actions_per_turn == 1 else
                    f"up to {cfg.max_actions_per_turn} actions per turn, separated by ||")
        return (
            "You are web shopping. An instruction describes a product to buy, with attributes, options and a price "
            "limit. Each state shows the current page as text pieces separated by [SEP], then the actions you can "
            "take there. search[keywords] searches the shop (only on a page with a search bar); click[name] clicks "
            "one of the listed buttons, product IDs or option values, e.g. click[back to search], click[next >], "
            "click[b0123abcde], click[large], click[buy now]. An action the page does not offer does nothing. "
            "click[buy now] buys the product with the options selected so far and ends the episode; the purchase "
            "is scored by how well it matches the instruction's product type, attributes, options and price. "
            f"You have {min(cfg.max_actions_per_episode, cfg.max_steps)} actions, {per_turn}. "
            "Answer like <answer>search[gluten free green tea]</answer> or <answer>click[buy now]</answer>."
        )

    def available_actions(self) -> list[str]:
        page = self.browser.page
        actions = ["search[<content>]"] if page.has_search_bar else []
        return actions + [f"click[{name}]" for name in page.clickables if name != "search"]

    def _observe(self, text: str) -> str:
        parts = [text + "."]
        if self.config.hints:
            parts.append(hint_lines(min(self.config.max_actions_per_episode, self.config.max_steps)))
        return "\n".join(parts) + "\n You must choose from these actions:" + ", ".join(self.available_actions())

    # ---- the current page, for the expert and tests ----------------------------------------------------------------
    def current_asin(self) -> str | None:
        page = self.browser.page
        return page.path_parts[2] if page is not None and page.kind in ("item", "sub_page", "done") else None

    def current_options(self) -> dict[str, str]:
        page = self.browser.page
        if page is None or page.kind not in ("item", "sub_page"):
            return {}
        return json.loads(page.path_parts[-1])

    def page_number(self) -> int | None:
        """The result page the browser is on or came from."""
        page = self.browser.page
        index = {"results": 3, "item": 4, "sub_page": 4}.get(page.kind) if page is not None else None
        return int(page.path_parts[index]) if index is not None else None

    # ---- the contract ------------------------------------------------------------------------------------------------
    def validate_action(self, text: str) -> bool:
        """Syntax only: ``search[...]`` or ``click[...]`` with a non-empty argument. Whether the page offers it is
        decided when it runs (an unavailable action is executed as an invalid no-op, as in RAGEN)."""
        return parse_action(text) is not None

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        if self.closed:
            raise RuntimeError(f"{self.name}: the env is closed")
        task_index = options.pop("task_index", None)
        goals = split_goals(self.num_goals, self.split, self.config.split_scheme)
        if task_index is not None:
            if not 0 <= int(task_index) < len(goals):
                raise ConfigError(f"options.task_index: expected 0..{len(goals) - 1} for split {self.split}")
            self.goal_index = goals[int(task_index)]
        else:
            self.goal_index = goals[seed % len(goals)]
        self._drop_visit()
        data = self.browser.api("POST", "/api/visit", {"goal_index": self.goal_index})
        self.visit, self.goal, self.instruction = data["visit"], data["goal"], data["instruction"]
        self.browser.open(f"/{self.visit}")
        self.steps = self.searches = 0
        self.found, self.purchase = False, None
        tag = self._spec.tag if self._server is not None else "server"
        self.task_id = f"webshop/{tag}/g{self.goal_index}"
        return self._observe(self.instruction), {"goal_index": self.goal_index}

    def _execute(self, action: str) -> bool:
        """Run the action if the current page offers it; report whether it did."""
        parsed = parse_action(action)
        if parsed is None:
            return False
        kind, arg = parsed
        page = self.browser.page
        if kind == "search":
            words = keywords_of(arg)
            if not page.has_search_bar or not words:
                return False
            self.browser.search(" ".join(words))
            self.searches += 1
            return True
        if arg == "search" or arg not in page.clickables:
            return False
        self.browser.click(arg)
        return True

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        before = self.browser.page.text
        valid = self._execute(action)
        page = self.browser.page
        if page.kind == "item" and self.current_asin() == self.goal["asin"]:
            self.found = True
        terminated = valid and page.kind == "done"
        raw = 0.0
        if terminated:
            self.purchase = self.browser.api("GET", f"/api/visit/{self.visit}")["purchase"]
            raw = float(self.purchase["reward"])
        success = terminated and raw >= 1.0 - SUCCESS_EPS
        reward = (1.0 if success else 0.0) if self.config.binarize else raw
        obs = self._observe(page.text) if valid else self.render()
        truncated = not terminated and self.steps >= self.config.max_steps
        info: dict[str, Any] = {
            "success": success,
            "action_is_valid": valid,
            "action_is_effective": valid and page.text != before,
            "raw_reward": raw,
            "success_purchase": terminated,
            "success_find": self.found,
        }
        if terminated:
            info["reward_info"] = self.purchase["reward_info"]
        return obs, reward, terminated, truncated, info

    def _drop_visit(self) -> None:
        from ragen_webshop.browser import ShopError

        if self.visit is not None:
            try:
                self.browser.api("DELETE", f"/api/visit/{self.visit}")
            except ShopError:
                pass  # the server is gone or forgot it: nothing to clean up
            self.visit = None

    def _close(self) -> None:
        if getattr(self, "browser", None) is not None:
            self._drop_visit()
            self.browser.close()
        if self._release is not None:
            self._release()
