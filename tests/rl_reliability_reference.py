"""Numpy reference port of the *online* (during-training) reliability metrics of
google-research/rl-reliability-metrics (Chan et al., "Measuring the Reliability of
Reinforcement Learning Algorithms", ICLR 2020).

Source read (via the code index), commit cf74658ce721f5f8806081be817d4c7a4cc28ffd:
  rl_reliability_metrics/metrics/metrics_online.py   (707 lines)
  rl_reliability_metrics/metrics/metric_utils.py     (478 lines)
  rl_reliability_metrics/metrics/metrics_base.py     (70 lines)
  rl_reliability_metrics/analysis/stats.py           (timeframes / median collapse)
  rl_reliability_metrics/evaluation/example.gin      (commit 40fe3ef..., the paper's settings)
The same metric_utils.py is also stored at commit 3f3aea4662fd86f8e50d8a549380f1f6e7dfc97b,
where the only change is ``np.float(window_size)`` -> ``float(window_size)`` in
get_nearest_within_window; the formulas are identical.

This is a re-expression of the formulas, not a copy: no gin / absl / six / TensorFlow.
Conventions:
  * one run is given as ``steps`` (the timepoint variable, may be unevenly spaced, assumed
    sorted ascending and unique, as upstream's loader guarantees) and ``values`` (the curve);
  * several runs are given as a sequence of ``(steps, values)`` pairs;
  * every option keeps the upstream default; ``baseline`` follows upstream semantics:
    ``None`` (or any falsy value, including 0.0!) = no normalisation, ``'curve_range'`` =
    divide by (95th percentile - first value), a number = divide by that number.
Quantiles: ``np.percentile`` with numpy's default 'linear' method (what scipy.stats.iqr and
np.percentile use upstream) and, for the CVaR threshold, scipy.stats.scoreatpercentile's
'fraction' formula re-implemented in :func:`score_at_percentile`.
"""

from __future__ import annotations

from functools import reduce
from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np

Baseline = Union[None, str, float]
Run = Tuple[Sequence[float], Sequence[float]]

# The parameters the paper's released example configuration uses (example.gin lines 42-68,
# commit 40fe3efd0f403b4b3790f06a78b16d3c0ecd95ee). Units are environment steps.
PAPER_CONFIG = {
    "FREQ_THRESH": 0.01,
    "WINDOW_SIZE": 100000,
    "WINDOW_SIZE_TRIMMED": 99000,  # "to handle shortened curves due to differencing"
    "EVAL_POINTS": [50000 + 100000 * k for k in range(20)],  # 50k, 150k, ..., 1.95M
    "IqrWithinRuns": dict(window_size=99000, eval_points="EVAL_POINTS", baseline="curve_range"),
    "LowerCVaROnDiffs": dict(alpha=0.05, baseline="curve_range"),
    "LowerCVaROnDrawdown": dict(alpha=0.05, baseline="curve_range"),
    "IqrAcrossRuns": dict(lowpass_thresh=0.01, eval_points="EVAL_POINTS", window_size=100000, baseline="curve_range"),
    "LowerCVaROnAcross": dict(
        alpha=0.05, lowpass_thresh=0.01, eval_points="EVAL_POINTS", window_size=100000, baseline="curve_range"
    ),
    "MedianPerfDuringTraining": dict(window_size=100000, eval_points="EVAL_POINTS", baseline=None),
}


# ----------------------------------------------------------------------------- helpers


def _as_run(steps, values) -> Tuple[np.ndarray, np.ndarray]:
    t = np.asarray(steps, dtype=float)
    y = np.asarray(values, dtype=float)
    if t.ndim != 1 or y.ndim != 1 or t.shape != y.shape:
        raise ValueError("steps and values must be 1-D arrays of the same length")
    if t.size == 0:
        raise ValueError("empty curve")
    return t, y


def score_at_percentile(x, per: float) -> float:
    """Port of ``scipy.stats.scoreatpercentile(x, per)`` with its default
    ``interpolation_method='fraction'`` (what upstream's compute_cvar calls; scipy's
    _compute_qth_percentile): sort; position ``idx = per/100 * (n-1)``; if ``idx`` is an
    integer return ``x_(idx)``, else the weighted mean ``(x_(i)*(j-idx) + x_(j)*(idx-i)) /
    ((j-idx)+(idx-i))`` with ``i = int(idx)``, ``j = i+1``. Empty input -> nan.
    Reference: metric_utils.py lines 224-231 (compute_cvar), scipy.stats._stats_py."""
    a = np.sort(np.asarray(x, dtype=float).ravel())
    if a.size == 0:
        return float("nan")
    if not 0 <= per <= 100:
        raise ValueError("percentile must be in the range [0, 100]")
    idx = per / 100.0 * (a.size - 1)
    i = int(idx)
    if i == idx:
        return float(a[i])
    j = i + 1
    w_lo, w_hi = (j - idx), (idx - i)
    return float((a[i] * w_lo + a[j] * w_hi) / (w_lo + w_hi))


def iqr(x, axis=None):
    """Port of ``scipy.stats.iqr(x, axis)`` with defaults (rng=(25, 75), interpolation
    'linear', nan_policy 'propagate'): ``percentile(x, 75) - percentile(x, 25)``, numpy's
    linear method. Used by IqrWithinRuns (metrics_online.py lines 257-266) and IqrAcrossRuns
    (lines 113-127)."""
    x = np.asarray(x, dtype=float)
    q25, q75 = np.percentile(x, [25, 75], axis=axis)
    return q75 - q25


def median_absolute_deviations(values, axis=None):
    """Port of metric_utils.median_absolute_deviations (metric_utils.py lines 43-68):
    ``median(|x - median(x)|)`` along ``axis``, *unscaled* (no 1.4826 factor)."""
    v = np.asarray(values, dtype=float)
    if axis not in (None, 0, 1):
        raise ValueError("axis must be in (None, 0, 1).")
    if v.ndim > 2:
        raise ValueError("values must be a 1-D or 2-D array.")
    med = np.median(v, axis=axis, keepdims=axis is not None)
    return np.median(np.abs(v - med), axis=axis)


def stddev(x, axis=None):
    """``np.std(x, ddof=1)``, the dispersion of StddevWithinRuns / StddevAcrossRuns
    (metrics_online.py lines 245-254 and 147-161)."""
    return np.std(np.asarray(x, dtype=float), axis=axis, ddof=1)


DISPERSION_FNS = {"iqr": iqr, "mad": median_absolute_deviations, "std": stddev}


def compute_cvar(array, tail: str = "lower", alpha: float = 0.05) -> float:
    """Port of metric_utils.compute_cvar (metric_utils.py lines 224-231).

    lower tail: VaR = score_at_percentile(array, 100*alpha); CVaR = mean of all elements
                ``<= VaR`` (ties at the threshold are all included, so the tail can hold more
                than alpha*n elements).
    upper tail: VaR = score_at_percentile(array, 100*(1-alpha)); CVaR = mean of elements
                ``>= VaR``.
    Since VaR is a *linearly interpolated* percentile, without ties the lower tail holds the
    smallest ``floor((n-1)*alpha) + 1`` elements (e.g. alpha=0.05: just the minimum for
    n <= 20, two elements for 21 <= n <= 40, ...). Empty array -> nan. No NaN handling.
    Any other ``tail`` raises (upstream would hit an UnboundLocalError)."""
    a = np.asarray(array, dtype=float)
    if tail == "lower":
        var = score_at_percentile(a, 100 * alpha)
        sel = a[a <= var]
    elif tail == "upper":
        var = score_at_percentile(a, 100 * (1 - alpha))
        sel = a[a >= var]
    else:
        raise ValueError("tail must be 'lower' or 'upper'")
    return float(sel.mean()) if sel.size else float("nan")


def differences(steps, values) -> Tuple[np.ndarray, np.ndarray]:
    """Port of metric_utils.differences (metric_utils.py lines 177-201): first differences
    *divided by the step gap*, ``(y[k] - y[k-1]) / (t[k] - t[k-1])``, stamped at ``t[k]``
    (the first timepoint is dropped). Returns ``(steps[1:], dy/dt)``."""
    t, y = _as_run(steps, values)
    return t[1:], np.true_divide(np.diff(y), np.diff(t))


def compute_drawdown(values) -> np.ndarray:
    """Port of metric_utils.compute_drawdown (metric_utils.py lines 204-221): running maximum
    (peak at or before T, including T) minus the value; >= 0. On the raw curve, no smoothing."""
    y = np.asarray(values, dtype=float)
    return np.maximum.accumulate(y) - y


def curve_range(values) -> float:
    """Port of metric_utils.curve_range (metric_utils.py lines 360-379):
    ``np.percentile(values, 95) - values[0]`` (linear percentile). NOT max-min: it can be
    zero (flat curve -> division gives inf/nan) or negative (a curve whose 95th percentile is
    below its start value -> normalised metrics flip sign)."""
    y = np.asarray(values, dtype=float)
    return float(np.percentile(y, 95) - y[0])


def lowpass_filter(values, lowpass_thresh: float) -> np.ndarray:
    """Port of metric_utils.lowpass_filter (metric_utils.py lines 284-292): zero-phase
    8th-order Butterworth low-pass, ``b, a = butter(8, lowpass_thresh)`` (threshold as a
    fraction of the Nyquist frequency *in samples*, i.e. ignoring the step spacing), applied
    with ``filtfilt(b, a, y, padlen=min(n-1, 3*max(len(a), len(b))))`` = min(n-1, 27)."""
    from scipy import signal  # scipy only needed for the low-pass option

    y = np.asarray(values, dtype=float)
    b, a = signal.butter(8, lowpass_thresh)
    padlen = min(len(y) - 1, 3 * max(len(a), len(b)))
    return signal.filtfilt(b, a, y, padlen=padlen)


def get_all_valid_eval_points(steps_list: Sequence[Sequence[float]], window_size: float = 1) -> np.ndarray:
    """Port of metric_utils.get_all_valid_eval_points (metric_utils.py lines 34-40):
    timepoints common to all curves (``np.intersect1d``, sorted unique) that are
    ``>= min(common) + window_size - 1`` (so a full trailing window fits)."""
    common = reduce(np.intersect1d, [np.asarray(s, dtype=float) for s in steps_list])
    if common.size == 0:
        raise ValueError("curves have no timepoint in common")
    return common[common >= common.min() + window_size - 1]


def apply_window_fn(steps, values, eval_points, window_fn: Callable, window_size: float = 1) -> np.ndarray:
    """Port of metric_utils.apply_window_fn (metric_utils.py lines 428-478) for one curve.

    For each eval point e the window is the *trailing* closed interval of timepoint values
    ``[e - window_size + 1, e]`` (in step units, not a count of samples; it ends at e, it is
    not centred). ``window_fn`` is applied to the values whose timepoints fall in it; an
    empty window raises ValueError. Returns an array of len(eval_points)."""
    t, y = _as_run(steps, values)
    out = np.empty(len(eval_points))
    for k, e in enumerate(eval_points):
        mask = (t >= e - window_size + 1) & (t <= e)
        if not mask.any():
            raise ValueError(f"no timepoints in window of size {window_size} at eval point {e}")
        out[k] = window_fn(y[mask])
    return out


def find_nearest(steps, targets) -> Tuple[np.ndarray, np.ndarray]:
    """Port of metric_utils.find_nearest (metric_utils.py lines 295-314): for each target the
    timepoint with the smallest |t - target| (ties -> the first, i.e. earlier, one), and the
    distance."""
    t = np.asarray(steps, dtype=float)
    tg = np.asarray(targets, dtype=float)
    idx = np.abs(t[None, :] - tg[:, None]).argmin(axis=1)
    nearest = t[idx]
    return nearest, np.abs(nearest - tg)


def get_nearest_within_window(runs: Sequence[Run], eval_points, window_size: float) -> np.ndarray:
    """Port of metric_utils.get_nearest_within_window (metric_utils.py lines 317-357): for
    each run and eval point, the value at the nearest timepoint, which must be at distance
    ``< window_size / 2`` (strict; else ValueError) -- a window *centred* on the eval point.
    Returns [n_runs x n_eval_points]."""
    eval_points = np.asarray(eval_points, dtype=float)
    rows = []
    for r, (steps, values) in enumerate(runs):
        t, y = _as_run(steps, values)
        nearest, dist = find_nearest(t, eval_points)
        if np.any(dist >= float(window_size) / 2):
            bad = eval_points[dist >= float(window_size) / 2]
            raise ValueError(f"run {r}: no timepoint within window of size {window_size} around {bad}")
        rows.append(apply_window_fn(t, y, nearest, _identity1, 1))
    return np.array(rows)


def _identity1(w):
    # upstream uses ``lambda x: x`` and relies on numpy turning a length-1 array into a scalar
    if w.size != 1:
        raise ValueError("duplicate timepoints: window holds more than one value")
    return w[0]


def across_runs_preprocess(runs: Sequence[Run], eval_points=None, window_size=None, lowpass_thresh=None) -> np.ndarray:
    """Port of metric_utils.across_runs_preprocess (metric_utils.py lines 234-281).

    1. eval_points None -> every timepoint common to all runs;
    2. low-pass filter each run's values if ``lowpass_thresh`` is truthy (filter on the
       *whole* curve, by sample index);
    3. window_size truthy -> value at the nearest timepoint within a centred window
       (:func:`get_nearest_within_window`), else the value exactly at each eval point
       (trailing window of size 1 = exact match, else ValueError).
    Returns [n_runs x n_eval_points]."""
    runs = [_as_run(s, v) for s, v in runs]
    if not runs:
        raise ValueError("no runs")
    if eval_points is None:
        eval_points = get_all_valid_eval_points([t for t, _ in runs], 1)
    if lowpass_thresh:
        runs = [(t, lowpass_filter(y, lowpass_thresh)) for t, y in runs]
    if window_size:
        return get_nearest_within_window(runs, eval_points, window_size)
    return np.array([apply_window_fn(t, y, eval_points, _identity1, 1) for t, y in runs])


def _divide(x, baseline: Baseline, run_range: float):
    """Upstream's ``if baseline == 'curve_range': ... elif baseline: x / baseline``."""
    if isinstance(baseline, str):
        if baseline != "curve_range":
            raise ValueError(f"unknown baseline {baseline!r}")
        return np.true_divide(x, run_range)
    if baseline:
        return np.true_divide(x, baseline)
    return x


# ----------------------------------------------------------------------------- within runs


def dispersion_within_runs(
    steps,
    values,
    window_size: Optional[float] = None,
    eval_points=None,
    baseline: Baseline = None,
    detrend: bool = True,
    dispersion: Union[str, Callable] = "iqr",
) -> np.ndarray:
    """Port of metrics_online._DispersionWithinRuns.__call__ (metrics_online.py lines
    164-242, __call__ at 197-242) for one run; ``dispersion='iqr'`` is IqrWithinRuns (lines
    257-266), ``'mad'`` MadWithinRuns (269-278), ``'std'`` StddevWithinRuns (245-254, ddof=1).

    1. detrend (always True in the public subclasses): (steps', d) = differences(steps,
       values), i.e. dy/dt divided by the step gap, stamped at the later step;
    2. window_size None -> window_size = max(steps') - min(steps') + 1 (the whole diff curve);
       eval_points None -> every diff timepoint >= min(steps') + window_size - 1 (so with both
       None: a single eval point, the last step, whose window covers all differences);
    3. at every eval point e: dispersion of the d whose timepoints lie in the trailing window
       [e - window_size + 1, e] (empty window -> ValueError);
    4. baseline: 'curve_range' divides by curve_range(values) of the *undifferenced* curve;
       a truthy number divides by it.
    Returns one value per eval point (upstream returns [n_runs x n_eval_points])."""
    fn = DISPERSION_FNS[dispersion] if isinstance(dispersion, str) else dispersion
    t, y = _as_run(steps, values)
    dt, d = differences(t, y) if detrend else (t, y)
    if dt.size == 0:
        raise ValueError("need at least two points to difference")
    w = window_size
    if eval_points is None or window_size is None:
        if window_size is None:
            valid = get_all_valid_eval_points([dt], 1)
            w = valid.max() - valid.min() + 1
        if eval_points is None:
            eval_points = get_all_valid_eval_points([dt], w)
    out = apply_window_fn(dt, d, eval_points, fn, w)
    return _divide(out, baseline, curve_range(y) if baseline == "curve_range" else np.nan)


def iqr_within_runs(steps, values, window_size=None, eval_points=None, baseline: Baseline = None) -> np.ndarray:
    """IqrWithinRuns (metrics_online.py lines 257-266): dispersion_within_runs with
    scipy.stats.iqr. Defaults: window_size=None, eval_points=None, baseline=None, i.e. one
    IQR of dy/dt over the whole run, unnormalised. Paper config (example.gin lines 49-51):
    window_size=99000, eval_points=50k..1.95M every 100k, baseline='curve_range'."""
    return dispersion_within_runs(steps, values, window_size, eval_points, baseline, True, "iqr")


def mad_within_runs(steps, values, window_size=None, eval_points=None, baseline: Baseline = None) -> np.ndarray:
    """MadWithinRuns (metrics_online.py lines 269-278)."""
    return dispersion_within_runs(steps, values, window_size, eval_points, baseline, True, "mad")


def stddev_within_runs(steps, values, window_size=None, eval_points=None, baseline: Baseline = None) -> np.ndarray:
    """StddevWithinRuns (metrics_online.py lines 245-254), ddof=1."""
    return dispersion_within_runs(steps, values, window_size, eval_points, baseline, True, "std")


def cvar_within_run(steps, values, target: str, tail: str, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """Port of metrics_online._CVaR.__call__ for the per-run targets (metrics_online.py lines
    372-479, __call__ at 430-479).

    The curve's *values* are first divided by the baseline ('curve_range' -> this run's
    curve_range; truthy number -> that number), then:
      target 'raw'      -> CVaR of the values;
      target 'diffs'    -> CVaR of differences() = dy/dt (divided by the step gap);
      target 'drawdown' -> CVaR of compute_drawdown() (running max - value, no smoothing);
    using compute_cvar(tail, alpha). One float per run."""
    t, y = _as_run(steps, values)
    if baseline == "curve_range":
        y = y / curve_range(y)
    elif isinstance(baseline, str):
        raise ValueError(f"unknown baseline {baseline!r}")
    elif baseline:
        y = y / baseline
    if target == "raw":
        x = y
    elif target == "diffs":
        x = differences(t, y)[1]
    elif target == "drawdown":
        x = compute_drawdown(y)
    else:
        raise ValueError("target must be 'raw', 'diffs' or 'drawdown' (use cvar_across_runs for 'across')")
    return compute_cvar(x, tail, alpha)


def lower_cvar_on_diffs(steps, values, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """LowerCVaROnDiffs (metrics_online.py lines 482-496), "short-term risk across time":
    mean of the dy/dt values <= their interpolated alpha-percentile. A (usually negative)
    number, bigger_is_better=True. Defaults alpha=0.05, baseline=None; the paper config
    (example.gin line 53) uses baseline='curve_range'."""
    return cvar_within_run(steps, values, "diffs", "lower", alpha, baseline)


def upper_cvar_on_diffs(steps, values, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """UpperCVaROnDiffs (metrics_online.py lines 499-513), bigger_is_better=True."""
    return cvar_within_run(steps, values, "diffs", "upper", alpha, baseline)


def lower_cvar_on_drawdown(steps, values, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """LowerCVaROnDrawdown (metrics_online.py lines 550-564), the metric the released
    example config uses for "long-term risk across time" (example.gin line 55, with
    baseline='curve_range'); bigger_is_better=False.

    NB: as written upstream it takes the *lower* tail of the drawdown series (drawdown >= 0),
    i.e. the mean of the *smallest* drawdowns (those <= their interpolated alpha-percentile).
    It is exactly 0 whenever the curve sits at its running maximum at >= floor((n-1)*alpha)+1
    samples -- always for n <= 20 at alpha=0.05, since the first sample has drawdown 0. It
    measures "how far below the peak even the best times are", not the worst drawdowns; the
    worst drawdowns are upper_cvar_on_drawdown (UpperCVaROnDrawdown).
    """
    return cvar_within_run(steps, values, "drawdown", "lower", alpha, baseline)


def upper_cvar_on_drawdown(steps, values, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """UpperCVaROnDrawdown (metrics_online.py lines 567-581): mean of the drawdowns >= their
    interpolated (1-alpha)-percentile, i.e. the expected *worst* drawdowns (the usual CDaR);
    bigger_is_better=False."""
    return cvar_within_run(steps, values, "drawdown", "upper", alpha, baseline)


def lower_cvar_on_raw(steps, values, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """LowerCVaROnRaw (metrics_online.py lines 516-530), bigger_is_better=True."""
    return cvar_within_run(steps, values, "raw", "lower", alpha, baseline)


def upper_cvar_on_raw(steps, values, alpha: float = 0.05, baseline: Baseline = None) -> float:
    """UpperCVaROnRaw (metrics_online.py lines 533-547), bigger_is_better=True."""
    return cvar_within_run(steps, values, "raw", "upper", alpha, baseline)


def max_drawdown(steps, values, baseline: Optional[float] = None, mean_normalize: bool = False) -> float:
    """Port of metrics_online.MaxDrawdown (metrics_online.py lines 281-320): optionally
    subtract ``baseline`` (here a number that is *subtracted*, metric_utils.subtract_baseline
    lines 71-83), optionally divide by |mean| (mean_normalization lines 134-152), then
    max(running max - value)."""
    _, y = _as_run(steps, values)
    if baseline is not None:
        y = y - baseline
    if mean_normalize:
        y = y / np.abs(np.mean(y))
    return float(np.max(compute_drawdown(y)))


def high_freq_energy_within_runs(steps, values, thresh: float) -> float:
    """Port of metrics_online.HighFreqEnergyWithinRuns (metrics_online.py lines 323-369):
    power spectrum |fft(y)|^2 at ``fftfreq(n, d=t[1]-t[0])`` (assumes equal spacing); energy
    at freqs > thresh over energy at freqs > 0."""
    t, y = _as_run(steps, values)
    power = np.abs(np.fft.fft(y)) ** 2
    freqs = np.fft.fftfreq(y.size, t[1] - t[0])
    return float(np.sum(power[freqs > thresh]) / np.sum(power[freqs > 0]))


def median_perf_during_training(runs: Sequence[Run], window_size=None, eval_points=None, baseline=None) -> np.ndarray:
    """Port of metrics_online.MedianPerfDuringTraining (metrics_online.py lines 632-701):
    median of the raw values in trailing windows [e - window_size + 1, e]. Defaults computed
    from the timepoints common to *all* runs: window = their span + 1, eval points = those
    >= min + window - 1 (one point). baseline: number b -> y / b; tuple (lo, hi) ->
    (y - lo) / (hi - lo) (band_normalization, metric_utils.py lines 109-131); a tuple
    containing None -> none. Returns [n_runs x n_eval_points]."""
    runs = [_as_run(s, v) for s, v in runs]
    w = window_size
    if eval_points is None or window_size is None:
        if window_size is None:
            valid = get_all_valid_eval_points([t for t, _ in runs], 1)
            w = valid.max() - valid.min() + 1
        if eval_points is None:
            eval_points = get_all_valid_eval_points([t for t, _ in runs], w)
    if baseline is not None:
        if isinstance(baseline, tuple):
            if None in baseline:
                baseline = None
            elif len(baseline) != 2:
                raise ValueError("tuple baseline must be (low, high)")
        if baseline is not None:
            lo, hi = baseline if isinstance(baseline, tuple) else (0.0, baseline)
            runs = [(t, (y - lo) / (hi - lo)) for t, y in runs]
    return np.array([apply_window_fn(t, y, eval_points, np.median, w) for t, y in runs])


# ----------------------------------------------------------------------------- across runs


def dispersion_across_runs(
    runs: Sequence[Run],
    dispersion: Union[str, Callable] = "iqr",
    lowpass_thresh=None,
    eval_points=None,
    window_size=None,
    baseline: Baseline = None,
) -> np.ndarray:
    """Port of metrics_online._DispersionAcrossRuns.__call__ (metrics_online.py lines
    44-110, __call__ at 84-110); ``'iqr'`` = IqrAcrossRuns (113-127), ``'mad'`` =
    MadAcrossRuns (130-144, unscaled MAD), ``'std'`` = StddevAcrossRuns (147-161, ddof=1).

    values = across_runs_preprocess(runs, eval_points, window_size, lowpass_thresh)
    [n_runs x n_eval]; dispersion over runs (axis 0) at each eval point; then
    'curve_range' -> divide by the *median over runs* of curve_range(raw values);
    truthy number -> divide by it. Returns one value per eval point."""
    fn = DISPERSION_FNS[dispersion] if isinstance(dispersion, str) else dispersion
    vals = across_runs_preprocess(runs, eval_points, window_size, lowpass_thresh)
    res = fn(vals, axis=0)
    if baseline == "curve_range":
        return res / np.median([curve_range(v) for _, v in runs])
    return _divide(res, baseline, np.nan)


def iqr_across_runs(
    runs: Sequence[Run], lowpass_thresh=None, eval_points=None, window_size=None, baseline: Baseline = None
) -> np.ndarray:
    """IqrAcrossRuns (metrics_online.py lines 113-127). Defaults all None (exact common
    timepoints, no filter, no normalisation). Paper config (example.gin lines 57-60):
    lowpass_thresh=0.01, eval_points every 100k, window_size=100000, baseline='curve_range'."""
    return dispersion_across_runs(runs, "iqr", lowpass_thresh, eval_points, window_size, baseline)


def mad_across_runs(
    runs: Sequence[Run], lowpass_thresh=None, eval_points=None, window_size=None, baseline: Baseline = None
) -> np.ndarray:
    """MadAcrossRuns (metrics_online.py lines 130-144)."""
    return dispersion_across_runs(runs, "mad", lowpass_thresh, eval_points, window_size, baseline)


def stddev_across_runs(
    runs: Sequence[Run], lowpass_thresh=None, eval_points=None, window_size=None, baseline: Baseline = None
) -> np.ndarray:
    """StddevAcrossRuns (metrics_online.py lines 147-161), ddof=1."""
    return dispersion_across_runs(runs, "std", lowpass_thresh, eval_points, window_size, baseline)


def cvar_across_runs(
    runs: Sequence[Run],
    tail: str = "lower",
    alpha: float = 0.05,
    baseline: Baseline = None,
    lowpass_thresh=None,
    eval_points=None,
    window_size=None,
) -> np.ndarray:
    """Port of metrics_online._CVaR.__call__ with target='across' (metrics_online.py lines
    430-479). Note the normalisation differs from IqrAcrossRuns: with 'curve_range' *each
    run* is divided by its *own* curve_range before preprocessing (not by the median range).
    Then across_runs_preprocess (filter / eval points / centred window) and, at each eval
    point, compute_cvar over the runs. With alpha=0.05 and <= 20 runs that is simply the
    minimum over runs (of the normalised, filtered values) -- not a distance from the
    median. Returns one value per eval point."""
    prepared = []
    for s, v in runs:
        t, y = _as_run(s, v)
        if baseline == "curve_range":
            y = y / curve_range(y)
        elif isinstance(baseline, str):
            raise ValueError(f"unknown baseline {baseline!r}")
        elif baseline:
            y = y / baseline
        prepared.append((t, y))
    vals = across_runs_preprocess(prepared, eval_points, window_size, lowpass_thresh)
    return np.array([compute_cvar(vals[:, k], tail, alpha) for k in range(vals.shape[1])])


def lower_cvar_on_across(
    runs: Sequence[Run],
    alpha: float = 0.05,
    baseline: Baseline = None,
    lowpass_thresh=None,
    eval_points=None,
    window_size=None,
) -> np.ndarray:
    """LowerCVaROnAcross (metrics_online.py lines 584-605), "risk across runs";
    bigger_is_better=True. (There is no class named LowerCVaRAcrossRuns online; the offline
    analogue is metrics_offline.LowerCVaRAcrossRollouts.) Paper config (example.gin lines
    62-65): lowpass_thresh=0.01, eval_points every 100k, window_size=100000,
    baseline='curve_range'."""
    return cvar_across_runs(runs, "lower", alpha, baseline, lowpass_thresh, eval_points, window_size)


def upper_cvar_on_across(
    runs: Sequence[Run],
    alpha: float = 0.05,
    baseline: Baseline = None,
    lowpass_thresh=None,
    eval_points=None,
    window_size=None,
) -> np.ndarray:
    """UpperCVaROnAcross (metrics_online.py lines 608-629)."""
    return cvar_across_runs(runs, "upper", alpha, baseline, lowpass_thresh, eval_points, window_size)


# ----------------------------------------------------------------------------- aggregation


def timeframe_points(eval_points, timeframe: Optional[int], n_timeframes: int = 3) -> range:
    """Port of analysis/stats.py StatsRunner.get_timeframe_points (stats.py lines 277-321,
    commit cf74658): split the eval points into ``n_timeframes`` (default 3: beginning /
    middle / end) by *value*: length L = (last - first) / n; timeframe k>0 starts at the first
    eval point >= k*L (note: k*L, not first + k*L, as upstream), ends before the first eval
    point >= (k+1)*L; the last timeframe runs to the end. ``None`` -> all points."""
    ep = np.asarray(eval_points, dtype=float)
    if timeframe is None:
        return range(len(ep))
    length = (ep[-1] - ep[0]) / n_timeframes
    start = 0 if timeframe == 0 else int(np.where(ep >= timeframe * length)[0][0])
    end = len(ep) if timeframe == n_timeframes - 1 else int(np.where(ep < (timeframe + 1) * length)[0][-1]) + 1
    return range(start, end)


def collapse_timeframe(per_point_values, points: Optional[range] = None) -> np.ndarray:
    """Port of the collapse in stats.py StatsRunner.load_metric_results (lines 323-375, the
    ``np.median(metric_results, -1)`` at line 373): a metric with an eval-point axis is
    summarised per timeframe by the *median* over its eval points (never the mean). Algorithms
    are then ranked per task (rank_per_task, lines 377-403; rank 1 = best using
    bigger_is_better) and ranks are averaged over tasks."""
    v = np.asarray(per_point_values, dtype=float)
    if points is not None:
        v = v[..., list(points)]
    return np.median(v, axis=-1)


BIGGER_IS_BETTER = {
    "IqrWithinRuns": False,
    "MadWithinRuns": False,
    "StddevWithinRuns": False,
    "IqrAcrossRuns": False,
    "MadAcrossRuns": False,
    "StddevAcrossRuns": False,
    "LowerCVaROnDiffs": True,
    "UpperCVaROnDiffs": True,
    "LowerCVaROnRaw": True,
    "UpperCVaROnRaw": True,
    "LowerCVaROnDrawdown": False,
    "UpperCVaROnDrawdown": False,
    "MaxDrawdown": False,
    "HighFreqEnergyWithinRuns": False,
    "LowerCVaROnAcross": True,
    "UpperCVaROnAcross": True,
    "MedianPerfDuringTraining": True,
}
