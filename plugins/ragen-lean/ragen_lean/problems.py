"""Theorems to prove: miniF2F in Coq (``.v`` files), Lean 4 JSONL, and the split rules.

* miniF2F-rocq (spec 11): ``{valid,test}/*.v``; header = the lines before the first ``Theorem|Lemma|Example|Corollary|
  Proposition|Fact|Remark`` line, statement = from there to ``Proof.`` (exclusive). A file whose proof ends with
  ``Qed.`` ships a known proof (the expert replays it); ``Admitted.`` and anything after the proof are dropped. Known
  short proofs for some items are bundled in ``data/minif2f_rocq_proofs.json``.
* Lean 4 JSONL: one ``{"name", "formal_statement", "header"?, "proof"?}`` object per line (RAGEN's HF
  ``CoderBak/minif2f`` layout); the default header is RAGEN's.
* Splits: miniF2F's ``valid/`` is the train split and ``test/`` the val and test splits; a single list (the curriculum,
  a JSONL file) is partitioned by a ``Random(0)`` permutation whose first ``val_size`` items are ``val`` (spec 1.5).
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

import attrs

from ragen_lean.tactics import coq_sentences, is_focus_marker

THEOREM_LINE = re.compile(r"^\s*(Theorem|Lemma|Example|Corollary|Proposition|Fact|Remark)\b")
PROOF_LINE = re.compile(r"^\s*Proof\s*\.")
LEAN_DEFAULT_HEADER = (
    "import Mathlib\nimport Aesop\nset_option maxHeartbeats 0\nopen BigOperators Real Nat Topology Rat"
)
MINIF2F_SPLIT_DIRS = {"train": "valid", "val": "test", "test": "test"}


@attrs.frozen
class Problem:
    """One theorem: the text loaded before it, its statement, and a known proof when there is one."""

    name: str
    header: str
    statement: str
    proof: tuple[str, ...] | None = None  #: actions (one sentence each, bullets attached) that prove it
    source: str = ""  #: e.g. ``curriculum``, ``minif2f-rocq/valid``, ``jsonl``
    hint: str = ""  #: one sentence on how the known proof works (the expert's rationale)


class DataError(ValueError):
    """A problem file or folder is missing or malformed."""


# ---- Coq files -------------------------------------------------------------------------------------------------------
def parse_coq_file(text: str, name: str, source: str = "") -> Problem:
    """Split a ``.v`` file into header, statement and (when it ends with ``Qed.``) a known proof."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if THEOREM_LINE.match(line)), None)
    if start is None:
        raise DataError(f"{name}: no Theorem/Lemma/Example/Corollary/Proposition/Fact/Remark line")
    stop = next((i for i in range(start, len(lines)) if PROOF_LINE.match(lines[i])), None)
    header = "\n".join(lines[:start]).strip()
    if stop is None:  # no 'Proof.': the statement is the first sentence
        sentences, _ = coq_sentences("\n".join(lines[start:]))
        return Problem(name, header, sentences[0] if sentences else "", None, source)
    statement = "\n".join(lines[start:stop]).strip()
    return Problem(name, header, statement, _shipped_proof("\n".join(lines[stop:])), source)


def _shipped_proof(text: str) -> tuple[str, ...] | None:
    """The actions of ``Proof. ... Qed.`` (bullets joined to the sentence they precede); None without a Qed."""
    try:
        sentences, _ = coq_sentences(text)
    except ValueError:
        return None
    if not sentences or not sentences[0].startswith("Proof"):
        return None
    body = sentences[1:]
    if "Qed." not in body:
        return None
    return group_focus(body[: body.index("Qed.")]) or None


def group_focus(sentences: list[str]) -> tuple[str, ...]:
    """Attach leading bullets/braces to the next sentence: ``['-', 'lia.', '}']`` -> ``('- lia.', '}')``."""
    actions, pending = [], []
    for s in sentences:
        if is_focus_marker(s) and s != "}":
            pending.append(s)
            continue
        actions.append(" ".join([*pending, s]))
        pending = []
    if pending:
        actions.append(" ".join(pending))
    return tuple(actions)


def minif2f_dir(root: Path, split: str) -> Path:
    """The folder of ``split`` under a miniF2F-rocq checkout (``valid`` for train, ``test`` for val/test)."""
    sub = root / MINIF2F_SPLIT_DIRS[split]
    if not sub.is_dir():
        raise DataError(f"{root}: no {MINIF2F_SPLIT_DIRS[split]}/ folder of .v files (miniF2F-rocq layout)")
    return sub


def load_minif2f(root: Path, split: str) -> list[Problem]:
    """The split's problems in file-name order, with bundled known proofs attached."""
    folder = minif2f_dir(root, split)
    files = sorted(folder.glob("*.v"))
    if not files:
        raise DataError(f"{folder}: no .v files")
    proofs = bundled_minif2f_proofs()
    problems = []
    for path in files:
        source = f"minif2f-rocq/{folder.name}"
        problem = parse_coq_file(path.read_text(encoding="utf-8"), path.stem, source)
        known = proofs.get(f"{folder.name}/{path.stem}")
        if problem.proof is None and known:
            problem = attrs.evolve(problem, proof=tuple(known["proof"]), hint=known.get("hint", ""))
        problems.append(problem)
    return problems


@lru_cache(maxsize=1)
def bundled_minif2f_proofs() -> dict[str, dict]:
    """``{"valid/<name>": {"proof": [...], "hint": ...}}``: short proofs checked by the tests."""
    text = resources.files("ragen_lean").joinpath("data/minif2f_rocq_proofs.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def known_unloadable() -> dict[str, dict[str, str]]:
    """Coq version -> {``valid/<name>``: reason}: miniF2F items that do not load there (``scripts/scan_minif2f.py``)."""
    text = resources.files("ragen_lean").joinpath("data/minif2f_rocq_unloadable.json").read_text(encoding="utf-8")
    return json.loads(text)


# ---- Lean 4 JSONL ----------------------------------------------------------------------------------------------------
def load_lean_jsonl(path: Path) -> list[Problem]:
    """Problems from a JSONL file of ``{name, formal_statement, header?, proof?}`` objects."""
    if not path.is_file():
        raise DataError(f"{path}: no such JSONL file")
    problems = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            statement = str(row["formal_statement"]).strip()
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{path}:{lineno}: expected a JSON object with formal_statement ({exc})") from None
        name = str(row.get("name") or row.get("id") or f"{path.stem}_{lineno}")
        proof = row.get("proof")
        if isinstance(proof, str):
            proof = [t.strip() for t in proof.splitlines() if t.strip()]
        problems.append(
            Problem(name, str(row.get("header") or LEAN_DEFAULT_HEADER), statement,
                    tuple(proof) if proof else None, "jsonl")
        )  # fmt: skip
    if not problems:
        raise DataError(f"{path}: no problems")
    return problems


# ---- splits ----------------------------------------------------------------------------------------------------------
def default_val_size(n: int) -> int:
    """Spec 1.5: min(500, 10 %), at least 1 when there are at least 2 items."""
    return min(500, max(1 if n >= 2 else 0, n // 10))


def partition(problems: list[Problem], split: str, val_size: int | None) -> list[Problem]:
    """A single list's ``split``: a ``Random(0)`` permutation, the first ``val_size`` items ``val``/``test``."""
    order = list(range(len(problems)))
    random.Random(0).shuffle(order)
    k = default_val_size(len(problems)) if val_size is None else val_size
    picked = order[:k] if split in ("val", "test") else order[k:]
    return [problems[i] for i in sorted(picked)]  # file order within the split
