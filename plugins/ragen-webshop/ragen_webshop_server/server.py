"""The WebShop server: a Flask app on werkzeug, bound to a loopback address.

Routes (WebShop's, plus a small JSON API for the env):

* ``GET /health`` -> ``{"status": "ok", "num_products", "num_goals", "index": "bm25s", "source"}``
* ``POST /api/visit {"goal_index": int}`` -> ``{"visit", "instruction", "goal"}`` (one visit per episode; ``goal`` is
  the oracle view the expert reads); ``GET /api/visit/<visit>`` its state; ``DELETE /api/visit/<visit>`` drops it.
* ``/<visit>`` search page (a form ``POST`` with ``search_query`` redirects to the results),
  ``/search_results/<visit>/<keywords>/<page>``, ``/item_page/<visit>/<asin>/<keywords>/<page>/<options>``,
  ``/item_sub_page/<visit>/<asin>/<keywords>/<page>/<sub_page>/<options>``, ``/done/<visit>/<asin>/<options>``
  (the purchase: scored once, later calls show the same score). ``keywords`` are word tokens joined by ``+``;
  ``options`` is a JSON object ``{dimension: value}``.

Bad input gets a 4xx answer (JSON for ``/api``, a short page otherwise), never a 5xx; a method a route does not
name (HEAD, OPTIONS, TRACE, ...) is a 405 with ``Allow``; nothing a client sends stops the server.
Standalone: ``python -m ragen_webshop_server --port 3000`` (generated catalogue) or with ``--items-file`` and
``--instructions-file``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import attrs
from flask import Flask, Response, abort, jsonify, redirect, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.serving import make_server

from ragen_webshop_server import pages
from ragen_webshop_server.catalogue import CatalogueSpec
from ragen_webshop_server.products import Catalogue
from ragen_webshop_server.reward import NounExtractor, get_reward
from ragen_webshop_server.search import KEYWORD, SearchIndex, keywords_of

LOOPBACK = ("127.0.0.1", "::1", "localhost")
MAX_VISITS = 100_000  #: oldest visits are dropped beyond this (envs delete theirs; this bounds leaks from crashes)
MAX_KEYWORDS = 50
MAX_PAGE = 5  #: 50 results, 10 per page


@attrs.define
class Visit:
    """One episode on the shop: its goal, where it is, what it has seen and bought."""

    goal_index: int
    keywords: list[str] | None = None
    page: int | None = None
    asin: str | None = None
    options: dict[str, str] = attrs.Factory(dict)
    visited: list[str] = attrs.Factory(list)
    done: bool = False
    purchase: dict[str, Any] | None = None
    lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)

    def state(self) -> dict[str, Any]:
        return {"goal_index": self.goal_index, "keywords": self.keywords, "page": self.page, "asin": self.asin,
                "options": self.options, "visited_asins": list(self.visited), "done": self.done,
                "purchase": self.purchase}


class VisitStore:
    def __init__(self, limit: int = MAX_VISITS):
        self._visits: OrderedDict[str, Visit] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def create(self, goal_index: int) -> str:
        vid = secrets.token_hex(8)
        with self._lock:
            self._visits[vid] = Visit(goal_index)
            while len(self._visits) > self._limit:
                self._visits.popitem(last=False)
        return vid

    def get(self, vid: str) -> Visit:
        with self._lock:
            visit = self._visits.get(vid)
        if visit is None:
            abort(404, description=f"unknown visit {vid!r}")
        return visit

    def delete(self, vid: str) -> bool:
        with self._lock:
            return self._visits.pop(vid, None) is not None

    def __len__(self) -> int:
        return len(self._visits)


# ---- request parsing ----------------------------------------------------------------------------------------------
def parse_keywords(segment: str) -> list[str]:
    words = [w for w in segment.split("+") if w]
    if not words or len(words) > MAX_KEYWORDS or not all(KEYWORD.fullmatch(w) for w in words):
        abort(400, description="keywords: expected 1-50 word tokens joined by '+'")
    return [w.lower() for w in words]


def parse_page(page: int) -> int:
    if not 1 <= page <= MAX_PAGE:
        abort(404, description=f"page: expected 1..{MAX_PAGE}, got {page}")
    return page


def parse_options(segment: str, product: dict) -> dict[str, str]:
    try:
        options = json.loads(segment)
    except (json.JSONDecodeError, RecursionError):
        abort(400, description="options: not a JSON object")
    if not isinstance(options, dict):
        abort(400, description="options: not a JSON object")
    for dim, value in options.items():
        if dim not in product["options"] or not isinstance(value, str) or value not in product["options"][dim]:
            abort(400, description=f"options: {product['asin']} has no option {dim!r}: {value!r}")
    return options


def oracle_goal(goal: dict, product: dict) -> dict:
    """The goal as the expert sees it: the target ASIN, its options and title, the wanted attributes and options."""
    return {**goal, "title": product["Title"], "product_options": product["options"]}


AUTOMATIC_METHODS = ("HEAD", "OPTIONS")  #: answered by Flask on every route unless refused


# ---- the app ------------------------------------------------------------------------------------------------------
def create_app(catalogue: Catalogue, nouns: NounExtractor, source: str = "generated") -> Flask:
    app = Flask("ragen_webshop")
    app.config["MAX_CONTENT_LENGTH"] = 1 << 20
    index = SearchIndex(catalogue.products)
    visits = VisitStore()
    goals, products, by_asin = catalogue.goals, catalogue.products, catalogue.by_asin
    app.extensions["ragen_webshop"] = {"catalogue": catalogue, "visits": visits, "index": index}

    def product_or_404(asin: str) -> dict:
        product = by_asin.get(asin)
        if product is None:
            abort(404, description=f"unknown product {asin!r}")
        return product

    def instruction(visit: Visit) -> str:
        return goals[visit.goal_index]["instruction_text"]

    @app.before_request
    def refuse_head_and_options() -> None:
        """Flask answers HEAD and OPTIONS on every route by itself; the shop serves only what its routes name."""
        if request.method in AUTOMATIC_METHODS and request.routing_exception is None:
            raise MethodNotAllowed(valid_methods=app.create_url_adapter(request).allowed_methods())

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        if request.path.startswith("/api/") or request.path == "/health":
            response = jsonify(error=exc.description, code=exc.code)
        else:
            response = Response(pages.ERROR.render(code=exc.code, message=exc.description), mimetype="text/html")
        response.status_code = exc.code
        if isinstance(exc, MethodNotAllowed):
            response.headers["Allow"] = ", ".join(sorted(set(exc.valid_methods or ()) - set(AUTOMATIC_METHODS)))
        return response

    @app.get("/health")
    def health() -> Any:
        return {"status": "ok", "num_products": len(products), "num_goals": len(goals), "index": "bm25s",
                "source": source, "visits": len(visits), "nouns": nouns.mode}

    @app.post("/api/visit")
    def new_visit() -> Any:
        try:
            data = request.get_json(silent=True)
        except RecursionError:  # a deeply nested body (silent=True covers only ValueError)
            data = None
        gi = data.get("goal_index") if isinstance(data, dict) else None
        if type(gi) is not int or not 0 <= gi < len(goals):
            abort(400, description=f"expected a JSON object {{\"goal_index\": 0..{len(goals) - 1}}}")
        vid = visits.create(gi)
        goal = goals[gi]
        return {"visit": vid, "instruction": goal["instruction_text"],
                "goal": oracle_goal(goal, by_asin[goal["asin"]])}, 201

    @app.get("/api/visit/<vid>")
    def visit_state(vid: str) -> Any:
        return visits.get(vid).state()

    @app.delete("/api/visit/<vid>")
    def drop_visit(vid: str) -> Any:
        if not visits.delete(vid):
            abort(404, description=f"unknown visit {vid!r}")
        return "", 204

    @app.route("/<vid>", methods=["GET", "POST"])
    def search_page(vid: str) -> Any:
        visit = visits.get(vid)
        if request.method == "POST" and "search_query" in request.form:
            words = keywords_of(request.form["search_query"])[:MAX_KEYWORDS]
            if not words:
                abort(400, description="search_query: no words to search for")
            return redirect(pages.url_results(vid, words, 1), code=303)
        with visit.lock:
            visit.keywords = visit.page = visit.asin = None
            visit.options = {}
        return pages.SEARCH.render(instruction=instruction(visit), search_url=pages.url_home(vid))

    @app.route("/search_results/<vid>/<keywords>/<int:page>", methods=["GET", "POST"])
    def results(vid: str, keywords: str, page: int) -> Any:
        visit, words, page = visits.get(vid), parse_keywords(keywords), parse_page(page)
        hits = index.search(tuple(words))
        shown = hits[(page - 1) * pages.PRODUCTS_PER_PAGE: page * pages.PRODUCTS_PER_PAGE]
        with visit.lock:
            visit.keywords, visit.page, visit.asin, visit.options = words, page, None, {}
        listing = [{"asin": products[i]["asin"], "title": products[i]["Title"], "price": products[i]["Price"],
                    "url": pages.url_item(vid, products[i]["asin"], words, page, {})} for i in shown]
        return pages.RESULTS.render(
            instruction=instruction(visit), home_url=pages.url_home(vid), page=page, total=len(hits),
            prev_url=pages.url_results(vid, words, page - 1) if page > 1 else None,
            next_url=pages.url_results(vid, words, page + 1) if page * pages.PRODUCTS_PER_PAGE < len(hits) else None,
            products=listing,
        )

    @app.route("/item_page/<vid>/<asin>/<keywords>/<int:page>/<path:options>", methods=["GET", "POST"])
    def item_page(vid: str, asin: str, keywords: str, page: int, options: str) -> Any:
        visit, product = visits.get(vid), product_or_404(asin)
        words, page, chosen = parse_keywords(keywords), parse_page(page), parse_options(options, product)
        with visit.lock:
            visit.keywords, visit.page, visit.asin, visit.options = words, page, asin, chosen
            if asin not in visit.visited:
                visit.visited.append(asin)
        option_rows = [
            (dim, [{"value": v, "checked": chosen.get(dim) == v,
                    "url": pages.url_item(vid, asin, words, page, {**chosen, dim: v})} for v in values])
            for dim, values in product["options"].items()
        ]
        return pages.ITEM.render(
            instruction=instruction(visit), home_url=pages.url_home(vid),
            prev_url=pages.url_results(vid, words, page), options=option_rows, title=product["Title"],
            price=product["Price"], rating=product["Rating"],
            sub_pages=[(s, pages.url_sub(vid, asin, words, page, s, chosen)) for s in pages.SUB_PAGES],
            buy_url=pages.url_done(vid, asin, chosen),
        )

    @app.route("/item_sub_page/<vid>/<asin>/<keywords>/<int:page>/<sub_page>/<path:options>", methods=["GET", "POST"])
    def item_sub_page(vid: str, asin: str, keywords: str, page: int, sub_page: str, options: str) -> Any:
        visit, product = visits.get(vid), product_or_404(asin)
        words, page, chosen = parse_keywords(keywords), parse_page(page), parse_options(options, product)
        name = next((s for s in pages.SUB_PAGES if s.lower() == sub_page.lower()), None)
        if name is None:
            abort(404, description=f"sub_page: expected one of {', '.join(pages.SUB_PAGES)}")
        return pages.SUB_PAGE.render(
            instruction=instruction(visit), home_url=pages.url_home(vid),
            prev_url=pages.url_item(vid, asin, words, page, chosen), lines=pages.sub_page_lines(product, name),
        )

    @app.route("/done/<vid>/<asin>/<path:options>", methods=["GET", "POST"])
    def done(vid: str, asin: str, options: str) -> Any:
        visit, product = visits.get(vid), product_or_404(asin)
        chosen = parse_options(options, product)
        with visit.lock:
            if not visit.done:  # the first purchase is final
                price = catalogue.prices[asin]
                score, parts = get_reward(product, goals[visit.goal_index], price, chosen, nouns)
                visit.done = True
                visit.purchase = {"asin": asin, "options": chosen, "price": price, "reward": score,
                                  "reward_info": parts}
            reward = visit.purchase["reward"]
        return pages.DONE.render(reward=reward)

    return app


# ---- standalone / subprocess entry point ----------------------------------------------------------------------------
def _spec_from_args(args: argparse.Namespace) -> CatalogueSpec:
    if args.spec:
        return CatalogueSpec.from_json(args.spec)
    source = "items" if args.items_file else "generated"
    return CatalogueSpec(source=source, catalogue_seed=args.catalogue_seed, num_products=args.num_products,
                         max_goals_per_product=args.max_goals_per_product, items_file=args.items_file,
                         instructions_file=args.instructions_file, reviews_file=args.reviews_file,
                         noun_extractor=args.noun_extractor)


def _watch_stdin() -> None:
    """Exit when stdin closes: the env that started us holds its write end, so we never outlive it."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ragen_webshop_server", description="WebShop server for ragen")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (127.0.0.1, ::1 or localhost)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument("--watch-stdin", action="store_true", help="exit when stdin reaches EOF")
    parser.add_argument("--spec", help="catalogue spec as JSON (what the env passes)")
    parser.add_argument("--catalogue-seed", type=int, default=0)
    parser.add_argument("--num-products", type=int, default=None)
    parser.add_argument("--max-goals-per-product", type=int, default=4)
    parser.add_argument("--items-file")
    parser.add_argument("--instructions-file")
    parser.add_argument("--reviews-file")
    parser.add_argument("--noun-extractor", default="auto", choices=("auto", "simple", "spacy"))
    args = parser.parse_args(argv)
    if args.host not in LOOPBACK:
        parser.error(f"--host: the shop only binds loopback addresses ({', '.join(LOOPBACK)}), got {args.host!r}")
    if args.watch_stdin:
        threading.Thread(target=_watch_stdin, daemon=True).start()
    spec = _spec_from_args(args)
    if spec.source == "generated" and spec.num_products is None:
        spec = attrs.evolve(spec, num_products=1000)
    try:
        catalogue = spec.build()
        nouns = NounExtractor(spec.noun_extractor, catalogue.vocab)
    except Exception as exc:  # noqa: BLE001 - reported to the env, which raises it as a config error
        print(f"ERROR: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    app = create_app(catalogue, nouns, spec.source)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request log lines
    server = make_server(args.host, args.port, app, threaded=True)
    port = server.server_port
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, args.port_file)
    print(f"webshop: {len(catalogue.products)} products, {len(catalogue.goals)} goals on http://{args.host}:{port}",
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
