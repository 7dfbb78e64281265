"""Stability metrics of a training run, computed from its per-step metric history.

Reliability metrics after Chan et al., "Measuring the Reliability of Reinforcement Learning Algorithms"
(ICLR 2020), on the reward curve r_1..r_n, each normalised by the curve's range R = max r − min r so that
they compare across rewards (``stability/*`` in MLflow):

- ``dispersion_time``: inter-quartile range of the detrended curve (first differences) in a trailing window
  (the last ``window`` fraction of steps), / R;
- ``short_term_risk``: CVaR (expected value of the worst ``alpha`` fraction) of the first differences — the
  typical size of the worst single-step drops, reported as a positive number, / R;
- ``long_term_risk``: CVaR of the drawdown from the running maximum — the expected worst drawdowns, / R;
- across runs (several seeds of one config): ``dispersion_runs`` = IQR of the runs' late-window rewards and
  ``risk_runs`` = CVaR of their lower tail, reported as the distance below the median run (raw reward units).

Plus, in raw units: late-window reward mean and slope (per step), the reward coefficient of variation in the
late window, KL mean / fraction of steps above ``target_kl`` / fraction negative, entropy relative drop (first
window -> late window) and volatility, ``frac_reward_zero_std`` mean, loss / grad-norm / value-loss spike
counts and the number of non-finite values.

Metric keys are TRL's (``reward``, ``kl``, ``entropy``, ``loss``, ``grad_norm``, ``frac_reward_zero_std``) or the
classic PPO names (``objective/scores``, ``objective/kl``, ``objective/entropy``, ``loss/value_avg``);
:mod:`sweeprl.analysis.history` maps common aliases onto them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

REWARD_KEYS = ("reward", "objective/scores")
KL_KEYS = ("kl", "objective/kl")
ENTROPY_KEYS = ("entropy", "objective/entropy")
LOSS_KEYS = ("loss", "loss/policy_avg")
VALUE_LOSS_KEYS = ("loss/value_avg",)
FINITE_WATCH = (
    "reward",
    "loss",
    "kl",
    "entropy",
    "grad_norm",
    "objective/kl",
    "objective/entropy",
    "objective/scores",
    "loss/policy_avg",
    "loss/value_avg",
)


def series(history: Sequence[Mapping[str, Any]], *keys: str, finite: bool = True) -> np.ndarray:
    """Values of the first of ``keys`` present in each record (records with none of them are skipped)."""
    out = []
    for rec in history:
        for k in keys:
            v = rec.get(k)
            if v is not None:
                out.append(float(v))
                break
    arr = np.asarray(out, dtype=float)
    return arr[np.isfinite(arr)] if finite else arr


def steps_of(history: Sequence[Mapping[str, Any]], *keys: str) -> np.ndarray:
    """The ``step`` of every record that has one of ``keys`` with a finite value."""
    out = []
    for i, rec in enumerate(history):
        for k in keys:
            v = rec.get(k)
            if v is not None:
                if math.isfinite(float(v)):
                    out.append(int(rec.get("step", i + 1)))
                break
    return np.asarray(out, dtype=int)


def window_size(n: int, fraction: float) -> int:
    return max(1, min(n, math.ceil(fraction * n)))


def iqr(x: np.ndarray) -> float:
    if x.size < 2:
        return 0.0
    q75, q25 = np.percentile(x, [75, 25])
    return float(q75 - q25)


def cvar_lower(x: np.ndarray, alpha: float = 0.05) -> float:
    """Mean of the smallest ``ceil(alpha * n)`` values (expected worst case of a lower tail)."""
    if x.size == 0:
        return 0.0
    k = max(1, math.ceil(alpha * x.size))
    return float(np.sort(x)[:k].mean())


def cvar_upper(x: np.ndarray, alpha: float = 0.05) -> float:
    """Mean of the largest ``ceil(alpha * n)`` values (expected worst case of an upper tail)."""
    if x.size == 0:
        return 0.0
    k = max(1, math.ceil(alpha * x.size))
    return float(np.sort(x)[-k:].mean())


def drawdowns(x: np.ndarray) -> np.ndarray:
    """Distance below the running maximum at every step."""
    return np.maximum.accumulate(x) - x if x.size else x


def moving_average(x: np.ndarray, k: int = 5) -> np.ndarray:
    if x.size < k:
        return x.copy()
    return np.convolve(x, np.ones(k) / k, mode="valid")


def slope(y: np.ndarray) -> float:
    """Least-squares slope per step."""
    if y.size < 2:
        return 0.0
    x = np.arange(y.size, dtype=float)
    return float(np.polyfit(x, y, 1)[0])


def robust_spikes(x: np.ndarray, k: float = 6.0, warmup: int = 5) -> List[int]:
    """Indices where a value departs from the median of the values before it by more than ``k`` robust standard
    deviations (1.4826 x MAD) *and* exceeds every earlier magnitude by 2x. Oscillation around a stable level
    (e.g. a policy-gradient loss around zero) does not count."""
    out = []
    for i in range(warmup, x.size):
        past = x[:i]
        med = float(np.median(past))
        mad = 1.4826 * float(np.median(np.abs(past - med)))
        scale = max(mad, 1e-8 + 1e-3 * abs(med))
        if abs(x[i] - med) > k * scale and abs(x[i]) > 2.0 * float(np.max(np.abs(past))):
            out.append(i)
    return out


def non_finite_count(history: Sequence[Mapping[str, Any]]) -> int:
    bad = 0
    for rec in history:
        for k in FINITE_WATCH:
            v = rec.get(k)
            if v is not None and not math.isfinite(float(v)):
                bad += 1
                break
    return bad


@dataclass
class StabilityReport:
    steps: int
    reward_start: float
    late_reward: float
    late_slope: float
    reward_range: float
    reward_cv: float
    dispersion_time: float
    short_term_risk: float
    long_term_risk: float
    dispersion_raw: float  # IQR of late differences, reward units (objective term)
    drawdown_raw: float  # CVaR of drawdowns of the 5-step moving average, reward units (objective term)
    short_term_risk_raw: float  # reward units
    kl_mean: float
    kl_frac_above_target: float
    kl_frac_negative: float
    entropy_drop: float
    entropy_volatility: float
    frac_reward_zero_std: float
    loss_spikes: int
    grad_norm_spikes: int
    value_loss_spikes: int
    non_finite: int
    non_finite_fraction: float

    def as_dict(self) -> Dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def compute(
    history: Sequence[Mapping[str, Any]],
    *,
    window: float = 0.25,
    target_kl: float = 0.1,
    alpha: float = 0.05,
    reward_keys: Sequence[str] = REWARD_KEYS,
) -> StabilityReport:
    """All stability metrics of one run. Raises ValueError when no finite reward was logged."""
    r = series(history, *reward_keys)
    if r.size == 0:
        others = ", ".join(dict.fromkeys(k for k in reward_keys[1:] if k != reward_keys[0]))
        raise ValueError(
            f"no finite '{reward_keys[0]}' value in {len(history)} logged steps (also tried: {others or '-'})"
        )
    w = window_size(r.size, window)
    late = r[-w:]
    rng = float(r.max() - r.min())
    norm = rng if rng > 1e-12 else 1.0
    diffs_late = np.diff(late)
    diffs_all = np.diff(r)
    dd = drawdowns(r)
    mean_late = float(late.mean())

    kl = series(history, *KL_KEYS)
    ent = series(history, *ENTROPY_KEYS)
    entropy_drop = entropy_vol = 0.0
    if ent.size >= 2:
        we = window_size(ent.size, window)
        start = float(ent[:we].mean())
        if start > 0:
            entropy_drop = max(0.0, 1.0 - float(ent[-we:].mean()) / start)
            entropy_vol = float(np.std(np.diff(ent)) / start)
    zero_std = series(history, "frac_reward_zero_std")
    n_hist = max(1, len(history))
    nonfinite = non_finite_count(history)
    return StabilityReport(
        steps=len(history),
        reward_start=float(r[:w].mean()),
        late_reward=mean_late,
        late_slope=slope(late),
        reward_range=rng,
        reward_cv=float(np.std(late) / abs(mean_late)) if abs(mean_late) > 1e-12 else 0.0,
        dispersion_time=iqr(diffs_late) / norm,
        short_term_risk=max(0.0, -cvar_lower(diffs_all, alpha)) / norm,
        long_term_risk=cvar_upper(dd, alpha) / norm,
        dispersion_raw=iqr(diffs_late),
        drawdown_raw=cvar_upper(drawdowns(moving_average(r)), alpha),
        short_term_risk_raw=max(0.0, -cvar_lower(diffs_all, alpha)),
        kl_mean=float(kl.mean()) if kl.size else 0.0,
        kl_frac_above_target=float((kl > target_kl).mean()) if kl.size else 0.0,
        kl_frac_negative=float((kl < 0).mean()) if kl.size else 0.0,
        entropy_drop=entropy_drop,
        entropy_volatility=entropy_vol,
        frac_reward_zero_std=float(zero_std.mean()) if zero_std.size else 0.0,
        loss_spikes=len(robust_spikes(series(history, *LOSS_KEYS))),
        grad_norm_spikes=len(robust_spikes(series(history, "grad_norm"))),
        value_loss_spikes=len(robust_spikes(series(history, *VALUE_LOSS_KEYS))),
        non_finite=nonfinite,
        non_finite_fraction=nonfinite / n_hist,
    )


def across_runs(late_rewards: Sequence[float], alpha: float = 0.05) -> Dict[str, float]:
    """Dispersion and risk across runs (seeds) of one configuration, from each run's late-window reward."""
    x = np.asarray([v for v in late_rewards if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"runs": 0, "mean": float("nan"), "dispersion_runs": 0.0, "risk_runs": 0.0, "std_runs": 0.0}
    med = float(np.median(x))
    return {
        "runs": int(x.size),
        "mean": float(x.mean()),
        "dispersion_runs": iqr(x),
        "risk_runs": max(0.0, med - cvar_lower(x, alpha)),
        "std_runs": float(x.std()),
    }


def optional_series(history: Sequence[Mapping[str, Any]], key: str) -> Optional[np.ndarray]:
    s = series(history, key)
    return s if s.size else None
