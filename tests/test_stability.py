"""Reliability metrics (sweeprl.analysis.stability) checked against a numpy port of the reference formulas of
google-research/rl-reliability-metrics (tests/rl_reliability_reference.py), and the calibration of the
stability-adjusted objective on a labelled set of synthetic runs under increasing noise."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import kendalltau

import rl_reliability_reference as ref
from sweeprl.analysis import curves, stability
from sweeprl.analysis.objective import compute_objective
from sweeprl.config.schema import ObjectiveConfig

N = 100


def hist(reward, steps=None, **series):
    steps = np.arange(1, len(reward) + 1) if steps is None else steps
    out = []
    for i, r in enumerate(reward):
        rec = {"step": float(steps[i]), "reward": float(r)}
        for k, v in series.items():
            rec[k] = float(v[i])
        out.append(rec)
    return out


def random_run(seed: int, uneven: bool, discrete: bool = False):
    g = np.random.default_rng(seed)
    n = int(g.integers(6, 200))
    steps = np.cumsum(g.integers(1, 6, n)) if uneven else np.arange(1, n + 1)
    values = np.cumsum(g.normal(0.01, 0.1, n)) + g.normal(0, 0.05, n)
    if discrete:  # binary-ish rewards: many ties
        values = np.round(values * 8) / 8
    return steps.astype(float), values


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("uneven", [False, True])
def test_run_metrics_match_the_reference_formulas(seed, uneven):
    steps, values = random_run(seed, uneven, discrete=seed % 3 == 0)
    got = stability.run_metrics(hist(values, steps), window=0.25)
    assert got["dispersion_time"] == pytest.approx(float(ref.iqr_within_runs(steps, values)[0]))
    assert got["short_term_risk"] == pytest.approx(ref.lower_cvar_on_diffs(steps, values))
    assert got["long_term_risk"] == pytest.approx(ref.upper_cvar_on_drawdown(steps, values))
    assert got["curve_range"] == pytest.approx(ref.curve_range(values))
    late = curves.curve(hist(values, steps), "reward").late(0.25)
    window = late.steps[-1] - late.steps[0] + 1
    assert got["median_performance"] == pytest.approx(
        float(ref.median_perf_during_training([(steps, values)], window_size=window, eval_points=[steps[-1]])[0][0])
    )
    if got["curve_range"] > 0:  # the reference's baseline='curve_range'
        assert got["dispersion_time_normalized"] == pytest.approx(
            float(ref.iqr_within_runs(steps, values, baseline="curve_range")[0])
        )
        assert got["short_term_risk_normalized"] == pytest.approx(
            ref.lower_cvar_on_diffs(steps, values, baseline="curve_range")
        )
        assert got["long_term_risk_normalized"] == pytest.approx(
            ref.upper_cvar_on_drawdown(steps, values, baseline="curve_range")
        )
    else:  # where the reference would divide by zero or flip the sign, nothing normalised is reported
        assert "long_term_risk_normalized" not in got


def test_differences_are_divided_by_the_step_gap():
    """The same linear rise logged every step and every 4 steps has the same per-step dispersion and risk."""
    every = hist(0.01 * np.arange(1, 81))
    sparse = [r for r in every if r["step"] % 4 == 0]
    a, b = stability.run_metrics(every), stability.run_metrics(sparse)
    assert a["short_term_risk"] == pytest.approx(0.01) and b["short_term_risk"] == pytest.approx(0.01)
    assert a["dispersion_time"] == pytest.approx(0.0, abs=1e-12) and b["dispersion_time"] == pytest.approx(0.0)


def test_cvar_includes_ties_like_the_reference():
    x = np.array([0.0, 0.0, 0.0, 1.0, 2.0, 3.0] * 5)
    assert stability.cvar(x, "lower") == pytest.approx(ref.compute_cvar(x, "lower")) == 0.0
    assert stability.cvar(x, "upper") == pytest.approx(ref.compute_cvar(x, "upper"))


@pytest.mark.parametrize("seed", range(6))
def test_across_runs_match_the_reference(seed):
    g = np.random.default_rng(seed)
    values = list(g.normal(0.5, 0.2, int(g.integers(3, 25))))
    out = stability.across_runs(values)
    one_point = [([1.0], [v]) for v in values]  # one number per run: the reference on a single eval point
    assert out["dispersion_runs"] == pytest.approx(float(ref.iqr_across_runs(one_point)[0]))
    assert out["risk_runs"] == pytest.approx(ref.compute_cvar(np.asarray(values), "lower"))
    n = len(values)  # sweeprl's std_runs is the population sd (ddof 0); the reference's uses ddof 1
    assert out["std_runs"] == pytest.approx(float(ref.stddev(values)) * ((n - 1) / n) ** 0.5)


def test_spike_indices_need_a_baseline_and_a_factor():
    x = np.full(50, 1.0) + np.random.default_rng(0).normal(0, 0.1, 50)
    assert stability.spike_indices(x) == []
    x[30] = 25.0
    assert stability.spike_indices(x) == [30]
    x[1] = 40.0  # the start-up transient is not a spike (warm-up)
    assert 1 not in stability.spike_indices(x)


def test_no_reward_gives_no_metrics():
    assert stability.run_metrics([{"step": 1, "loss": 1.0}]) == {}


# ------------------------------------------------------------------------------------ calibration
def synthetic_runs(seed: int = 0, noise_x: float = 1.0):
    """(label_rank, name, history): rank 1 is the run an engineer would pick first. ``noise_x`` scales every
    noise term of every run."""
    g = np.random.default_rng(seed)
    t = np.arange(N, dtype=float)

    def noise(s):
        return g.normal(0, s * noise_x, N)

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


def taus(noise_x: float, seeds: int = 20, name: str = "stability_adjusted"):
    cfg = OmegaConf.merge(OmegaConf.structured(ObjectiveConfig), {"name": name})
    out = []
    for seed in range(seeds):
        runs = synthetic_runs(seed, noise_x)
        tau, _ = kendalltau([r for r, _, _ in runs], [-compute_objective(h, cfg).value for _, _, h in runs])
        out.append(tau)
    return float(np.median(out)), float(min(out))


def test_objective_ranking_matches_labels_under_noise():
    """Kendall tau of the objective's order against the labels, 20 seeds at each noise level (the closing note
    records the table). The bar is noise x3; at x1 the labels want a 0.85 run with batch noise sd 0.1 below a
    stable 0.55 one, which the objective does not do (its noise penalty is relative to the learning)."""
    results = {x: taus(x) for x in (1, 2, 3)}
    print({x: {"median": round(m, 3), "worst": round(w, 3)} for x, (m, w) in results.items()})
    assert results[3][0] >= 0.9 and results[3][1] >= 0.85
    assert results[2][0] >= 0.85 and results[1][0] >= 0.8


def test_plain_reward_objective_ranks_worse_than_stability_adjusted():
    """The baseline objective cannot tell stable from unstable runs: its tau against the labels is lower."""
    assert taus(3, seeds=5)[0] > taus(3, seeds=5, name="reward")[0] + 0.2
