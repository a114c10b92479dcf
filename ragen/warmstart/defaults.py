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

#: ... and these for a real (pretrained) model, which already reads text and needs the answer format and a first pull
#: toward the expert's moves, not a random model's schedule. Starting points for SmolLM2-135M-Instruct on 2 CPU cores,
#: not yet measured against alternatives (bench/real_llm.py is where to tune them):
#: half a built-in model's demos: a pretrained model picks up a fixed format from few examples, and the demos and the
#: SFT on them cost half the CPU time
REAL_EPISODES = 128
#: two passes, not 24: a pretrained model of this size memorises the demos' moves over many passes rather than
#: learning to read a board it can already read as text
REAL_EPOCHS = 2
#: a fine-tuning rate (full fine-tuning of pretrained models usually runs at 1e-5 to 1e-4): a built-in model's 2e-3
#: overwrites what the model was pretrained on
REAL_LR = 5e-5


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
