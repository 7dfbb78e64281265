"""RungPruner: its decisions on hand-made studies, and on the curve bank replayed as bench/pruner_replay.py does it
(seconds, no training)."""

from __future__ import annotations

import sys

import numpy as np
import optuna
import pytest

from conftest import REPO
from hydra_plugins.sweeprl_sweeper.rung_pruner import RungPruner

sys.path.insert(0, str(REPO / "bench"))
import pruner_ceiling  # noqa: E402
import pruner_replay  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


def run_trial(study, curve, length=100):
    """Report ``curve`` (step -> value) until the pruner stops the trial; the step it stopped at, else None."""
    trial = study.ask()
    trial.set_user_attr("max_steps", length)
    for step, value in curve.items():
        trial.report(value, step)
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return step
    study.tell(trial, list(curve.values())[-1])
    return None


def test_a_trial_is_judged_at_its_rungs_on_its_latest_value_not_its_best():
    study = optuna.create_study(direction="maximize", pruner=RungPruner(rungs=[0.2, 0.5], eta=2, min_trials=3))
    steps = range(10, 101, 10)
    for level in (0.3, 0.4, 0.5, 0.6):  # four steady trials
        assert run_trial(study, {s: level for s in steps}) is None
    peaked = {s: 0.9 if s <= 30 else 0.1 for s in steps}  # best at the first rung, falling by the second
    assert run_trial(study, peaked) == 50  # kept at 20 (0.9), stopped at 50: its value now, not its best
    slow = {s: 0.2 if s < 50 else 0.8 for s in steps}
    assert run_trial(study, slow) == 20  # a slow starter below the top half at the first rung is stopped there
    pruner = study.pruner
    assert (
        "at update 20 (the 0.2 rung of 100)" in pruner.last_reason
        and "top 1/2 of the 5 other trials" in pruner.last_reason
    )


def test_each_rung_keeps_its_own_share():
    # rungs given out of order are paired with their eta: keep the top half at 0.2, the top quarter at 0.5
    study = optuna.create_study(direction="maximize", pruner=RungPruner(rungs=[0.5, 0.2], eta=[4, 2], min_trials=3))
    steps = range(10, 101, 10)
    for level in (0.1, 0.2, 0.3, 0.4, 0.5):
        assert run_trial(study, {s: level for s in steps}) is None
    assert run_trial(study, {s: 0.38 for s in steps}) == 50  # in the top half at 20, not in the top quarter at 50
    assert "the top 1/4 of the 5 other trials" in study.pruner.last_reason
    assert run_trial(study, {s: 0.25 for s in steps}) == 20  # below the top half at 20
    assert "the top 1/2 of the 6 other trials" in study.pruner.last_reason


def test_minimize_min_trials_and_the_length_from_completed_trials():
    study = optuna.create_study(direction="minimize", pruner=RungPruner(rungs=[0.5], eta=2, min_trials=2))
    curve = {s: 1.0 for s in range(10, 101, 10)}
    study.optimize(lambda t: 0.0, n_trials=0)
    first = study.ask()  # no max_steps attribute and no completed trial: no length, no decision
    first.report(5.0, 50)
    assert not first.should_prune()
    study.tell(first, 5.0)
    assert run_trial(study, curve) is None  # one peer only: below min_trials
    assert run_trial(study, {s: 9.0 for s in curve}) == 50  # worse (higher) than the better half of 2 peers


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rungs": [0.0]},
        {"rungs": [1.5]},
        {"rungs": []},
        {"eta": 1.0},
        {"eta": [2.0]},  # one per rung, and there are two
        {"eta": [2.0, 1.0]},
        {"window": 1},
        {"max_resource": 0},
    ],
)
def test_bad_arguments_say_what_is_allowed(kwargs):
    with pytest.raises(ValueError):
        RungPruner(**kwargs)


def test_the_pruner_on_the_curve_bank():
    """Replays of the 24 banked quickstart sweeps in 20 random orders each: the figures measured with 1000 orders
    per half (BENCHMARKS.md rows pruner_replay_*) within a margin for the smaller sample."""
    sweeps = pruner_replay.load_bank()
    assert len(sweeps) == 24 and len(pruner_replay.load_bank(half="held-out")) == 18
    rng = np.random.default_rng(0)
    orders = [(trials, rng.permutation(len(trials))) for trials in sweeps for _ in range(20)]

    def replays(factory, first=10):
        return [pruner_replay.replay(trials, order, factory, first) for trials, order in orders]

    def mean(got):
        return [float(np.mean([g[k] for g in got])) for k in ("saved", "best_kept", "regret")]

    default = replays(RungPruner)
    four = ((0.125, 0.25, 0.375, 0.5), (2.5, 1.5, 2.0, 2.5))
    # bench/pruner_ceiling.py's fast rule decides as the real pruner does, order by order
    for (rungs, eta), real in (
        (((0.125, 0.25, 0.5), (2.0, 2.0, 3.0)), default),
        (four, replays(lambda: RungPruner(*four))),
    ):
        fast = [pruner_ceiling.replay(trials, order, rungs, eta) for trials, order in orders]
        assert [g["best_kept"] for g in real] == [g["best_kept"] for g in fast]
        assert [g["saved"] for g in real] == pytest.approx([g["saved"] for g in fast])
    saved, kept, regret = mean(default)
    assert 0.46 <= saved <= 0.56, saved
    assert kept >= 0.84 and regret <= 0.015, (kept, regret)
    earlier = mean(replays(lambda: RungPruner(rungs=(0.2, 0.5), eta=3.0)))  # the two-rung setting it replaced
    assert earlier[0] < saved - 0.03 and earlier[1] >= kept
    median = mean(replays(optuna.pruners.MedianPruner, 20))
    assert median[0] < saved - 0.1  # what Optuna's default gives up


def test_the_pruning_summary_counts_the_updates_an_unpruned_sweep_would_have_run():
    from sweeprl.study import pruning_summary

    study = optuna.create_study(direction="maximize")
    assert pruning_summary(study) is None
    for steps, state in ((80, "COMPLETE"), (80, "COMPLETE"), (20, "PRUNED"), (40, "PRUNED")):
        trial = study.ask()
        trial.set_user_attr("steps", steps)
        if state == "COMPLETE":
            study.tell(trial, 0.5)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    text = pruning_summary(study)  # 80 + 80 + 20 + 40 of 4 x 80 updates run
    assert text == "pruning stopped 2 of 4 trials (at update 20, 40): 31% of the updates of an unpruned sweep saved"
