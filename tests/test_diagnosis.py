"""Every finding id on hand-made histories, positive and negative; short histories; conflicting advice; advice
that is valid and effective on real configs; sources, aliases, the CLI (with the objective) and next_sweep."""

from __future__ import annotations

import csv
import json
import subprocess

import numpy as np
import pytest

from conftest import PYTHON, compose_cfg
from sweeprl.analysis.advice import PARAMS
from sweeprl.analysis.diagnosis import FINDING_IDS, Thresholds, diagnose, sweep_level, to_markdown
from sweeprl.analysis.history import RunHistory, config_values, load, load_runs, run_algo

N = 60
T = np.arange(N, dtype=float)
CONFIG = {
    "learning_rate": 1e-3,
    "beta": 0.05,
    "temperature": 0.9,
    "num_generations": 4,
    "max_grad_norm": 1.0,
    "max_completion_length": 64,
    "cliprange": 0.2,
    "cliprange_value": 0.2,
    "vf_coef": 0.1,
    "warmup_steps": 0,
}


def records(cols, n=N):
    return [{"step": float(i + 1), **{k: float(v[i]) for k, v in cols.items() if v is not None}} for i in range(n)]


def healthy(**over):
    """A GRPO run that learns steadily and has nothing wrong with it."""
    g = np.random.default_rng(1)
    cols = {
        "reward": 0.2 + 0.6 * (1 - np.exp(-T / 15)) + g.normal(0, 0.01, N),
        "reward_std": 0.15 - 0.03 * T / N,
        "loss": 0.02 * np.sin(T) + g.normal(0, 0.005, N),  # policy-gradient loss around zero
        "grad_norm": 0.5 + g.normal(0, 0.02, N),
        "kl": 0.01 + 0.04 * T / N,
        "entropy": 4.0 - 1.0 * T / N,
        "frac_reward_zero_std": np.full(N, 0.05),
        "clip_ratio/region_mean": np.full(N, 0.02),
        "completions/mean_length": 40 + g.normal(0, 1, N),
        "completions/clipped_ratio": np.full(N, 0.05),
        "reward_best_of_n": 0.3 + 0.6 * (1 - np.exp(-T / 15)),
    }
    cols.update(over)
    return RunHistory(source="synthetic", records=records(cols), config=dict(CONFIG), algo="grpo")


def ppo(**over):
    g = np.random.default_rng(2)
    cols = {
        "objective/scores": 0.5 + 0.4 * T / N + g.normal(0, 0.01, N),
        "objective/kl": 0.02 + 0.03 * T / N,
        "objective/entropy": 30 - 5 * T / N,
        "loss/policy_avg": g.normal(0, 0.01, N),
        "loss/value_avg": 0.5 + g.normal(0, 0.02, N),
        "policy/approxkl_avg": np.full(N, 0.01),
        "policy/clipfrac_avg": np.full(N, 0.05),
        "val/explained_var": 0.3 + 0.3 * T / N,
        "grad_norm": 1.0 + g.normal(0, 0.05, N),
    }
    cols.update(over)
    return RunHistory(source="synthetic-ppo", records=records(cols), config=dict(CONFIG, beta=0.2), algo="ppo")


def dpo(**over):
    """A DPO run that learns the preference steadily: loss 0.69 -> ~0.45, chosen reward up a little, rejected
    down, accuracies 0.5 -> 0.8 (TRL's DPOTrainer names)."""
    g = np.random.default_rng(11)
    grow = 1 - np.exp(-T / 20)
    cols = {
        "loss": 0.693 - 0.25 * grow + g.normal(0, 0.03, N),
        "rewards/chosen": 0.2 * grow + g.normal(0, 0.05, N),
        "rewards/rejected": -0.8 * grow + g.normal(0, 0.05, N),
        "rewards/margins": 1.0 * grow + g.normal(0, 0.05, N),
        "rewards/accuracies": 0.5 + 0.3 * grow + g.normal(0, 0.05, N),
        "grad_norm": 5 + g.normal(0, 0.5, N),
        "learning_rate": np.full(N, 5e-7),
    }
    cols.update(over)
    return RunHistory(source="synthetic-dpo", records=records(cols), config=dict(CONFIG), algo="dpo")


def spiked(x, at, value):
    y = np.array(x, dtype=float)
    y[at] = value
    return y


def peak_then_collapse(kl=None):
    """The reward rises to 0.8 by step 25, then falls back to 0.05; by default the KL runs far past its target
    as it falls (the evidence of updates too large)."""
    g = np.random.default_rng(7)
    r = np.where(T < 25, 0.05 + 0.75 * T / 25, np.maximum(0.05, 0.8 - 0.04 * (T - 25))) + g.normal(0, 0.03, N)
    return healthy(reward=r, kl=np.where(T < 25, 0.02, 0.02 + 0.1 * (T - 25)) if kl is None else kl)


def format_only():
    """Two reward functions: the format term learns (0 -> 0.8), the correctness term stays at 0.05."""
    g = np.random.default_rng(5)
    form = 0.8 * (1 - np.exp(-T / 15)) + g.normal(0, 0.02, N)
    task = 0.05 + g.normal(0, 0.02, N)
    return healthy(reward=form + task, **{"rewards/format_reward/mean": form, "rewards/correctness/mean": task})


CASES = {
    "non_finite": lambda: healthy(loss=spiked(0.02 * np.sin(T), 30, np.nan)),
    "loss_spike": lambda: healthy(loss=spiked(0.02 * np.sin(T), 40, 3.0)),
    "loss_oscillation": lambda: ppo(**{"loss/value_avg": 1.0 + 0.8 * np.where(T % 2 == 0, 1, -1)}),
    "grad_norm_spike": lambda: healthy(grad_norm=np.where(T % 15 == 14, 20.0, 0.5)),
    "value_loss_spike": lambda: ppo(  # a spike that did harm: the reward fell after it
        **{
            "loss/value_avg": spiked(0.5 + 0.01 * np.sin(T), 45, 50.0),
            "objective/scores": np.where(T < 46, 0.5 + 0.4 * T / N, 0.3) + np.random.default_rng(2).normal(0, 0.01, N),
        }
    ),
    "explained_variance_negative": lambda: ppo(**{"val/explained_var": 0.2 - 0.8 * T / N}),
    "reward_collapse": peak_then_collapse,
    "reward_dip": lambda: healthy(
        reward=np.where((T > 25) & (T < 40), 0.15, 0.2 + 0.6 * (1 - np.exp(-T / 10)))
        + np.random.default_rng(8).normal(0, 0.02, N)
    ),
    "reward_flat": lambda: healthy(reward=0.3 + np.random.default_rng(3).normal(0, 0.005, N)),
    "reward_below_target": lambda: healthy(),  # with target_reward=0.95
    "task_reward_flat": format_only,
    "reward_variance_rising": lambda: healthy(
        reward=0.5 + 0.1 * T / N + np.random.default_rng(5).normal(0, 0.01, N), reward_std=0.05 + 0.2 * T / N
    ),
    "reward_cv_high": lambda: healthy(reward=0.3 + 0.3 * np.where(T % 2 == 0, 1, -1), reward_std=None),
    "reward_variance_died": lambda: healthy(reward_std=0.3 * np.exp(-T / 8)),
    "reward_frozen": lambda: healthy(  # rose, then every sample scored 0 (empty outputs): exactly 0 from step 40
        reward=np.where(T < 40, 0.2 + 0.01 * T + np.random.default_rng(4).normal(0, 0.02, N), 0.0)
    ),
    "best_of_n_gap": lambda: healthy(reward_best_of_n=0.6 + 0.6 * (1 - np.exp(-T / 15))),
    "mode_collapse": lambda: healthy(
        reward=0.3 + np.random.default_rng(9).normal(0, 0.01, N), frac_reward_zero_std=np.minimum(1, T / 20)
    ),
    "entropy_collapse": lambda: healthy(  # the entropy collapses while the reward stays where it was
        entropy=4.0 * np.exp(-T / 8), reward=0.3 + np.random.default_rng(3).normal(0, 0.005, N)
    ),
    "entropy_rising": lambda: healthy(entropy=2.0 + 4.0 * T / N),
    "entropy_unstable": lambda: healthy(entropy=4.0 + np.where(T > N / 2, 1.5, 0.02) * np.where(T % 2 == 0, 1, -1)),
    "kl_negative": lambda: healthy(kl=-0.05 + 0.02 * np.sin(T)),
    "kl_above_target": lambda: healthy(kl=0.05 + 1.0 * T / N),
    "clip_fraction_high": lambda: ppo(**{"policy/clipfrac_avg": np.full(N, 0.4)}),
    "updates_too_small": lambda: ppo(
        **{
            "objective/scores": np.full(N, 0.5) + np.random.default_rng(4).normal(0, 0.002, N),
            "policy/approxkl_avg": np.full(N, 1e-6),
            "policy/clipfrac_avg": np.zeros(N),
        }
    ),
    "length_hacking": lambda: healthy(**{"completions/mean_length": 40 + 100 * (1 - np.exp(-T / 15))}),
    "truncation_high": lambda: healthy(**{"completions/clipped_ratio": np.full(N, 0.6)}),
    "short_history": lambda: RunHistory("short", records({"reward": [0.1, 0.2, 0.3, 0.35, 0.4, 0.42]}, n=6)),
    "preference_overfit": lambda: dpo(
        loss=0.69 * np.exp(-T / 5) + 0.005,
        **{
            "rewards/chosen": -6 * (1 - np.exp(-T / 10)) + np.random.default_rng(12).normal(0, 0.2, N),
            "rewards/rejected": -25 * (1 - np.exp(-T / 10)),
            "rewards/margins": 19 * (1 - np.exp(-T / 10)),
            "rewards/accuracies": np.minimum(1.0, 0.5 + T / 10),
        },
    ),
    "loss_flat": lambda: RunHistory(  # a trainer's Step | Training Loss table that never moved off 0.072
        "table.log", records({"loss": 0.072 + np.random.default_rng(18).normal(0, 0.002, 20)}, n=20)
    ),
    "preference_no_learning": lambda: dpo(
        loss=0.693 + np.random.default_rng(13).normal(0, 0.02, N),
        **{
            "rewards/chosen": np.random.default_rng(14).normal(0, 0.01, N),
            "rewards/rejected": np.random.default_rng(15).normal(0, 0.01, N),
            "rewards/margins": np.random.default_rng(16).normal(0, 0.01, N),
            "rewards/accuracies": 0.5 + np.random.default_rng(17).normal(0, 0.05, N),
        },
    ),
}


def th_for(fid):
    return Thresholds(target_reward=0.95) if fid == "reward_below_target" else Thresholds()


def test_a_gain_the_task_term_shares_is_not_format_only():
    g = np.random.default_rng(5)
    form = 0.8 * (1 - np.exp(-T / 15)) + g.normal(0, 0.02, N)
    task = 0.05 + 0.3 * T / N + g.normal(0, 0.02, N)  # the answers get better too
    run = healthy(reward=form + task, **{"rewards/format_reward/mean": form, "rewards/correctness/mean": task})
    assert "task_reward_flat" not in diagnose(run).ids()
    f = next(f for f in diagnose(format_only()).findings if f.id == "task_reward_flat")
    assert "correctness 0.0535 -> 0.0525" in f.evidence and "format_reward +0.498" in f.evidence
    assert not f.recommendation["changes"]  # the learning rate is not the cause


def test_a_loss_only_log_is_judged_by_its_loss_only_when_nothing_else_measures_learning():
    g = np.random.default_rng(19)
    falling = 0.072 * (1 - 0.1 * np.arange(20) / 19) + g.normal(0, 0.002, 20)  # 10 % lower by the end: learning
    assert "loss_flat" not in diagnose(RunHistory("table.log", records({"loss": falling}, n=20))).ids()
    flat = {"loss": 0.072 + g.normal(0, 0.002, N)}
    assert "loss_flat" not in diagnose(healthy(**flat)).ids()  # the reward judges a GRPO run
    assert "loss_flat" not in diagnose(RunHistory("dpo.log", records({**flat, "rewards/chosen": T}))).ids()
    run = CASES["loss_flat"]()  # the same table with a learning rate still rising: no verdict yet
    run.records = [dict(r, learning_rate=1e-6 * (i + 1)) for i, r in enumerate(run.records)]
    d = diagnose(run)
    assert "loss_flat" not in d.ids() and any("warming up" in w for w in d.not_enough_evidence)
    drift = 0.691 - 0.008 * np.arange(500) / 499 + g.normal(0, 0.008, 500)  # a 1 % drift: a trend, not learning
    assert "loss_flat" in diagnose(RunHistory("table.log", records({"loss": drift}, n=500))).ids()
    f = next(f for f in diagnose(CASES["loss_flat"]()).findings if f.id == "loss_flat")
    assert f.severity == "warning" and not f.recommendation["changes"]  # no evidence about the update size
    assert "p=" in f.evidence and f.confidence >= 0.8


def test_length_and_reward_that_both_grow_are_hacking_only_when_they_move_together_step_by_step():
    """Reasoning that grows longer as the answers get better: reward and length both rise over the run, each with
    its own batch-to-batch noise. A reward paid for length: the steps whose completions ran longer score higher."""
    g = np.random.default_rng(21)
    length = 200 * (1 + T / N) + g.normal(0, 15, N)
    learning = healthy(**{"completions/mean_length": length})  # its reward rises with noise of its own
    d = diagnose(learning)
    assert "length_hacking" not in d.ids()
    assert any(
        w.startswith("length_hacking: reward and completion length rose together") for w in d.not_enough_evidence
    )
    paid = healthy(reward=0.002 * length + g.normal(0, 0.02, N), **{"completions/mean_length": length})
    assert "length_hacking" in diagnose(paid).ids()


def test_a_reward_that_repeats_as_often_as_it_did_before_is_not_frozen():
    """Exactly 1.0 over the last 15 steps, but 1.0 was already the value of 38 of the 45 steps before (a pass rate
    on a few prompts): 15 in a row happens by chance (p = 0.83^15 = 0.06), so it is not evidence of a frozen
    reward; the same tail after a reward that never repeated is (the positive case in CASES)."""
    reward = np.ones(N)
    reward[:5], reward[[12, 44]] = 0.0, 0.9
    d = diagnose(healthy(reward=reward))
    assert "reward_frozen" not in d.ids()
    assert any(w.startswith("reward_frozen:") and "p=0.06" in w for w in d.not_enough_evidence)


def test_a_tiny_steady_rise_at_the_floor_of_a_0_1_reward_is_still_flat():
    """0.041 -> 0.047 over 60 steps rises beyond the noise, but nearly every group still scores all zeros: no
    signal. The same steady rise in the middle of the scale is a slow learner, not a flat reward."""
    g = np.random.default_rng(22)
    floor = 0.041 + 0.006 * T / N + g.normal(0, 0.002, N)
    assert "reward_flat" in diagnose(healthy(reward=floor, reward_std=None)).ids()
    middle = diagnose(healthy(reward=floor + 0.4, reward_std=None))
    assert "reward_flat" not in middle.ids() and any("rises steadily" in w for w in middle.not_enough_evidence)


def test_a_dpo_loss_that_drifts_a_few_thousandths_below_ln2_has_learned_no_preference():
    """Three epochs at a decaying learning rate: the loss 0.6934 -> 0.6904 (a significant trend, under 1 % of
    ln 2), margins of a few thousandths, pair accuracy 0.57. A loss that fell to 0.65 with margins at 0.3 and
    accuracy 0.7 is slow learning, not this."""
    g = np.random.default_rng(23)
    t = T / N
    stuck = dpo(
        loss=0.6934 - 0.003 * t + g.normal(0, 0.0005, N),
        **{
            "rewards/margins": 0.001 + 0.006 * t + g.normal(0, 0.001, N),
            "rewards/accuracies": 0.5 + 0.07 * t + g.normal(0, 0.03, N),
        },
    )
    assert "preference_no_learning" in diagnose(stuck).ids()
    slow = dpo(
        loss=0.693 - 0.045 * t + g.normal(0, 0.003, N),
        **{
            "rewards/margins": 0.3 * t + g.normal(0, 0.01, N),
            "rewards/accuracies": 0.5 + 0.2 * t + g.normal(0, 0.03, N),
        },
    )
    assert "preference_no_learning" not in diagnose(slow).ids()


def test_every_finding_id_has_a_case():
    assert set(CASES) == set(FINDING_IDS)


def test_healthy_runs_have_no_findings():
    assert diagnose(healthy()).ids() == []
    assert diagnose(ppo()).ids() == []


@pytest.mark.parametrize("fid", FINDING_IDS)
def test_finding_positive(fid):
    d = diagnose(CASES[fid](), th_for(fid))
    assert fid in d.ids(), d.ids()
    f = next(f for f in d.findings if f.id == fid)
    assert f.severity in ("critical", "warning", "info")
    assert 0.5 <= f.confidence <= 0.99
    assert any(ch.isdigit() for ch in f.evidence), "evidence must carry numbers"
    assert f.cause and f.recommendation["text"]
    for c in f.recommendation["changes"]:
        assert c["param"] in PARAMS and c["direction"] in ("increase", "decrease", "set")


@pytest.mark.parametrize("fid", FINDING_IDS)
def test_finding_negative(fid):
    """The healthy runs (GRPO and PPO style) never raise it, even with the finding's thresholds."""
    th = Thresholds(target_reward=0.5) if fid == "reward_below_target" else th_for(fid)
    assert fid not in diagnose(healthy(), th).ids()
    assert fid not in diagnose(ppo(), th).ids()
    assert fid not in diagnose(dpo(), th).ids()


def changes(d, fid):
    return {c["param"]: c for c in next(f for f in d.findings if f.id == fid).recommendation["changes"]}


def test_overrides_use_current_values_and_the_effective_keys():
    ch = changes(diagnose(CASES["kl_above_target"]()), "kl_above_target")
    assert {p: c["override"] for p, c in ch.items()} == {
        "beta": "algo.beta=0.1",
        "learning_rate": "algo.learning_rate=0.0005",
    }
    ch = changes(diagnose(CASES["value_loss_spike"]()), "value_loss_spike")
    assert {c["override"] for c in ch.values()} == {"algo.vf_coef=0.05", "algo.cliprange_value=0.1"}
    # PPO without its resolved config: the KL coefficient is algo.beta too; GRPO has no value head
    ch = changes(diagnose(ppo(**{"objective/kl": 0.05 + 10 * T / N})), "kl_above_target")
    assert ch["beta"]["override"] == "algo.beta=0.4"
    assert "vf_coef" not in changes(diagnose(CASES["loss_spike"]()), "loss_spike")


def test_peak_then_collapse_is_a_collapse_not_a_flat_run():
    d = diagnose(peak_then_collapse())
    assert "reward_collapse" in d.ids() and "reward_flat" not in d.ids()
    f = next(f for f in d.findings if f.id == "reward_collapse")
    assert f.severity == "critical" and 20 <= f.onset <= 32
    ch = changes(d, "reward_collapse")
    assert ch["learning_rate"]["direction"] == "decrease" and ch["beta"]["direction"] == "increase"
    assert all(c["direction"] != "increase" for c in d.changes() if c["param"] == "learning_rate")


def test_a_collapse_without_evidence_of_large_updates_gets_no_learning_rate_advice():
    """The same fall with the KL low and steady: the log does not show updates too large, so no learning-rate
    direction; the recommendation says why and what to look at."""
    d = diagnose(peak_then_collapse(kl=0.02 + 0.001 * np.sin(T)))
    f = next(f for f in d.findings if f.id == "reward_collapse")
    assert "learning_rate" not in changes(d, "reward_collapse")
    assert "does not show updates too large" in f.recommendation["text"]
    assert "beyond its noise" in f.evidence and f.confidence > 0.9


def test_a_fall_within_the_noise_is_not_a_collapse():
    """10 noisy points of a 0-1 reward (4 prompts a step) that happen to end lower: no finding, a note."""
    reward = [0.25, 0.5, 0.25, 0.75, 0.5, 0.5, 0.25, 0.5, 0.25, 0.25]
    d = diagnose(RunHistory("noisy.jsonl", records({"reward": reward, "kl": [0.01] * 10}, n=10)))
    assert not {"reward_collapse", "reward_dip"} & set(d.ids())
    assert any("within its" in n and "noise" in n for n in d.not_enough_evidence), d.not_enough_evidence


def test_one_direction_per_parameter():
    """A run below its target whose reward fell after a loss spike: reward_below_target says raise the learning
    rate, loss_spike (harmful: the reward fell after it) says lower it."""
    run = healthy(
        reward=np.where(T < 40, 0.3, 0.15) + np.random.default_rng(3).normal(0, 0.005, N),
        loss=spiked(0.02 * np.sin(T), 40, 3.0),
        kl=np.full(N, 1e-5),
    )
    d = diagnose(run, Thresholds(target_reward=0.7))
    assert {"reward_below_target", "loss_spike"} <= set(d.ids())
    assert next(f for f in d.findings if f.id == "loss_spike").severity != "info"
    for param in PARAMS:
        directions = {c["direction"] for f in d.findings for c in f.recommendation["changes"] if c["param"] == param}
        assert len(directions) <= 1, (param, directions)
    assert d.resolved_conflicts and "learning_rate" in d.resolved_conflicts[0]


def test_short_epoch_table_gets_the_loss_spikes_and_is_told_to_lower_the_learning_rate():
    """7 epochs: the loss jumps +80 % between two epochs and +34 % later; the reward sits at 0.24, target 0.7."""
    loss = [0.92, 0.88, 0.85, 1.53, 1.40, 1.88, 1.80]
    reward = [0.20, 0.22, 0.25, 0.23, 0.24, 0.24, 0.25]
    run = RunHistory(
        "epochs.csv",
        [{"epoch": i + 1, "step": i + 1, "loss": lo, "reward": r} for i, (lo, r) in enumerate(zip(loss, reward))],
    )
    d = diagnose(run, Thresholds(target_reward=0.7))
    assert {"loss_spike", "reward_below_target", "short_history"} <= set(d.ids())
    spike = next(f for f in d.findings if f.id == "loss_spike")
    assert spike.steps == [4, 6] and "+80%" in spike.evidence and "+34%" in spike.evidence
    lr = {c["direction"] for c in d.changes() if c["param"] == "learning_rate"}
    assert lr == {"decrease"}
    assert d.summary["windows"][0]["window"] == "epoch 1"  # one summary row per epoch


def test_six_grpo_log_lines_get_mode_collapse_and_reward_cv():
    rows = [
        {"step": 10 * (i + 1), "reward": r, "reward_std": 0.7 * r, "frac_reward_zero_std": z, "kl": 0.01}
        for i, (r, z) in enumerate(zip([0.30, 0.32, 0.31, 0.33, 0.30, 0.32], [0.25, 0.3, 0.4, 0.45, 0.5, 0.5]))
    ]
    d = diagnose(RunHistory("six.jsonl", rows))
    assert {"mode_collapse", "reward_cv_high", "short_history"} <= set(d.ids())
    assert d.summary["algo"] == "grpo"  # inferred from TRL's metric names


def test_saturated_groups_are_not_called_a_collapse():
    run = healthy(frac_reward_zero_std=np.minimum(0.9, T / 20), reward_std=0.3 * np.exp(-T / 8))
    d = diagnose(run)
    f = next(f for f in d.findings if f.id == "mode_collapse")
    assert f.severity == "info" and "saturation" in f.cause and not f.recommendation["changes"]
    assert next(f for f in d.findings if f.id == "reward_variance_died").severity == "info"


def _alike(entropy, reward, rise=0.3, seed=4):
    g = np.random.default_rng(seed)
    zs = np.clip(0.6 - rise + rise * T / N + g.normal(0, 0.03, N), 0, 1)  # groups alike, more as the run goes
    d = diagnose(healthy(frac_reward_zero_std=zs, entropy=entropy, reward=reward))
    return next(f for f in d.findings if f.id == "mode_collapse")


def test_alike_groups_are_read_by_the_entropy_and_the_reward():
    g = np.random.default_rng(8)
    rising = 0.4 + 0.3 * T / N + g.normal(0, 0.05, N)
    flat = 0.4 + g.normal(0, 0.05, N)
    steady = 0.5 + g.normal(0, 0.01, N)
    solved = _alike(steady, rising)  # samples still differ, the reward rises: prompts being solved
    assert solved.severity == "info" and not solved.recommendation["changes"]
    assert _alike(steady, flat).severity == "info"  # sorting into solved and unsolved prompts as the reward holds
    coarse = _alike(steady, flat, rise=0.0)  # alike from the start, samples differ: the reward's problem
    assert coarse.severity == "warning" and {c["param"] for c in coarse.recommendation["changes"]} == {
        "num_generations"
    }
    narrowed = _alike(0.5 * np.exp(-T / 6), flat)  # the policy narrowed: a collapse, for a higher temperature
    assert narrowed.severity in ("warning", "critical")
    assert ("temperature", "increase") in {(c["param"], c["direction"]) for c in narrowed.recommendation["changes"]}


def test_a_policy_deterministic_from_the_first_logged_step_is_a_collapse_not_a_learning_rate_too_low():
    g = np.random.default_rng(2)
    noise = g.normal(0, 0.03, N)
    run = ppo(
        **{"objective/entropy": 0.005 + g.normal(0, 5e-4, N), "objective/scores": 0.2 + noise},
        **{"policy/approxkl_avg": np.full(N, 0.0), "policy/clipfrac_avg": np.full(N, 0.0)},
    )
    d = diagnose(run)
    f = next(f for f in d.findings if f.id == "entropy_collapse")
    assert f.severity == "warning" and "one completion per prompt" in f.evidence
    assert "updates_too_small" not in d.ids()
    assert not [c for c in d.changes() if c["param"] == "learning_rate"]


def test_a_fall_of_the_mean_against_the_trend_of_the_steps_is_not_a_collapse():
    g = np.random.default_rng(3)  # most steps creep up; two large early rewards lift the first stretch's mean
    reward = -1.2 + 0.003 * T + g.normal(0, 0.05, N)
    reward[[1, 4]] = 4.0
    d = diagnose(healthy(reward=reward, reward_std=None))
    assert "reward_collapse" not in d.ids()
    assert any("a few large early rewards" in w for w in d.not_enough_evidence)


def test_a_flat_reward_with_no_gradient_blames_the_setup_not_the_learning_rate():
    g = np.random.default_rng(6)
    run = healthy(reward=0.5 + g.normal(0, 0.02, N), kl=np.full(N, 1e-5), grad_norm=np.zeros(N))
    f = next(f for f in diagnose(run).findings if f.id == "reward_flat")
    assert "0 or NaN on 60 of 60" in f.evidence and "no update reaches the weights" in f.cause
    assert not f.recommendation["changes"]


def test_one_lucky_batch_on_a_floor_reward_is_no_collapse_and_no_signal_is_named():
    reward = np.full(25, -1.0)
    reward[20] = -0.67  # 12 samples a batch, all -1 but for one batch with two successes
    std = np.where(np.arange(25) == 20, 0.75, 0.0)
    d = diagnose(RunHistory("floor.log", records({"reward": reward, "reward_std": std}, n=25)))
    assert "reward_collapse" not in d.ids()
    assert "every sample scored the same" in next(f for f in d.findings if f.id == "reward_flat").evidence


def test_a_short_log_within_its_noise_is_not_called_flat_without_evidence_the_policy_stood_still():
    reward = [0.58, 0.62, 0.68, 0.60, 0.61, 0.59, 0.70]
    d = diagnose(RunHistory("short.jsonl", records({"reward": np.array(reward)}, n=7)))
    assert "reward_flat" not in d.ids() and any(w.startswith("reward_flat:") for w in d.not_enough_evidence)
    still = records({"reward": np.array(reward), "kl": np.full(7, 2e-4)}, n=7)  # KL says: the policy stood still
    assert "reward_flat" in diagnose(RunHistory("short.jsonl", still)).ids()


def test_a_surrogate_loss_spike_the_reward_shrugged_off_is_information():
    d = diagnose(healthy(loss=spiked(0.02 * np.sin(T), 40, 80.0)))
    f = next(f for f in d.findings if f.id == "loss_spike")
    assert f.severity == "info" and not f.recommendation["changes"]


def test_a_preference_loss_that_got_noisy_after_warm_up_has_no_spike():
    g = np.random.default_rng(11)  # 16 pairs a step: still during the warm-up, swinging by +-0.15 after it
    loss = np.where(T < 20, 0.69 + g.normal(0, 0.005, N), 0.62 + g.normal(0, 0.1, N))
    loss[45] = 0.95
    run = RunHistory(
        "dpo.log", records({"loss": loss, "rewards/chosen": np.zeros(N), "rewards/rejected": -0.1 * T / N})
    )
    assert "loss_spike" not in diagnose(run).ids()


def test_a_dpo_loss_over_three_pairs_a_step_is_heavy_tailed_not_a_spike_but_a_harmful_update_is():
    """Three pairs a step, margins widening as DPO learns: one misordered pair lifts a loss of 0.02 to 0.7 or more
    every few dozen steps and the margin goes on as before. An update that breaks the ranking (every margin 6 lower
    at step 150, recovering over 50 steps) is a spike that did harm. 40 simulated runs each (4 of the 40 healthy
    ones warned, 33 before the spikes were judged by the margin after them)."""

    def spike(margins):
        loss = np.log1p(np.exp(-margins)).mean(axis=1)  # DPO's loss: the mean -log sigmoid of the pair margins
        run = RunHistory("dpo.jsonl", records({"loss": loss, "rewards/margins": margins.mean(axis=1)}, n=200))
        return next((f.severity for f in diagnose(run).findings if f.id == "loss_spike"), None)

    healthy_warned = harmful_caught = 0
    for seed in range(40):
        mu = np.linspace(0.0, 5.0, 200)[:, None]
        margins = mu + (0.7 * mu + 0.05) * np.random.default_rng(seed).normal(0, 1, (200, 3))
        healthy_warned += spike(margins) in ("warning", "critical")
        margins[150:] -= np.linspace(6, 0, 50)[:, None]
        harmful_caught += spike(margins) in ("warning", "critical")
    assert healthy_warned <= 6 and harmful_caught == 40, (healthy_warned, harmful_caught)


def test_pg_loss_oscillation_is_not_a_spike_or_oscillation():
    run = healthy(loss=0.3 * np.where(T % 2 == 0, 1, -1))  # large but centred on zero
    assert {"loss_spike", "loss_oscillation"}.isdisjoint(diagnose(run).ids())
    run = healthy(loss=0.05 + 0.3 * np.where(T % 2 == 0, 1, -1))  # GRPO with a KL term: off zero, still normal
    assert {"loss_spike", "loss_oscillation"}.isdisjoint(diagnose(run).ids())
    run = healthy(loss=np.where(T % 7 == 0, -0.036, 0.001))  # near-zero loss with a repeated excursion
    assert "loss_spike" not in diagnose(run).ids()


def test_variance_growing_with_the_reward_is_not_flagged():
    run = healthy(reward=0.02 + 0.6 * T / N, reward_std=0.03 + 0.1 * T / N)
    assert "reward_variance_rising" not in diagnose(run).ids()


def test_sweep_level_findings_are_those_on_most_trials():
    by_trial = {0: ["truncation_high", "reward_flat"], 1: ["truncation_high"], 2: ["truncation_high"], 3: []}
    assert sweep_level(by_trial) == {"truncation_high"}
    assert sweep_level({0: ["x"], 1: ["x"]}) == set()  # two trials are not a sweep-wide pattern


# ------------------------------------------------------------------------------------------ advice on real configs
def resolved(overrides):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_cfg(overrides), resolve=True)


def effective(cfg_dict):
    """What the trainer gets: TRL's config kwargs (GRPO), or PPO's learning rate and initial KL coefficient."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(cfg_dict)
    if cfg.algo.name == "ppo":
        from dataclasses import asdict

        from sweeprl.config.algos.ppo import as_ppo_config

        algo = asdict(as_ppo_config(cfg.algo))
        return {**algo, "generation": dict(cfg.generation)}
    from sweeprl.models.loading import DeviceSettings
    from sweeprl.training.trl_trainers import trainer_kwargs, trl_classes

    device = DeviceSettings(use_cpu=True, bf16=False, description="cpu")
    return trainer_kwargs(cfg, trl_classes(cfg.algo.name)[0], "/tmp/x", device, {}, [1.0])


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=quickstart"],
        ["experiment=quickstart", "algo.beta=0.05", "algo.num_generations=8"],
        ["experiment=length_ppo", "model=tiny"],
        [
            "experiment=length_ppo",
            "model=tiny",
            "algo.beta=0.3",
        ],  # sweep=lr_kl sets algo.beta
    ],
)
@pytest.mark.parametrize("fid", FINDING_IDS)
def test_every_override_is_valid_and_changes_what_the_trainer_gets(overrides, fid):
    from omegaconf import OmegaConf

    from sweeprl.config import validate

    cfg = resolved(overrides)
    run = CASES[fid]()
    run.config, run.algo = config_values(cfg)
    run.resolved = cfg
    d = diagnose(run, th_for(fid))
    before = effective(cfg)
    for c in d.changes():
        if not c.get("override"):
            continue
        new = OmegaConf.merge(OmegaConf.create(cfg), OmegaConf.from_dotlist(c["override"].split()))
        validate(new)  # valid
        assert effective(OmegaConf.to_container(new)) != before, c["override"]  # effective


# ------------------------------------------------------------------------------------------ sources
def write_sources(tmp_path):
    run = CASES["kl_above_target"]()
    recs = run.records
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    state = {"log_history": [dict(r, step=int(r["step"])) for r in recs] + [{"train_runtime": 1.0, "step": N}]}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    aliased = [
        {
            "step": r["step"],
            "avg_reward": r["reward"],
            "reward_var": r["reward_std"] ** 2,
            "grad": r["grad_norm"],
            "lr": 1e-3,
            "avg_loss": r["loss"],
            "kl": r["kl"],
            "frac_zero_std": r["frac_reward_zero_std"],
        }
        for r in recs
    ]
    with (tmp_path / "m.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(aliased[0]))
        w.writeheader()
        w.writerows(aliased)
    trial = tmp_path / "trial_0"
    trial.mkdir()
    (trial / "metrics.jsonl").write_text((tmp_path / "m.jsonl").read_text())
    import yaml

    (trial / "resolved_config.yaml").write_text(yaml.safe_dump(resolved(["experiment=quickstart"])))
    return recs


def test_sources_and_aliases(tmp_path):
    recs = write_sources(tmp_path)
    for name in ("m.jsonl", "trainer_state.json", "m.csv", "trial_0"):
        run = load(str(tmp_path / name))
        assert len(run.records) == N, name
        assert run.records[5]["reward"] == pytest.approx(recs[5]["reward"])
        # the trial's own objective.target_kl (2.5 in the quickstart) replaces the default per-token 0.1
        assert ("kl_above_target" in diagnose(run).ids()) == (name != "trial_0"), name
    csv_run = load(str(tmp_path / "m.csv"))
    assert csv_run.records[5]["reward_std"] == pytest.approx(recs[5]["reward_std"])  # variance -> std
    assert csv_run.records[5]["grad_norm"] == pytest.approx(recs[5]["grad_norm"])
    assert csv_run.records[5]["learning_rate"] == 1e-3 and "frac_reward_zero_std" in csv_run.records[5]
    trial = load(str(tmp_path / "trial_0"))
    assert trial.algo == "grpo" and trial.resolved["name"] == "quickstart" and trial.target_kl == 2.5


def run_cli(*args):
    return subprocess.run([PYTHON, "-m", "sweeprl", "diagnose", *args], capture_output=True, text=True, timeout=120)


def test_cli_markdown_and_json_with_the_objective(tmp_path):
    write_sources(tmp_path)
    md = run_cli(str(tmp_path / "m.jsonl"))
    assert md.returncode == 0, md.stderr
    assert (
        "## Findings" in md.stdout and "kl_above_target" in md.stdout and "Objective (stability_adjusted)" in md.stdout
    )
    js = run_cli(
        str(tmp_path / "m.jsonl"),
        "--format",
        "json",
        "--target-kl",
        "5",
        "--target-reward",
        "0.99",
        "--out",
        str(tmp_path / "out"),
    )
    data = json.loads(js.stdout)
    assert set(data) >= {"summary", "findings", "next_sweep", "objective"}
    ids = [f["id"] for f in data["findings"]]
    assert "kl_above_target" not in ids and "reward_below_target" in ids  # thresholds from the command line
    assert data["objective"]["target_kl"] == 5.0 and data["objective"]["terms"]["kl_excess"] == 0.0  # --target-kl too
    for f in data["findings"]:
        assert set(f) == {"id", "severity", "confidence", "onset", "evidence", "steps", "cause", "recommendation"}
    assert (tmp_path / "out" / "diagnosis.json").is_file() and (tmp_path / "out" / "diagnosis.md").is_file()
    for source in ("trainer_state.json", "m.csv", "trial_0"):  # every source gets the objective
        data = json.loads(run_cli(str(tmp_path / source), "--format", "json").stdout)
        assert set(data["objective"]) == {"value", "terms", "target_kl"}, source
        assert data["objective"]["terms"]["late_reward"] == pytest.approx(
            data["summary"]["windows"][-1]["reward"], abs=0.05
        )
    bad = run_cli(str(tmp_path / "nope"))
    assert bad.returncode == 2 and "not a trial directory" in bad.stderr


def test_cli_diagnoses_each_run_of_a_file_that_holds_several(tmp_path):
    rows = [{"step": s, "reward": 0.5, "kl": 0.01} for s in (1, 2, 3)]
    rows += [{"step": s, "reward": 0.2 + 0.01 * s, "kl": 0.001 * s} for s in range(1, 31)]
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = run_cli(str(tmp_path / "two.jsonl"))
    assert md.returncode == 0 and "holds 2 runs; each is diagnosed on its own" in md.stdout, md.stderr
    assert "(run 1 of 2, steps 1-3)" in md.stdout and "(run 2 of 2, steps 1-30)" in md.stdout
    data = json.loads(run_cli(str(tmp_path / "two.jsonl"), "--format", "json").stdout)
    assert data["source"] == str(tmp_path / "two.jsonl") and [r["summary"]["steps"] for r in data["runs"]] == [3, 30]
    # piped into a reader that stops early (`| head -1`): no traceback
    proc = subprocess.Popen(
        [PYTHON, "-m", "sweeprl", "diagnose", str(tmp_path / "two.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in proc.stderr.read()


def test_markdown_rendering_lists_overrides_and_confidence():
    md = to_markdown(diagnose(CASES["kl_above_target"]()))
    assert "kl_above_target" in md and "algo.learning_rate=0.0005" in md and "| window |" in md
    assert "confidence 0." in md and "from step" in md


def test_markdown_names_the_steps_once_and_rounds_the_config():
    run = CASES["reward_dip"]()
    run.config = {"learning_rate": 0.008483345748827318, "beta": 0.1057789839505809}
    md = to_markdown(diagnose(run))
    dip = next(line for line in md.splitlines() if "**reward_dip**" in line)
    assert "around step" in dip and "(steps " not in dip  # the evidence already says where
    assert "learning_rate=0.00848, beta=0.106" in md
    md = to_markdown(diagnose(CASES["grad_norm_spike"]()))
    assert "(steps 15, 30, 45, 60)" in md  # evidence without step numbers keeps the list


def test_markdown_is_printed_raw_when_piped(capsys):
    from sweeprl.console import print_markdown

    print_markdown("# Diagnosis\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert capsys.readouterr().out == "# Diagnosis\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"


def test_next_sweep_shifts_the_source_ranges():
    run = CASES["kl_above_target"]()
    run.sweep_params = {"algo.learning_rate": "tag(log, interval(1e-4, 1e-2))", "algo.beta": "interval(0.0, 0.2)"}
    nxt = diagnose(run).next_sweep["params"]
    assert nxt["algo.learning_rate"] == "tag(log, interval(0.00025, 0.001))"  # centred on 5e-4
    assert nxt["algo.beta"] == "interval(0.08, 0.125)"  # centred on 0.1, linear like the searched range
    from hydra_plugins.sweeprl_sweeper.search_space import parse_search_space

    space, _ = parse_search_space(nxt, [])  # valid override grammar
    assert space.distributions["algo.learning_rate"].log


def test_next_sweep_group_sizes_divide_the_batch():
    cfg = resolved(["experiment=quickstart", "algo.num_generations=8"])  # batch 8: no larger group divides it
    run = CASES["reward_cv_high"]()
    run.config, run.algo = config_values(cfg)
    run.resolved = cfg
    d = diagnose(run)
    ch = changes(d, "reward_cv_high")["num_generations"]
    assert ch["override"] == "algo.num_generations=16 algo.per_device_train_batch_size=16"
    run.sweep_params = {"algo.num_generations": "choice(2, 4, 8)"}
    assert diagnose(run).next_sweep["params"]["algo.num_generations"].startswith("choice(")


def test_every_finding_has_a_priority_and_the_cause_comes_first():
    from sweeprl.analysis.diagnosis import RANK

    assert set(RANK) == set(FINDING_IDS)
    run = healthy(entropy=4.0 * np.exp(-T / 6), frac_reward_zero_std=np.minimum(1, T / 20))
    run.records = [dict(r, **{"completions/clipped_ratio": 0.9}) for r in run.records]
    ids = diagnose(run).ids()
    # a collapsed policy explains the groups that score alike and comes before the truncated completions
    assert ids.index("entropy_collapse") < ids.index("mode_collapse") < ids.index("truncation_high")


def broken_from_the_start(n=N, start=0.35):
    """A learning rate far too high: the first updates break the policy (entropy spikes, then collapses), the
    reward falls from where the untrained model was and never comes back, completions run to the limit."""
    t = np.arange(n, dtype=float)
    cols = {
        "reward": np.where(t < 2, start, 0.02) + np.random.default_rng(11).normal(0, 0.01, n),
        "entropy": np.where(t < 1, 2.0, np.where(t < 3, 6.0, 0.05)),
        "completions/clipped_ratio": np.where(t < 2, 0.2, 1.0),
    }
    if n == N:  # a full GRPO log
        return healthy(kl=np.where(t < 1, 0.0, 3.0), **cols)
    return RunHistory("short.jsonl", records(cols, n=n))  # a short log with only these columns


@pytest.mark.parametrize("n", [N, 8])
def test_a_run_broken_by_its_first_updates_is_told_to_lower_the_learning_rate_10x(n):
    d = diagnose(broken_from_the_start(n))
    assert {"reward_collapse", "entropy_collapse", "truncation_high"} <= set(d.ids())
    collapse = next(f for f in d.findings if f.id == "reward_collapse")
    assert "without rising first" in collapse.evidence and collapse.onset <= 4
    assert changes(d, "reward_collapse")["learning_rate"]["factor"] == 0.1
    assert changes(d, "entropy_collapse")["learning_rate"]["factor"] == 0.1
    assert "symptom" in next(f for f in d.findings if f.id == "truncation_high").cause
    assert not [c for c in d.changes() if c["param"] == "max_completion_length"]  # no longer runaway text
    assert {c["direction"] for c in d.changes() if c["param"] == "learning_rate"} == {"decrease"}


def test_a_flat_reward_while_the_policy_moves_is_not_told_to_raise_the_learning_rate():
    """Reward stuck near 0 (a [0, 1] reward: 0.04 -> 0 is flat), entropy 0.25 -> 1.6 -> 0.004 (the OCaml 100x
    learning-rate run's shape), against a flat reward of 0.4 (not sparse) with the entropy steady (learning rate
    too low); the same sparse reward with the entropy steady gets reward-side advice, not a learning rate."""
    t = np.arange(30, dtype=float)
    reward = np.where(t < 1, 0.04, 0.0)
    moved = RunHistory(
        "moved", records({"reward": reward, "entropy": np.where(t < 1, 0.25, np.where(t < 3, 1.6, 0.004))}, n=30)
    )
    steady = 0.25 + 0.01 * np.sin(t)
    still = RunHistory("still", records({"reward": 0.4 + 0.002 * np.cos(t), "entropy": steady}, n=30))
    sparse = RunHistory("sparse", records({"reward": reward, "entropy": steady}, n=30))
    assert "learning_rate" not in changes(diagnose(sparse), "reward_flat")
    flat_moved = next(f for f in diagnose(moved).findings if f.id == "reward_flat")
    assert "while the policy moved (entropy" in flat_moved.evidence
    assert not [c for c in flat_moved.recommendation["changes"] if c["param"] == "learning_rate"]
    assert {c["direction"] for c in diagnose(moved).changes() if c["param"] == "learning_rate"} == {"decrease"}
    assert changes(diagnose(still), "reward_flat")["learning_rate"]["direction"] == "increase"


def test_a_collapse_after_learning_still_lowers_the_learning_rate_and_ppo_names_work_too():
    assert changes(diagnose(CASES["entropy_collapse"]()), "entropy_collapse")["learning_rate"]["factor"] == 0.5
    sharpened = diagnose(healthy(entropy=4.0 * np.exp(-T / 8)))  # the reward rose as the entropy fell
    assert next(f for f in sharpened.findings if f.id == "entropy_collapse").severity == "info"
    assert changes(diagnose(peak_then_collapse()), "reward_collapse")["learning_rate"]["factor"] == 0.3
    broken = ppo(**{"objective/scores": np.where(T < 2, 0.5, 0.05), "objective/entropy": np.where(T < 2, 30.0, 0.5)})
    d = diagnose(broken)
    assert changes(d, "reward_collapse")["learning_rate"]["factor"] == 0.1
    assert changes(d, "entropy_collapse")["learning_rate"]["factor"] == 0.1
    truncated_from_the_start = healthy(**{"completions/clipped_ratio": np.full(N, 0.6)})  # entropy steady: a budget
    assert changes(diagnose(truncated_from_the_start), "truncation_high")["max_completion_length"]["factor"] == 2.0


def test_truncation_that_falls_as_the_reward_rises_is_a_policy_learning_to_finish_not_a_warning():
    noise = np.random.default_rng(21).normal(0, 0.02, N)
    falling = {"completions/clipped_ratio": 0.65 - 0.35 * T / N + noise}  # 65 % cut off at first, 30 % at the end
    finding = next(f for f in diagnose(healthy(**falling)).findings if f.id == "truncation_high")
    assert finding.severity == "info" and "down from" in finding.evidence and "the reward rose" in finding.evidence
    assert changes(diagnose(healthy(**falling)), "truncation_high")["max_completion_length"]["direction"] == "increase"
    flat = healthy(reward=0.3 + np.random.default_rng(3).normal(0, 0.005, N), **falling)  # fewer cut off, no gain
    assert next(f for f in diagnose(flat).findings if f.id == "truncation_high").severity == "warning"


def prompt_noise_run(kl_level, n=40, seed=5):
    """A run whose reward and entropy move only with the prompts drawn (2 per step, from problems of different
    difficulty), with the KL to the reference at ``kl_level``: a learning rate so low that nothing moves."""
    g = np.random.default_rng(seed)
    difficulty = g.uniform(0.0, 0.35, 12)  # each problem's reward level; entropy higher on the harder ones
    drawn = g.integers(0, 12, (n, 2))
    reward = difficulty[drawn].mean(axis=1) + g.normal(0, 0.02, n)
    entropy = 0.3 - 0.5 * difficulty[drawn].mean(axis=1) + g.normal(0, 0.04, n)
    cols = {"reward": reward, "entropy": entropy, "kl": np.full(n, kl_level) * g.uniform(0.2, 1.0, n)}
    return RunHistory(f"noise-kl{kl_level}", records(cols, n=n), config=dict(CONFIG), algo="grpo")


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_a_policy_that_never_left_the_reference_is_not_told_to_lower_the_learning_rate(seed):
    still = diagnose(prompt_noise_run(5e-5, seed=seed))
    assert not {"reward_dip", "reward_collapse", "entropy_unstable"} & set(still.ids()), still.ids()
    assert "decrease" not in {c["direction"] for c in still.changes() if c["param"] == "learning_rate"}
    short = diagnose(prompt_noise_run(5e-5, n=10, seed=seed))  # a short log of the same kind
    assert "decrease" not in {c["direction"] for c in short.changes() if c["param"] == "learning_rate"}
    moved = diagnose(prompt_noise_run(0.05, seed=seed))  # same curves, a policy that moved: the entropy's
    assert "entropy_unstable" not in moved.ids()  # volatility is as large at the start: sampling noise


def test_the_student_t_tail_matches_scipy_without_importing_it():
    """The evidence tests use Student's t on the run's noise; sweeprl computes its tail itself (scipy is a test
    dependency only, and importing scipy.stats costs a second in every trial)."""
    from scipy.stats import t

    from sweeprl.analysis.rules.base import one_sided_p

    for df in (1, 2, 3, 5, 8, 12, 30, 100, 199):
        for z in (-3.0, -0.1, 0.0, 0.5, 1.645, 2.7, 8.0, 55.0):
            assert one_sided_p(z, df) == pytest.approx(float(t.sf(z, df)), rel=1e-9, abs=1e-300)
    assert one_sided_p(1.645) == pytest.approx(0.05, abs=1e-4)  # no df: the normal tail


def test_a_rise_of_half_the_flat_gain_beyond_the_noise_is_learning_not_a_flat_reward():
    """A 0-1 reward 0.10 -> 0.17 over 11 logged points (a hard task, every 40th step of a verl export): under the
    flat gain of its scale, but far beyond its step-to-step noise, so the run learns. The same rise under a swing
    of +-0.08 from step to step is still flat."""
    steady = [0.103, 0.109, 0.137, 0.188, 0.131, 0.211, 0.156, 0.177, 0.177, 0.160, 0.180]
    assert "reward_flat" not in diagnose(RunHistory("steady", records({"reward": np.array(steady)}, n=11))).ids()
    noisy = np.linspace(0.10, 0.17, 11) + 0.08 * np.array([1, -1] * 5 + [1])
    assert "reward_flat" in diagnose(RunHistory("noisy", records({"reward": noisy}, n=11))).ids()


def test_a_tiny_approx_kl_is_no_evidence_of_small_updates_when_the_entropy_moved():
    """verl's actor/ppo_kl compares the policy with itself one update earlier: ~0 for a single on-policy update
    per batch, whatever the learning rate. An entropy that fell 0.8 -> 0.35 meanwhile says the updates changed the
    policy, so neither updates_too_small nor reward_flat raises the learning rate; the same log with the entropy
    steady does."""
    g = np.random.default_rng(4)
    reward = 0.3 + g.normal(0, 0.01, N)
    tiny = {"policy/approxkl_avg": np.full(N, 1e-5), "clip_ratio/region_mean": np.zeros(N)}
    falling = 0.35 + 0.6 * np.exp(-T / 8)
    moved = diagnose(RunHistory("moved", records({"reward": reward, "entropy": falling, **tiny})))
    assert "updates_too_small" not in moved.ids()
    assert "increase" not in {c["direction"] for c in moved.changes() if c["param"] == "learning_rate"}
    still = diagnose(RunHistory("still", records({"reward": reward, "entropy": np.full(N, 0.8), **tiny})))
    assert {c["direction"] for c in still.changes() if c["param"] == "learning_rate"} == {"increase"}


def test_a_kl_runaway_without_a_kl_penalty_asks_for_one_not_for_a_lower_learning_rate(tmp_path):
    """A PPO sweep CSV (its ``method`` column names PPO on every row, which outweighs the bare ``kl`` column PPO
    logs too) with a run at beta 0 whose KL climbs to ~90 nats: the cause is the missing penalty. A run at beta
    0.2 whose KL climbs as far is told to lower the learning rate as well."""
    path = tmp_path / "sweep.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["method", "beta", "seed", "step", "kl", "proxy"])
        for beta in (0.0, 0.2):
            for i in range(15):
                w.writerow(["PPO", beta, 0, 5 * i, min(95.0, 0.2 + 7.0 * i), 3 + 0.3 * i])
    runs = load_runs(str(path))
    assert len(runs) == 2 and {run_algo(r) for r in runs} == {"ppo"}
    free, held = (next(diagnose(r) for r in runs if r.records[0]["kl_coef"] == b) for b in (0.0, 0.2))
    nopen = changes(free, "kl_above_target")
    assert "KL coefficient 0" in next(f for f in free.findings if f.id == "kl_above_target").evidence
    assert set(nopen) == {"beta"} and nopen["beta"]["direction"] == "increase" and nopen["beta"]["override"] is None
    assert changes(held, "kl_above_target")["learning_rate"]["direction"] == "decrease"


def test_gradient_norm_spikes_of_a_preference_run_are_judged_by_its_margin():
    """TRL logs the gradient norm before clipping: isolated spikes to 1e5 that leave the margin rising are
    information; the same spikes followed by a margin that falls away are a warning with a lower learning rate."""
    gn = spiked(spiked(spiked(np.full(N, 4.0), 20, 1e5), 35, 3e4), 48, 6e4)
    held = diagnose(dpo(grad_norm=gn))
    assert next(f for f in held.findings if f.id == "grad_norm_spike").severity == "info"
    g = np.random.default_rng(12)
    margin = np.where(T < 21, T / 20, 0.1) + g.normal(0, 0.05, N)
    harmed = diagnose(dpo(grad_norm=gn, **{"rewards/margins": margin}))
    assert next(f for f in harmed.findings if f.id == "grad_norm_spike").severity != "info"


def test_a_preference_run_with_no_gradient_learns_nothing_wherever_its_loss_sits():
    """A reference that differs from the starting policy puts the loss at 0.61, not ln 2; a gradient norm of 0 at
    every step still means the policy never changes (the values only repeat)."""
    g = np.random.default_rng(13)
    run = dpo(
        loss=0.61 + g.normal(0, 0.004, N),
        grad_norm=np.zeros(N),
        **{"rewards/margins": 0.18 + g.normal(0, 0.02, N), "rewards/accuracies": np.ones(N)},
    )
    f = next(f for f in diagnose(run).findings if f.id == "preference_no_learning")
    assert f.severity == "critical" and "gradient norm 0 at every step" in f.evidence
    assert "preference_no_learning" not in diagnose(dpo(grad_norm=np.zeros(N))).ids()  # it learns: loss falls


def test_a_policy_that_left_its_reference_is_not_told_its_updates_are_too_small():
    """verl's approx-KL (consecutive policies) reads 0 while the KL to the reference climbs 0.0004 -> 0.065: the
    updates moved the policy, so a flat reward gets no 'raise the learning rate'."""
    g = np.random.default_rng(14)
    cols = {
        "reward": 0.4 + g.normal(0, 0.05, N),
        "policy/approxkl_avg": np.zeros(N),
        "clip_ratio/region_mean": np.zeros(N),
        "entropy": 0.56 - 0.1 * T / N,
    }
    left = diagnose(RunHistory("left", records({**cols, "kl": 0.0004 + 0.065 * T / N})))
    assert "updates_too_small" not in left.ids()
    assert "increase" not in {c["direction"] for c in left.changes() if c["param"] == "learning_rate"}
    stayed = diagnose(RunHistory("stayed", records({**cols, "kl": np.full(N, 1e-5)})))
    assert {c["direction"] for c in stayed.changes() if c["param"] == "learning_rate"} == {"increase"}
