"""An Optuna pruner for curves that rise and fall: decisions at a few rungs, on what a trial is *now*.

Optuna's median and percentile pruners compare a trial's best value so far with the others at the same step: a
run that peaks early and then collapses is protected by its early best, and a slow starter is cut. Successive
halving compares the last value, but from one step on (``min_resource="auto"``) and without any allowance for
how noisy that value is. :class:`RungPruner` judges a trial only at a few rungs, given as fractions of the
trial's length; at a rung it compares the trial's latest reported value with the values the other trials
reported at that rung, and keeps it when it is within the top ``1/eta`` of them, allowing ``margin`` times the
value's own noise (its step-to-step spread over the last reports) so that a curve that is still climbing is not
cut for one bad report. It works in any Optuna study that reports intermediate values; it needs no sweeprl.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Union

import optuna
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

#: the trial user attribute that tells the pruner a trial's length (sweeprl's trials set it to algo.max_steps)
MAX_RESOURCE_ATTR = "max_steps"


class RungPruner(BasePruner):
    """Keep the top ``1/eta`` of the trials at each rung, scored by their latest value with a noise margin.

    Args:
        rungs: the fractions of a trial's length at which it is judged (its first report at or after each).
        eta: keep a trial when its value is above the ``1 - 1/eta`` quantile of the others at the rung; one number
            for every rung, or one per rung (e.g. keep the top half at the early rungs, the top third later).
        margin: the allowance, in units of the trial's own noise (the spread of its last ``window`` reported values
            around their trend), added to its value before the comparison.
        window: how many of the trial's latest reports estimate that noise.
        min_trials: judge only when at least this many other trials reported at the rung.
        max_resource: a trial's length in steps, or ``"auto"``: the trial's ``max_steps`` user attribute, else the
            longest completed trial's last step (no pruning until one completed).
    """

    def __init__(
        self,
        rungs: Sequence[float] = (0.125, 0.25, 0.5),
        eta: Union[float, Sequence[float]] = (2.0, 2.0, 3.0),
        margin: float = 0.0,
        window: int = 4,
        min_trials: int = 3,
        max_resource: Union[int, str] = "auto",
    ) -> None:
        rungs = [float(r) for r in rungs]
        if not rungs or not all(0.0 < r < 1.0 for r in rungs):
            raise ValueError(f"rungs must be fractions in (0, 1), got {list(rungs)}")
        etas = (
            [float(e) for e in eta]
            if isinstance(eta, Sequence) and not isinstance(eta, str)
            else [float(eta)] * len(rungs)
        )
        if len(etas) != len(rungs) or not all(e > 1.0 for e in etas):
            raise ValueError(
                f"eta must be > 1 (keep the top 1/eta): one number, or one per rung ({len(rungs)}), got {eta!r}"
            )
        if margin < 0 or window < 2 or min_trials < 1:
            raise ValueError("margin must be >= 0, window >= 2 and min_trials >= 1")
        if max_resource != "auto" and (not isinstance(max_resource, int) or max_resource < 1):
            raise ValueError(f"max_resource must be a positive int or 'auto', got {max_resource!r}")
        rungs, etas = map(list, zip(*sorted(zip(rungs, etas))))
        self.rungs, self.etas, self.margin = rungs, etas, float(margin)
        self.last_reason = ""  # why the last trial this pruner stopped was stopped (for the trial's log)
        self.window, self.min_trials, self.max_resource = int(window), int(min_trials), max_resource

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        length = self._length(study, trial)
        if step is None or length is None:
            return False
        reached = [math.ceil(r * length) for r in self.rungs if math.ceil(r * length) <= step]
        if not reached:
            return False
        rung, eta = reached[-1], self.etas[len(reached) - 1]
        if _report_at(trial.intermediate_values, rung) != step:
            return False  # judged once per rung: at the first report at or after it
        peers = [
            v
            for t in study.get_trials(
                deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
            )
            if t.number != trial.number
            and (s := _report_at(t.intermediate_values, rung)) is not None
            and math.isfinite(v := t.intermediate_values[s])
        ]
        if len(peers) < self.min_trials:
            return False
        value = trial.intermediate_values[step]
        if not math.isfinite(value):
            return True
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        ranked = sorted(sign * v for v in peers)
        cut = _quantile(ranked, 1.0 - 1.0 / eta)
        allowance = self.margin * noise(trial.intermediate_values, step, self.window)
        if sign * value + allowance >= cut:
            return False
        fraction = next(r for r in reversed(self.rungs) if math.ceil(r * length) == rung)
        self.last_reason = (
            f"at update {step} (the {fraction:g} rung of {length}) its value {value:.4g}"
            + (f" (+{allowance:.3g} for its noise)" if allowance else "")
            + f" is worse than the cut {sign * cut:.4g}, the top 1/{eta:g} of the {len(peers)} other trials there"
        )
        return True

    def _length(self, study: optuna.Study, trial: FrozenTrial) -> Optional[int]:
        if self.max_resource != "auto":
            return int(self.max_resource)
        own = trial.user_attrs.get(MAX_RESOURCE_ATTR)
        if isinstance(own, (int, float)) and own > 0:
            return int(own)
        done = [t.last_step for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        done = [s for s in done if s is not None]
        return max(done) if done else None


def _report_at(values: Dict[int, float], rung: int) -> Optional[int]:
    """The first reported step at or after ``rung`` (None when the trial has not reached it)."""
    after = [s for s in values if s >= rung]
    return min(after) if after else None


def _quantile(ranked: List[float], q: float) -> float:
    """Linear-interpolation quantile of an ascending list."""
    pos = q * (len(ranked) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(ranked) - 1)
    return ranked[lo] + (pos - lo) * (ranked[hi] - ranked[lo])


def noise(values: Dict[int, float], step: int, window: int) -> float:
    """The spread of the last ``window`` reports up to ``step`` around their straight-line trend (the residual
    standard deviation; 0 with fewer than 3 reports): how much one report of this trial moves by chance."""
    steps = sorted(s for s in values if s <= step and math.isfinite(values[s]))[-window:]
    if len(steps) < 3:
        return 0.0
    xs, ys = steps, [values[s] for s in steps]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys)]
    return math.sqrt(sum(r * r for r in resid) / (len(resid) - 2)) if len(resid) > 2 else 0.0
