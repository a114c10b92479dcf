"""User-supplied Countdown files (environments.md §5 and §1.5): JSONL or parquet rows with ``target`` and ``nums``.

The layout is that of the Hugging Face dataset ``Jiayi-Pan/Countdown-Tasks-3to4`` (RAGEN's data). Files are read in
the order given (a folder contributes its ``*.jsonl``/``*.json``/``*.parquet`` files sorted by name); the first
``max_instances`` rows are kept (RAGEN: 20,000). Rows whose fields have the wrong type are a ``ConfigError`` naming
the file and row; well-typed rows the env cannot serve are dropped and counted by reason: negative numbers, more than
``MAX_NUMS`` numbers, no solution (checked by the exhaustive solver), or no +/- solution under ``additive_only``.

Splits (FIX, §1.5): without ``val_files`` the kept rows are partitioned by a ``random.Random(0)`` permutation of their
positions, the first ``val_size`` (default min(500, 10 %), at least 1 when there are 2+ rows) being ``val`` and the
rest ``train``; each split lists its rows in file order. With ``val_files`` those rows are ``val`` and every row of
``data_files`` is ``train``. ``test`` has no rows of its own and serves the ``val`` rows.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import attrs

from ragen import ConfigError
from ragen_countdown.solver import MAX_NUMS, additive_signs, solve

SUFFIXES = (".jsonl", ".json", ".parquet")
SAMPLE = Path(__file__).resolve().parent / "data" / "sample.jsonl"  #: shipped default of `countdown-file`


@attrs.frozen
class Item:
    target: int
    nums: tuple[int, ...]
    source: str  #: "<file stem>/<row>" (0-based row in its file): stable across configs, used in task_id
    expression: str  #: the solver's answer


@attrs.frozen
class CountdownData:
    train: tuple[Item, ...]
    val: tuple[Item, ...]
    dropped: dict[str, int]  #: reason -> rows dropped
    rows_read: int

    def split(self, name: str) -> tuple[Item, ...]:
        return self.train if name == "train" else self.val


def files_of(paths: tuple[str, ...], key: str) -> tuple[Path, ...]:
    """The data files named by ``paths`` (files, or folders whose data files are taken sorted by name)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix in SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"{key}: {str(p)!r} does not exist")
    if not files:
        raise ConfigError(
            f"{key}: no Countdown files given; set {key} to .jsonl or .parquet files (or a folder of them)"
        )
    return tuple(files)


def read_rows(path: Path) -> list[tuple[int, Any]]:
    """``(row number, record)`` of one file; parquet needs pyarrow (a clear ``ConfigError`` if it is missing)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                f"data_files: reading {path.name} needs pyarrow, which is not installed; "
                "pip install 'ragen-countdown[parquet]' (or pyarrow), or convert the file to JSONL"
            ) from None
        try:
            table = pq.read_table(path, columns=["target", "nums"])
        except Exception as exc:  # pyarrow raises its own types for bad files and missing columns
            raise ConfigError(f"data_files: cannot read {path}: {exc}") from None
        return list(enumerate(table.to_pylist()))
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append((lineno - 1, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"data_files: {path}:{lineno}: not JSON ({exc.msg})") from None
    return rows


def _typed(path: Path, row: int, record: Any) -> tuple[int, tuple[int, ...]]:
    where = f"data_files: {path}, row {row}"
    if not isinstance(record, dict) or "target" not in record or "nums" not in record:
        raise ConfigError(f"{where}: expected an object with 'target' and 'nums', got {str(record)[:80]}")
    target, nums = record["target"], record["nums"]
    if type(target) is not int:
        raise ConfigError(f"{where}: 'target' must be an integer, got {target!r}")
    if not isinstance(nums, (list, tuple)) or not nums or any(type(n) is not int for n in nums):
        raise ConfigError(f"{where}: 'nums' must be a non-empty list of integers, got {str(nums)[:80]}")
    return target, tuple(nums)


def load_items(
    paths: tuple[str, ...], key: str, max_instances: int, additive_only: bool
) -> tuple[list[Item], Counter, int]:
    """Kept items in file order, the drop counts by reason, and the number of rows read."""
    items, dropped, read = [], Counter(), 0
    for path in files_of(paths, key):
        for row, record in read_rows(path):
            if read >= max_instances:
                return items, dropped, read
            read += 1
            target, nums = _typed(path, row, record)
            if any(n < 0 for n in nums):
                dropped["negative numbers"] += 1
            elif len(nums) > MAX_NUMS:
                dropped[f"more than {MAX_NUMS} numbers"] += 1
            elif additive_only and additive_signs(nums, target) is None:
                dropped["no +/- solution (additive_only)"] += 1
            elif (solution := solve(nums, target)) is None:
                dropped["unsolvable"] += 1
            else:
                items.append(Item(target, nums, f"{path.stem}/{row}", solution.expression))
    return items, dropped, read


def _stamp(paths: tuple[str, ...]) -> tuple:
    """Paths with their size and mtime, so the cache reloads files that changed."""
    out = []
    for p in map(Path, paths):
        st = p.stat() if p.exists() else None
        out.append((str(p), st.st_size if st else -1, st.st_mtime_ns if st else -1))
    return tuple(out)


def load(
    data_files: tuple[str, ...],
    val_files: tuple[str, ...],
    max_instances: int,
    additive_only: bool,
    val_size: int | None,
) -> CountdownData:
    """The train/val items of a config (cached per process: files are read and solved once)."""
    return _load(_stamp(data_files), _stamp(val_files), max_instances, additive_only, val_size)


@lru_cache(maxsize=8)
def _load(data: tuple, val: tuple, max_instances: int, additive_only: bool, val_size: int | None) -> CountdownData:
    items, dropped, read = load_items(tuple(p for p, _, _ in data), "data_files", max_instances, additive_only)
    if val:
        val_items, val_dropped, val_read = load_items(
            tuple(p for p, _, _ in val), "val_files", max_instances, additive_only
        )
        train = items
        dropped.update(val_dropped)
        read += val_read
    else:
        train, val_items = partition(items, val_size)
    if not train:
        raise ConfigError(f"data_files: no usable rows ({read} read, dropped: {dict(dropped) or 'none'})")
    return CountdownData(tuple(train), tuple(val_items), dict(dropped), read)


def default_val_size(n: int) -> int:
    """min(500, 10 % of n), at least 1 when n >= 2 (so ``val`` exists) and at most n - 1 (so ``train`` does)."""
    return 0 if n < 2 else max(1, min(500, n // 10))


def partition(items: list[Item], val_size: int | None) -> tuple[list[Item], list[Item]]:
    """``(train, val)``: a ``Random(0)`` permutation of positions, the first ``val_size`` are val; file order within."""
    n = len(items)
    k = default_val_size(n) if val_size is None else val_size
    if k >= n and n:
        raise ConfigError(f"val_size: {k} leaves no training rows out of {n} usable rows")
    order = list(range(n))
    random.Random(0).shuffle(order)
    val_pos = set(order[:k])
    return [it for i, it in enumerate(items) if i not in val_pos], [it for i, it in enumerate(items) if i in val_pos]
