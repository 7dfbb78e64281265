"""Rules on the reward's shape: a collapse, a dip, a flat reward, a reward below its target, a gain made by the
format terms of a reward alone; a short history."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Optional

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
            v.change("beta", "increase", 2.0),
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
            [v.change("learning_rate", "decrease", factor), v.change("beta", "increase", kl_factor)],
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
    blocks = r.blocks(10)
    if int(np.sum(blocks.values[:-1] >= s["start"] + 0.5 * gain)) < 2:  # learned, then lost: a level it held
        v.weak.append(
            f"reward_collapse: the reward's peak ({num(s['peak'], 3)} around step {int(s['peak_step'])}) is one block "
            "above half its gain: a transient high, not a level the run reached and lost"
        )
        return None
    z, p = level_test(r, _block_points(r, blocks, int(s["peak_index"])), r.late(v.th.window), tests=int(s["blocks"]))
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
    if int(np.sum(blocks.values[:i_trough] >= s["start"] + 0.5 * gain)) < 2:
        v.weak.append(
            f"reward_dip: the best before the fall ({num(trough + fall, 3)} around step {int(peak_step)}) is one "
            "block above half the gain: a transient high, not a level the run reached and lost"
        )
        return None
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
    pinned = v.reward.values.min() >= 0 and v.reward.values.max() <= 1 and not 0.05 < s["late"] < 0.95
    # a rise beyond the noise is learning, not a flat reward; but one of under flat_gain that leaves a [0, 1]
    # reward at its floor or ceiling still gives (almost) every group one score: no signal
    if z is not None and z > 0 and p < 0.05 and not pinned:
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


def f_reward_frozen(v: View) -> Optional[Finding]:
    """The reward, after it moved, is the same to the last digit at every step of the run's last stretch (at least
    5 steps and a quarter of the log), a run of repeats its earlier frequency makes unlikely (p < 0.05): every
    sample of every group scored alike and the updates carry no signal. At the run's best, the prompts are solved; below
    it, the outputs became degenerate (empty, cut off, one fixed answer) or the reward stopped discriminating. A
    reward that never moved is :func:`f_reward_flat`'s, whose evidence says the same."""
    r = v.reward
    if r.n < 8 or flat_shape(v) is not None:
        return None
    last = float(r.values[-1])
    held = int(np.argmax(r.values[::-1] != last)) if np.any(r.values != last) else r.n
    if held < max(5, math.ceil(v.th.window * r.n)):
        return None
    before = r.values[: r.n - held]
    share = (float(np.sum(before == last)) + 1) / (before.size + 2)  # how often that value came up before
    p = share**held  # the chance of ``held`` repeats in a row at that rate (a discrete reward repeats itself)
    since, best = int(r.steps[r.n - held]), float(r.values.max())
    what = (
        f"reward exactly {num(last, 4)} at every one of the last {held} logged steps (it came up on {share:.0%} of "
        f"the steps before: {held} in a row by chance {pval(p)})"
    )
    if p >= 0.05:
        v.weak.append(f"reward_frozen: {what}")
        return None
    common: Dict[str, Any] = dict(confidence=evidence_confidence(p, v.short), onset=since)
    if last >= best:
        return Finding(
            "reward_frozen",
            "warning",
            what + ", its best",
            [since],
            "every sample earns the full reward: these prompts are solved, and the updates since carry no signal",
            v.rec("Stop at that step, or move to harder prompts (a curriculum)."),
            **common,
        )
    return Finding(
        "reward_frozen",
        "warning",
        f"{what}, below its best {num(best, 3)} (step {int(r.steps[int(np.argmax(r.values))])})",
        [since],
        "every sample scores the same: the outputs became degenerate (empty, cut off, one fixed answer) or the "
        "reward stopped telling them apart, so no gradient flows",
        v.rec(
            f"Read the completions from step {since} on; keep the checkpoint before it. The log does not show the "
            "size of the updates, so the learning rate is not the evident cause."
        ),
        **common,
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


#: reward functions named for what they score (TRL logs each as ``rewards/<name>/mean``): the task, or the form
TASK_TERM = re.compile(r"correct|accura|answer|pass|solve|exact_match|equiv|verif", re.I)
FORM_TERM = re.compile(r"format|tag|xml|length|think|style|strict|soft|count", re.I)
#: ``rewards/<x>`` names that are preference statistics, not reward functions
_NOT_TERMS = {"chosen", "rejected", "margins", "accuracies"}


def reward_terms(v: View) -> Dict[str, str]:
    """The reward functions the log reports one by one: name -> column (``rewards/<name>/mean``, or the
    ``rewards/<name>`` of older TRL releases)."""
    names = {k for r in v.records[:50] for k in r}
    terms: Dict[str, str] = {}
    for k in sorted(names):
        m = re.fullmatch(r"rewards/([^/]+)(/mean)?", k)
        if m and m.group(1) not in _NOT_TERMS:
            terms.setdefault(m.group(1), k)
    return terms


def f_task_reward_flat(v: View) -> Optional[Finding]:
    """A reward that rose through its format terms while the terms that score the task (named correctness,
    accuracy, answer, ...) did not move: the policy learned the output's form, and the task gives it no signal
    (a checker that rejects right answers, prompts too hard for the model). Judged on the reward functions TRL
    logs one by one; silent without a task term and a form term."""
    terms = reward_terms(v)
    task = {n: k for n, k in terms.items() if TASK_TERM.search(n) and not FORM_TERM.search(n)}
    form = {n: k for n, k in terms.items() if FORM_TERM.search(n)}
    r = v.reward
    if not task or not form or r.n < 8:
        return None
    early, late = r.early(v.th.window), r.late(v.th.window)
    z, p = level_test(r, late, early)
    gain = float(late.mean() - early.mean())
    if gain <= 0 or p >= 0.05:  # the reward did not rise beyond its noise: the flat-reward rules speak
        return None

    def moved(col: str) -> tuple:
        c = v.c((col,))
        return (
            float(c.early(v.th.window).mean()),
            float(c.late(v.th.window).mean()),
            level_test(c, c.late(v.th.window), c.early(v.th.window))[1],
        )

    task_moves = {n: moved(k) for n, k in task.items() if v.c((k,)).n >= 8}
    form_moves = {n: moved(k) for n, k in form.items() if v.c((k,)).n >= 8}
    if not task_moves or not form_moves:
        return None
    task_gain = sum(b - a for a, b, _ in task_moves.values())
    form_gain = sum(b - a for a, b, _ in form_moves.values())
    if any(pu < 0.05 and b > a for a, b, pu in task_moves.values()) or task_gain > 0.1 * gain:
        return None  # the task term rose too: learning where it counts
    if form_gain < 0.5 * gain:
        return None
    said = ", ".join(f"{n} {num(a, 3)} -> {num(b, 3)}" for n, (a, b, _) in task_moves.items())
    rose = ", ".join(f"{n} {b - a:+.3g}" for n, (a, b, _) in form_moves.items() if b > a)
    return Finding(
        "task_reward_flat",
        "warning",
        f"the reward rose {num(float(early.mean()), 3)} -> {num(float(late.mean()), 3)} (z={z:.1f}, {pval(p)}) "
        f"through its form terms ({rose}), while the task term did not: {said}",
        [],
        "the policy learned the output's form, not the task: the task reward gives no signal (a checker that "
        "rejects right answers, or prompts too hard for the model)",
        v.rec(
            "Check the task reward on a few completions (answer parsing and normalisation: an exact string match "
            "rejects equivalent answers), start from easier prompts, and lower the form terms' weight once the "
            "form is learned. The learning rate is not the cause."
        ),
        confidence=evidence_confidence(p, v.short),
    )
