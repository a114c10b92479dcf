"""Checkpoints of a run (DeepSpeed's, one tag per step, with the trainer's own state as client state), the RNG state
they carry, and the final model export."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ragen.errors import ConfigError, RagenError
from ragen.log import log
from ragen.models import distributed as dp
from ragen.models.load import save_parser

CHECKPOINTS = "checkpoints"
FINAL = "final"


def rng_state() -> dict:
    """The RNG states as plain values and tensors only, so the checkpoint loads with ``weights_only=True``."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = [name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)]
    return {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])  # a tuple of a version, 625 ints and None: plain values, loaded as saved
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


def save(run_dir: Path, step: int, actor, critic, state: dict, keep: int) -> Path:
    """Write tag ``step<step>`` of the actor (``state`` as its client state) and the critic (collectively, on every
    rank), then keep the newest ``keep`` tags (0: all)."""
    tag = f"step{step}"
    ckpt = Path(run_dir) / CHECKPOINTS
    actor.save_checkpoint(str(ckpt / "actor"), tag=tag, client_state=state)
    if critic is not None:
        critic.save_checkpoint(str(ckpt / "critic"), tag=tag)
    _prune(ckpt, keep)
    log.info("checkpoint_saved", step=step, path=str(ckpt))
    return ckpt


def _prune(ckpt: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` tags (DeepSpeed's ``latest`` names the newest)."""
    if not keep or not dp.is_main():
        return
    for sub in ("actor", "critic"):
        tags = sorted((p for p in (ckpt / sub).glob("step*") if p.is_dir() and p.name[4:].isdigit()),
                      key=lambda p: int(p.name[4:]))
        for old in tags[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


class WeightsOnly:
    """A DeepSpeed checkpoint engine whose ``load`` unpickles nothing but tensors and plain values
    (``torch.load(weights_only=True)``): a crafted checkpoint file in a copied run folder cannot run code
    (docs/security.md). Everything else is the wrapped engine's."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def load(self, path: str, map_location=None):
        import pickle

        try:
            return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RagenError(f"--resume: {path} holds more than weights and was not loaded (a run folder is data: "
                             f"docs/security.md): {first}") from None


#: bytes of DeepSpeed's ``latest`` file: one tag name
MAX_LATEST_BYTES = 4096


def latest_tag(run_dir: Path, sub: str) -> str | None:
    """The tag DeepSpeed's ``latest`` names under ``checkpoints/<sub>``, checked: read by the bounded reader (a
    regular file inside the run folder, at most ``MAX_LATEST_BYTES``) and one folder of that checkpoint folder (a
    copied run folder whose ``latest`` says ``../../../evil`` is refused, never followed); None without ``latest``."""
    from ragen.config.bounded import read_file

    folder = Path(run_dir) / CHECKPOINTS / sub
    path = folder / "latest"
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        raw = read_file(path, source=f"--resume: {path}", max_bytes=MAX_LATEST_BYTES, inside=run_dir)
    except FileNotFoundError:
        return None
    tag = raw.decode("utf-8", "replace").strip()
    target = (folder / tag).resolve()
    if (not tag or "/" in tag or "\\" in tag or tag in (".", "..") or not tag.isprintable()
            or target.parent != folder.resolve() or not target.is_dir()):
        raise RagenError(f"--resume: {path} names {tag[:60]!r}, not a checkpoint folder beside it; refused (a run "
                         "folder is data: docs/security.md)")
    return tag


def load(run_dir: Path, actor, critic) -> dict:
    """Load the newest tag into the actor (and critic), weights only; returns the client state saved with it. The tag
    comes from ``latest``, confined to the run folder (``latest_tag``)."""
    ckpt = Path(run_dir) / CHECKPOINTS
    for engine in (actor, critic):
        if engine is not None and not isinstance(engine.checkpoint_engine, WeightsOnly):
            engine.checkpoint_engine = WeightsOnly(engine.checkpoint_engine)
    tag = latest_tag(run_dir, "actor")
    critic_tag = latest_tag(run_dir, "critic") if critic is not None else None
    if tag is None:
        raise ConfigError(f"--resume: no checkpoint under {ckpt}")
    path, state = actor.load_checkpoint(str(ckpt / "actor"), tag=tag)
    if path is None:
        raise ConfigError(f"--resume: no checkpoint under {ckpt}")
    if critic is not None:
        critic.load_checkpoint(str(ckpt / "critic"), tag=critic_tag)
    return state


def export(
    out: Path, module: torch.nn.Module, tokenizer, lora: bool, parser: tuple[str, dict, str, int] | None = None
) -> Path:
    """The policy as a plain Hugging Face folder with its tokenizer (LoRA: merged, and the adapter alone in
    ``out/adapter``) and, given ``parser``, the record of the parser it answers for; rank 0 writes it."""
    if not dp.is_main():
        return out
    if lora:
        from ragen.models.lora import export as export_lora

        export_lora(module, out)
    else:
        module.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if parser is not None:
        save_parser(out, *parser)
    return out
