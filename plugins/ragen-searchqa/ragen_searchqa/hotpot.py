"""HotpotQA sources: a HotpotQA-format JSON file, and the Hugging Face ``hotpot_qa`` dataset (distractor) when online.

Records hold ``question``, ``answer``, ``supporting_facts`` and ``context``, the latter two either in the original
layout (lists of ``[title, sent_id]`` / ``[title, [sentences]]``) or the Hugging Face one (``{"title": [...],
"sent_id": [...]}`` / ``{"title": [...], "sentences": [[...]]}``). The corpus is every context paragraph (its
sentences joined), deduplicated by (title, text), ids ``p000000``... in first-seen order.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from ragen import ConfigError, RagenError
from ragen_searchqa.data import Dataset, Doc, Question, partition

HF_DATASET = "hotpotqa/hotpot_qa"


class DatasetUnavailableError(RagenError):
    """The Hugging Face dataset cannot be reached (offline, no network, missing client packages)."""


def _pairs(field, keys: tuple[str, str]) -> list[tuple]:
    """``[[a, b], ...]`` or ``{keys[0]: [a...], keys[1]: [b...]}`` as a list of pairs."""
    if isinstance(field, dict):
        return list(zip(field[keys[0]], field[keys[1]], strict=True))
    return [tuple(item) for item in field]


def records_to_dataset(records: list[dict], key: str, name: str, val_size: int | None, origin: str) -> Dataset:
    """Questions and the deduplicated paragraph corpus of HotpotQA records."""
    doc_ids: dict[tuple[str, str], str] = {}
    docs: list[Doc] = []
    questions: list[Question] = []
    for i, rec in enumerate(records):
        try:
            paragraphs = [(str(t), "".join(str(s) for s in sents))
                          for t, sents in _pairs(rec["context"], ("title", "sentences"))]
            support = tuple(dict.fromkeys(str(t) for t, _ in _pairs(rec["supporting_facts"], ("title", "sent_id"))))
            question, answer = str(rec["question"]), str(rec["answer"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}: record {i} is not in HotpotQA format ({type(exc).__name__}: {exc})") from None
        for title, text in paragraphs:
            if (title, text) not in doc_ids:
                doc_ids[(title, text)] = f"p{len(docs):06d}"
                docs.append(Doc(doc_ids[(title, text)], title, text))
        qid = str(rec.get("_id") or rec.get("id") or i)
        questions.append(Question(qid, question, (answer,), support, str(rec.get("type", ""))))
    if not questions:
        raise ConfigError(f"{origin}: no questions")
    train, held_out = partition(questions, val_size)
    return Dataset(key, name, tuple(docs), train, held_out)


@lru_cache(maxsize=4)
def _load_file(path: str, mtime_ns: int, val_size: int | None) -> Dataset:
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except OSError as exc:
        raise ConfigError(f"hotpot_file: cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"hotpot_file: {path} is not JSON ({exc})") from None
    if not isinstance(records, list):
        raise ConfigError(f"hotpot_file: {path} must hold a JSON list of HotpotQA records")
    return records_to_dataset(
        records, f"hotpot/{path}@{mtime_ns}", f"hotpot/{Path(path).stem}", val_size, f"hotpot_file: {path}"
    )


def load_hotpot_file(path: str | None, val_size: int | None = None) -> Dataset:
    """A HotpotQA-format JSON list (e.g. ``hotpot_dev_distractor_v1.json``); cached per path and mtime."""
    if not path:
        raise ConfigError(
            "hotpot_file: source='hotpot' needs a HotpotQA-format JSON file: set hotpot_file=PATH "
            "(ragen run: env.options.hotpot_file=PATH; ragen play: -o hotpot_file=PATH)"
        )
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ConfigError(f"hotpot_file: {path} does not exist")
    return _load_file(str(p), p.stat().st_mtime_ns, val_size)


# ---- Hugging Face -------------------------------------------------------------------------------------------------
def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _unavailable(repo: str, why: str) -> DatasetUnavailableError:
    return DatasetUnavailableError(
        f"searchqa-hf: the Hugging Face dataset {repo} cannot be loaded ({why}); use the offline variants "
        "'searchqa' (procedural KB) or 'searchqa-hotpot' with hotpot_file=PATH"
    )


def download_parquet(repo: str, config: str, split: str) -> list[Path]:
    """The dataset's parquet shards of ``config``/``split``, from the hub or the local cache (sorted)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise _unavailable(repo, "huggingface_hub is not installed: pip install 'ragen-searchqa[hf]'") from None
    patterns = [f"{config}/{split}-*.parquet", f"{config}/{split}/*.parquet"]
    try:
        root = Path(snapshot_download(repo_id=repo, repo_type="dataset", allow_patterns=patterns))
    except Exception as exc:  # offline mode, no network, unknown repo: all end the same way
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        raise _unavailable(
            repo, ("HF_HUB_OFFLINE is set and it is not cached; " if offline else "") + _one_line(exc)
        ) from None
    files = sorted({p for pattern in patterns for p in root.glob(pattern)})
    if not files:
        raise _unavailable(repo, f"no parquet files matching {' or '.join(patterns)}")
    return files


def read_parquet_records(files: list[Path], limit: int) -> list[dict]:
    """The first ``limit`` rows of the parquet shards, in order, as dicts."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetUnavailableError(
            "searchqa-hf: reading parquet needs pyarrow: pip install 'ragen-searchqa[hf]'"
        ) from None
    records: list[dict] = []
    for path in files:
        names = pq.ParquetFile(path).schema_arrow.names
        columns = [c for c in ("id", "question", "answer", "type", "supporting_facts", "context") if c in names]
        records.extend(pq.read_table(path, columns=columns).to_pylist())
        if len(records) >= limit:
            break
    return records[:limit]


@lru_cache(maxsize=2)
def load_hf(
    repo: str = HF_DATASET, config: str = "distractor", limit: int = 20_000, val_size: int | None = None
) -> Dataset:
    """The first ``limit`` train questions of HF ``hotpot_qa`` (RAGEN: 20,000), split like a single file."""
    records = read_parquet_records(download_parquet(repo, config, "train"), limit)
    return records_to_dataset(records, f"hf/{repo}/{config}/{limit}", f"hf/{config}", val_size, f"{repo} ({config})")
