"""Early stopping (algorithms.md §8): RAGEN's three rules, each switchable, each stop logged with its reason.

* empty filter: ``empty_stop_steps`` consecutive steps whose filter kept nothing;
* reward-spread collapse: the mean pre-filter in-group reward std of steps 1..``rv_baseline_steps`` is the baseline b;
  afterwards ``rv_patience`` consecutive steps all below ``rv_ratio``·b stop the run;
* low validation success: ``val_patience`` consecutive validations where some variant's success < ``val_min_success``.
"""

from __future__ import annotations

import attrs

from ragen.config import EarlyStopSection

REASONS = {
    "empty_filtered_steps": "the rollout filter kept nothing for {n} consecutive steps",
    "reward_variance_collapse": "in-group reward std stayed below {ratio} x its baseline {base:.4g} for {n} steps",
    "low_validation_success": "validation success stayed below {min} for {n} consecutive validations",
}


@attrs.define
class EarlyStopper:
    """Tracks the rules across steps; ``state_dict``/``load_state_dict`` make resumed runs stop where the uninterrupted
    run would."""

    cfg: EarlyStopSection
    empty: int = 0
    baseline: list[float] = attrs.Factory(list)
    low_rv: int = 0
    low_val: int = 0

    def after_step(self, metrics: dict) -> str | None:
        """Update with one step's metrics (``rollout/empty_after_filter``, ``reward/group_std``); returns a stop
        reason."""
        c = self.cfg
        self.empty = self.empty + 1 if metrics.get("rollout/empty_after_filter") else 0
        metrics["rollout/consecutive_empty_after_filter_steps"] = float(self.empty)  # the one count of the streak
        if c.enabled and c.empty_stop_steps and self.empty >= c.empty_stop_steps:
            return self._stop(metrics, "empty_filtered_steps", n=self.empty)
        spread = metrics.get("reward/group_std")
        if spread is None or not c.rv_baseline_steps:
            return None
        if len(self.baseline) < c.rv_baseline_steps:
            self.baseline.append(float(spread))
            return None
        base = sum(self.baseline) / len(self.baseline)
        self.low_rv = self.low_rv + 1 if spread < c.rv_ratio * base else 0
        if c.enabled and c.rv_patience and self.low_rv >= c.rv_patience:
            return self._stop(metrics, "reward_variance_collapse", ratio=c.rv_ratio, base=base, n=self.low_rv)
        return None

    def after_validation(self, metrics: dict) -> str | None:
        """Update with one validation's ``val/<variant>/success`` (or ``val/success``); returns a stop reason."""
        c = self.cfg
        per_variant = [
            v for k, v in metrics.items() if k.startswith("val/") and k.endswith("/success") and k.count("/") == 2
        ]
        values = per_variant or [metrics[k] for k in ("val/success",) if k in metrics]
        if not values:
            return None
        self.low_val = self.low_val + 1 if min(values) < c.val_min_success else 0
        if c.enabled and c.val_patience and self.low_val >= c.val_patience:
            return self._stop(metrics, "low_validation_success", min=c.val_min_success, n=self.low_val)
        return None

    @staticmethod
    def _stop(metrics: dict, rule: str, **fmt) -> str:
        metrics[f"early_stopped/{rule}"] = 1.0
        return f"{rule}: " + REASONS[rule].format(**fmt)

    def state_dict(self) -> dict:
        return {"empty": self.empty, "baseline": list(self.baseline), "low_rv": self.low_rv, "low_val": self.low_val}

    def load_state_dict(self, state: dict) -> None:
        self.empty, self.baseline = int(state["empty"]), list(state["baseline"])
        self.low_rv, self.low_val = int(state["low_rv"]), int(state["low_val"])
