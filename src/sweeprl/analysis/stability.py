"""Reliability metrics of RL training runs after Chan et al., "Measuring the Reliability of Reinforcement
Learning Algorithms" (ICLR 2020), as google-research/rl-reliability-metrics computes them
(``metrics_online.py``, ``metric_utils.py``; tests/rl_reliability_reference.py is a numpy port of those
formulas and the tests check every function here against it). Reported in each diagnosis next to the
objective; the objective itself (:mod:`sweeprl.analysis.objective`) uses its own, documented terms.

Within one run, on the reward curve (steps t, values y):

- ``dispersion_time`` — IqrWithinRuns: inter-quartile range of dy/dt (first differences divided by the step
  gap, so the value does not depend on the logging frequency) over the whole run (the reference's default
  window);
- ``short_term_risk`` — LowerCVaROnDiffs: mean of the dy/dt at or below their 5th percentile (linearly
  interpolated; ties included). Signed, bigger is better: the typical worst per-step change;
- ``long_term_risk`` — UpperCVaROnDrawdown: mean of the drawdowns (running max − value) at or above their
  95th percentile: the expected worst fall from the best so far. The reference's example configuration
  uses LowerCVaROnDrawdown, which averages the *smallest* drawdowns and is 0 for almost every run; the upper
  tail is what the paper describes as long-term risk, so that is what sweeprl reports;
- ``median_performance`` — MedianPerfDuringTraining over the late window;
- ``curve_range`` — the reference's normaliser, 95th percentile − first value; ``*_normalized`` are the
  three risk/dispersion metrics divided by it (the reference's ``baseline='curve_range'``), reported only
  when it is > 0 (the reference would divide by 0, or flip the sign of a declining run).

Across runs of one configuration (seeds), on each run's late-window median: ``dispersion_runs`` (IQR, as
IqrAcrossRuns without its low-pass filter and time alignment: one number per run), ``risk_runs`` (lower
CVaR of the runs, i.e. the worst run's level for fewer than 21 runs, as LowerCVaROnAcross) and ``std_runs``
(the population standard deviation, ddof 0 — the reference's StddevAcrossRuns uses ddof 1 — which multi-seed
trials pay as a penalty).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from sweeprl.analysis import curves
from sweeprl.analysis.keys import REWARD

ALPHA = 0.05


def percentile_fraction(x: np.ndarray, per: float) -> float:
    """``scipy.stats.scoreatpercentile(x, per)`` (linear interpolation between closest ranks)."""
    a = np.sort(np.asarray(x, dtype=float))
    if a.size == 0:
        return float("nan")
    idx = per / 100.0 * (a.size - 1)
    i = int(math.floor(idx))
    if i == idx or i + 1 >= a.size:
        return float(a[i])
    return float(a[i] + (a[i + 1] - a[i]) * (idx - i))


def cvar(x: np.ndarray, tail: str = "lower", alpha: float = ALPHA) -> float:
    """Conditional value at risk as the reference computes it: the mean of every value at or beyond the
    (interpolated) ``alpha`` percentile of the tail, ties included. nan for no values."""
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return float("nan")
    if tail == "lower":
        return float(a[a <= percentile_fraction(a, 100 * alpha)].mean())
    return float(a[a >= percentile_fraction(a, 100 * (1 - alpha))].mean())


def iqr(x: np.ndarray) -> float:
    if np.asarray(x).size == 0:
        return float("nan")
    q25, q75 = np.percentile(x, [25, 75])
    return float(q75 - q25)


def differences(c: curves.Curve) -> np.ndarray:
    """dy/dt: first differences divided by the step gap."""
    return np.diff(c.values) / np.diff(c.steps) if c.n >= 2 else np.zeros(0)


def drawdowns(values: np.ndarray) -> np.ndarray:
    """Distance below the running maximum at every point."""
    v = np.asarray(values, dtype=float)
    return np.maximum.accumulate(v) - v if v.size else v


def curve_range(values: np.ndarray) -> float:
    """The reference's normaliser: 95th percentile (linear) − first value."""
    v = np.asarray(values, dtype=float)
    return float(np.percentile(v, 95) - v[0]) if v.size else float("nan")


def _within(c: curves.Curve) -> Dict[str, float]:
    d = differences(c)
    return {
        "dispersion_time": iqr(d) if d.size else 0.0,
        "short_term_risk": cvar(d, "lower") if d.size else 0.0,
        "long_term_risk": cvar(drawdowns(c.values), "upper"),
    }


def run_metrics(history: Sequence[Mapping[str, Any]], window: float = 0.25, reward_keys=REWARD) -> Dict[str, float]:
    """The reference reliability metrics of one run's reward curve (module docstring); empty without a reward."""
    c = curves.curve(history, *reward_keys)
    if not c:
        return {}
    out = _within(c)
    out["median_performance"] = float(np.median(c.late(window).values))
    out["curve_range"] = curve_range(c.values)
    if out["curve_range"] > 0:  # normalised as the reference does: the curve first, then the metrics
        scaled = _within(curves.Curve(c.steps, c.values / out["curve_range"]))
        out.update({f"{k}_normalized": v for k, v in scaled.items()})
    return out


def across_runs(values: Sequence[float], alpha: float = ALPHA) -> Dict[str, float]:
    """Dispersion and risk across runs (seeds) of one configuration, from one number per run."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"runs": 0, "mean": float("nan"), "dispersion_runs": 0.0, "risk_runs": 0.0, "std_runs": 0.0}
    return {
        "runs": int(x.size),
        "mean": float(x.mean()),
        "dispersion_runs": iqr(x),
        "risk_runs": cvar(x, "lower", alpha),
        "std_runs": float(x.std()),
    }


def spike_indices(x: np.ndarray, factor: float = 10.0, warmup: int = 3) -> List[int]:
    """Indices where a non-negative quantity (gradient norm, value loss) exceeds ``factor`` x the median of the
    values before it (after ``warmup`` points, so the start-up transient is not a spike)."""
    out = []
    x = np.asarray(x, dtype=float)
    for i in range(warmup, x.size):
        med = float(np.median(np.abs(x[:i])))
        if med > 0 and abs(x[i]) > factor * med:
            out.append(i)
    return out
