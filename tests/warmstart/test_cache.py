"""Warm start by default (ragen/warmstart/cache.py): when it applies, its cache key, the cache, and the run summary."""

import json
import os
import subprocess

import attrs
import pytest
from conftest import ragen_cmd

from ragen.config import load_config
from ragen.runs.summary import format_summary, run_summary
from ragen.warmstart import cache as warmstart
from ragen.warmstart import defaults

#: a warm start small enough for a test: a handful of demos, one pass
FAST = ["model.name=tiny", "warmstart.episodes=6", "warmstart.epochs=1", "warmstart.batch_size=3",
        "logging.progress=false"]


def test_auto_mode_warm_starts_only_built_in_models():
    assert warmstart.applies(load_config(overrides=["model.name=small"]))
    assert warmstart.applies(load_config(overrides=["model.name=tiny"]))
    assert not warmstart.applies(load_config(overrides=["model.name=HuggingFaceTB/SmolLM2-135M-Instruct"]))
    assert not warmstart.applies(load_config(overrides=["model.name=smollm2"]))
    assert warmstart.applies(load_config(overrides=["model.name=smollm2", "warmstart.mode=always"]))
    assert not warmstart.applies(load_config(overrides=["model.name=tiny", "warmstart.mode=never"]))
    assert warmstart.applies(load_config(overrides=["model.name=tiny"]), flag=True)
    assert not warmstart.applies(load_config(overrides=["model.name=tiny"]), flag=False)


#: one changed input per case: every one must give another key
KEY_CHANGES = [
    "env.name=frozenlake-slippery", "env.options.max_turns=3", "model.name=small", "model.dtype=float32",
    "model.lora_rank=8", "warmstart.episodes=7", "warmstart.noise=0.2", "warmstart.epochs=2", "warmstart.lr=0.01",
    "warmstart.batch_size=4", "warmstart.seed=1", "rollout.parser=answer", "rollout.max_model_len=1000",
    "rollout.prompt=compact", "rollout.max_context_window=1",
]


def test_a_full_frame_warm_start_keeps_its_key_from_before_prompt_styles():
    """Entries cached before rollout.prompt existed were trained on the full frame: their key has no prompt input."""
    assert "prompt" not in warmstart.key_inputs(load_config(overrides=["env.name=frozenlake", *FAST]))
    assert (
        warmstart.key_inputs(load_config(overrides=["env.name=frozenlake", *FAST, "rollout.prompt=compact"]))["prompt"]
        == "compact"
    )


@pytest.mark.parametrize("change", KEY_CHANGES)
def test_cache_key_changes_with_each_input(change):
    base = load_config(overrides=["env.name=frozenlake", *FAST])
    assert warmstart.cache_key(load_config(overrides=["env.name=frozenlake", *FAST, change])) != warmstart.cache_key(
        base
    )


def test_cache_key_ignores_what_the_warm_start_does_not_use():
    base = load_config(overrides=["env.name=frozenlake", *FAST])
    for same in (
        "algo.name=ppo",
        "trainer.seed=3",
        "trainer.actor_lr=0.1",
        "rollout.n_groups=2",
        "warmstart.cache=false",
        "warmstart.mode=always",
        "trainer.steps=3",
        "trainer.format_penalty=-0.5",
    ):
        assert warmstart.cache_key(load_config(overrides=["env.name=frozenlake", *FAST, same])) == warmstart.cache_key(
            base
        )


def test_cache_key_changes_with_the_env_plugins_version(monkeypatch):
    cfg = load_config(overrides=["env.name=frozenlake", *FAST])
    before = warmstart.cache_key(cfg)
    real = warmstart.distribution_version
    monkeypatch.setattr(warmstart, "distribution_version",
                        lambda dist: "99.0" if dist == "ragen-frozenlake" else real(dist))
    assert warmstart.cache_key(cfg) != before


@pytest.mark.slow
def test_cache_is_reused_only_for_the_same_env_and_model(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_CACHE_DIR", str(tmp_path / "cache"))
    frozen = load_config(overrides=["env.name=frozenlake", *FAST])
    path, first = warmstart.prepare(frozen, tmp_path / "run1")
    assert first["warmstart/cached"] == 0.0 and (path / "config.json").is_file() and first["sft/demos"] == 6
    entry = warmstart.cache_root() / warmstart.cache_key(frozen)
    assert (entry / warmstart.INFO_FILE).is_file()
    again_path, again = warmstart.prepare(frozen, tmp_path / "run2")
    assert again["warmstart/cached"] == 1.0 and again["sft/loss_last"] == first["sft/loss_last"]
    assert (again_path / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    # another variant, another model config: never the cached weights
    for other in (["env.name=frozenlake-slippery"], ["warmstart.noise=0.5"],
                  ["model.name=tiny", "model.attn_implementation=eager"]):
        cfg = load_config(overrides=["env.name=frozenlake", *FAST, *other])
        _, m = warmstart.prepare(cfg, tmp_path / f"run-{len(other)}-{other[-1]}")
        assert m["warmstart/cached"] == 0.0, other
    assert len([p for p in warmstart.cache_root().iterdir() if not p.name.startswith(".")]) == 4
    # with the cache off nothing is read or written
    off = attrs.evolve(frozen, warmstart=attrs.evolve(frozen.warmstart, cache=False))
    _, m = warmstart.prepare(off, tmp_path / "run-off")
    assert m["warmstart/cached"] == 0.0


def _run(tmp_path, name, *extra, cache):
    proc = subprocess.run(
        ragen_cmd(
            "run",
            "--env",
            "frozenlake",
            "--algo",
            "grpo",
            "trainer.steps=1",
            "rollout.n_groups=2",
            "rollout.group_size=2",
            "rollout.n_val_groups=4",
            "rollout.n_paired_levels=4",
            "trainer.short_run_steps=0",
            "trainer.ppo_mini_batch_size=4",
            "collapse.enabled=false",
            # short answers: the tiny model, random or barely warm-started, may write the 400-token default each turn;
            # what these runs check (the warm start, its cache, the summary) reads no answer's length
            "rollout.response_length=48",
            f"logging.run_dir={tmp_path}",
            f"logging.name={name}",
            *FAST,
            *extra,
        ),
        env={**os.environ, "HF_HUB_OFFLINE": "1", "RAGEN_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return proc, rows


@pytest.mark.slow
def test_ragen_run_warm_starts_then_reuses_the_cache_and_prints_the_summary(tmp_path):
    cache = tmp_path / "cache"
    proc, rows = _run(tmp_path, "a", cache=cache)
    assert "warmstart_started" in proc.stderr and "warmstart_cached" not in proc.stderr
    warm = next(r for r in rows if "sft/demo_success" in r)
    assert warm["step"] == 0 and warm["warmstart/cached"] == 0.0
    assert (tmp_path / "a" / "model-source" / "warmstart" / "config.json").is_file()
    # the summary's numbers are metrics.jsonl's
    before = next(r for r in rows if r["step"] == 0 and "val/success" in r)
    after = [r for r in rows if "val/success" in r][-1]
    assert after["step"] == 1
    summary = run_summary(tmp_path / "a")
    assert summary["before"]["success"] == before["val/success"] and summary["after"]["success"] == after["val/success"]
    assert summary["change"] == pytest.approx(after["val/success"] - before["val/success"])
    assert format_summary(summary) in proc.stdout
    assert f"before RL (step 0): {100 * before['val/success']:.1f}%" in proc.stdout

    proc2, rows2 = _run(tmp_path, "b", cache=cache)
    assert "warmstart_cached" in proc2.stderr and "warmstart_started" not in proc2.stderr
    assert next(r for r in rows2 if "sft/demo_success" in r)["warmstart/cached"] == 1.0
    # the same starting weights: the same step-0 validation
    assert next(r for r in rows2 if r["step"] == 0 and "val/success" in r)["val/success"] == before["val/success"]


@pytest.mark.slow
def test_no_warmstart_keeps_the_random_model(tmp_path):
    proc, rows = _run(tmp_path, "c", "--no-warmstart", cache=tmp_path / "cache")
    assert not any("sft/demo_success" in r for r in rows)
    # the cache folder now also holds the built-in model (cache/builtin): no warm start is stored beside it
    assert "warmstart_started" not in proc.stderr and not (tmp_path / "cache" / "warmstart").exists()
    assert "mode: never" in (tmp_path / "c" / "config.yaml").read_text()


def test_summary_reads_metrics_jsonl(tmp_path):
    rows = [{"step": 0, "sft/demo_success": 0.5, "warmstart/cached": 1.0},
            {"step": 0, "val/success": 0.25, "val/num_trajectories": 64.0},
            {"step": 1, "rollout/valid_format_rate": 0.95, "timing/step_s": 30.0},
            {"step": 2, "timing/step_s": 30.0, "val/success": 0.5, "val/num_trajectories": 64.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "tor')
    s = run_summary(tmp_path)
    assert s["before"]["success"] == 0.25 and s["after"]["success"] == 0.5 and s["steps"] == 2
    assert s["change"] == 0.25 and s["change_se"] == pytest.approx(((0.25 * 0.75 + 0.25) / 64) ** 0.5)
    assert s["warmstart_cached"] and s["first_step_valid_format_rate"] == 0.95
    text = format_summary(s)
    assert "+25.0 points" in text and "from the cache" in text and "25.0%" in text and "50.0%" in text


@pytest.mark.parametrize(("cache_on", "cached", "says"), [
    (True, 0.0, "warm start: trained and cached;"),
    (True, 1.0, "warm start: from the cache;"),
    (False, 0.0, "warm start: trained for this run, not cached (warmstart.cache=false);"),
])
def test_summary_says_whether_the_warm_start_was_cached(tmp_path, cache_on, cached, says):
    from ragen.train.provenance import resolved_config
    from ragen.train.runlog import RunWriter

    cfg = load_config(overrides=["env.name=frozenlake", *FAST, f"warmstart.cache={str(cache_on).lower()}"])
    RunWriter(tmp_path, resolved_config(cfg)).close()  # config.yaml as a run writes it
    rows = [{"step": 0, "sft/demo_success": 1.0, "warmstart/cached": cached},
            {"step": 0, "val/success": 0.25, "val/num_trajectories": 8.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = format_summary(run_summary(tmp_path))
    assert says in text and text.count("warm start:") == 1


@pytest.mark.slow
def test_a_run_without_the_cache_does_not_say_cached(tmp_path):
    proc, rows = _run(tmp_path, "n", "warmstart.cache=false", cache=tmp_path / "cache")
    assert next(r for r in rows if "sft/demo_success" in r)["warmstart/cached"] == 0.0
    assert "warm start: trained for this run, not cached (warmstart.cache=false)" in proc.stdout
    assert "trained and cached" not in proc.stdout and not (tmp_path / "cache" / "warmstart").exists()


def test_summary_of_a_change_without_spread_prints_no_nan(tmp_path):
    rows = [{"step": 0, "val/success": 0.0, "val/num_trajectories": 1.0},
            {"step": 1, "timing/step_s": 1.0, "val/success": 0.0, "val/num_trajectories": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = format_summary(run_summary(tmp_path))
    assert "nan" not in text and "change: +0.0 points ± 0.0 (s.e.; no spread" in text


#: the main job's (`ragen run --env sokoban --algo grpo`) warm-start key with every distribution at 0.1.0: a change to
#: the warm-start defaults must not orphan the cache entry (and the results) of the README's main job
MAIN_JOB_KEY = "2b05fdc62297865e8d60"


def test_the_main_jobs_warm_start_keeps_its_cache_key(monkeypatch):
    from ragen.cli.train import resolved_run

    monkeypatch.setattr(warmstart, "distribution_version", lambda dist: "0.1.0")
    run = resolved_run(None, [], env_name="sokoban", algo_name="grpo")
    assert warmstart.key_inputs(run)["warmstart"] == {"seed": 0, "episodes": 256, "noise": 0.0, "epochs": 24,
                                                      "lr": 2e-3, "batch_size": 4, "prompt_loss_weight": None}
    assert warmstart.cache_key(run) == MAIN_JOB_KEY


def test_warm_start_defaults_depend_on_the_model_kind():
    for name in ("tiny", "small"):
        w = warmstart.settings(load_config(overrides=[f"model.name={name}"]))
        assert (w.episodes, w.epochs, w.lr) == (256, 24, 2e-3), name
    for name in ("smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        w = warmstart.settings(load_config(overrides=[f"model.name={name}"]))
        assert (w.episodes, w.epochs, w.lr) == (defaults.REAL_EPISODES, defaults.REAL_EPOCHS, defaults.REAL_LR)
    given = ["model.name=smollm2", "warmstart.episodes=7", "warmstart.epochs=3", "warmstart.lr=0.01"]
    w = warmstart.settings(load_config(overrides=given))
    assert (w.episodes, w.epochs, w.lr) == (7, 3, 0.01)


@pytest.mark.parametrize("name", ["REAL_EPISODES", "REAL_EPOCHS", "REAL_LR"])
def test_a_real_models_resolved_defaults_are_in_its_key(monkeypatch, name):
    """A retuned real-model default makes a new cache entry instead of reusing one trained with the old value; a
    built-in model's key does not move with it."""
    real, builtin = load_config(overrides=["model.name=smollm2"]), load_config(overrides=["model.name=tiny"])
    before = warmstart.cache_key(real), warmstart.cache_key(builtin)
    monkeypatch.setattr(defaults, name, getattr(defaults, name) * 2)
    assert warmstart.cache_key(real) != before[0]
    assert warmstart.cache_key(builtin) == before[1]
