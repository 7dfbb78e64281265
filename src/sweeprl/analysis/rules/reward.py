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
    dead_gradient,
    eval_rising,
    evidence_confidence,
    first_sustained,
    flat_shape,
    level_test,
    missing_measures,
    policy_moved,
    policy_still,
    pval,
    saturated,
    shape,
    trend_test,
    update_size,
)
from sweeprl.formatting import num


def _block_points(r, blocks, i: int):
    """The logged points that block ``i`` of ``r.blocks()`` averages."""
    edges = np.concatenate([[r.steps[0] - r.gaps[0]], (blocks.steps[1:] + blocks.steps[:-1]) / 2, [np.inf]])
    return r.slice((r.steps > edges[i]) & (r.steps <= edges[i + 1]))


def _fell_from_the_start(v: View, s: dict) -> Optional[Finding]:
    """The reward never rose and ended far below where the untrained policy started: the first updates took
    away what the model could already do."""
    fall = s["start"] - s["late"]
    if fall < v.th.flat_gain * s["scale"] or fall < v.th.collapse_drop * abs(s["start"]):
        return None
    r = v.reward
    z, p = level_test(r, _block_points(r, r.blocks(10), 0), r.late(v.th.window))
    if p >= 0.05:
        v.weak.append(
            f"reward_collapse: the reward fell from {num(s['start'], 3)} to {num(s['late'], 3)}, within "
            f"its noise (z={z:.1f}, {pval(p)})"
        )
        return None
    mk_z, mk_p = trend_test(v, r)
    if mk_z is not None and mk_z > 0 and mk_p < 0.05:  # a few large early rewards lifted the first mean
        v.weak.append(
            f"reward_collapse: the mean reward fell from {num(s['start'], 3)} to {num(s['late'], 3)}, but the steps "
            f"rose (Mann-Kendall z={mk_z:.1f}, {pval(mk_p)}): a few large early rewards, not a fall"
        )
        return None
    onset = first_sustained(r.values < s["start"] - 0.5 * fall, min(3, r.n))
    size, why = update_size(v)
    if size == "large":
        rec = v.rec(
            f"Lower the learning rate 10x (not a little: the run never had a good stretch, and the updates were "
            f"large: {why}) and raise the KL coefficient to hold the policy near the reference.",
            v.change("learning_rate", "decrease", 0.1),
            v.change("kl_coef", "increase", 2.0),
        )
    else:
        rec = v.rec(
            f"The log does not show updates too large ({why}): check that the reward scores what the untrained "
            "model already did right." + missing_measures(v)
        )
    return Finding(
        "reward_collapse",
        "critical",
        f"reward fell from {num(s['start'], 3)} in the first stretch to {num(s['late'], 3)} without rising first "
        f"({fall / max(abs(s['start']), 1e-12):.0%} of where it started; beyond its noise: z={z:.1f}, {pval(p)})",
        [],
        "the first updates took away what the model could do before it learned anything",
        rec,
        confidence=evidence_confidence(p, v.short),
        onset=int(r.steps[onset]) if onset is not None else None,
    )


def _lr_down(v: View, factor: float, kl_factor: float, what: str) -> tuple[str, list]:
    """Advice for a reward that fell: lower the learning rate only where the log shows large updates."""
    size, why = update_size(v)
    if size == "large":
        return (
            f"Lower the learning rate and hold the policy closer to the reference (raise the KL coefficient): "
            f"the updates were large ({why}); {what}",
            [v.change("learning_rate", "decrease", factor), v.change("kl_coef", "increase", kl_factor)],
        )
    return (
        f"{what[0].upper()}{what[1:]} The log does not show updates too large ({why}), so the learning rate is "
        "not the evident cause: check the reward and the data at the fall (a reward model drifting, harder prompts, "
        "truncated completions)." + missing_measures(v),
        [],
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
    z, p = level_test(r, _block_points(r, r.blocks(10), s["peak_index"]), r.late(v.th.window), tests=s["blocks"])
    if p >= 0.05:
        v.weak.append(
            f"reward_collapse: the reward fell from {num(s['peak'], 3)} (around step {int(s['peak_step'])}) to "
            f"{num(s['late'], 3)}, but that is within its step-to-step noise (z={z:.1f}, {pval(p)} with the peak "
            "picked among the blocks)"
        )
        return None
    text, changes = _lr_down(v, 0.3, 2.0, "keep the checkpoint from the peak.")
    return Finding(
        "reward_collapse",
        "critical",
        f"reward rose from {num(s['start'], 3)} to {num(s['peak'], 3)} by step {int(s['peak_step'])}, then fell to "
        f"{num(s['late'], 3)} ({drop / gain:.0%} of what it had gained; beyond its noise: z={z:.1f}, {pval(p)})",
        [int(s["peak_step"])],
        "the policy learned, then lost it: updates too large for the reached state, too little KL pull toward the "
        "reference, or a reward that stopped rewarding what the policy does",
        v.rec(text, *changes),
        confidence=evidence_confidence(p, v.short),
        onset=int(s["peak_step"]),
    )


def f_reward_dip(v: View) -> Optional[Finding]:
    """The reward fell far below its best mid-run and came back: it did not end collapsed, but the policy went
    through a collapse on the way (what a lower learning rate avoids). The fall must exceed the reward's own
    noise (peak and trough picked among the blocks: a Bonferroni correction for every pair)."""
    r = v.reward
    if (
        r.n < 8
        or policy_still(v)
        or f_reward_collapse(View(v.records, v.algo, v.advice, v.th, v.target_kl)) is not None
    ):
        return None
    s = shape(v)
    blocks = r.blocks(10)
    fall, peak_step, trough_step = max_drawdown(blocks)
    gain = float(blocks.values[: int(np.searchsorted(blocks.steps, peak_step)) + 1].max() - s["start"])
    if gain < v.th.flat_gain * s["scale"] or fall < v.th.collapse_drop * gain:
        return None
    i_peak, i_trough = int(np.searchsorted(blocks.steps, peak_step)), int(np.searchsorted(blocks.steps, trough_step))
    trough = float(blocks.values[i_trough])
    pairs = blocks.n * (blocks.n - 1) // 2
    z, p = level_test(r, _block_points(r, blocks, i_peak), _block_points(r, blocks, i_trough), tests=pairs)
    if p >= 0.05:
        v.weak.append(
            f"reward_dip: the reward fell from {num(trough + fall, 3)} to {num(trough, 3)} and came back, within its "
            f"noise (z={z:.1f}, {pval(p)} over {pairs} block pairs)"
        )
        return None
    text, changes = _lr_down(v, 0.5, 1.5, "the run relearned, but paid the steps.")
    return Finding(
        "reward_dip",
        "warning",
        f"reward fell from {num(trough + fall, 3)} (around step {int(peak_step)}) to {num(trough, 3)} (around step "
        f"{int(trough_step)}), {fall / gain:.0%} of what it had gained, then came back to {num(s['late'], 3)} "
        f"(beyond its noise: z={z:.1f}, {pval(p)})",
        [int(peak_step), int(trough_step)],
        "an update too large for the state the policy had reached threw it back (or the prompts of that stretch were "
        "harder); it relearned, but the run could as well have ended at the bottom",
        v.rec(text, *changes),
        confidence=evidence_confidence(p, v.short),
        onset=int(peak_step),
    )


def _signal(v: View, s: dict) -> Optional[str]:
    """Why the reward carries no learning signal, when the log shows it: groups whose samples all score alike
    (``frac_reward_zero_std``), or a reward pinned at the floor or the ceiling of a [0, 1] scale; else None."""
    zs = v.c(keys.ZERO_STD)
    if zs.n >= 3 and zs.late(v.th.window).mean() >= 0.5:
        return f"in {zs.late(v.th.window).mean():.0%} of groups every sample scored the same"
    std = v.c(keys.REWARD_STD).late(v.th.window)
    if std.n >= 3 and float(np.mean(std.values == 0)) >= 0.5:
        return f"on {float(np.mean(std.values == 0)):.0%} of the late steps every sample scored the same"
    r = v.reward
    if r.values.min() >= 0 and r.values.max() <= 1 and (s["late"] >= 0.95 or s["late"] <= 0.05):
        return f"the reward sits at {num(s['late'], 3)} on a 0-1 scale"
    return None


def f_reward_flat(v: View) -> Optional[Finding]:
    """A reward that never moved. The advice follows the evidence: raise the learning rate only where the log
    shows the policy barely moved (tiny KL / approx-KL); a reward without spread (every sample of a group alike,
    pinned at 0 or 1) is the reward's or the data's problem; without a measure of the update size, say so."""
    if v.reward.n < 5:
        return None
    s = flat_shape(v)
    if s is None:
        return None
    z, p = trend_test(v, v.reward)
    if z is not None and z > 0 and p < 0.05:  # a rise beyond the noise is learning, not a flat reward
        v.weak.append(
            f"reward_flat: the reward moved little ({num(s['start'], 3)} -> {num(s['late'], 3)}) but rises steadily "
            f"(Mann-Kendall z={z:.1f}, {pval(p)})"
        )
        return None
    if v.short and s["within_noise"] and not (dead_gradient(v) or update_size(v)[0] == "small"):
        v.weak.append(  # a handful of points: no test can tell a flat reward from a noisy rise
            f"reward_flat: the reward went {num(s['start'], 3)} -> {num(s['late'], 3)} over {v.reward.n} points, "
            "within its noise, and nothing in the log says the policy stood still"
        )
        return None
    zero_std = v.c(keys.ZERO_STD)
    hot = zero_std.n and zero_std.late(v.th.window).mean() >= v.th.mode_collapse
    evidence = (
        f"reward {num(s['start'], 3)} in the first stretch, {num(s['late'], 3)} at the end ({v.reward.n} logged steps)"
    )
    conf = 0.6 if v.short else 0.75
    done = saturated(v) or eval_rising(v)
    if done:  # at the ceiling, or learning where it counts: nothing to fix
        return Finding(
            "reward_flat",
            "info",
            f"{evidence}; {done}",
            [],
            "the training reward has nothing left to gain on these prompts"
            if saturated(v)
            else "the training reward is flat, the held-out one improves",
            v.rec("Nothing to change; harder prompts (a curriculum) if the run should go on learning."),
            confidence=conf,
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
            v.rec("Do not raise the learning rate: settle what moved the policy first."),
            confidence=conf,
        )
    no_signal = _signal(v, s)
    if no_signal:
        return Finding(
            "reward_flat",
            "warning",
            f"{evidence}; {no_signal}",
            [],
            "the reward does not separate the samples, so there is nothing to learn from: the task is too hard or "
            "too easy for the model, or the reward is too sparse",
            v.rec(
                "Fix the signal, not the optimizer: prompts at the model's level (a curriculum), a denser or partial-"
                "credit reward" + ("; more samples per prompt so some differ." if hot else "."),
                v.change("num_generations", "increase", 2.0) if hot else None,
            ),
            confidence=conf,
        )
    dead = dead_gradient(v)
    if dead:
        return Finding(
            "reward_flat",
            "warning",
            f"{evidence}; {dead}",
            [],
            "no update reaches the weights: trainable parameters that are frozen or not attached (LoRA targets), a "
            "loss detached from the policy, or an overflow that skips every step; the learning rate is not the cause",
            v.rec(
                "Check that the gradient flows: the trainable parameter count, the LoRA target modules, bf16 "
                "instead of fp16."
            ),
            confidence=conf,
        )
    size, why = update_size(v)
    if size != "small":
        return Finding(
            "reward_flat",
            "warning",
            evidence,
            [],
            f"no learning signal is getting through; the log does not tell whether the updates are too small ({why})",
            v.rec(
                "Check the reward separates good from bad samples; if the KL to the reference and the entropy barely "
                "move, raise the learning rate." + missing_measures(v)
            ),
            confidence=conf,
        )
    return Finding(
        "reward_flat",
        "warning",
        f"{evidence}, and the policy barely moved ({why})",
        [],
        "the updates are too small to change the policy: learning rate too low (or KL too tight)",
        v.rec("Raise the learning rate.", v.change("learning_rate", "increase", 3.0)),
        confidence=conf,
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
    if r.values.min() >= 0 and r.values.max() <= 1:  # a 0-1 reward's spread is bounded by sqrt(p(1-p))
        bound_e, bound_l = math.sqrt(max(re * (1 - re), 1e-6)), math.sqrt(max(rl * (1 - rl), 1e-6))
        if l_ / bound_l < v.th.variance_rise * e / bound_e:
            return None  # the spread rose no more than its level allows
    if rl - re >= 2 * floor:
        return None  # the reward rose with it: samples began to differ because some now succeed
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
    saturated = s is not None and (
        (s["gain"] > v.th.flat_gain * s["scale"] and s["late"] >= s["start"] + 0.8 * s["gain"])
        or (unit and s["late"] >= 0.9)
    )
    floor = unit and s["late"] <= 0.1
    idx = [i for i, x in enumerate(zs.values) if x >= v.th.mode_collapse]
    onset = first_sustained(zs.values >= v.th.mode_collapse, min(3, zs.n))
    common = dict(confidence=v.confidence(late, v.th.mode_collapse, 0.7), onset=int(zs.steps[onset]) if onset else None)
    if saturated:
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
    if floor:
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
