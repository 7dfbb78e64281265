"""The failure budget (``_scheduling.Budget``) on sequences of outcomes, without a sweep: a rate of the trials
attempted (counted as at least n_trials), and the stop of a run that only fails."""

from __future__ import annotations

import pytest

from hydra_plugins.sweeprl_sweeper._scheduling import Budget, SweepAborted
from hydra_plugins.sweeprl_sweeper.outcomes import COMPLETE, FAIL, Outcome


def record(budget: Budget, states: str) -> None:
    for s in states:
        budget.record(Outcome(FAIL if s == "F" else COMPLETE, values=None if s == "F" else [1.0]))


@pytest.mark.parametrize(
    "rate, n_trials, states",
    [
        (0.25, 8, "FF"),  # 2 failures <= 0.25 x 8: the first failures do not end a sweep
        (0.5, 4, "CFCFCFCF"),  # half of the attempts, never more
        (0.9, 8, "FCFFCFCCFFCFCFCF"),  # 9 of 16 attempts, 56 % < 90 %
        (1.0, 1, "FF"),  # a 1-trial sweep's failures are replaced too
    ],
)
def test_within_the_budget(rate, n_trials, states):
    budget = Budget(n_trials, rate, "run", 1)
    record(budget, states)
    assert not budget.stopped


@pytest.mark.parametrize(
    "rate, n_trials, states, message",
    [
        (0.0, 8, "CF", "1 of 2 trials failed this run, more than max_failure_rate=0.0"),
        (0.25, 8, "FFF", "3 of 3 trials failed this run, more than max_failure_rate=0.25"),
        (0.5, 8, "CFFCFFCF", "5 of 8 trials failed this run"),  # 62 % of the attempts
        (0.9, 4, "CCCCCCCCCCFFFF", "the last 4 trials of this run all failed (n_trials=4)"),  # 29 % but all recent
    ],
)
def test_beyond_the_budget(rate, n_trials, states, message):
    budget = Budget(n_trials, rate, "run", 1)
    with pytest.raises(SweepAborted, match=message.replace("(", r"\(").replace(")", r"\)")):
        record(budget, states)


def test_at_1_0_a_run_that_only_fails_stops_without_aborting():
    budget = Budget(2, 1.0, "run", 1)
    record(budget, "CFF")
    assert not budget.stopped  # 2 in a row, but fewer than the 3 that always mean a broken run
    record(budget, "F")
    assert budget.stopped and budget.capacity(None) == 0  # no new trial is asked
