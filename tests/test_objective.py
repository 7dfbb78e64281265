"""The stability-adjusted objective: hand-checked terms, and the properties a practitioner's ranking needs
(a noisy learner beats a flat non-learner; logging frequency does not move the value; a divergent run ranks
below a stable one even without its KL columns)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from sweeprl.analysis import curves
from sweeprl.analysis.objective import PENALTIES, ObjectiveError, compute_objective, stability_terms, target_kl_of
from sweeprl.config.schema import ObjectiveConfig


def cfg(**kw):
    return OmegaConf.merge(OmegaConf.structured(ObjectiveConfig), kw)


def hist(rewards, steps=None, **series):
    steps = np.arange(1, len(rewards) + 1) if steps is None else steps
    out = []
    for i, r in enumerate(rewards):
        rec = {"step": float(steps[i]), "reward": float(r)}
        for k, v in series.items():
            rec[k] = float(v[i])
        out.append(rec)
    return out


def every_k_means(h, k=4):
    """What TRL logs with logging_steps=k: each logged value is the mean of the k steps."""
    out = []
    for j in range(0, len(h) - k + 1, k):
        chunk = h[j : j + k]
        rec = {key: float(np.mean([c[key] for c in chunk])) for key in chunk[0]}
        rec["step"] = chunk[-1]["step"]
        out.append(rec)
    return out


def learner(seed, n=80, sd=0.12, shape="linear"):
    g = np.random.default_rng(seed)
    t = np.arange(n)
    mu = 0.1 + 0.6 * (t / (n - 1) if shape == "linear" else 1 - np.exp(-t / (n / 4)))
    return hist(mu + g.normal(0, sd, n))


def flat(seed, n=80, level=0.2, sd=0.0):
    return hist(level + np.random.default_rng(seed + 1000).normal(0, sd, n))


# ------------------------------------------------------------------------------------ terms
def test_flat_curve_has_no_penalties():
    res = compute_objective(hist([0.5] * 20), cfg())
    assert res.value == pytest.approx(0.5)
    assert set(res.terms) == {"late_reward", *PENALTIES}
    assert all(res.terms[k] == 0 for k in PENALTIES)


def test_late_window_is_a_share_of_the_steps_weighted_by_the_steps_each_point_stands_for():
    # steps 10, 20, ..., 100: the last quarter of the steps is 76..100 -> points 80, 90, 100
    h = hist([0.0] * 7 + [0.3, 0.6, 0.9], steps=np.arange(10, 101, 10))
    assert compute_objective(h, cfg()).terms["late_reward"] == pytest.approx(0.6)
    # each point stands for the steps since the previous one (the first for the typical gap, 20 here)
    c = curves.curve(hist([0.0, 1.0, 0.0], steps=[10, 20, 50]), "reward")
    assert c.mean() == pytest.approx((0.0 * 20 + 1.0 * 10 + 0.0 * 30) / 60)


def test_noise_per_step_does_not_depend_on_the_logging_frequency():
    a = [curves.noise_per_step(curves.curve(learner(s, sd=0.15), "reward")) for s in range(30)]
    b = [curves.noise_per_step(curves.curve(every_k_means(learner(s, sd=0.15)), "reward")) for s in range(30)]
    assert np.mean(a) == pytest.approx(0.15, rel=0.1) and np.mean(b) == pytest.approx(0.15, rel=0.1)


def test_noise_costs_relative_to_the_learning():
    noisy_flat = stability_terms(flat(0, sd=0.1), cfg())
    noisy_learner = stability_terms(learner(0, sd=0.1), cfg())
    assert noisy_flat["noise_per_step"] == pytest.approx(noisy_learner["noise_per_step"], rel=0.35)
    assert noisy_flat["dispersion"] > 0.8 * noisy_flat["noise_per_step"]  # nothing else moves: the full noise
    assert noisy_learner["dispersion"] < 0.35 * noisy_learner["noise_per_step"]  # small next to the learning


def test_one_step_drops_are_spikes_gaussian_noise_is_not():
    g = np.random.default_rng(0)
    r = 0.8 + g.normal(0, 0.01, 100)
    assert stability_terms(hist(r), cfg())["short_term_risk"] == 0.0
    r[[20, 45, 70, 90]] -= 0.5
    risk = stability_terms(hist(r), cfg())["short_term_risk"]
    assert 4 * 0.47 / 5 < risk < 4 * 0.5 / 5  # 4 of the worst 5 % (5 drops) are spikes of ~0.5 (minus noise)
    noisy = 0.8 + g.normal(0, 0.15, 100)  # symmetric noise, as large: not spikes
    assert stability_terms(hist(noisy), cfg())["short_term_risk"] == 0.0


def test_collapse_after_peak_costs_drawdown_and_a_rise_does_not():
    t = np.arange(100)
    rising = hist(0.1 + 0.7 * t / 99)
    collapse = hist(np.where(t < 50, 0.1 + 0.7 * t / 50, np.maximum(0.1, 0.8 - 0.07 * (t - 50))))
    assert stability_terms(rising, cfg())["drawdown"] == 0.0
    # the block means (10 steps each) peak at ~0.73 and end at 0.1: a fall of ~0.63
    assert stability_terms(collapse, cfg())["drawdown"] == pytest.approx(0.63, abs=0.05)
    assert compute_objective(collapse, cfg()).value < compute_objective(rising, cfg()).value


def test_kl_excess_is_zero_at_the_target_smooth_above_and_bounded_far_above():
    def excess(level):
        return stability_terms(hist([1.0] * 20, kl=[level] * 20), cfg(target_kl=0.1))["kl_excess"]

    assert excess(0.05) == 0.0 and excess(0.1) == 0.0
    assert excess(0.101) < 1e-4  # no cliff at the target
    assert excess(0.12) == pytest.approx(math.log1p(0.5 * 0.2**2))
    assert excess(1.0) == pytest.approx(math.log1p(9 - 0.5))  # linear-then-log far above


def test_kl_targets_default_to_the_units_the_algorithm_logs():
    grpo = hist([1.0] * 4, kl=[0.3] * 4)
    ppo = hist([1.0] * 4, **{"objective/kl": [3.0] * 4})
    assert target_kl_of(cfg(), grpo) == 0.1 and target_kl_of(cfg(), ppo) == 6.0  # per token vs per sequence
    assert stability_terms(ppo, cfg())["kl_excess"] == 0.0  # 3 nats per completion is under PPO's 6
    assert stability_terms(grpo, cfg())["kl_excess"] > 0.5  # 0.3 per token is 3x the per-token target


def test_negative_kl_entropy_spikes_and_nan_enter_the_objective():
    n = 40
    t = np.arange(n)
    base = dict(kl=np.full(n, 0.05), entropy=np.full(n, 4.0))
    calm = compute_objective(hist([0.5] * n, **base), cfg(target_kl=0.1))
    cases = {
        "kl_negative": dict(base, kl=np.full(n, -0.2)),
        "entropy_collapse": dict(base, entropy=4.0 * np.exp(-t / 4)),
        "entropy_blowup": dict(base, entropy=4.0 + 0.2 * t),
        "grad_norm_spikes": dict(base, grad_norm=np.where(t % 10 == 9, 50.0, 1.0)),
        "value_loss_spikes": dict(base, **{"loss/value_avg": np.where(t % 10 == 9, 500.0, 2.0)}),
        "mode_collapse": dict(base, frac_reward_zero_std=np.full(n, 0.9)),
        "non_finite": dict(base, loss=np.where(t % 10 == 0, np.nan, 0.1)),
    }
    for term, series in cases.items():
        res = compute_objective(hist([0.5] * n, **series), cfg(target_kl=0.1))
        assert res.terms[term] > 0.05, term
        assert res.value < calm.value - 0.05, term
        assert all(v == 0 for k, v in res.terms.items() if k not in ("late_reward", term)), (term, res.terms)


def test_divergence_penalties_scale_with_the_reward():
    """A severity costs the same share of a 0-1 reward and of a 0-100 reward."""
    t = np.arange(40)
    ent = 4.0 * np.exp(-t / 4)
    small = compute_objective(hist([0.5] * 40, entropy=ent), cfg())
    large = compute_objective(hist([50.0] * 40, entropy=ent), cfg())
    assert large.terms["entropy_collapse"] == pytest.approx(100 * small.terms["entropy_collapse"])


def test_validation_reward_replaces_the_training_reward():
    h = hist([1.0] * 8)
    for i, v in zip((1, 3, 5, 7), (0.1, 0.2, 0.3, 0.4)):  # evaluated every 2 steps
        h[i]["eval_reward"] = v
    res = compute_objective(h, cfg(window=0.5))
    assert res.terms["late_reward"] == pytest.approx(0.35) and res.raw["train_late_reward"] == pytest.approx(1.0)
    assert res.raw["uses_validation_reward"] == 1.0


def test_pareto_returns_reward_and_instability():
    h = hist(0.5 + 0.2 * np.sin(np.arange(40)), entropy=4.0 * np.exp(-np.arange(40) / 4))
    res = compute_objective(h, cfg(name="pareto"))
    assert res.values[0] == pytest.approx(res.terms["late_reward"])
    assert res.values[1] == pytest.approx(sum(v for k, v in res.terms.items() if k != "late_reward"))
    assert res.values[1] > 0


def test_no_reward_at_all_is_an_error():
    with pytest.raises(ObjectiveError, match="no finite 'reward'"):
        compute_objective([{"step": 1, "loss": 0.1}], cfg())


def test_reward_objective_is_final_mean():
    res = compute_objective(hist([0.0, 0.0, 1.0, 2.0, 3.0]), cfg(name="reward", final_steps=3))
    assert res.value == pytest.approx(2.0) and res.terms == {"final_reward": pytest.approx(2.0)}


def test_ppo_key_names_are_read():
    h = [{"step": i + 1, "objective/scores": 1.0, "objective/kl": 12.0} for i in range(4)]
    res = stability_terms(h, cfg())
    assert res["late_reward"] == 1.0 and res["target_kl"] == 6.0 and res["kl_excess"] > 0


# ------------------------------------------------------------------------------------ what a practitioner expects
@pytest.mark.parametrize("sd", [0.12, 0.15])
@pytest.mark.parametrize("shape", ["linear", "saturating"])
def test_a_noisy_learner_beats_a_flat_non_learner_in_every_seed(sd, shape):
    for seed in range(20):
        value = compute_objective(learner(seed, sd=sd, shape=shape), cfg()).value
        assert value > compute_objective(flat(seed), cfg()).value, seed  # flat 0.2, no noise
        assert value > compute_objective(flat(seed, sd=sd), cfg()).value, seed  # flat 0.2, the same noise


def test_logging_every_step_or_every_4_steps_gives_the_same_value():
    worst = 0.0
    for sd in (0.12, 0.15):
        for shape in ("linear", "saturating"):
            for seed in range(20):
                h = learner(seed, sd=sd, shape=shape)
                worst = max(
                    worst, abs(compute_objective(h, cfg()).value - compute_objective(every_k_means(h), cfg()).value)
                )
    assert worst <= 0.05


def ppo_pair(seed: int, n: int = 300):
    """A stable, flat PPO length run (LR 1e-6) and a divergent one like experiment=length_ppo at LR 1e-5: KL
    swinging from -30 to 300 against a 0.1 target, value loss spiking to ~3000, entropy 11 -> 0, gradient
    spikes, while the length reward climbs to its maximum."""
    g = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    ramp = np.clip(t / (0.5 * n), 0, 1)
    kl = 5 * ramp + g.normal(0, 1, n) * (1 + 60 * ramp)
    kl[g.choice(n, 15, replace=False)] = g.uniform(-30, 300, 15)
    vl = 3.0 + np.abs(g.normal(0, 1, n)) * (1 + 20 * ramp)
    vl[g.choice(np.arange(n // 4, n), 12, replace=False)] = g.uniform(300, 3000, 12)
    gn = 1.0 + np.abs(g.normal(0, 0.3, n)) * (1 + 5 * ramp)
    gn[g.choice(np.arange(n // 4, n), 6, replace=False)] *= 30
    stable = {
        "objective/scores": 0.6 + g.normal(0, 0.05, n),
        "objective/kl": 0.05 + g.normal(0, 0.02, n),
        "objective/entropy": 11 + g.normal(0, 0.1, n),
        "loss/value_avg": 2.0 + np.abs(g.normal(0, 0.5, n)),
        "grad_norm": 1.0 + np.abs(g.normal(0, 0.2, n)),
    }
    divergent = {
        "objective/scores": 0.6 + 1.3 * ramp + g.normal(0, 0.1, n),
        "objective/kl": kl,
        "objective/entropy": 11 * (1 - ramp) + np.abs(g.normal(0, 0.05, n)),
        "loss/value_avg": vl,
        "grad_norm": gn,
    }

    def records(cols, drop_kl):
        return [
            {"step": float(i + 1), **{k: float(v[i]) for k, v in cols.items() if not (drop_kl and "kl" in k)}}
            for i in range(n)
        ]

    return records, stable, divergent


@pytest.mark.parametrize("seed", range(5))
def test_a_divergent_ppo_run_ranks_below_a_stable_one_even_without_its_kl_columns(seed):
    records, stable, divergent = ppo_pair(seed)
    c = cfg(target_kl=0.1)
    for drop_kl in (False, True):
        good = compute_objective(records(stable, drop_kl), c)
        bad = compute_objective(records(divergent, drop_kl), c)
        assert bad.value < good.value, (drop_kl, bad.terms)
        assert bad.terms["late_reward"] > good.terms["late_reward"] + 1.0  # it wins on reward alone
