"""The stability-adjusted objective on hand-built curves with hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from sweeprl.analysis.objective import ObjectiveError, compute_objective, stability_terms
from sweeprl.analysis.stability import cvar_upper, iqr
from sweeprl.config.schema import ObjectiveConfig


def cfg(**kw):
    base = OmegaConf.structured(ObjectiveConfig)
    return OmegaConf.merge(base, kw)


def hist(rewards, **series):
    out = []
    for i, r in enumerate(rewards):
        rec = {"step": i + 1, "reward": r}
        for k, v in series.items():
            rec[k] = v[i]
        out.append(rec)
    return out


def test_flat_curve_has_no_penalties():
    res = compute_objective(hist([0.5] * 20), cfg())
    assert res.value == pytest.approx(0.5)
    assert res.terms == {
        "late_reward": 0.5,
        "dispersion": 0.0,
        "drawdown": 0.0,
        "short_term_risk": 0.0,
        "kl_excess": 0.0,
        "entropy_collapse": 0.0,
        "mode_collapse": 0.0,
        "non_finite": 0.0,
    }


def test_late_window_and_dispersion_by_hand():
    # 8 steps, window 0.25 -> last 2 steps; window 0.5 -> last 4 steps: [0.4, 0.8, 0.4, 0.8]
    rewards = [0.0, 0.1, 0.2, 0.3, 0.4, 0.8, 0.4, 0.8]
    res = compute_objective(hist(rewards), cfg(window=0.5))
    assert res.raw["late_reward"] == pytest.approx(0.6)
    # diffs of the late window: [0.4, -0.4, 0.4] -> IQR = 0.4 - 0.0 = 0.4 (numpy linear percentiles)
    assert res.raw["dispersion"] == pytest.approx(0.4)
    assert res.raw["dispersion"] == pytest.approx(np.subtract(*np.percentile([0.4, -0.4, 0.4], [75, 25])))


def test_collapse_after_peak_costs_drawdown():
    rising = [i / 20 for i in range(40)] + [2.0] * 10  # monotone: no drawdown
    collapse = [i / 20 for i in range(40)] + [0.2] * 10
    # worst 5 % of 49 single-step changes = 3 of them: the drop of 1.75 and two flat steps
    assert stability_terms(hist(collapse), cfg())["short_term_risk"] == pytest.approx((1.95 - 0.2) / 3)
    r_ok = stability_terms(hist(rising), cfg())
    r_bad = stability_terms(hist(collapse), cfg())
    assert r_ok["drawdown"] == pytest.approx(0.0, abs=1e-12)
    # 5-step moving average peaks at 1.85 (steps 36..40 = 1.75..1.95), ends at 0.2; worst 5% (3 of 46) drawdowns
    assert r_bad["drawdown"] == pytest.approx(1.85 - 0.2)
    res = compute_objective(hist(collapse), cfg())
    assert res.value < compute_objective(hist(rising), cfg()).value


def test_kl_excess_and_entropy_collapse():
    n = 8
    h = hist([1.0] * n, kl=[0.0, 0.1, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3], entropy=[4.0, 4.0, 3, 3, 2, 2, 0.4, 0.4])
    res = compute_objective(h, cfg(target_kl=0.1, window=0.25, entropy_drop_free=0.5))
    # kl excess: [0, 0, .1, .2, .2, .2, .2, .2] -> mean 1.1/8
    assert res.raw["kl_excess"] == pytest.approx(1.1 / 8)
    # entropy: first 2 mean 4.0, last 2 mean 0.4 -> drop 0.9 -> collapse beyond free 0.5 = 0.4, x weight 0.5
    assert res.raw["entropy_drop"] == pytest.approx(0.9)
    assert res.terms["entropy_collapse"] == pytest.approx(0.5 * 0.4)
    assert res.value == pytest.approx(1.0 - 1.1 / 8 - 0.2)


def test_mode_collapse_and_validation_reward():
    h = hist([1.0] * 8, frac_reward_zero_std=[1.0] * 8)
    res = compute_objective(h, cfg(zero_std_free=0.5))
    assert res.terms["mode_collapse"] == pytest.approx(0.5 * 0.5)
    # a validation reward, when logged, replaces the training reward in the reward term
    h = hist([1.0] * 8)
    h[3]["eval_reward"] = 0.2
    h[7]["eval_reward"] = 0.4
    res = compute_objective(h, cfg(window=0.5))
    assert res.terms["late_reward"] == pytest.approx(0.4) and res.raw["train_late_reward"] == pytest.approx(1.0)


def test_pareto_returns_reward_and_instability():
    h = hist([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    res = compute_objective(h, cfg(name="pareto"))
    assert res.values[0] == pytest.approx(res.terms["late_reward"])
    assert res.values[1] == pytest.approx(sum(v for k, v in res.terms.items() if k != "late_reward"))
    assert res.values[1] > 0


def test_non_finite_steps_are_penalised_and_ignored_in_reward():
    h = hist([0.5, 0.5, float("nan"), 0.5], loss=[0.1, float("inf"), 0.1, 0.1])
    res = compute_objective(h, cfg())
    assert res.raw["non_finite"] == pytest.approx(0.5)
    assert res.terms["non_finite"] == pytest.approx(10.0 * 0.5)
    assert res.raw["late_reward"] == pytest.approx(0.5)


def test_no_reward_at_all_is_an_error():
    with pytest.raises(ObjectiveError, match="no finite 'reward'"):
        compute_objective([{"step": 1, "loss": 0.1}], cfg())


def test_reward_objective_is_final_mean():
    res = compute_objective(hist([0.0, 0.0, 1.0, 2.0, 3.0]), cfg(name="reward", final_steps=3))
    assert res.value == pytest.approx(2.0) and res.terms == {"final_reward": pytest.approx(2.0)}


def test_helpers():
    assert iqr(np.array([1.0, 2.0, 3.0, 4.0, 5.0])) == pytest.approx(2.0)
    assert cvar_upper(np.arange(100.0), alpha=0.05) == pytest.approx(np.mean([95, 96, 97, 98, 99]))
    assert math.isclose(cvar_upper(np.array([]), 0.05), 0.0)


def test_ppo_key_names_are_read():
    h = hist([1.0] * 4, **{"objective/kl": [0.5] * 4})
    assert stability_terms(h, cfg(target_kl=0.1))["kl_excess"] == pytest.approx(0.4)
