"""DeepSpeed engines for the actor and the critic, on one CPU process (gloo) or on GPUs (nccl)."""

from __future__ import annotations

import logging
import os
import warnings

import torch

from ragen.errors import ConfigError
from ragen.models.openmp import (
    default_threads,  # torch-free (the wait policy counts threads before torch loads)
)

__all__ = ["default_threads", "pick_device", "set_threads"]


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"trainer.device: {name!r} requested but CUDA is not available")
    return torch.device(name)


def set_threads(threads: int) -> int:
    """Apply ``trainer.threads`` (0 = ``default_threads()``) with ``torch.set_num_threads``; returns the count used and
    logs it (``torch_threads``) with where it came from.

    More intra-op threads than free cores makes OpenMP barriers spin and stall: on 2 cores shared with other work,
    small matmuls ran 30-70x slower at 2 threads than at 1. Every rank calls this, and the HF rollout runs in the
    same process, so one call covers generation and training."""
    from ragen.log import log

    n = threads or default_threads()
    source = (
        "trainer.threads"
        if threads
        else (
            "OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit() else "cores / local processes"
        )
    )
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    from ragen.models.openmp import choice

    log.info("torch_threads", threads=n, source=source, openmp_wait=choice.get("policy", "unchanged"),
             openmp_reason=choice.get("reason", "ragen was not imported first"))
    return n


def _no_shm_comm_op() -> None:
    """Keep DeepSpeed from JIT-compiling its ``deepspeed_shm_comm`` C++ op (about 83 CPU-seconds at the first run).

    DeepSpeed's ``TorchBackend`` builds the op whenever the CPU accelerator lists it as compatible; it only speeds up
    all-reduce between ranks on one host, which gloo does without it. Marking it incompatible in DeepSpeed's
    ``deepspeed.ops.__compatible_ops__`` table (computed once per process, edits persist) makes the backend skip it.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def init_distributed(device: torch.device) -> None:
    """Initialise torch.distributed through DeepSpeed (a one-process group unless a launcher set RANK etc.).

    On CPU the group is gloo and no DeepSpeed op is compiled (see ``_no_shm_comm_op``)."""
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch.distributed as dist

    # DeepSpeed's own warnings are about its internals (and leak on Ctrl-C), not about the user's run: errors only
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"deepspeed(\.|$)")
    if device.type == "cpu":
        _no_shm_comm_op()

    if dist.is_available() and dist.is_initialized():
        return
    for key, value in {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(key, value)
    own_port = "MASTER_PORT" not in os.environ
    if own_port:
        os.environ["MASTER_PORT"] = str(_free_port())
    deepspeed.init_distributed(dist_backend="gloo" if device.type == "cpu" else "nccl", verbose=False)
    if own_port:  # the store is up; a child process (another `ragen run`) must not inherit our port and collide
        del os.environ["MASTER_PORT"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


OWNED_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "managed_gradient_accumulation",
              "train_batch_size")


def user_deepspeed_config(path: str) -> dict:
    """The user's DeepSpeed JSON (``trainer.deepspeed_config``), minus the keys the trainer owns."""
    from pathlib import Path

    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"trainer.deepspeed_config: {path!r} does not exist")
    from ragen.config.bounded import BoundedReadError, read_json_file

    try:
        data = read_json_file(p, source=f"trainer.deepspeed_config: {path!r}")
    except BoundedReadError as exc:
        raise ConfigError(str(exc).replace("not valid JSON (", "is not valid JSON (", 1)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"trainer.deepspeed_config: {path!r} is not a JSON object")
    return {k: v for k, v in data.items() if k not in OWNED_KEYS}


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def make_engine(module: torch.nn.Module, *, lr: float, weight_decay: float, grad_clip: float, zero_stage: int,
                dtype: torch.dtype, extra_config: dict | None = None):
    """A DeepSpeed engine around ``module`` with a plain torch AdamW (no JIT-compiled optimizer on CPU).

    Gradient accumulation is caller-owned (``managed_gradient_accumulation: false``): ``backward()`` per
    micro-batch, one ``step()`` per mini-batch, so mini-batches may differ in size after filtering.
    """
    import deepspeed

    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": grad_clip,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": dtype == torch.bfloat16},
        "fp16": {"enabled": False},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }
    config = _merge(config, extra_config or {})
    # DeepSpeed's own optimizers (ZeRO, bf16/fp16) clip and report the global gradient norm; with the plain torch
    # optimizer it clips but reports nothing, and all-reduces the gradients inside step(), so no caller can read the
    # global norm. There ragen clips instead, in a hook that runs after the all-reduce, just before AdamW's step.
    plain = config["zero_optimization"].get("stage", 0) == 0 and not (
        config["bf16"].get("enabled") or config["fp16"].get("enabled")
    )
    clip = _ClipBeforeStep(config["gradient_clipping"]) if plain else None
    if clip is not None:
        config["gradient_clipping"] = 0.0
        optimizer.register_step_pre_hook(clip)
    engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
    engine.ragen_clip = clip
    return engine


class _ClipBeforeStep:
    """An optimizer pre-step hook: clip the (already all-reduced) gradients to ``max_norm`` (0 = no clipping) and keep
    their norm before clipping, which DeepSpeed's stage-0 path computes but does not return."""

    def __init__(self, max_norm: float):
        self.max_norm = float(max_norm) if max_norm and max_norm > 0 else float("inf")
        self.last_norm: float | None = None

    def __call__(self, optimizer, args, kwargs) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.last_norm = float(torch.nn.utils.clip_grad_norm_(params, self.max_norm)) if params else 0.0


def step_with_grad_norm(engine) -> float:
    """``engine.step()``, returning the global gradient norm before clipping (the same on every rank)."""
    engine.step()
    if engine.ragen_clip is not None:
        return engine.ragen_clip.last_norm
    return float(engine.get_global_grad_norm())


# ---- data parallelism: helpers that are no-ops in a one-process run ------------------------------------------------
def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        import torch.distributed as dist

        dist.barrier()


def all_gather_objects(obj) -> list:
    """Every rank's ``obj``, in rank order (a one-element list in a one-process run)."""
    if world_size() == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj):
    """Rank 0's ``obj`` on every rank."""
    if world_size() == 1:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(values: list[float]) -> list[float]:
    """Element-wise sum over ranks, in float64 (exact enough for counts and sums of statistics)."""
    if world_size() == 1:
        return list(values)
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()
