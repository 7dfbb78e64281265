"""Rules on the reward: its shape (collapse, flat, target), its noise and spread, groups, length."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.curves import max_drawdown
from sweeprl.analysis.rules.base import (
    SHORT,
    Finding,
    View,
    first_sustained,
    flat_shape,
    policy_moved,
    policy_still,
    shape,
    trend_test,
)
from sweeprl.formatting import num


def _fell_from_the_start(v: View, s: dict) -> Optional[Finding]:
    """The reward never rose and ended far below where the untrained policy started: the first updates took
    away what the model could already do."""
    fall = s["start"] - s["late"]
    if fall < v.th.flat_gain * s["scale"] or fall < v.th.collapse_drop * abs(s["start"]):
        return None
    r = v.reward
    onset = first_sustained(r.values < s["start"] - 0.5 * fall, min(3, r.n))
    return Finding(
        "reward_collapse",
        "critical",
        f"reward fell from {num(s['start'], 3)} in the first stretch to {num(s['late'], 3)} without rising first "
        f"({fall / max(abs(s['start']), 1e-12):.0%} of where it started)",
        [],
        "the first updates were far too large: they took away what the model could do before it learned anything",
        v.rec(
            "Lower the learning rate 10x (not a little: the run never had a good stretch) and raise the KL "
            "coefficient to hold the policy near the reference.",
            v.change("learning_rate", "decrease", 0.1),
            v.change("kl_coef", "increase", 2.0),
        ),
        confidence=v.confidence(fall / max(abs(s["start"]), 1e-12), v.th.collapse_drop, 0.75),
        onset=int(r.steps[onset]) if onset is not None else None,
    )


def f_reward_collapse(v: View) -> Optional[Finding]:
    r = v.reward
    if r.n < 5 or policy_still(v):  # no update moved the policy: the fall is the prompts', not a collapse
        return None
    s = shape(v)
    gain, drop = s["gain"], s["peak"] - s["late"]
    if gain < v.th.flat_gain * s["scale"]:
        return _fell_from_the_start(v, s)
    if s["peak_index"] >= s["blocks"] - 1 or drop < v.th.collapse_drop * gain:
        return None
    after = r.at_or_after(s["peak_step"])
    z, p = trend_test(v, after)
    if z is not None and not (z < 0 and p < 0.05) and drop < 0.6 * gain:
        return None  # no significant decline after the peak, and not a large fall either
    trend = f"; Mann-Kendall after the peak z={z:.1f}, p={p:.2g}" if z is not None else ""
    return Finding(
        "reward_collapse",
        "critical",
        f"reward rose from {num(s['start'], 3)} to {num(s['peak'], 3)} by step {int(s['peak_step'])}, then fell to "
        f"{num(s['late'], 3)} ({drop / gain:.0%} of what it had gained){trend}",
        [int(s["peak_step"])],
        "the policy learned, then updates too large for the reached state (or too little KL pull toward the "
        "reference) undid it",
        v.rec(
            "Lower the learning rate and hold the policy closer to the reference (raise the KL coefficient); keep "
            "the checkpoint from the peak.",
            v.change("learning_rate", "decrease", 0.3),
            v.change("kl_coef", "increase", 2.0),
        ),
        confidence=v.confidence(drop / gain, v.th.collapse_drop, 0.75),
        onset=int(s["peak_step"]),
    )


def f_reward_dip(v: View) -> Optional[Finding]:
    """The reward fell far below its best mid-run and came back: it did not end collapsed, but the policy went
    through a collapse on the way (what a lower learning rate avoids)."""
    r = v.reward
    if r.n < 8 or policy_still(v) or f_reward_collapse(v) is not None:
        return None
    s = shape(v)
    blocks = r.blocks(10)
    fall, peak_step, trough_step = max_drawdown(blocks)
    gain = float(blocks.values[: int(np.searchsorted(blocks.steps, peak_step)) + 1].max() - s["start"])
    if gain < v.th.flat_gain * s["scale"] or fall < v.th.collapse_drop * gain:
        return None
    trough = float(blocks.values[int(np.searchsorted(blocks.steps, trough_step))])
    return Finding(
        "reward_dip",
        "warning",
        f"reward fell from {num(trough + fall, 3)} (around step {int(peak_step)}) to {num(trough, 3)} (around step "
        f"{int(trough_step)}), {fall / gain:.0%} of what it had gained, then came back to {num(s['late'], 3)}",
        [int(peak_step), int(trough_step)],
        "an update too large for the state the policy had reached threw it back; it relearned, but the run paid the "
        "steps and could as well have ended at the bottom",
        v.rec(
            "Lower the learning rate (or raise the KL coefficient to hold the policy near what it had learned).",
            v.change("learning_rate", "decrease", 0.5),
            v.change("kl_coef", "increase", 1.5),
        ),
        confidence=v.confidence(fall / gain, v.th.collapse_drop, 0.65),
        onset=int(peak_step),
    )


def f_reward_flat(v: View) -> Optional[Finding]:
    if v.reward.n < 5:
        return None
    s = flat_shape(v)
    if s is None:
        return None
    zero_std = v.c(keys.ZERO_STD)
    hot = zero_std.n and zero_std.late(v.th.window).mean() >= v.th.mode_collapse
    evidence = (
        f"reward {num(s['start'], 3)} in the first stretch, {num(s['late'], 3)} at the end ({v.reward.n} logged steps)"
    )
    moved = policy_moved(v)
    if moved:  # the updates were not too small: the policy changed and the reward did not follow
        return Finding(
            "reward_flat",
            "warning",
            f"{evidence}, while the policy moved ({moved})",
            [],
            "the updates changed the policy but not toward more reward: they are too large for the signal (see the "
            "entropy findings), or the reward gives the same score to every sample",
            v.rec(
                "Do not raise the learning rate: settle what moved the policy first"
                + ("; samples score alike, so raise the temperature." if hot else "."),
                v.change("temperature", "increase", 1.15) if hot else None,
            ),
            confidence=0.6 if v.short else 0.75,
        )
    return Finding(
        "reward_flat",
        "warning",
        evidence,
        [],
        "no learning signal is getting through: learning rate too low, KL too tight, or the reward gives the same "
        "score to every sample",
        v.rec(
            "Raise the learning rate" + ("; samples score alike, so raise the temperature too." if hot else "."),
            v.change("learning_rate", "increase", 3.0),
            v.change("temperature", "increase", 1.15) if hot else None,
        ),
        confidence=0.6 if v.short else 0.75,
    )


def f_reward_below_target(v: View) -> Optional[Finding]:
    r = v.reward
    if v.th.target_reward is None or not r:
        return None
    late = r.late(v.th.window).mean()
    if late >= v.th.target_reward:
        return None
    rising = flat_shape(v) is None and shape(v)["late"] >= shape(v)["peak"] - 1e-12
    if rising:
        rec = v.rec("The reward is still rising: train longer.")
    else:
        rec = v.rec("The reward is not moving: raise the learning rate.", v.change("learning_rate", "increase", 1.5))
    return Finding(
        "reward_below_target",
        "warning",
        f"late-window reward {num(late, 3)} < target {num(v.th.target_reward, 3)}",
        [],
        "the run has not reached the reward it was meant to reach",
        rec,
        confidence=0.55,
    )


def f_reward_variance_rising(v: View) -> Optional[Finding]:
    """The spread of rewards within groups grows faster than the reward itself (a spread that grows with the
    mean, as when learning starts from ~0, is not a problem)."""
    std, r = v.c(keys.REWARD_STD), v.reward
    if std.n < 6 or r.n < 6:
        return None
    e, l_ = std.early(v.th.window).mean(), std.late(v.th.window).mean()
    re, rl = r.early(v.th.window).mean(), r.late(v.th.window).mean()
    floor = v.th.flat_gain * shape(v)["scale"]  # spreads and levels below this do not matter
    rel_e, rel_l = e / max(abs(re), floor), l_ / max(abs(rl), floor)
    if e <= 1e-9 or l_ < floor or l_ < v.th.variance_rise * e or rel_l < v.th.variance_rise * rel_e:
        return None
    return Finding(
        "reward_variance_rising",
        "warning",
        f"within-group reward std rose from {num(e, 3)} to {num(l_, 3)} ({l_ / e:.1f}x) while the mean reward went "
        f"{num(re, 3)} -> {num(rl, 3)}",
        [],
        "the policy is becoming erratic: some samples improve while others degrade",
        v.rec(
            "Lower the learning rate and the sampling temperature.",
            v.change("learning_rate", "decrease", 0.5),
            v.change("temperature", "decrease", 0.85),
        ),
        confidence=v.confidence(rel_l / rel_e, v.th.variance_rise, 0.65),
    )


def f_reward_cv_high(v: View) -> Optional[Finding]:
    """The reward is noisy relative to its level: within groups (``reward_std`` / ``reward``) when logged,
    else from step to step in the late window."""
    r, std = v.reward, v.c(keys.REWARD_STD)
    if r.n < 4:
        return None
    late = r.late(v.th.window)
    mean = late.mean()
    if abs(mean) < v.th.flat_gain * shape(v)["scale"]:
        return None  # a reward near zero has no meaningful coefficient of variation
    if std.n >= 4:
        cv = std.late(v.th.window).mean() / abs(mean)
        where = f"within-group reward std {num(std.late(v.th.window).mean(), 3)} vs mean reward {num(mean, 3)}"
    else:
        cv = float(np.std(late.values)) / abs(mean)
        where = f"late-window reward std {num(float(np.std(late.values)), 3)} vs mean {num(mean, 3)}"
    if cv < v.th.cv_high:
        return None
    return Finding(
        "reward_cv_high",
        "warning",
        f"reward CV {cv:.2f}: {where}",
        [],
        "each update sees a noisy estimate of the reward: too few samples per prompt to average out the noise",
        v.rec(
            "Sample more completions per prompt; lower the temperature.",
            v.change("num_generations", "increase", 2.0),
            v.change("temperature", "decrease", 0.85),
        ),
        confidence=v.confidence(cv, v.th.cv_high, 0.65),
    )


def f_reward_variance_died(v: View) -> Optional[Finding]:
    """Within-group reward spread fell to a fraction of its start: saturation (the task is solved) or collapse."""
    std, r = v.c(keys.REWARD_STD), v.reward
    if std.n < 6 or r.n < 6:
        return None
    e, l_ = std.early(v.th.window).mean(), std.late(v.th.window).mean()
    if e <= 1e-9 or l_ > 0.25 * e:
        return None
    s = shape(v)
    saturated = s["late"] >= s["start"] + 0.8 * max(s["gain"], 0.0) and s["gain"] > v.th.flat_gain * s["scale"]
    onset = first_sustained(std.values <= 0.25 * e, min(3, std.n))
    if saturated:
        return Finding(
            "reward_variance_died",
            "info",
            f"within-group reward std fell from {num(e, 3)} to {num(l_, 3)} while the reward reached "
            f"{num(s['late'], 3)}",
            [],
            "saturation: the samples of a prompt all score (almost) the same because the task is solved for these "
            "prompts; further updates carry little signal",
            v.rec("Stop here, or move to harder prompts (a curriculum)."),
            confidence=0.7,
            onset=int(std.steps[onset]) if onset is not None else None,
        )
    return Finding(
        "reward_variance_died",
        "warning",
        f"within-group reward std fell from {num(e, 3)} to {num(l_, 3)} without the reward improving "
        f"({num(s['start'], 3)} -> {num(s['late'], 3)})",
        [],
        "collapse: the policy samples the same completion for a prompt, or the reward stopped discriminating",
        v.rec(
            "Raise the sampling temperature; check the reward still separates good from bad samples.",
            v.change("temperature", "increase", 1.15),
        ),
        confidence=0.7,
        onset=int(std.steps[onset]) if onset is not None else None,
    )


def f_best_of_n_gap(v: View) -> Optional[Finding]:
    best, r = v.c(keys.BEST_OF_N), v.reward
    if best.n < 4 or r.n < 4:
        return None
    gap = best.late(v.th.window).mean() - r.late(v.th.window).mean()
    if gap < v.th.best_of_n_gap:
        return None
    return Finding(
        "best_of_n_gap",
        "info",
        f"late-window best-of-N reward exceeds the mean by {num(gap, 3)}",
        [],
        "the model can solve the task but does not do so consistently",
        v.rec(
            "Keep training with more samples per prompt so the good completions dominate the update.",
            v.change("num_generations", "increase", 2.0),
        ),
        confidence=v.confidence(gap, v.th.best_of_n_gap, 0.6),
    )


def f_mode_collapse(v: View) -> Optional[Finding]:
    zs = v.c(keys.ZERO_STD)
    if zs.n < 3:
        return None
    late = zs.late(v.th.window).mean()
    if late < v.th.mode_collapse:
        return None
    s = shape(v) if v.reward else None
    saturated = s is not None and s["gain"] > v.th.flat_gain * s["scale"] and s["late"] >= s["start"] + 0.8 * s["gain"]
    idx = [i for i, x in enumerate(zs.values) if x >= v.th.mode_collapse]
    onset = first_sustained(zs.values >= v.th.mode_collapse, min(3, zs.n))
    common = dict(confidence=v.confidence(late, v.th.mode_collapse, 0.7), onset=int(zs.steps[onset]) if onset else None)
    if saturated:
        return Finding(
            "mode_collapse",
            "info",
            f"frac_reward_zero_std = {late:.2f} in the late window, with the reward at {num(s['late'], 3)}: groups "
            "score alike because they are solved",
            v.steps(zs, idx),
            "saturation rather than collapse: these prompts no longer teach anything",
            v.rec("Move to harder prompts (a curriculum), or stop: the run has learned what these prompts teach."),
            **common,
        )
    return Finding(
        "mode_collapse",
        "critical" if late > 0.6 else "warning",
        f"frac_reward_zero_std = {late:.2f} in the late window: in that share of groups every sample got the same "
        "reward",
        v.steps(zs, idx),
        "samples of a prompt have become (nearly) identical, so group-relative advantages are zero and there is no "
        "gradient",
        v.rec(
            "Raise the sampling temperature and sample more completions per prompt.",
            v.change("temperature", "increase", 1.15),
            v.change("num_generations", "increase", 2.0),
        ),
        **common,
    )


def f_length_hacking(v: View) -> Optional[Finding]:
    pairs = [(r.get("reward", r.get("objective/scores")), r.get("completions/mean_length")) for r in v.records]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 6:
        return None
    r, length = np.array(pairs).T
    if r.std() < 1e-9 or length.std() < 1e-9:
        return None
    corr = float(np.corrcoef(r, length)[0, 1])
    lc = v.c(keys.COMPLETION_LENGTH)
    early, late = lc.early(v.th.window).mean(), lc.late(v.th.window).mean()
    rel = float(late / max(early, 1e-9) - 1)
    if abs(corr) < v.th.length_corr or abs(rel) < v.th.length_change:
        return None
    return Finding(
        "length_hacking",
        "warning",
        f"reward–length correlation {corr:+.2f}; mean completion length {num(early, 3)} -> {num(late, 3)} ({rel:+.0%})",
        [],
        "the reward is being earned through completion length rather than content",
        v.rec(
            "Cap the completion length (or add a length term to the reward).",
            v.change("max_completion_length", "decrease" if rel > 0 else "increase", 0.5 if rel > 0 else 2.0),
        ),
        confidence=v.confidence(abs(corr), v.th.length_corr, 0.65),
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
    return Finding(
        "truncation_high",
        "warning",
        f"{late:.0%} of completions hit the maximum length in the late window",
        [],
        "completions are cut off before they finish, so their reward is noise (and runaway penalties dominate)",
        v.rec("Allow longer completions.", v.change("max_completion_length", "increase", 2.0)),
        confidence=v.confidence(late, v.th.truncation, 0.6),
    )


def f_short_history(v: View) -> Optional[Finding]:
    n = v.reward.n
    if n == 0 or n >= SHORT:
        return None
    return Finding(
        "short_history",
        "info",
        f"only {n} logged points: windows hold {max(2, math.ceil(v.th.window * n))} points and trend tests need "
        f"{v.th.min_points_trend}",
        [],
        "findings are read off a handful of points, as a person would; their confidence is lowered",
        v.rec("Log every step (algo.logging_steps=1) for a full diagnosis."),
        confidence=0.99,
    )
