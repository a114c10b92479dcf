"""The BM25 index behind the retrieval server: ``bm25s`` (method lucene, k1 1.5, b 0.75), lower-cased, English
stopwords removed, Snowball English stemming from PyStemmer when it is installed.

A document's score is ``BM25(content) + title_weight * BM25(title)``: two bm25s indices, one over ``title + "\\n" +
text`` and one over the title alone (a BM25F-style title field). With ``title_weight = 0`` it is plain BM25 over the
content. The title field is on by default because plain BM25 ranks a paragraph whose title is exactly the query
below longer paragraphs that repeat the query words (HotpotQA: "Roald Dahl" ranks 6th behind five "... Roald Dahl"
titles); with weight 1 every gold title of the 100 shared HotpotQA questions ranks its paragraph in the top 5.
Results are sorted by score, ties by id; documents matching no query term are never returned.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ragen_searchqa.data import Doc

if TYPE_CHECKING:  # bm25s (and tqdm, asyncio under it) loads when an index is built: listing the env needs none of it
    import bm25s

try:  # the stemmer is optional (environments.md §9); without it terms are matched unstemmed
    import Stemmer
except ImportError:  # pragma: no cover - PyStemmer is a dependency of the package
    Stemmer = None

K1, B, METHOD = 1.5, 0.75, "lucene"


class BM25Index:
    """An in-memory BM25 index of documents; ``search`` is thread-safe (one lock around the stemmer and scoring)."""

    def __init__(self, docs: Sequence[Doc], title_weight: float = 1.0):
        if not docs:
            raise ValueError("the corpus is empty")
        self.docs = list(docs)
        self.title_weight = float(title_weight)
        self.stemmer = Stemmer.Stemmer("english") if Stemmer is not None else None
        self._content = self._build([d.content for d in self.docs])
        self._title = self._build([d.title for d in self.docs]) if self.title_weight > 0 else None
        # rank of each document in id order, so ties sort by id with a numeric key
        order = sorted(range(len(self.docs)), key=lambda i: self.docs[i].id)
        self._id_rank = np.empty(len(self.docs), dtype=np.int64)
        self._id_rank[order] = np.arange(len(self.docs))
        self._lock = threading.Lock()

    @property
    def stemming(self) -> bool:
        return self.stemmer is not None

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        import bm25s

        tokens = bm25s.tokenize(texts, lower=True, stopwords="en", stemmer=self.stemmer, return_ids=False,
                                show_progress=False)
        return [[t for t in doc if t] for doc in tokens]

    def _build(self, texts: list[str]) -> bm25s.BM25:
        import bm25s

        index = bm25s.BM25(method=METHOD, k1=K1, b=B)
        index.index(self.tokenize(texts), show_progress=False)
        return index

    @staticmethod
    def _scores(index: bm25s.BM25, tokens: list[str], n: int) -> np.ndarray:
        known = [t for t in tokens if t in index.vocab_dict]
        if not known:
            return np.zeros(n, dtype=np.float64)
        return index.get_scores(known).astype(np.float64)

    def scores(self, query: str) -> np.ndarray:
        """The score of every document for ``query``."""
        with self._lock:  # PyStemmer objects are not thread-safe
            tokens = self.tokenize([query])[0]
            n = len(self.docs)
            total = self._scores(self._content, tokens, n)
            if self._title is not None:
                total += self.title_weight * self._scores(self._title, tokens, n)
        return total

    def search(self, query: str, top_k: int) -> list[tuple[Doc, float]]:
        """The ``top_k`` best documents with a positive score, by score then id."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if hits.size > top_k:  # keep every document tied with the k-th best, then order exactly
            kth = np.partition(scores[hits], hits.size - top_k)[hits.size - top_k]
            hits = hits[scores[hits] >= kth]
        order = hits[np.lexsort((self._id_rank[hits], -scores[hits]))][:top_k]
        return [(self.docs[i], float(scores[i])) for i in order]
