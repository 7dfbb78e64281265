"""The diagnosis rules: one function per finding id, each reading a :class:`View` of the run.

Every rule works in steps (:mod:`sweeprl.analysis.curves`) and degrades to what a person can read off a short
history: windows never hold fewer than 2 points, trend tests (Mann-Kendall) are used from
``Thresholds.min_points_trend`` points on and replaced by plain comparisons below that, and spike rules that
need a baseline say so instead of guessing. A finding carries a confidence (0.5 … 0.99, how far past its
threshold the evidence is, lower on short histories) and an onset step, so conflicting advice can be
resolved by confidence (:mod:`sweeprl.analysis.diagnosis`).
"""

from __future__ import annotations

from typing import Callable, Optional

from sweeprl.analysis.rules.base import SHORT, Finding, Thresholds, View
from sweeprl.analysis.rules.groups import (
    f_best_of_n_gap,
    f_mode_collapse,
    f_reward_cv_high,
    f_reward_variance_died,
    f_reward_variance_rising,
)
from sweeprl.analysis.rules.length import f_length_hacking, f_truncation_high
from sweeprl.analysis.rules.optimization import (
    f_explained_variance_negative,
    f_grad_norm_spike,
    f_loss_flat,
    f_loss_oscillation,
    f_loss_spike,
    f_non_finite,
    f_value_loss_spike,
)
from sweeprl.analysis.rules.policy import (
    f_clip_fraction_high,
    f_entropy_collapse,
    f_entropy_rising,
    f_entropy_unstable,
    f_kl_above_target,
    f_kl_negative,
    f_updates_too_small,
)
from sweeprl.analysis.rules.preference import f_preference_no_learning, f_preference_overfit
from sweeprl.analysis.rules.reward import (
    f_reward_below_target,
    f_reward_collapse,
    f_reward_dip,
    f_reward_flat,
    f_reward_frozen,
    f_short_history,
    f_task_reward_flat,
)

__all__ = ["FINDING_IDS", "RULES", "SHORT", "Finding", "Thresholds", "View"]

RULES: tuple[Callable[[View], Optional[Finding]], ...] = (
    f_non_finite,
    f_loss_spike,
    f_loss_oscillation,
    f_grad_norm_spike,
    f_value_loss_spike,
    f_explained_variance_negative,
    f_reward_collapse,
    f_reward_dip,
    f_reward_flat,
    f_task_reward_flat,
    f_reward_below_target,
    f_reward_variance_rising,
    f_reward_cv_high,
    f_reward_variance_died,
    f_reward_frozen,
    f_best_of_n_gap,
    f_mode_collapse,
    f_entropy_collapse,
    f_entropy_rising,
    f_entropy_unstable,
    f_kl_negative,
    f_kl_above_target,
    f_clip_fraction_high,
    f_updates_too_small,
    f_length_hacking,
    f_truncation_high,
    f_preference_overfit,
    f_preference_no_learning,
    f_loss_flat,
    f_short_history,
)
FINDING_IDS = tuple(fn.__name__[2:] for fn in RULES)
