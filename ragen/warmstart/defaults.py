"""The warm start's per-model defaults: ``warmstart.episodes``, ``epochs`` and ``lr`` = None resolve here, for the warm
start (ragen/warmstart/sft.py) and its cache key (ragen/warmstart/cache.py) alike."""

from __future__ import annotations

import attrs

from ragen.config import RunConfig

#: ``warmstart.episodes`` / ``epochs`` / ``lr`` = None take these for a built-in model: a random one must learn to read
#: the env's text (the `small` model reads the Sokoban board at 24 epochs and not at 4 or 12: docs/models.md). They are
#: the values the built-in models' cache entries were trained with, so those entries keep their keys.
BUILTIN_EPISODES = 256
BUILTIN_EPOCHS = 24
BUILTIN_LR = 2e-3

#: ... and these for a real (pretrained) model, measured with SmolLM2-135M-Instruct on FrozenLake (answer-only, compact
#: prompt, window 1; bench/warmstart_reading.py, docs/notes/2026-11-29-real-llm-reads.md): 64 demos x 2 epochs at 5e-5
#: (32 updates) taught the format but not the board (one first answer on 123 of 128 held-out levels, optimal moves
#: 23% against 37% chance); 256 x 3 at 2e-4 (192 updates) reads it (optimal moves 80% against 34% chance, greedy
#: success 79% against 26% for the best blind sequence). Reading a grid is learnt from the demos, like the built-in
#: models', so a real model needs the demos and updates too, at a fine-tuning rate.
REAL_EPISODES = 256
#: three passes: the 192 updates of the measured recipe
REAL_EPOCHS = 3
#: 2e-4: a high fine-tuning rate for a 135M model, but 5e-5 in 32 updates left it blind (above)
REAL_LR = 2e-4


def settings(cfg: RunConfig):
    """``cfg.warmstart`` with ``episodes``, ``epochs`` and ``lr`` resolved: a value given is kept, None takes the
    model kind's default (built-in or real, above). The warm start and its cache key both read these."""
    from ragen.models.builtin import BUILTIN_MODELS

    w = cfg.warmstart
    builtin = cfg.model.name in BUILTIN_MODELS
    return attrs.evolve(
        w,
        episodes=w.episodes if w.episodes is not None else (BUILTIN_EPISODES if builtin else REAL_EPISODES),
        epochs=w.epochs if w.epochs is not None else (BUILTIN_EPOCHS if builtin else REAL_EPOCHS),
        lr=w.lr if w.lr is not None else (BUILTIN_LR if builtin else REAL_LR),
    )
