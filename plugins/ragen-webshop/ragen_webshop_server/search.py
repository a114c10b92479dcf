"""The shop's search engine: BM25 (bm25s, Lucene variant) over each product's title, bullets, description and
attributes; top 50 hits with a positive score, ties broken by catalogue order so results are reproducible."""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import numpy as np

SEARCH_RETURN_N = 50
KEYWORD = re.compile(r"\w+")


def keywords_of(text: str) -> list[str]:
    """The search keywords of free text: lower-cased word tokens (punctuation dropped)."""
    return KEYWORD.findall(text.lower())


def document(product: dict) -> str:
    return " ".join([product["Title"], *product["BulletPoints"], product["Description"], *product["Attributes"]])


class SearchIndex:
    def __init__(self, products: list[dict], k1: float = 1.5, b: float = 0.75):
        import bm25s  # here, not at the top: the webshop env imports this module to list itself, and needs no index

        self._tokenize = bm25s.tokenize
        corpus = bm25s.tokenize([document(p) for p in products], stopwords="en", show_progress=False)
        self._bm25 = bm25s.BM25(method="lucene", k1=k1, b=b)
        self._bm25.index(corpus, show_progress=False)
        self._lock = threading.Lock()  # bm25s makes no thread-safety promise; a query takes well under a millisecond
        self.search = lru_cache(maxsize=4096)(self._search)  # group members repeat each other's queries

    def _search(self, keywords: tuple[str, ...], n: int = SEARCH_RETURN_N) -> tuple[int, ...]:
        """Catalogue indices of the best ``n`` products for ``keywords``, by score, then catalogue order."""
        tokens = self._tokenize([" ".join(keywords)], stopwords="en", return_ids=False, show_progress=False)[0]
        if not tokens:
            return ()
        with self._lock:
            scores = np.asarray(self._bm25.get_scores(tokens), dtype=np.float64)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))]
        return tuple(int(i) for i in order[:n])
