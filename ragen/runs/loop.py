"""A training run around ``Trainer.step`` (``ragen run``): the run folder, the warm start, validation before the first
step, the steps with their validations and checkpoints, the export of the final model; or a resume from the last
checkpoint of a run folder."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import attrs

from ragen import config as config_mod
from ragen.config import RunConfig
from ragen.envs.resolved import ResolvedRun, as_resolved, resolve_run
from ragen.errors import ConfigError, Interrupted, RagenError
from ragen.log import configure_logging, log, progress
from ragen.models import distributed as dp
from ragen.runs.diagnosis import Watcher
from ragen.train import interrupt
from ragen.train.runlog import saved_config, unredact  # noqa: F401  (unredact: imported from here too)
from ragen.train.trainer import Trainer


def train(run: ResolvedRun | RunConfig | None, resume: Path | None = None, warmstart: bool | None = None) -> Path:
    """Run (or resume) a training run; returns the run folder. ``run``: the resolved run (the CLI resolves it when it
    checks the config; a ``RunConfig`` is resolved here), None with ``resume``. ``warmstart`` True/False overrides
    ``warmstart.mode``."""
    configure_logging()
    run = None if run is None else as_resolved(run)
    if warmstart is not None and run is not None:  # recorded in config.yaml, so a resume or a rerun does the same
        cfg = attrs.evolve(run.cfg, warmstart=attrs.evolve(run.cfg.warmstart, mode="always" if warmstart else "never"))
        run = attrs.evolve(run, cfg=cfg)  # warmstart.mode enters none of the resolved fields
    run, run_dir = _run_folder(run, resume)
    init_model, warm_metrics = _initial_model(run, run_dir, resume is not None)
    trainer = Trainer(run, run_dir, resume=resume is not None, init_model=init_model)
    try:
        _start(trainer, resume is not None, warm_metrics)
        run_steps(trainer)
        _finish(trainer)
    finally:
        trainer.close()
    return run_dir


def new_run_dir(run: ResolvedRun) -> Path:
    cfg = run.cfg
    name = cfg.logging.name or f"{run.label}-{cfg.algo.name}-{datetime.now():%Y%m%d-%H%M%S}"
    path = Path(cfg.logging.run_dir) / name
    if path.exists() and any(path.iterdir()):
        raise ConfigError(f"logging.name: run folder {str(path)!r} exists; use `ragen run --resume {path}` or another "
                          "name")
    try:  # now, before anything is built: an unwritable place is a one-line config error, not a traceback later
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"logging.run_dir: cannot create the run folder {str(path)!r}: "
                          f"{exc.strerror or type(exc).__name__}") from None
    return path


def _run_folder(run: ResolvedRun | None, resume: Path | None) -> tuple[ResolvedRun, Path]:
    """The run and its folder: a resumed run's own config (resolved here), or a new folder that every rank agrees
    on."""
    if resume is not None:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume: {str(run_dir)!r} is not a run folder (no config.yaml)")
        return resolve_run(config_mod.load_config(base=saved_config(run_dir))), run_dir
    dp.init_distributed(dp.pick_device(run.cfg.trainer.device))  # under a launcher every rank must agree on the folder
    return run, dp.broadcast_object(new_run_dir(run) if dp.is_main() else None)


def _initial_model(run: ResolvedRun, run_dir: Path, resume: bool) -> tuple[Path | None, dict]:
    """The warm-started model folder this run starts from (None: ``model.name`` as is) and the warm start's metrics.

    Rank 0 trains it or takes it from the cache (ragen/warmstart/cache.py); the other ranks wait, then load the same
    folder. A resumed run starts from the copy in its own folder.
    """
    from ragen.warmstart import cache as warmstart

    path = Path(run_dir) / warmstart.RUN_SUBDIR
    if resume:
        return (path if (path / "config.json").is_file() else None), {}
    if not warmstart.applies(run.cfg):
        return None, {}
    with interrupt.phase("the warm start (the validation and the greedy pass before RL follow it)"):
        metrics = warmstart.prepare(run, run_dir)[1] if dp.is_main() else {}
    dp.barrier()
    return path, metrics


def _start(trainer: Trainer, resumed: bool, warm_metrics: dict) -> None:
    """A resumed run loads its last checkpoint; a new one logs the warm start's metrics and validates the initial
    policy (both as step 0)."""
    run_dir, cfg = trainer.run_dir, trainer.cfg
    if resumed:
        start = trainer.load_checkpoint()
        trainer.writer.truncate_after(start)
        log.info("run_resumed", run_dir=str(run_dir), step=start)
        return
    log.info("run_started", run_dir=str(run_dir), env=trainer.run.label, algo=cfg.algo.name, model=cfg.model.name)
    if warm_metrics:
        trainer.writer.metrics(0, warm_metrics)
    if not trainer.run.validates:  # a short run (ragen/envs/resolved.py): its steps, no evaluation passes
        log.info("short_run", steps=cfg.trainer.steps, short_run_steps=cfg.trainer.short_run_steps,
                 note="no validation and no greedy pass; trainer.short_run_steps=0 plays them")
        return
    paired = " (the greedy pass before RL follows it)" if cfg.rollout.n_paired_levels else ""
    with interrupt.phase(f"the validation before RL{paired}"):
        val = trainer.validate()
    trainer.early_stop.after_validation(val)
    trainer.writer.metrics(0, {**val, **_paired_before(trainer)})


def run_steps(trainer: Trainer) -> None:
    """Steps until ``trainer.steps``, an early stop, the wall-time limit or Ctrl-C; validation every ``test_freq`` steps
    and after the last one (with the greedy pass compared level by level to the one before RL, unless Ctrl-C stopped
    the run), a checkpoint every ``save_freq`` steps and after the last one."""
    cfg = trainer.cfg.trainer
    t_start = time.perf_counter()
    bar = progress(cfg.steps, trainer.step_idx, trainer.cfg.logging.progress and dp.is_main())
    # a warning the first time a finding fires
    watch = Watcher.for_run(trainer.run_dir, trainer.cfg.rollout.train_levels) if dp.is_main() else None
    try:
        while trainer.step_idx < cfg.steps:
            if dp.all_reduce_sum([float(interrupt.requested())])[0]:  # every rank stops after the same step
                trainer.interrupted = True
                break
            with interrupt.phase(f"the current training step (step {trainer.step_idx + 1} of {cfg.steps})"):
                res = trainer.step()
            step = trainer.step_idx
            out_of_time = bool(cfg.max_steps_wall_s) and time.perf_counter() - t_start > cfg.max_steps_wall_s
            stop = res.stop_reason
            if trainer.run.validates and (step == cfg.steps or out_of_time or stop
                                          or (cfg.test_freq and step % cfg.test_freq == 0)):
                with interrupt.phase(f"the validation after step {step}"):
                    res.metrics.update(trainer.validate())
                stop = stop or trainer.early_stop.after_validation(res.metrics)
            last = bool(stop or out_of_time or step == cfg.steps)
            if last and trainer.cfg.rollout.n_paired_levels:  # in the last step's row, so rows[-1] stays a step's row
                with interrupt.phase("the greedy paired pass (after RL)"):
                    res.metrics.update(_paired_after(trainer))
            trainer.writer.metrics(step, res.metrics)
            if watch is not None:
                watch.warn(step, res.metrics)
            _show(trainer, bar, res.metrics, last=last)
            if stop:
                log.warning("early_stopped", step=step, reason=stop)
                break
            if out_of_time:
                log.warning("wall_time_limit_reached", step=step, limit_s=cfg.max_steps_wall_s)
                break
            if cfg.save_freq and step % cfg.save_freq == 0 and step < cfg.steps:
                trainer.save_checkpoint()
        if trainer.saved_step != trainer.step_idx:
            trainer.save_checkpoint()
        if trainer.interrupted:
            interrupt.saved()
    finally:
        bar.close()


def _show(trainer: Trainer, bar, metrics: dict, last: bool) -> None:
    """The step on the progress bar, and in report.html when ``logging.report_every`` asks (a long run watched in a
    browser)."""
    if trainer.cfg.logging.report_every and dp.is_main():
        from ragen.runs.report import refresh

        refresh(trainer.run_dir, trainer.step_idx, trainer.cfg.logging.report_every, final=last)
    bar.update(1)
    bar.set_postfix({k.split("/")[-1]: f"{metrics[k]:.3g}" for k in
                     ("rollout/success", "reward/mean", "actor/pg_loss", "val/success") if k in metrics})


def _finish(trainer: Trainer) -> None:
    """Export the final model, unless Ctrl-C stopped the run; a run ended by non-finite updates then fails in one
    line."""
    if trainer.interrupted:  # checkpointed, not exported: the run is unfinished
        during = interrupt.during() or ""
        where = "" if during.startswith("the current training step") or not during else f"during {during}, "
        raise Interrupted(f"interrupted {where}after step {trainer.step_idx}; checkpoint saved, continue with "
                          f"`ragen run --resume {trainer.run_dir}`")
    final = trainer.export()
    if trainer.updater.fatal:  # checkpointed and exported: now the one-line error and a non-zero exit
        raise RagenError(trainer.updater.fatal)
    log.info("run_finished", run_dir=str(trainer.run_dir), final_model=str(final), steps=trainer.step_idx)


#: the state-dependence numbers of a greedy pass kept beside its success (where the env's expert judges actions)
_PAIRED_STATE = ("optimal_action_rate", "optimal_action_chance")


def _paired_before(trainer: Trainer) -> dict:
    """The greedy pass before RL (ragen/runs/paired.py); its per-level outcomes stay in paired_trajectories.jsonl,
    where the pass after RL reads them back (a resumed run included)."""
    if not trainer.cfg.rollout.n_paired_levels:
        return {}
    with interrupt.phase("the greedy paired pass (before RL)"):
        m, trajs = trainer.paired_validate("before")
    log.info("paired_before", levels=len(trajs), success=m.get("success"))
    return {"paired/success_before": m.get("success", 0.0),
            **{f"paired/{k}_before": m[k] for k in _PAIRED_STATE if k in m}, **_paired_failures(m, "before")}


def _paired_failures(m: dict, label: str) -> dict:
    """The episodes a greedy pass dropped (an env failed), in all and by reason (``failed/<reason>`` of the pass):
    ``paired/failed_<label>`` and ``paired/failed_<label>/<reason>``."""
    out = {f"paired/failed_{label}": float(m.get("failed_envs", 0.0))}
    out.update({f"paired/failed_{label}/{k.removeprefix('failed/')}": v for k, v in m.items()
                if k.startswith("failed/")})
    return out


def _paired_after(trainer: Trainer) -> dict:
    """The greedy pass after RL compared level by level with the pass before it: the ``paired/*`` metrics."""
    from ragen.runs import paired
    from ragen.runs.plot import read_jsonl

    m, trajs = trainer.paired_validate("after")
    if not dp.is_main():  # every rank plays its levels; rank 0 writes the comparison
        return {}
    rows = read_jsonl(trainer.run_dir / "paired_trajectories.jsonl")
    before_rows = [r for r in rows if r.get("pass") == "before"]
    before = {(r["env_name"], int(r["seed"])): bool(r["success"]) for r in before_rows}
    if not before:  # a run resumed from a folder written before the paired pass existed
        log.warning("paired_before_missing", file="paired_trajectories.jsonl")
        return {}
    result = paired.compare(before, paired.level_successes(trajs))
    first = next((r for r in read_jsonl(trainer.run_dir / "metrics.jsonl") if "paired/success_before" in r), {})
    out = {**paired.metrics(result), **{f"paired/{k}_after": m[k] for k in _PAIRED_STATE if k in m},
           **{k: first[k] for k in (f"paired/{s}_before" for s in _PAIRED_STATE) if k in first},
           **{k: v for k, v in first.items() if k.startswith("paired/failed_before")}, **_paired_failures(m, "after")}
    # the levels this pass set out to play, and those missing from either pass (left out of the comparison)
    planned = float(m.get("num_trajectories", 0.0) + m.get("failed_envs", 0.0))
    out["paired/levels_planned"] = planned
    out["paired/levels_dropped"] = max(planned - result.levels, 0.0)
    log.info("paired_comparison", levels=result.levels, change=result.change, se=result.se, z=result.z,
             verdict=paired.verdict(result.z))
    return out
