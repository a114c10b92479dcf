"""Question sources: the procedural generator, GSM8K folders, any JSONL/JSON file, and the HF MetaMathQA file.

Data-backed sources map ``seed`` to ``index = seed mod |split|`` over the split's items in file order (spec §1.5);
``task_index`` bypasses that. Splits are disjoint: a GSM8K folder gives ``train.jsonl`` to train and partitions
``test.jsonl`` into val and test; a single file is partitioned into val, test and train by a ``Random(0)``
permutation (the first ``val_size`` items val, the next ``test_size`` test). Loaded files are cached per process
(group members and validation envs share one copy), keyed by path, size and modification time.
"""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path
from typing import Any

import attrs

from ragen import ConfigError, RagenError
from ragen_metamathqa import generator
from ragen_metamathqa.answers import extract_gold, solution_text

SPLITS = ("train", "val", "test")
HF_REPO = "meta-math/MetaMathQA"
HF_FILE = "MetaMathQA-395K.json"


class DatasetUnavailable(RagenError, RuntimeError):
    """A data source cannot be read or fetched; the message says how to get it."""


@attrs.frozen
class Task:
    """One question of an episode."""

    task_id: str
    question: str
    gold: str
    solution: str = ""  #: worked solution (the expert's rationale), '' when unknown


@attrs.frozen
class Item:
    row: int  #: position in its file (0-based, counting every record)
    question: str
    answer: str  #: the raw answer field (a full solution for GSM8K and MetaMathQA)
    gold: str


@attrs.frozen
class Dataset:
    label: str  #: for ids and messages: "gsm8k", "jsonl:FILE" or "hf:FILE"
    splits: dict[str, tuple[Item, ...]]
    skipped: int  #: records without a question or a gold answer

    def task(self, seed: int, split: str, task_index: int | None = None) -> Task:
        items = self.splits[split]
        if not items:
            raise ConfigError(f"split {split!r} of {self.label} is empty; adjust val_size/test_size or the data")
        if task_index is not None:
            if not 0 <= int(task_index) < len(items):
                raise ConfigError(f"options.task_index: {task_index} is outside 0..{len(items) - 1} ({split} split)")
            index = int(task_index)
        else:
            index = seed % len(items)
        item = items[index]
        return Task(f"metamathqa/{self.label}/{split}/{item.row}", item.question, item.gold,
                    solution_text(item.answer))


# ---- the procedural source -----------------------------------------------------------------------------------------
class ProceduralSource:
    """Generated word problems; a pure function of (seed, split, steps, families)."""

    def __init__(self, steps: int | None, families: tuple[str, ...]):
        self.steps, self.families = steps, tuple(families)

    def task(self, seed: int, split: str, task_index: int | None = None) -> Task:
        del task_index  # procedural: the seed alone picks the problem
        p = generator.generate(seed, split, self.steps, self.families)
        return Task(f"metamathqa/procedural/{p.family}/{p.steps}step/{split}/s{seed}", p.question, str(p.answer),
                    p.rationale())


# ---- reading files -------------------------------------------------------------------------------------------------
def read_records(path: Path) -> list[Any]:
    """Records of a JSON Lines file, or of a JSON file holding one array (the MetaMathQA layout)."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(4096).lstrip()
            fh.seek(0)
            if head.startswith("["):
                return json.load(fh)
            records = []
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    records.append(json.loads(line))
            return records
    except json.JSONDecodeError as exc:
        where = f"line {lineno}" if not head.startswith("[") else f"offset {exc.pos}"
        raise ConfigError(f"path: {path} is not valid JSON Lines / JSON ({where}: {exc.msg})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"path: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def to_items(records: list[Any], question_field: str, answer_field: str, max_items: int | None,
             label: str) -> tuple[list[Item], int]:
    """Items with a question and a non-empty gold answer; the rest are counted as skipped."""
    items, skipped = [], 0
    for row, rec in enumerate(records[:max_items] if max_items else records):
        q = rec.get(question_field) if isinstance(rec, dict) else None
        a = rec.get(answer_field) if isinstance(rec, dict) else None
        if not isinstance(q, str) or not q.strip() or a is None:
            skipped += 1
            continue
        gold = extract_gold(str(a))
        if not gold:
            skipped += 1
            continue
        items.append(Item(row, q.strip(), str(a), gold))
    if not items:
        raise ConfigError(
            f"question_field/answer_field: no record of {label} has a {question_field!r} and an {answer_field!r} field"
        )
    return items, skipped


def default_holdout(n: int) -> int:
    """Spec §1.5: min(500, 10 %)."""
    return min(500, n // 10)


def partition(items: list[Item], val_size: int, test_size: int) -> dict[str, tuple[Item, ...]]:
    """Val = the first ``val_size`` of a ``Random(0)`` permutation, test = the next ``test_size``, train = the rest;
    each split keeps file order."""
    order = list(range(len(items)))
    random.Random(0).shuffle(order)
    val, test = set(order[:val_size]), set(order[val_size : val_size + test_size])
    return {
        "train": tuple(it for i, it in enumerate(items) if i not in val and i not in test),
        "val": tuple(it for i, it in enumerate(items) if i in val),
        "test": tuple(it for i, it in enumerate(items) if i in test),
    }


def load_gsm8k(folder: Path, val_size: int | None, max_items: int | None) -> Dataset:
    """``train.jsonl`` -> train; ``test.jsonl`` split into val (first ``val_size`` of a Random(0) permutation) and
    test (the rest)."""
    if not folder.is_dir():
        raise ConfigError(
            f"path: {folder} is not a folder (source 'gsm8k' reads FOLDER/train.jsonl and FOLDER/test.jsonl)"
        )
    for name in ("train.jsonl", "test.jsonl"):
        if not (folder / name).is_file():
            raise ConfigError(f"path: {folder} has no {name} (source 'gsm8k' reads train.jsonl and test.jsonl)")
    train, skip_a = to_items(read_records(folder / "train.jsonl"), "question", "answer", max_items, "train.jsonl")
    test, skip_b = to_items(read_records(folder / "test.jsonl"), "question", "answer", max_items, "test.jsonl")
    n_val = default_holdout(len(test)) if val_size is None else min(val_size, len(test))
    held = partition(test, n_val, len(test) - n_val)
    return Dataset("gsm8k", {"train": tuple(train), "val": held["val"], "test": held["test"]}, skip_a + skip_b)


def load_file(path: Path, question_field: str, answer_field: str, val_size: int | None, test_size: int | None,
              max_items: int | None, kind: str = "jsonl") -> Dataset:
    """One JSONL/JSON file partitioned into disjoint train/val/test."""
    if not path.is_file():
        raise ConfigError(f"path: {path} is not a file")
    items, skipped = to_items(read_records(path), question_field, answer_field, max_items, path.name)
    n_val = default_holdout(len(items)) if val_size is None else val_size
    n_test = n_val if test_size is None else test_size
    if n_val + n_test >= len(items):
        raise ConfigError(
            f"val_size/test_size: {n_val} + {n_test} held-out items leave no training items of the {len(items)} "
            f"in {path.name}"
        )
    return Dataset(f"{kind}:{path.name}", partition(items, n_val, n_test), skipped)


# ---- the Hugging Face file -----------------------------------------------------------------------------------------
def _hub_offline() -> bool:
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:  # pragma: no cover
        return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def fetch_hf(repo: str, filename: str, revision: str | None) -> Path:
    """The dataset file from the Hugging Face Hub (or its local cache). Raises ``DatasetUnavailable`` in one line."""
    how = (f"download it once with network access (`hf download {repo} {filename} --repo-type dataset`), "
           f"or pass path=FILE to a local copy, or use the offline variant 'metamathqa'")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise DatasetUnavailable(f"source 'hf': needs huggingface_hub (pip install huggingface_hub); or {how}") from exc
    try:
        return Path(hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset", revision=revision))
    except Exception as exc:  # offline without a cached copy, no network, gated or missing file: all say the same
        if _hub_offline():
            why = "HF_HUB_OFFLINE is set and the file is not in the local Hugging Face cache"
        else:
            why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise DatasetUnavailable(
            f"source 'hf': cannot get {filename} of the Hugging Face dataset {repo} ({why}); {how}"
        ) from exc


# ---- cache ---------------------------------------------------------------------------------------------------------
_CACHE: dict[tuple, Dataset] = {}
_CACHE_LOCK = threading.Lock()


def _cached(key: tuple, load) -> Dataset:
    with _CACHE_LOCK:  # one loader at a time: concurrent envs of a group wait for the first and share its copy
        if key not in _CACHE:
            _CACHE[key] = load()
        return _CACHE[key]


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
        return str(path.resolve()), st.st_size, st.st_mtime_ns
    except OSError:
        return (str(path),)


def make_source(cfg) -> ProceduralSource | Dataset:
    """The source the config asks for (loading, or fetching, its data now)."""
    if cfg.source == "procedural":
        return ProceduralSource(cfg.steps, cfg.families)
    if cfg.source == "gsm8k":
        folder = Path(cfg.path).expanduser()
        key = ("gsm8k", *_stamp(folder / "train.jsonl"), *_stamp(folder / "test.jsonl"), cfg.val_size, cfg.max_items)
        return _cached(key, lambda: load_gsm8k(folder, cfg.val_size, cfg.max_items))
    if cfg.source == "hf" and cfg.path is None:
        path = fetch_hf(cfg.hf_repo, cfg.hf_file, cfg.hf_revision)
    else:
        path = Path(cfg.path).expanduser()
    key = (cfg.source, *_stamp(path), cfg.question_field, cfg.answer_field, cfg.val_size, cfg.test_size, cfg.max_items)
    return _cached(key, lambda: load_file(path, cfg.question_field, cfg.answer_field, cfg.val_size, cfg.test_size,
                                          cfg.max_items, cfg.source))
