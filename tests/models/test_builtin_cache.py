"""The cache of the built-in models: a hit writes the same bytes as a fresh build, the key follows the corpus, and an
entry without its completion marker is never used."""

from __future__ import annotations

import hashlib

import pytest

from ragen.models import cache
from ragen.models.builtin import BUILTIN_MODELS, build_corpus, build_tiny_model
from ragen.models.load import resolve_model

SEEDS = 2  # a small corpus: the build takes well under a second


def _files(path):
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _entries(cache_dir):
    root = cache_dir / cache.SUBDIR
    return sorted(p for p in root.iterdir()) if root.is_dir() else []


def test_a_cache_hit_writes_the_bytes_of_a_fresh_build(cache_dir, tmp_path):
    fresh = tmp_path / "fresh"
    build_tiny_model(fresh, ["frozenlake"], corpus_seeds=SEEDS, **BUILTIN_MODELS["tiny"])
    assert cache.build_builtin("tiny", tmp_path / "miss", ["frozenlake"], corpus_seeds=SEEDS,
                               **BUILTIN_MODELS["tiny"]) is False
    (entry,) = _entries(cache_dir)
    assert (entry / cache.MARKER).is_file()
    assert cache.build_builtin("tiny", tmp_path / "hit", ["frozenlake"], corpus_seeds=SEEDS,
                               **BUILTIN_MODELS["tiny"]) is True
    expected = _files(fresh)
    assert "model.safetensors" in expected and "tokenizer.json" in expected and "RAGEN_TINY" in expected
    assert _files(tmp_path / "miss") == expected
    assert _files(tmp_path / "hit") == expected  # the marker stays in the cache


def test_opting_out_builds_in_place_and_stores_nothing(cache_dir, tmp_path):
    assert cache.build_builtin("tiny", tmp_path / "m", ["frozenlake"], cache=False, corpus_seeds=SEEDS,
                               **BUILTIN_MODELS["tiny"]) is False
    assert (tmp_path / "m" / "config.json").is_file() and _entries(cache_dir) == []


def test_the_key_follows_the_envs_the_corpus_and_the_size():
    def key(envs, seeds=SEEDS, name="tiny"):
        corpus = build_corpus(envs, seeds=seeds)
        return cache.key_of(cache.key_inputs(name, corpus, list(envs), BUILTIN_MODELS[name]))

    base = key(["frozenlake"])
    assert key(["frozenlake"]) == base  # the same inputs, the same key
    assert key(["sokoban"]) != base
    assert key(["frozenlake"], seeds=SEEDS + 1) != base  # more corpus seeds: more text
    assert key(["frozenlake"], name="small") != base
    corpus = build_corpus(["frozenlake"], seeds=SEEDS)
    edited = [*corpus[:-1], corpus[-1] + " "]  # the same env names, another text (an edited env): another key
    assert (cache.key_of(cache.key_inputs("tiny", edited, ["frozenlake"], BUILTIN_MODELS["tiny"]))
            != cache.key_of(cache.key_inputs("tiny", corpus, ["frozenlake"], BUILTIN_MODELS["tiny"])))


def test_an_entry_without_its_marker_is_never_used(cache_dir, tmp_path):
    cache.build_builtin("tiny", tmp_path / "a", ["frozenlake"], corpus_seeds=SEEDS, **BUILTIN_MODELS["tiny"])
    (entry,) = _entries(cache_dir)
    expected = _files(entry)
    (entry / cache.MARKER).unlink()
    (entry / "model.safetensors").write_bytes(b"half written")
    assert cache.build_builtin("tiny", tmp_path / "b", ["frozenlake"], corpus_seeds=SEEDS,
                               **BUILTIN_MODELS["tiny"]) is False
    assert _files(entry) == expected  # replaced by a whole entry
    assert _files(tmp_path / "b") == _files(tmp_path / "a")


def test_a_store_that_loses_the_race_keeps_the_other_entry(cache_dir, tmp_path):
    entry = cache_dir / cache.SUBDIR / "k"
    cache._store(entry, lambda out: (out.mkdir(parents=True), (out / "f").write_text("first")))
    cache._store(entry, lambda out: (out.mkdir(parents=True), (out / "f").write_text("second")))
    assert (entry / "f").read_text() == "first" and (entry / cache.MARKER).is_file()
    assert [p.name for p in entry.parent.iterdir()] == ["k"]  # the loser's copy is gone


def test_resolve_model_takes_the_builtin_model_from_the_cache(cache_dir, tmp_path, monkeypatch):
    seen = []
    real = cache.build_builtin

    def spy(*args, **kwargs):
        seen.append(real(*args, corpus_seeds=SEEDS, **kwargs))
        return seen[-1]

    monkeypatch.setattr("ragen.models.load.build_builtin", spy)
    first = resolve_model("tiny", tmp_path / "run1", ["frozenlake"])
    second = resolve_model("tiny", tmp_path / "run2", ["frozenlake"])
    assert seen == [False, True]
    assert first.path.endswith("tiny-model") and second.path.endswith("tiny-model")
    assert _files(tmp_path / "run1") == _files(tmp_path / "run2")
