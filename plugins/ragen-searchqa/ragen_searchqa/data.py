"""Corpus documents, questions and the disjoint train / held-out split shared by every question source.

This module, ``index.py`` and ``server.py`` never import ``ragen``: the server subprocess loads only them
(``import ragen`` pulls in torch and costs seconds per server start).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import attrs


class DataError(ValueError):
    """Bad data or a bad split size; the message starts with the config key (the env raises it as a ConfigError)."""


@attrs.frozen
class Doc:
    """One retrievable passage; the server returns ``content = title + "\\n" + text``."""

    id: str
    title: str
    text: str

    @property
    def content(self) -> str:
        return f"{self.title}\n{self.text}"

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text}


@attrs.frozen
class Question:
    """A question with its gold answers and the titles of the passages that answer it, in reasoning order.

    ``support`` drives the expert (one search per title, then ``finish``); ``hops`` holds, for the synthetic
    knowledge base, the fact each hop establishes (used in the expert's rationale).
    """

    qid: str
    question: str
    answers: tuple[str, ...]
    support: tuple[str, ...]
    kind: str = ""
    hops: tuple[str, ...] = ()


@attrs.frozen
class Dataset:
    """A corpus and its questions; ``train`` and ``held_out`` are disjoint (val and test read ``held_out``)."""

    key: str  #: identifies the corpus (servers are shared between envs with the same key)
    name: str  #: short name in task ids, e.g. ``synthetic/k0n2000``, ``hotpot/hotpot_dev_distractor_100``
    docs: tuple[Doc, ...]
    train: tuple[Question, ...]
    held_out: tuple[Question, ...]

    def split(self, name: str) -> tuple[Question, ...]:
        return self.train if name == "train" else self.held_out


def default_val_size(n: int) -> int:
    """min(500, 10 %) of the questions (environments.md 1.5)."""
    return min(500, n // 10)


def partition(questions: list[Question], val_size: int | None) -> tuple[tuple[Question, ...], tuple[Question, ...]]:
    """Disjoint splits: a ``Random(0)`` permutation, the first ``val_size`` questions held out, the rest train;
    each split keeps source order."""
    n = len(questions)
    size = default_val_size(n) if val_size is None else val_size
    if not 0 <= size < n:
        raise DataError(f"val_size: must be in [0, {n - 1}] for {n} questions, got {size}")
    order = list(range(n))
    random.Random(0).shuffle(order)
    held = set(order[:size])
    train = tuple(q for i, q in enumerate(questions) if i not in held)
    held_out = tuple(q for i, q in enumerate(questions) if i in held)
    return train, held_out


def write_corpus(docs: tuple[Doc, ...] | list[Doc], path: Path) -> None:
    """The server's corpus format: JSON lines ``{"id", "title", "text"}``."""
    with open(path, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc.to_json(), ensure_ascii=False) + "\n")


def read_corpus(path: str | Path) -> list[Doc]:
    """A JSONL corpus ``{"id", "title", "text"}`` (``id`` and ``title`` may be numbers); ids must be unique."""
    docs, seen = [], set()
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    doc = Doc(str(row["id"]), str(row.get("title", "")), str(row.get("text", "")))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise DataError(
                        f"corpus_file: {path}:{lineno}: expected {{id, title, text}} JSON ({exc})"
                    ) from None
                if doc.id in seen:
                    raise DataError(f"corpus_file: {path}:{lineno}: duplicate id {doc.id!r}")
                seen.add(doc.id)
                docs.append(doc)
    except OSError as exc:
        raise DataError(f"corpus_file: cannot read {path}: {exc.strerror or exc}") from None
    if not docs:
        raise DataError(f"corpus_file: no documents in {path}")
    return docs
