"""The StarPO trainer. One training step reads top to bottom in ``Trainer.step``:

ROLLOUT -> DIAGNOSE -> FILTER -> SHAPE -> ADVANTAGES -> UPDATE -> LOG

What the step runs is built by ``ragen.train.setup`` from the names in the config; the forward passes are in
``ragen.train.policy``, the update in ``ragen.train.update``, checkpoints in ``ragen.train.checkpoint``. The run
loop around the steps (warm start, validation, checkpoints) is ``ragen.runs.loop.train``.
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import numpy as np

from ragen.config import RunConfig
from ragen.errors import RagenError
from ragen.log import log, progress
from ragen.models import distributed as dp
from ragen.train import boundary, checkpoint, setup
from ragen.train.batch import Batch, collate
from ragen.train.ranks import gather, own_rows, replica_diff
from ragen.train.stats import StepTimer, finite_scores, reward_metrics


@attrs.define
class StepResult:
    metrics: dict
    stop_reason: str | None = None


class Trainer:
    """Builds the engines and components of a run, then runs steps, validation and checkpoints."""

    def __init__(self, run: setup.ResolvedRun | RunConfig, run_dir: Path, resume: bool = False,
                 init_model: Path | None = None):
        """``run``: the resolved run (``ragen.envs.resolved``); a ``RunConfig`` is resolved by ``setup.build``."""
        self.run_dir = Path(run_dir)
        parts = setup.build(run, self.run_dir, resume=resume, init_model=init_model)
        self.run, self.cfg = parts.run, parts.run.cfg
        self.device, self.dtype, self.rank, self.world = parts.device, parts.dtype, parts.rank, parts.world
        # components, by name, from the registries
        self.preset, self.estimator = parts.preset, parts.estimator
        self.filters, self.shapers, self.gate = parts.filters, parts.shapers, parts.gate
        # models and engines; the reference policy: with LoRA the base model with adapters disabled, else a frozen copy
        self.tokenizer, self.model_source, self.lora = parts.tokenizer, parts.model_source, parts.lora
        self.actor, self.critic, self.reference, self.engine = parts.actor, parts.critic, parts.reference, parts.engine
        self.policy, self.updater, self._rollout = parts.policy, parts.updater, parts.rollout
        self.early_stop, self.collapse, self.writer = parts.early_stop, parts.collapse, parts.writer
        self.kl_beta = self.preset.kl_reward_coef
        self.step_idx = 0
        # Ctrl-C asked to stop (ragen/train/interrupt.py); the last checkpoint's step
        self.interrupted, self.saved_step = False, None
        self._nonfinite_warned: set[str] = set()  # the shapers already warned about non-finite scores

    def _seed(self, *keys: int) -> int:
        return int(np.random.SeedSequence([self.cfg.trainer.seed, *keys]).generate_state(1)[0])

    # ------------------------------------------------------------------------------------------------
    def step(self) -> StepResult:
        """One StarPO step; each phase's wall time goes to ``timing/<phase>_s``."""
        cfg, step, p = self.cfg, self.step_idx, self.preset
        metrics: dict = {}
        timer = StepTimer(metrics)

        # ==== ROLLOUT: n_groups x group_size envs, one seed per group, multi-turn, token-in/token-out ====
        with timer.phase("rollout"):
            result = gather(self._rollout.train_batch(step, policy_version=step, seed=self._seed(1, step)), self.world)
        trajs = result.trajectories  # the global batch: every rank's groups, in group order
        metrics.update({f"rollout/{k}": v for k, v in result.metrics.items()})
        if not trajs:
            raise RagenError(f"step {step}: every env failed ({result.failed_envs} failures); see the warnings above")
        # R_i = env rewards + format penalties: what filters and early stopping see
        metrics.update(reward_metrics([t.score for t in trajs], [t.group_id for t in trajs]))

        # ==== DIAGNOSE: collapse metrics on the unfiltered batch, with the pre-update actor ====
        with timer.phase("diagnose"):
            if self.collapse is not None and self.collapse.should_run(step + 1) and dp.is_main():
                metrics.update(self.collapse(self.actor.module, trajs, step + 1, cfg.rollout.temperature))

        # ==== FILTER: keep or drop whole groups, always on raw rewards ====
        with timer.phase("filter"):
            rows, kept_ratio = self._filter(trajs, metrics)
        if not rows:  # a batch without a success under the gate is no filter's doing: it does not count towards a stop
            event = "empty_after_filter" if metrics["rollout/empty_after_filter"] else "no_success_in_batch"
            log.warning(event, step=step)
            return self._log(metrics, trajs, timer)

        # ==== SHAPE: training scores of the kept trajectories (normalisation, penalties); raw stays untouched ====
        with timer.phase("shape"):
            kept = [trajs[i] for i in rows]
            scores, turn_scores = self._shape(kept, metrics)
            # this rank trains its own groups; a rank whose groups were all dropped trains one masked-out row
            n_global = len(kept)
            by_traj = {id(t): ts for t, ts in zip(kept, turn_scores)}
            kept, scores, dummy = own_rows(kept, scores, trajs, self.rank, self.world)
            turn_scores = [by_traj.get(id(t)) or [x.reward + x.penalty for x in t.turns] for t in kept]

        # ==== ADVANTAGES: old (and reference) log-probs and values on the exact sampled ids, then the estimator ====
        with timer.phase("advantages", "update"):  # timing/update_s has always counted these forward passes
            batch = collate(kept, self.tokenizer.pad_token_id, scores, placement=p.reward_placement,
                            turn_scores=turn_scores).to(self.device)
            if dummy:
                batch.loss_mask.zero_()
            reused = self.policy.old_logprobs(batch, metrics, self.engine)
            if p.needs_reference:
                self.kl_beta = self.policy.reference_kl(batch, metrics, self.kl_beta)
            self._advantages(batch, kept_ratio, metrics)

        # ==== UPDATE: critic first, then actor; ppo_epochs over near-equal mini-batches ====
        with timer.phase("update"):
            seed = self._seed(2, step, self.rank)  # the mini-batch shuffle
            metrics.update(self.updater(batch, step, n_global, seed=seed, measure_entropy=reused))
            if self.world > 1:
                metrics["dist/replica_max_abs_diff"] = replica_diff(self.actor.module)
            metrics.update(self.engine.sync_weights(self.actor.module))  # vLLM: loaded, then verified on a probe

        # ==== LOG: one metrics.jsonl line per step, sampled trajectories, console ====
        return self._log(metrics, trajs, timer)

    def _filter(self, trajs: list, metrics: dict) -> tuple[list[int], float]:
        """Rows of the kept groups (success gate, pre-filter, then filter) and the kept-group ratio; counts steps the
        filters emptied."""
        keep = {t.group_id for t in trajs}
        n_groups = len(keep)
        keep -= self._gate(trajs, n_groups, metrics)
        gate_emptied = not keep
        wants_entropy = any(getattr(f, "needs_entropy", False) for f in self.filters)
        entropies = self._entropies(trajs) if keep and wants_entropy else None
        for i, filt in enumerate(self.filters if keep else ()):
            idx = [j for j, t in enumerate(trajs) if t.group_id in keep]
            res = boundary.call_filter(filt, metrics, raw_rewards=[trajs[j].score for j in idx],
                                       group_ids=[trajs[j].group_id for j in idx], n_groups=n_groups,
                                       successes=[trajs[j].success for j in idx],
                                       lengths=[trajs[j].response_length for j in idx],
                                       entropies=None if entropies is None else [entropies[j] for j in idx])
            pre = "rollout/pre_filter_" if i < len(self.filters) - 1 else "rollout/"
            metrics.update({pre + k.removeprefix("rollout/"): v for k, v in res.metrics.items()})
            keep &= set(res.kept_groups)
        rows = [i for i, t in enumerate(trajs) if t.group_id in keep]
        ratio = len(keep) / max(n_groups, 1)
        metrics["rollout/filter_kept_ratio"] = ratio
        metrics["rollout/empty_after_filter"] = float(not rows and not gate_emptied)
        return rows, ratio

    def _gate(self, trajs: list, n_groups: int, metrics: dict) -> set[int]:
        """The groups the success gate leaves out (``ragen.train.gate``), counted per step when it is active."""
        if self.gate is None:
            return set()
        out = self.gate(trajs)
        metrics["rollout/success_gate_groups"] = float(len(out))
        metrics["rollout/success_gate_ratio"] = len(out) / max(n_groups, 1)
        metrics["rollout/success_gate_empty"] = float(len(out) == n_groups)  # this step trained nothing
        return out

    def _entropies(self, trajs: list) -> list[float]:
        """Mean token entropy over each trajectory's sampled tokens (for the entropy filter metrics)."""
        batch = collate(trajs, self.tokenizer.pad_token_id, [0.0] * len(trajs)).to(self.device)
        return self.policy.mean_entropies(batch)

    def _shape(self, kept: list, metrics: dict) -> tuple[list[float], list[list[float]]]:
        """The shapers in order over the kept trajectories' scores and turn rewards (reward + penalty of each turn until
        a shaper returns a ``ShapeOutput``); a NaN/inf score becomes a neutral 0, counted."""
        scores = [t.score for t in kept]
        turns = [[t.reward + t.penalty for t in traj.turns] for traj in kept]
        for shape in self.shapers:
            before = scores
            scores, turns = boundary.call_shaper(shape, metrics, scores=scores, group_ids=[t.group_id for t in kept],
                                                 env_names=[t.env_name for t in kept], trajectories=kept,
                                                 turn_scores=turns)
            self._count_nonfinite(shape, before, scores, metrics)
        scores, bad = finite_scores(scores)  # counted with the env's own non-finite rewards
        metrics["rollout/nonfinite_rewards"] = metrics.get("rollout/nonfinite_rewards", 0.0) + bad
        if self.shapers and scores:  # what the update is paid: a shaper's own reward can rise while success does not
            metrics["reward/shaped_mean"] = sum(scores) / len(scores)
        return scores, turns

    def _count_nonfinite(self, shape, before: list[float], after: list[float], metrics: dict) -> None:
        """``<kind>/<name>/nonfinite``: the NaN/inf scores this shaper made of finite ones (they train as 0); the
        first time, a warning naming the shaper and its distribution, so a shaper that is always NaN is not a silent
        run on all-zero scores."""
        bad = sum(math.isfinite(b) and not math.isfinite(a) for b, a in zip(before, after))
        key = getattr(shape, "component_key", None) or f"component/{boundary.who(shape)}"
        metrics[f"{key}/nonfinite"] = metrics.get(f"{key}/nonfinite", 0.0) + float(bad)
        if bad and key not in self._nonfinite_warned:
            self._nonfinite_warned.add(key)
            log.warning("shaper_returned_nonfinite", shaper=boundary.who(shape), step=self.step_idx + 1,
                        scores=f"{bad} of {len(after)}", metric=f"{key}/nonfinite",
                        note="each such score trains as 0; warned once per shaper")

    def _advantages(self, batch: Batch, kept_ratio: float, metrics: dict) -> None:
        """The estimator's advantages (scaled by ``filter_loss_scaling``), and with a critic its values and returns."""
        p = self.preset
        values = self.policy.values(batch) if self.critic is not None else None
        # each rank holds its own rows: batch-wide statistics (whitening) sum over the ranks
        out = boundary.call_estimator(self.estimator, values is not None, metrics, token_rewards=batch.token_rewards,
                                      mask=batch.loss_mask, scores=batch.scores, group_ids=batch.group_ids,
                                      values=values, turn_ids=batch.turn_ids, turn_scores=batch.turn_scores,
                                      kl_rewards=batch.kl_rewards, world_size=self.world,
                                      all_reduce_sum=dp.all_reduce_sum)
        scale = {"none": 1.0, "linear": kept_ratio, "sqrt": kept_ratio ** 0.5}[p.filter_loss_scaling]
        batch.advantages = out.advantages.to(self.device).float() * scale
        if values is not None:
            batch.values = values
            batch.returns = out.returns.to(self.device).float()
        sampled = batch.loss_mask.bool()
        adv_sum, adv_n = dp.all_reduce_sum([float(batch.advantages[sampled].sum()), float(sampled.sum())])
        metrics["actor/advantage_mean"] = adv_sum / max(adv_n, 1.0)

    def _log(self, metrics: dict, trajs: list, timer: StepTimer) -> StepResult:
        """The step's timings and throughput, its sampled trajectories, the early-stopping check."""
        step_s = timer.finish()
        metrics["perf/tokens_per_s"] = sum(len(t.input_ids) for t in trajs) / max(step_s, 1e-9)
        self.step_idx += 1
        keep = self.cfg.logging.save_trajectories
        sample = trajs if keep < 0 else trajs[:keep]
        self.writer.trajectories("trajectories.jsonl", [{"step": self.step_idx, **t.to_dict()} for t in sample])
        stop = self.early_stop.after_step(metrics)
        return StepResult(metrics, stop_reason=self.updater.fatal or stop)

    # ------------------------------------------------------------------------------------------------
    def validate(self) -> dict:
        bar = progress(0, 0, self.cfg.logging.progress and dp.is_main(), desc="validation", unit="turn", leave=False)
        with bar:
            result = gather(self._rollout.val_batch(policy_version=self.step_idx, seed=self._seed(3, self.step_idx),
                                                    progress=bar), self.world)
        self.writer.trajectories("val_trajectories.jsonl",
                                 [{"step": self.step_idx, **t.to_dict()} for t in result.trajectories])
        return {f"val/{k}": v for k, v in result.metrics.items()}

    def paired_validate(self, label: str) -> tuple[dict, list]:
        """The greedy pass over ``rollout.n_paired_levels`` fixed levels (``label``: 'before' or 'after' RL): its
        rollout metrics and trajectories (every rank's), the trajectories also in paired_trajectories.jsonl."""
        bar = progress(0, 0, self.cfg.logging.progress and dp.is_main(), desc=f"greedy levels ({label})", unit="turn",
                       leave=False)
        with bar:
            result = gather(self._rollout.paired_batch(self.cfg.rollout.n_paired_levels, policy_version=self.step_idx,
                                                       progress=bar), self.world)
        self.writer.trajectories("paired_trajectories.jsonl",
                                 [{"step": self.step_idx, "pass": label, **t.to_dict()} for t in result.trajectories])
        return result.metrics, result.trajectories

    def save_checkpoint(self) -> Path:
        state = {"step": self.step_idx, "rng": checkpoint.rng_state(),
                 "early_stop": self.early_stop.state_dict(), "kl_beta": self.kl_beta,
                 "collapse": self.collapse.state_dict() if self.collapse is not None else None}
        path = checkpoint.save(self.run_dir, self.step_idx, self.actor, self.critic, state,
                               keep=self.cfg.trainer.keep_checkpoints)
        self.saved_step = self.step_idx
        return path

    def load_checkpoint(self) -> int:
        state = checkpoint.load(self.run_dir, self.actor, self.critic)
        self.step_idx = int(state["step"])
        self.early_stop.load_state_dict(state["early_stop"])
        self.kl_beta = float(state["kl_beta"])
        if self.collapse is not None and state.get("collapse"):
            self.collapse.load_state_dict(state["collapse"])
        checkpoint.set_rng_state(state["rng"])
        self.engine.sync_weights(self.actor.module)
        return self.step_idx

    def export(self) -> Path:
        r = self.cfg.rollout
        parser = (r.parser, dict(r.parser_options), r.prompt, r.max_context_window)
        return checkpoint.export(self.run_dir / checkpoint.FINAL, self.actor.module, self.tokenizer, self.lora, parser)

    def close(self) -> None:
        self.engine.close()
        self._rollout.close()
        self.writer.close()
