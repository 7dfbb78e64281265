"""Rules on completion length: reward earned through length, completions that drift longer for nothing, and
completions cut off at the length limit."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.rules.base import Finding, View, flat_shape, level_test, policy_moved, pval
from sweeprl.formatting import num

#: correlation of the step-to-step changes of reward and completion length above which the reward pays for length
LENGTH_PAID = 0.2


def f_length_hacking(v: View) -> Optional[Finding]:
    """The reward is earned through length (reward and length move together), or the completions grow to twice
    their length or more while the reward stays flat (a policy drifting to longer text for nothing)."""
    lc = v.c(keys.COMPLETION_LENGTH)
    if lc.n < 6:
        return None
    early, late = lc.early(v.th.window).mean(), lc.late(v.th.window).mean()
    rel = float(late / max(early, 1e-9) - 1)
    pairs = [(r.get("reward", r.get("objective/scores")), r.get("completions/mean_length")) for r in v.records]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    corr = steps_corr = 0.0
    if len(pairs) >= 6:
        r, length = np.array(pairs).T
        if r.std() > 1e-9 and length.std() > 1e-9:
            corr = float(np.corrcoef(r, length)[0, 1])
        dr, dl = np.diff(r), np.diff(length)
        if dr.std() > 1e-9 and dl.std() > 1e-9:
            steps_corr = float(np.corrcoef(dr, dl)[0, 1])
    drift = rel >= 1.0 and v.reward.n >= 5 and flat_shape(v) is not None
    if (abs(corr) < v.th.length_corr or abs(rel) < v.th.length_change) and not drift:
        return None
    # a reward paid for length rises on the steps whose completions ran longer; a policy that learns to reason at
    # greater length shows both rising over the run, with no such step-to-step link
    if corr > 0 and not drift and steps_corr < LENGTH_PAID:
        v.weak.append(
            f"length_hacking: reward and completion length rose together (correlation {corr:+.2f}, length "
            f"{num(early, 3)} -> {num(late, 3)}), but their step-to-step changes do not move together "
            f"({steps_corr:+.2f}): both follow the training, the reward does not pay for length"
        )
        return None
    evidence = f"mean completion length {num(early, 3)} -> {num(late, 3)} ({rel:+.0%})"
    return Finding(
        "length_hacking",
        "warning",
        (f"reward–length correlation {corr:+.2f}; " + evidence)
        if not drift
        else evidence + " while the reward stayed flat",
        [],
        (
            "the reward is being earned through completion length rather than content"
            if corr > 0
            else "completions grow longer as the reward falls: runaway text that the reward pays less for"
        )
        if not drift
        else "the policy drifts to longer completions that earn nothing more: a length the reward does not check",
        v.rec(
            "Cap the completion length (or add a length term to the reward).",
            v.change("max_completion_length", "decrease" if rel > 0 else "increase", 0.5 if rel > 0 else 2.0),
        ),
        confidence=v.confidence(abs(corr), v.th.length_corr, 0.65) if not drift else v.confidence(rel, 1.0, 0.65),
    )


def f_truncation_high(v: View) -> Optional[Finding]:
    tr = v.c(keys.TRUNCATED)
    if tr.n < 3:
        return None
    late = tr.late(v.th.window).mean()
    if late < v.th.truncation:
        return None
    first, moved = float(tr.values[0]), policy_moved(v)
    if moved and late - first >= v.th.truncation:  # runaway text of a degenerating policy, not a short budget
        return Finding(
            "truncation_high",
            "warning",
            f"{late:.0%} of completions hit the maximum length in the late window ({first:.0%} at step "
            f"{int(tr.steps[0])}, before the updates), while the policy moved ({moved})",
            [],
            "completions began running to the limit as the policy changed: a symptom of that change, not a length "
            "budget that is too small",
            v.rec(
                "Keep the length: settle the policy first (the entropy findings); longer completions would only "
                "lengthen the runaway text."
            ),
            confidence=v.confidence(late, v.th.truncation, 0.6),
        )
    learning_to_finish = _learning_to_finish(v)
    return Finding(
        "truncation_high",
        "info" if learning_to_finish else "warning",
        f"{late:.0%} of completions hit the maximum length in the late window"
        + (f"; {learning_to_finish}" if learning_to_finish else ""),
        [],
        "the policy is learning to finish within the limit and the reward rises as it does: the limit slows the "
        "run, it does not stop it"
        if learning_to_finish
        else "completions are cut off before they finish, so their reward is noise (and runaway penalties dominate)",
        v.rec("Allow longer completions.", v.change("max_completion_length", "increase", 2.0)),
        confidence=v.confidence(late, v.th.truncation, 0.6),
    )


def _learning_to_finish(v: View) -> Optional[str]:
    """Evidence, as text, that fewer completions hit the limit as the reward rises (both beyond their noise):
    the policy learns to answer within the budget, as a sparse task's first learning often looks."""
    tr, r = v.c(keys.TRUNCATED), v.reward
    if tr.n < 6 or r.n < 6:
        return None
    _, p_fell = level_test(tr, tr.early(v.th.window), tr.late(v.th.window))
    _, p_rose = level_test(r, r.late(v.th.window), r.early(v.th.window))
    if p_fell >= 0.05 or p_rose >= 0.05:
        return None
    return (
        f"down from {tr.early(v.th.window).mean():.0%} while the reward rose {num(r.early(v.th.window).mean(), 3)}"
        f" -> {num(r.late(v.th.window).mean(), 3)} ({pval(max(p_fell, p_rose))})"
    )
