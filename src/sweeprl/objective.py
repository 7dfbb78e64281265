"""The trial value Optuna optimises, computed from a trial's per-step metric history.

``objective=stability_adjusted`` (sweep default)::

    value = late_reward - w_dispersion * dispersion - w_drawdown * drawdown
                        - w_kl_excess * kl_excess - w_entropy_collapse * entropy_collapse
                        - w_non_finite * non_finite

with, on the logged reward curve r_1..r_n and a late window of the last ``ceil(window * n)`` steps:

- ``late_reward``: mean of r over the late window;
- ``dispersion``: inter-quartile range of the step-to-step differences of r in the late window (Chan et al.
  2020's dispersion across time, detrended by differencing) — noisy, spiky late training costs;
- ``drawdown``: mean of the worst 5 % drawdowns of a 5-step moving average of r from its running maximum
  (long-term risk as CVaR) — a run that peaks and then collapses costs;
- ``kl_excess``: mean over steps of max(0, kl - target_kl) (GRPO ``kl``, or PPO ``objective/kl``);
- ``entropy_collapse``: max(0, relative entropy drop from the first to the late window - entropy_drop_free);
- ``non_finite``: fraction of logged steps where reward, loss, kl, entropy or grad_norm is NaN/inf.

All penalty terms are in reward units (except the two fractions), so the weights in ``conf/objective/`` read
as "how much reward one unit of this instability is worth". ``objective=reward`` is the baseline: the mean
reward of the last ``final_steps`` logged steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

KL_KEYS = ("kl", "objective/kl")
ENTROPY_KEYS = ("entropy", "objective/entropy")
FINITE_WATCH = ("reward", "loss", "kl", "entropy", "grad_norm", "objective/kl", "objective/entropy")


class ObjectiveError(ValueError):
    """The history cannot give an objective value (e.g. no finite reward was ever logged)."""


@dataclass
class ObjectiveResult:
    value: float
    name: str
    terms: Dict[str, float] = field(default_factory=dict)  # weighted contributions (penalties positive)
    raw: Dict[str, float] = field(default_factory=dict)  # the unweighted stability quantities

    def as_dict(self) -> Dict[str, Any]:
        return {"objective": self.value, "name": self.name, "terms": self.terms, "raw": self.raw}


def series(history: Sequence[Mapping[str, Any]], *keys: str) -> np.ndarray:
    """Values of the first key of ``keys`` present in each record (records without any are skipped)."""
    out = []
    for rec in history:
        for k in keys:
            if k in rec and rec[k] is not None:
                out.append(float(rec[k]))
                break
    return np.asarray(out, dtype=float)


def window_size(n: int, fraction: float) -> int:
    return max(1, min(n, math.ceil(fraction * n)))


def iqr(x: np.ndarray) -> float:
    if x.size < 2:
        return 0.0
    q75, q25 = np.percentile(x, [75, 25])
    return float(q75 - q25)


def cvar_upper(x: np.ndarray, alpha: float = 0.05) -> float:
    """Mean of the largest ``ceil(alpha * n)`` values (expected worst case)."""
    if x.size == 0:
        return 0.0
    k = max(1, math.ceil(alpha * x.size))
    return float(np.sort(x)[-k:].mean())


def moving_average(x: np.ndarray, k: int = 5) -> np.ndarray:
    if x.size < k:
        return x.copy()
    kernel = np.ones(k) / k
    return np.convolve(x, kernel, mode="valid")


def non_finite_fraction(history: Sequence[Mapping[str, Any]]) -> float:
    if not history:
        return 0.0
    bad = 0
    for rec in history:
        vals = [rec[k] for k in FINITE_WATCH if k in rec and rec[k] is not None]
        if any(not math.isfinite(float(v)) for v in vals):
            bad += 1
    return bad / len(history)


def stability_terms(history: Sequence[Mapping[str, Any]], objective_cfg: Any) -> Dict[str, float]:
    """The unweighted quantities of the stability-adjusted objective (see module docstring)."""
    rewards_all = series(history, objective_cfg.reward_key)
    rewards = rewards_all[np.isfinite(rewards_all)]
    if rewards.size == 0:
        raise ObjectiveError(f"no finite '{objective_cfg.reward_key}' value in {len(history)} logged steps")
    w = window_size(rewards.size, objective_cfg.window)
    late = rewards[-w:]
    smooth = moving_average(rewards)
    drawdowns = np.maximum.accumulate(smooth) - smooth

    kl = series(history, *KL_KEYS)
    kl = kl[np.isfinite(kl)]
    kl_excess = float(np.maximum(kl - objective_cfg.target_kl, 0.0).mean()) if kl.size else 0.0

    ent = series(history, *ENTROPY_KEYS)
    ent = ent[np.isfinite(ent)]
    entropy_drop = 0.0
    if ent.size >= 2:
        we = window_size(ent.size, objective_cfg.window)
        start = float(ent[:we].mean())
        if start > 0:
            entropy_drop = max(0.0, 1.0 - float(ent[-we:].mean()) / start)

    return {
        "late_reward": float(late.mean()),
        "dispersion": iqr(np.diff(late)),
        "drawdown": cvar_upper(drawdowns),
        "kl_excess": kl_excess,
        "entropy_drop": entropy_drop,
        "entropy_collapse": max(0.0, entropy_drop - objective_cfg.entropy_drop_free),
        "non_finite": non_finite_fraction(history),
    }


def compute_objective(history: Sequence[Mapping[str, Any]], objective_cfg: Any) -> ObjectiveResult:
    """The trial value for ``objective_cfg.name`` (stability_adjusted or reward)."""
    if objective_cfg.name == "reward":
        rewards = series(history, objective_cfg.reward_key)
        rewards = rewards[np.isfinite(rewards)]
        if rewards.size == 0:
            raise ObjectiveError(f"no finite '{objective_cfg.reward_key}' value in {len(history)} logged steps")
        value = float(rewards[-objective_cfg.final_steps :].mean())
        return ObjectiveResult(value=value, name="reward", terms={"final_reward": value})
    if objective_cfg.name != "stability_adjusted":
        raise ObjectiveError(f"objective.name={objective_cfg.name!r}; allowed: stability_adjusted, reward")

    raw = stability_terms(history, objective_cfg)
    weights = objective_cfg.weights
    terms = {"late_reward": raw["late_reward"]}
    for name in ("dispersion", "drawdown", "kl_excess", "entropy_collapse", "non_finite"):
        terms[name] = float(getattr(weights, name)) * raw[name]
    value = terms["late_reward"] - sum(v for k, v in terms.items() if k != "late_reward")
    return ObjectiveResult(value=float(value), name="stability_adjusted", terms=terms, raw=raw)


def objective_metrics(result: ObjectiveResult) -> Dict[str, float]:
    """Flat metric dict for MLflow: ``objective``, ``objective_terms/<term>``, ``stability/<quantity>``."""
    out: Dict[str, float] = {"objective": result.value}
    out.update({f"objective_terms/{k}": v for k, v in result.terms.items()})
    out.update({f"stability/{k}": v for k, v in result.raw.items()})
    return out


def load_history(path: str) -> List[Dict[str, Any]]:
    """Read a ``metrics.jsonl`` written by :class:`sweeprl.training.callbacks.MetricsRecorder`."""
    import json

    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


__all__ = [
    "ObjectiveError",
    "ObjectiveResult",
    "compute_objective",
    "load_history",
    "objective_metrics",
    "stability_terms",
]
