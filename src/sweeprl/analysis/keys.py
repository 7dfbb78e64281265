"""The metric vocabulary: which logged keys hold which quantity, for every algorithm sweeprl reads.

TRL's GRPO/RLOO names come first, then the classic PPO names (sweeprl's own PPO logs those). Histories from
other tools are mapped onto these names by :mod:`sweeprl.analysis.history` (``ALIASES``).
"""

from __future__ import annotations

import math
from typing import Any, List, Mapping, Sequence

REWARD = ("reward", "objective/scores")
REWARD_STD = ("reward_std",)
BEST_OF_N = ("reward_best_of_n",)
KL = ("kl", "objective/kl")
ENTROPY = ("entropy", "objective/entropy")
LOSS = ("loss", "loss/policy_avg")
VALUE_LOSS = ("loss/value_avg",)
GRAD_NORM = ("grad_norm",)
ZERO_STD = ("frac_reward_zero_std",)
CLIP_FRACTION = ("policy/clipfrac_avg", "clip_ratio/region_mean")
APPROX_KL = ("policy/approxkl_avg",)
EXPLAINED_VARIANCE = ("val/explained_var",)
COMPLETION_LENGTH = ("completions/mean_length",)
TRUNCATED = ("completions/clipped_ratio",)
#: a NaN/inf in any of these makes a logged step non-finite
FINITE_WATCH = (*REWARD, *LOSS, *KL, *ENTROPY, *GRAD_NORM, *VALUE_LOSS)


def non_finite_steps(history: Sequence[Mapping[str, Any]]) -> List[int]:
    """Steps (the record's ``step``, else its position from 1) with a NaN/inf in a watched metric."""
    out = []
    for i, rec in enumerate(history):
        for k in FINITE_WATCH:
            v = rec.get(k)
            if v is None:
                continue
            try:
                bad = not math.isfinite(float(v))
            except (TypeError, ValueError):
                bad = False
            if bad:
                out.append(int(rec.get("step", i + 1)))
                break
    return out
