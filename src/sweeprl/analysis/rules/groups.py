"""Rules on the spread of rewards within groups: a spread rising or dying, a noisy reward, groups whose samples
all score alike, the gap to the best of N."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.rules.base import (
    Finding,
    View,
    first_sustained,
    policy_moved,
    pval,
    shape,
    trend_test,
)
from sweeprl.formatting import num


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
    if r.values.min() >= 0 and r.values.max() <= 1:  # a 0-1 reward's spread is bounded by sqrt(p(1-p))
        bound_e, bound_l = math.sqrt(max(re * (1 - re), 1e-6)), math.sqrt(max(rl * (1 - rl), 1e-6))
        if l_ / bound_l < v.th.variance_rise * e / bound_e:
            return None  # the spread rose no more than its level allows
    if rl - re >= 2 * floor:
        return None  # the reward rose with it: samples began to differ because some now succeed
    zs = v.c(keys.ZERO_STD)
    alike = zs.early(v.th.window).mean() >= 0.5 if zs.n >= 3 else e < 0.25 * floor  # no signal at the start
    z, p = trend_test(v, r)
    if alike and z is not None and z > 0 and p < 0.05:
        return None  # a signal appeared where groups had none, and the reward rises with it beyond its noise
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
    return Finding(  # information: small groups and few prompts per step make any RL reward noisy
        "reward_cv_high",
        "info",
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


def _nothing_earned(v: View) -> bool:
    """A reward never above 0 that sits at exactly 0 in the late window: a success reward no sample earns (calling
    a penalty-only reward "solved" would take more than the log shows)."""
    r = v.reward
    return r.n > 0 and r.values.max() <= 0 and float(np.median(r.late(v.th.window).values)) == 0


def f_reward_variance_died(v: View) -> Optional[Finding]:
    """Within-group reward spread fell to a fraction of its start: saturation (the task is solved) or collapse."""
    std, r = v.c(keys.REWARD_STD), v.reward
    if std.n < 6 or r.n < 6:
        return None
    e, l_ = std.early(v.th.window).mean(), std.late(v.th.window).mean()
    if e <= 1e-9 or l_ > 0.25 * e:
        return None
    s = shape(v)
    nothing = _nothing_earned(v)
    saturated = (
        not nothing and s["late"] >= s["start"] + 0.8 * max(s["gain"], 0.0) and s["gain"] > v.th.flat_gain * s["scale"]
    )
    onset = first_sustained(std.values <= 0.25 * e, min(3, std.n))
    fell = f"within-group reward std fell from {num(e, 3)} to {num(l_, 3)}"

    def died(severity: str, text: str, cause: str, rec: Dict[str, Any]) -> Finding:
        at = int(std.steps[onset]) if onset is not None else None
        return Finding("reward_variance_died", severity, text, [], cause, rec, confidence=0.7, onset=at)

    if nothing:
        return died(
            "warning",
            f"{fell} with the reward at 0 and never above it",
            "no sample earns any reward any more, so every group scores alike and there is no signal: the reward "
            "is too sparse for this model (or its penalties cancel out)",
            v.rec(
                "Give the model a signal: easier prompts, partial credit in the reward, or more samples per prompt.",
                v.change("num_generations", "increase", 2.0),
            ),
        )
    if saturated:
        return died(
            "info",
            f"{fell} while the reward reached {num(s['late'], 3)}",
            "saturation: the samples of a prompt all score (almost) the same because the task is solved for these "
            "prompts; further updates carry little signal",
            v.rec("Stop here, or move to harder prompts (a curriculum)."),
        )
    return died(
        "warning",
        f"{fell} without the reward improving ({num(s['start'], 3)} -> {num(s['late'], 3)})",
        "collapse: the policy samples the same completion for a prompt, or the reward stopped discriminating",
        v.rec(
            "Raise the sampling temperature; check the reward still separates good from bad samples.",
            v.change("temperature", "increase", 1.15),
        ),
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
    """Many groups whose samples all scored the same. Three readings: the prompts are solved (a reward at its
    best or the ceiling: information), nothing is solved (a reward at the floor: the signal is missing, not the
    diversity), or the samples of a prompt became alike (collapse: raise the temperature, unless the entropy
    is already rising)."""
    zs = v.c(keys.ZERO_STD)
    if zs.n < 3:
        return None
    late = zs.late(v.th.window).mean()
    if late < v.th.mode_collapse:
        return None
    s = shape(v) if v.reward else None
    r = v.reward
    unit = s is not None and r.values.min() >= 0 and r.values.max() <= 1
    nothing = s is not None and _nothing_earned(v)
    floor = s is not None and ((unit and s["late"] <= 0.1) or nothing)
    saturated = (
        s is not None
        and not nothing
        and (
            (s["gain"] > v.th.flat_gain * s["scale"] and s["late"] >= s["start"] + 0.8 * s["gain"])
            or (unit and s["late"] >= 0.9)
        )
    )
    idx = [i for i, x in enumerate(zs.values) if x >= v.th.mode_collapse]
    onset = first_sustained(zs.values >= v.th.mode_collapse, min(3, zs.n))
    common: Dict[str, Any] = dict(
        confidence=v.confidence(late, v.th.mode_collapse, 0.7), onset=int(zs.steps[onset]) if onset else None
    )
    if saturated and s is not None:
        # most of the run had nothing left to learn: a 0-1 reward at its ceiling (0.98) from the first 40% on
        b = r.blocks(10)
        at_top = b.values >= 0.98
        early_on = unit and b.n >= 5 and bool(at_top[int(0.4 * b.n) :].all())
        return Finding(  # a warning when most of the run had nothing to learn: those steps were spent for nothing
            "mode_collapse",
            "warning" if early_on else "info",
            f"frac_reward_zero_std = {late:.2f} in the late window, with the reward at {num(s['late'], 3)}: groups "
            "score alike because they are solved"
            + (f", from step {int(zs.steps[onset])} of {int(zs.steps[-1])}" if early_on else ""),
            v.steps(zs, idx),
            "saturation rather than collapse: these prompts no longer teach anything",
            v.rec("Move to harder prompts (a curriculum), or stop: the run has learned what these prompts teach."),
            **common,
        )
    if floor and s is not None:
        return Finding(
            "mode_collapse",
            "warning",
            f"frac_reward_zero_std = {late:.2f} in the late window, with the reward at {num(s['late'], 3)}: groups "
            "score alike because (almost) every sample fails",
            v.steps(zs, idx),
            "the reward is too sparse for this model: no sample of a group earns anything, so there is no signal",
            v.rec(
                "Give the model a signal: easier prompts, partial credit in the reward, or more samples per prompt.",
                v.change("num_generations", "increase", 2.0),
            ),
            **common,
        )
    return _alike_groups(v, zs, late, idx, common)


def _alike_groups(v: View, zs, late: float, idx: list, common: dict) -> Finding:
    """Many groups alike, the reward neither at its best nor at the floor. Only a policy that narrowed (its
    entropy fell by ``narrowing`` or more) makes the samples of a prompt alike: a collapse, for a higher temperature.
    With the entropy holding, more alike groups while the reward holds are prompts being solved (information,
    while one group in ten still has a signal), and groups alike from the start are a reward without spread: the
    task's or the reward's, not the sampler's."""
    ent, r = v.c(keys.ENTROPY), v.reward
    e0 = ent.early(v.th.window).mean() if ent.n >= 3 else 0.0
    narrowed = e0 > 0 and 1 - ent.late(v.th.window).mean() / e0 >= v.th.narrowing
    heating = e0 > 0 and policy_moved(v) is not None and ent.late(v.th.window).mean() > e0
    zs_z, zs_p = trend_test(v, zs)
    r_z, r_p = trend_test(v, r)
    rising = zs_z is not None and zs_z > 0 and zs_p < 0.05
    reward_held = r_z is not None and not (r_z < 0 and r_p < 0.05)
    what = f"frac_reward_zero_std = {late:.2f} in the late window"
    reward_rose = r_z is not None and r_z > 0 and r_p < 0.05
    if not narrowed and rising and (reward_rose or e0 > 0 and reward_held) and late < 0.9:
        return Finding(
            "mode_collapse",
            "info",
            f"{what}, up from {zs.early(v.th.window).mean():.2f} while the reward "
            f"{'rose' if reward_rose else 'held'} ({num(shape(v)['start'], 3)} -> {num(shape(v)['late'], 3)}, "
            f"Mann-Kendall {pval(r_p)})"
            + (f" and the entropy did not fall ({num(e0, 3)} -> {num(ent.late(v.th.window).mean(), 3)})" if e0 else ""),
            v.steps(zs, idx),
            "more groups score alike while the samples still differ: the prompts sort into solved and unsolved as "
            "the policy learns, it is not narrowing",
            v.rec("Nothing to fix; harder prompts (a curriculum) keep the groups informative."),
            **common,
        )
    if e0 > 0 and not narrowed:
        return Finding(
            "mode_collapse",
            "warning",
            f"{what} while the entropy held ({num(e0, 3)} -> {num(ent.late(v.th.window).mean(), 3)}): the samples "
            "differ, their scores do not",
            v.steps(zs, idx),
            "the reward gives the same score to different samples (all right or all wrong), so those groups carry no "
            "gradient: a task too easy or too hard for the model, or a reward too coarse",
            v.rec(
                "Fix the signal, not the sampler: prompts at the model's level, a reward with partial credit; more "
                "samples per prompt so some score differently.",
                v.change("num_generations", "increase", 2.0),
            ),
            **common,
        )
    if not narrowed:  # no entropy in the log: alike samples and alike scores cannot be told apart
        return Finding(
            "mode_collapse",
            "warning",
            f"{what}: in that share of groups every sample got the same reward",
            v.steps(zs, idx),
            "either the samples of a prompt are (nearly) identical or the reward scores different samples alike; "
            "both leave the group-relative advantages at zero",
            v.rec(
                "Sample more completions per prompt; if the samples are identical (log the entropy to tell), raise "
                "the temperature, else give the reward partial credit.",
                v.change("num_generations", "increase", 2.0),
            ),
            **common,
        )
    return Finding(
        "mode_collapse",
        "critical" if late > 0.6 else "warning",
        f"{what} while the entropy fell {num(e0, 3)} -> {num(ent.late(v.th.window).mean(), 3)}: the samples of a "
        "prompt became alike",
        v.steps(zs, idx),
        "samples of a prompt have become (nearly) identical, so group-relative advantages are zero and there is no "
        "gradient",
        v.rec(
            "Sample more completions per prompt"
            + (
                " (not a higher temperature: the entropy is already rising)." if heating else "; raise the temperature."
            ),
            None if heating else v.change("temperature", "increase", 1.15),
            v.change("num_generations", "increase", 2.0),
        ),
        **common,
    )
