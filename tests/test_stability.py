"""Stability metrics on hand-built curves, cross-checked against direct numpy formulas, and the calibration
of the stability-adjusted objective against a labelled set of synthetic runs (Kendall tau >= 0.9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import kendalltau

from sweeprl.analysis import stability
from sweeprl.analysis.objective import compute_objective
from sweeprl.config.schema import ObjectiveConfig

N = 100


def hist(reward, **series):
    out = []
    for i, r in enumerate(reward):
        rec = {"step": i + 1, "reward": float(r)}
        for k, v in series.items():
            rec[k] = float(v[i])
        out.append(rec)
    return out


def test_hand_computed_values():
    # r = 0, 1, 2, 3, 2, 1, 2, 3 ; range 3 ; window 0.5 -> last 4: [2, 1, 2, 3]
    r = [0, 1, 2, 3, 2, 1, 2, 3]
    rep = stability.compute(hist(r), window=0.5)
    assert rep.late_reward == pytest.approx(2.0)
    assert rep.reward_range == pytest.approx(3.0)
    # late diffs [-1, 1, 1]: IQR = 1 - 0 = 1 -> / range 3
    assert rep.dispersion_time == pytest.approx(1 / 3)
    # all diffs [1, 1, 1, -1, -1, 1, 1]: worst 5 % = 1 value = -1 -> risk 1 / 3
    assert rep.short_term_risk == pytest.approx(1 / 3)
    # drawdowns [0, 0, 0, 0, 1, 2, 1, 0]: worst 5 % = 1 value = 2 -> 2 / 3
    assert rep.long_term_risk == pytest.approx(2 / 3)
    assert rep.late_slope == pytest.approx(0.4)  # polyfit of [2, 1, 2, 3]
    assert rep.reward_cv == pytest.approx(np.std([2, 1, 2, 3]) / 2)


def test_kl_entropy_and_counts():
    kl = [0.05, 0.2, -0.1, 0.3]
    ent = [4.0, 3.0, 2.0, 1.0]
    rep = stability.compute(
        hist([1, 1, 1, 1], kl=kl, entropy=ent, frac_reward_zero_std=[0, 0.5, 1, 0.5]), window=0.5, target_kl=0.1
    )
    assert rep.kl_mean == pytest.approx(np.mean(kl))
    assert rep.kl_frac_above_target == pytest.approx(0.5) and rep.kl_frac_negative == pytest.approx(0.25)
    assert rep.entropy_drop == pytest.approx(1 - 1.5 / 3.5)
    assert rep.entropy_volatility == pytest.approx(np.std(np.diff(ent)) / 3.5)
    assert rep.frac_reward_zero_std == pytest.approx(0.5)


def numpy_reference(r: np.ndarray, window: float, alpha: float):
    """Direct numpy transcription of each formula, independent of sweeprl.analysis.stability's helpers."""
    n = len(r)
    w = max(1, min(n, math.ceil(window * n)))
    rng = r.max() - r.min()
    d = np.diff(r)
    late_d = np.diff(r[-w:])
    k = max(1, math.ceil(alpha * len(d)))
    dd = np.maximum.accumulate(r) - r
    kd = max(1, math.ceil(alpha * len(dd)))
    return {
        "dispersion_time": (np.percentile(late_d, 75) - np.percentile(late_d, 25)) / rng,
        "short_term_risk": -np.sort(d)[:k].mean() / rng,
        "long_term_risk": np.sort(dd)[-kd:].mean() / rng,
        "late_reward": r[-w:].mean(),
    }


@pytest.mark.parametrize("seed", range(5))
def test_cross_check_against_numpy(seed):
    rng = np.random.default_rng(seed)
    r = np.cumsum(rng.normal(0.01, 0.1, size=200))
    rep = stability.compute(hist(r), window=0.25, alpha=0.05)
    ref = numpy_reference(r, 0.25, 0.05)
    for key, value in ref.items():
        assert getattr(rep, key) == pytest.approx(value), key


def test_spike_detection_ignores_oscillation_around_zero():
    t = np.arange(100)
    pg_loss = 0.05 * np.sin(t) + 0.01 * np.cos(3 * t)  # GRPO-style: oscillates around 0
    assert stability.robust_spikes(pg_loss) == []
    spiky = pg_loss.copy()
    spiky[60] = 2.0
    assert stability.robust_spikes(spiky) == [60]


def test_across_runs():
    out = stability.across_runs([0.5, 0.6, 0.7, 0.1])
    assert out["runs"] == 4 and out["dispersion_runs"] == pytest.approx(
        np.percentile([0.1, 0.5, 0.6, 0.7], 75) - np.percentile([0.1, 0.5, 0.6, 0.7], 25)
    )
    assert out["risk_runs"] == pytest.approx(0.55 - 0.1)


def test_no_reward_raises():
    with pytest.raises(ValueError, match="no finite 'reward'"):
        stability.compute([{"step": 1, "loss": 1.0}])


# ------------------------------------------------------------------------------------ calibration
def synthetic_runs():
    """(label_rank, name, history): rank 1 is the run an engineer would pick first."""
    g = np.random.default_rng(0)
    t = np.arange(N, dtype=float)
    noise = lambda s: g.normal(0, s, N)  # noqa: E731
    ent_ok = 5.0 - 1.5 * t / N
    kl_ok = 0.02 + 0.05 * t / N
    zs_ok = np.full(N, 0.1)

    def run(reward, kl=kl_ok, ent=ent_ok, zs=zs_ok, loss=None):
        return hist(reward, kl=kl, entropy=ent, frac_reward_zero_std=zs, loss=loss if loss is not None else noise(0.05))

    spiky = 0.2 + 0.7 * (1 - np.exp(-t / 20)) + noise(0.01)
    spiky[g.choice(N, 12, replace=False)] -= 0.45
    peak = np.where(t < 50, 0.2 + 0.7 * t / 50, 0.9 - 0.7 * np.minimum(1, (t - 50) / 10)) + noise(0.01)
    nan_loss = noise(0.05)
    nan_loss[g.choice(N, 20, replace=False)] = np.nan
    return [
        (1, "stable_rising_high", run(0.2 + 0.72 * (1 - np.exp(-t / 20)) + noise(0.01))),
        (2, "stable_flat_high", run(0.85 + noise(0.01))),
        (3, "rising_moderate", run(0.2 + 0.6 * t / N + noise(0.02))),
        # high reward, but the policy collapsed: still ahead of a stable mediocre run, behind stable high ones
        (4, "entropy_collapse", run(0.9 + noise(0.01), ent=5.0 * np.exp(-t / 12) + 0.05, zs=np.minimum(1, t / 60))),
        (5, "stable_mid", run(0.55 + noise(0.01))),
        (6, "spiky_rising", run(spiky)),
        (7, "noisy_high", run(0.85 + noise(0.1))),
        (8, "stable_low", run(0.2 + noise(0.01))),
        (9, "diverging_kl", run(0.85 + noise(0.01), kl=0.05 + 1.5 * t / N)),
        (10, "flat_zero", run(np.zeros(N) + noise(0.005))),
        (11, "collapsing_after_peak", run(peak)),
        (12, "noisy_low", run(0.2 + noise(0.15))),
        (13, "non_finite_loss", run(0.8 + noise(0.01), loss=nan_loss)),
    ]


def test_objective_ranking_matches_labels():
    cfg = OmegaConf.structured(ObjectiveConfig)
    runs = synthetic_runs()
    assert len(runs) >= 12
    values = {name: compute_objective(h, cfg).value for _, name, h in runs}
    labels = [rank for rank, _, _ in runs]
    objective_rank = [-values[name] for _, name, _ in runs]  # higher objective = better = smaller rank
    tau, _ = kendalltau(labels, objective_rank)
    order = sorted(values, key=values.get, reverse=True)
    assert tau >= 0.9, (
        f"tau={tau:.3f}; objective order: {order}; values: { {k: round(v, 3) for k, v in values.items()} }"
    )


def test_plain_reward_objective_ranks_worse_than_stability_adjusted():
    """The baseline objective cannot tell stable from unstable runs: its tau against the labels is lower."""
    runs = synthetic_runs()
    labels = [rank for rank, _, _ in runs]
    stab = OmegaConf.structured(ObjectiveConfig)
    plain = OmegaConf.merge(stab, {"name": "reward"})
    tau_stab, _ = kendalltau(labels, [-compute_objective(h, stab).value for _, _, h in runs])
    tau_plain, _ = kendalltau(labels, [-compute_objective(h, plain).value for _, _, h in runs])
    assert tau_stab > tau_plain + 0.2
