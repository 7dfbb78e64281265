"""Rules on the optimisation itself: non-finite values, loss, gradient and value-loss spikes, the value head."""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.curves import Curve, noise_per_step
from sweeprl.analysis.rules.base import (
    SHORT,
    Finding,
    View,
    evidence_confidence,
    first_sustained,
    level_test,
    pval,
    shape,
    spike_points,
    trend_test,
    warming_up,
)
from sweeprl.formatting import num


def f_non_finite(v: View) -> Optional[Finding]:
    """NaN/inf in a watched metric. Steps where only the gradient norm is non-finite while the loss and reward
    stay finite, and the run goes on finite, are fp16 loss-scale overflows the optimizer skipped (information);
    anything else is a blow-up."""
    bad = keys.non_finite_steps(v.records)
    if not bad:
        return None
    watched = [k for k in keys.FINITE_WATCH if k not in keys.GRAD_NORM]
    by_step = {int(r.get("step", i + 1)): r for i, r in enumerate(v.records)}

    def finite(rec, names) -> bool:
        vals = [rec.get(k) for k in names if rec.get(k) is not None]
        return all(math.isfinite(float(x)) for x in vals)

    skipped = all(finite(by_step[s], watched) for s in bad if s in by_step)
    last = v.records[-1]
    if skipped and finite(last, keys.FINITE_WATCH):
        return Finding(
            "non_finite",
            "info",
            f"gradient norm NaN/inf at {len(bad)} of {len(v.records)} logged steps (first at step {bad[0]}) with the "
            "loss and reward finite, and the run went on finite",
            bad[:20],
            "fp16 loss-scale overflow: the optimizer skipped those steps and lowered the scale (no weight update)",
            v.rec("Nothing to change; bf16, where the GPU has it, avoids the skipped steps."),
            confidence=0.8,
            onset=bad[0],
        )
    first_updates = sum(1 for r in v.records if r.get("step", 0) <= bad[0]) <= 3
    if first_updates:  # no update can have grown too large yet: the loss, the data or the precision is at fault
        return Finding(
            "non_finite",
            "critical",
            f"NaN/inf from step {bad[0]}, among the first logged steps ({len(bad)} of {len(v.records)} steps)",
            bad[:20],
            "a NaN before the updates could grow: the loss or reward computes NaN on some inputs (empty or "
            "truncated answers, a log of 0), or the precision overflows (fp16)",
            v.rec(
                "Find the batch that gives NaN (empty/truncated samples, a reward returning NaN); train in bf16 or "
                "fp32. Lowering the learning rate will not fix a NaN at the first steps."
            ),
            confidence=0.95,
            onset=bad[0],
        )
    return Finding(
        "non_finite",
        "critical",
        f"{len(bad)} of {len(v.records)} logged steps have NaN/inf in reward, loss, KL, entropy or grad norm "
        f"(first at step {bad[0]})",
        bad[:20],
        "numerical blow-up: an update too large for the model (learning rate, gradient scale, fp16 overflow) "
        "or a reward that returned NaN; weights after the first NaN may be poisoned",
        v.rec(
            f"Restart from before step {bad[0]}: lower the learning rate and clip gradients harder; use bf16 rather "
            "than fp16; check the reward for NaN.",
            v.change("learning_rate", "decrease", 0.3),
            v.change("max_grad_norm", "decrease", 0.5),
        ),
        confidence=0.99,
        onset=bad[0],
    )


def _excursion(x: np.ndarray, i: int) -> float:
    """How far point ``i`` sits above the median of the 20 points before it."""
    return float(x[i] - np.median(x[max(0, i - 20) : i]))


def _unprecedented(x: np.ndarray, i: int, window: int = 50) -> bool:
    """Point ``i`` rises above its running level twice as far as any of the ``window`` points before it did. A
    loss over a few pairs or samples a step is heavy-tailed (one misordered pair of three lifts a DPO loss of 0.02
    to 0.7): its robust noise is small, yet such jumps come back every few dozen steps, and one a little larger
    than the ones before is the same noise, not an update that broke the model."""
    before = [_excursion(x, j) for j in range(max(1, i - window), i)]
    return not before or _excursion(x, i) > 2 * max(max(before), 0.0)


def _loss_spikes(v: View, c: Curve) -> tuple[List[int], float]:
    """(indices, largest ratio) of loss spikes, judged by the loss's sign and scale."""
    x, n = c.values, c.n
    th = v.th
    signed = v.algo in ("grpo", "rloo", "ppo") or np.mean(x < 0) > 0.1 or np.median(x) <= 0
    out, ratio = [], 0.0
    if signed:
        # a policy-gradient surrogate oscillates around zero, and a batch whose groups all score alike gives
        # ~0: only an isolated, unprecedented value above an absolute floor counts (with advantages normalised
        # per group and the ratio clipped, a batch-mean surrogate beyond 1 is not ordinary noise)
        warm = max(3, math.ceil(0.05 * n))
        for i in range(warm, n):
            prev = np.abs(x[:i])
            med = float(np.median(prev))
            big = abs(x[i]) >= th.signed_loss_floor and abs(x[i]) > 2 * float(prev.max())
            if med > 0 and big and abs(x[i]) > th.spike_factor * med:
                out.append(i)
                ratio = max(ratio, abs(x[i]) / med)
        return out, ratio
    # a positive loss (SFT-style, value loss, preference losses, epoch tables): a jump above its running level,
    # and beyond the loss's own noise where it happened (a DPO loss over 2-16 pairs a step swings by half its
    # level and back once the learning rate is up, while it sat still during the warm-up)
    noise = noise_per_step(c) / math.sqrt(max(c.gap, 1e-12))
    # a loss printed with few decimals moves in whole digits: a few of them are no spike
    steps_of = np.diff(np.unique(x))
    noise = max(noise, 2 * float(steps_of.min())) if steps_of.size else noise
    for i in range(1, n):
        level = float(np.median(x[:i]))
        usual = float(np.median(np.abs(np.diff(x[:i])))) if i >= 3 else 0.0
        rise = float(x[i] - x[i - 1])
        lo = max(0, i - 20)  # the noise where it happened, never below the whole curve's
        local = noise_per_step(Curve(c.steps[lo:i], x[lo:i])) / math.sqrt(max(c.gap, 1e-12)) if i - lo >= 6 else 0
        local = max(local, noise)
        # beyond the noise, or lasting: the next points stay above halfway (a noisy loss swings back at once)
        after = float(np.median(x[i + 1 : i + 3])) if i + 1 < n else -math.inf
        lasting = after > level + 0.5 * (x[i] - level) and after - level > 2 * local
        big = rise > max(3 * usual, th.loss_jump * level) and x[i] > (1 + th.loss_jump) * level
        if level > 0 and big and ((x[i] - level > 5 * local and _unprecedented(x, i)) or lasting):
            out.append(i)
            ratio = max(ratio, (x[i] - level) / (th.loss_jump * level))  # in units of the jump threshold
    return out, ratio


def f_loss_spike(v: View) -> Optional[Finding]:
    c = v.c(("loss",) if v.algo != "ppo" else ("loss/policy_avg",))
    if c.n < 4:
        return None
    idx, ratio = _loss_spikes(v, c)
    if not idx:
        return None
    signed_ratio = v.th.spike_factor if v.algo in ("grpo", "rloo", "ppo") or c.values.min() < 0 else 1.0
    i = idx[0]
    before = float(np.median(np.abs(c.values[:i])))
    jumps = ", ".join(
        f"step {int(c.steps[j])}: {num(c.values[j - 1], 4)} -> {num(c.values[j], 4)}"
        + (f" ({c.values[j] / c.values[j - 1] - 1:+.0%})" if c.values[j - 1] > 0 else "")
        for j in idx[:3]
    )
    surrogate = signed_ratio > 1.0  # a policy-gradient loss measures no progress: the reward judges the harm
    # a preference loss over a few pairs a step: one misordered pair lifts it for a step; the margin judges the harm
    if surrogate:
        progress, what = v.reward, "reward"
        harmed = _harmed(v, float(c.steps[i]), float(c.steps[idx[-1]]))
    else:
        progress, what = _preference_progress(v)
        harmed = progress.n < 6 or not _pairs_held(v, progress, [float(c.steps[j]) for j in idx])
    if progress.n >= 6 and not harmed:
        return Finding(
            "loss_spike",
            "info",
            f"{len(idx)} loss spike(s) against a typical |loss| of {num(before, 4)}: {jumps}; the {what} went on "
            "as before",
            v.steps(c, idx),
            "an outlier batch (a few groups with extreme advantages or ratios); gradient clipping held it"
            if surrogate
            else "an outlier batch (a few pairs the policy ranks the wrong way); the next updates went on as before",
            v.rec("Nothing to change unless spikes recur; the samples at those steps show what caused them."),
            confidence=0.6,
            onset=int(c.steps[i]),
        )
    return Finding(
        "loss_spike",
        "critical" if len(idx) > 2 else "warning",
        f"{len(idx)} loss spike(s) against a typical |loss| of {num(before, 4)}: {jumps}",
        v.steps(c, idx),
        "an update far larger than the ones before it: learning rate too high for this batch, or an outlier batch "
        "without enough gradient clipping",
        v.rec(
            "Lower the learning rate, clip gradients harder and warm up.",
            v.change("learning_rate", "decrease", 0.5),
            v.change("max_grad_norm", "decrease", 0.5),
            v.change("warmup_steps", "increase", 2.0),
        ),
        confidence=v.confidence(ratio, signed_ratio, 0.75 if len(idx) > 1 else 0.65),
        onset=int(c.steps[i]),
    )


def f_loss_flat(v: View) -> Optional[Finding]:
    """A log whose only measure of learning is a positive loss (no reward or preference column: a trainer's
    ``Step | Training Loss`` table of a preference or fine-tuning run) where the loss did not fall: its last fifth
    less than 5 % below its first beyond the loss's noise (the confidence is that test's 1 - p; a drift of 1 % over
    thousands of steps is significant, and still no learning). Policy-gradient surrogates are skipped: they sit
    near 0 on a healthy run."""
    if v.algo in ("grpo", "rloo", "ppo") or v.reward or v.c(keys.PREFERENCE):
        return None
    loss = v.c(("loss",))
    if loss.n < 8 or float(loss.values.min()) <= 0:
        return None
    z, _ = trend_test(v, loss)
    if z is None:
        return None
    first, last = loss.early(0.2), loss.late(0.2)
    tolerance = 0.05 * first.mean()  # a fall of 5 % is learning, however slow
    p = level_test(loss, Curve(last.steps, last.values + tolerance), first)[1]
    if last.mean() > first.mean() + tolerance:  # rising: not this finding
        return None
    went = f"loss_flat: the loss went {num(first.mean(), 4)} -> {num(last.mean(), 4)}"
    if warming_up(v):
        v.weak.append(f"{went}, but the learning rate is still warming up")
        return None
    if p >= 0.05:
        if p < 0.5:
            v.weak.append(f"{went}, not shown within 5 % of the first fifth ({pval(p)})")
        return None
    return Finding(
        "loss_flat",
        "warning",
        f"the loss, the only measure of learning in this log, did not fall: {num(first.mean(), 4)} over the first "
        f"fifth, {num(last.mean(), 4)} over the last ({loss.n} logged steps; less than a 5 % fall, {pval(p)}; "
        f"Mann-Kendall z={z:.1f})",
        [],
        "the updates do not change what the model is trained on: adapters frozen or not attached, a learning rate "
        "far too low for this set-up, or a loss term whose weight (a preference loss's beta) leaves it no gradient",
        v.rec(
            "Check that the trainable parameters receive gradients (a non-zero grad norm), then raise the learning "
            "rate or the weight of the trained term; log a reward, margin or accuracy to tell which."
        ),
        confidence=evidence_confidence(p, loss.n < SHORT),
    )


def f_loss_oscillation(v: View) -> Optional[Finding]:
    """A regression loss (PPO's value loss; a plain positive loss elsewhere) that alternates direction with a
    large amplitude. Policy-gradient losses (GRPO/RLOO, PPO's policy loss) oscillate normally and are skipped."""
    if v.algo in ("grpo", "rloo") or (v.algo is None and v.reward):  # an RL log's loss is a surrogate
        return None
    c = v.c(keys.VALUE_LOSS) if v.algo == "ppo" else v.c(("loss",))
    if c.n < 8:
        return None
    late = c.late(v.th.window).values
    mean, std = float(late.mean()), float(late.std())
    if abs(mean) <= 0.5 * std:  # centred on zero: a policy-gradient loss
        return None
    d = np.diff(late)
    flips = float(np.mean(np.sign(d[1:]) != np.sign(d[:-1]))) if d.size > 2 else 0.0
    cv = std / abs(mean)
    # alternation, not noise: white noise flips direction on 2/3 of steps too, but its successive values are
    # uncorrelated; an overshooting loss swings up, down, up (lag-1 autocorrelation well below 0)
    x = late - np.convolve(late, np.ones(3) / 3, mode="same") if late.size >= 6 else late - mean
    lag1 = float(np.corrcoef(x[:-1], x[1:])[0, 1]) if x.size >= 4 and x.std() > 0 else 0.0
    if flips < v.th.oscillation_sign_changes or cv < 0.5 or lag1 > -0.7:
        return None
    return Finding(
        "loss_oscillation",
        "warning",
        f"late-window loss alternates direction on {flips:.0%} of steps with CV {cv:.2f} around mean {num(mean, 4)} "
        f"(lag-1 autocorrelation {lag1:+.2f})",
        [],
        "updates overshoot: the learning rate is high for the loss landscape",
        v.rec("Lower the learning rate.", v.change("learning_rate", "decrease", 0.5)),
        confidence=v.confidence(flips, v.th.oscillation_sign_changes, 0.6),
    )


def _harmed(v: View, first: float, last: float) -> bool:
    """Did spikes between steps ``first`` and ``last`` do harm? A NaN after them, or the reward after them below
    the reward before them beyond its noise and by ``flat_gain`` of its scale (a smooth reward of 256 prompts a
    step shows a 2 % dip as significant: not harm)."""
    r = v.reward
    before, after = r.slice(r.steps < first), r.slice(r.steps > last)
    harm = bool(keys.non_finite_steps([x for x in v.records if x.get("step", 0) > last]))
    if r.n >= 3 and before and after:
        drop = float(before.late(0.5).mean() - after.mean())
        harm = harm or (level_test(r, before.late(0.5), after)[1] < 0.05 and drop >= v.th.flat_gain * shape(v)["scale"])
    return harm


def _preference_progress(v: View) -> tuple[Curve, str]:
    """What a preference run's progress is read on: its reward margin, else its pair accuracy."""
    margin = v.c(keys.PREF_MARGIN)
    return (margin, "margin") if margin else (v.c(keys.PREF_ACCURACY), "pair accuracy")


def _pairs_held(v: View, progress: Curve, spikes: List[float]) -> bool:
    """Did a preference loss's spikes leave the ranking as it was? No NaN after them, and after each spike the
    margin (pair accuracy) of the next 10 steps not below the 20 steps before it beyond its noise and
    by ``flat_gain`` of its scale. A harmful update shows at once; a few misordered pairs of a small batch leave
    the next steps as they were. A spike at an end of the log (no step after it) is not shown harmless."""
    if keys.non_finite_steps([x for x in v.records if x.get("step", 0) > spikes[0]]):
        return False
    scale = shape(v, progress)["scale"]
    for s in spikes:
        at = int(np.searchsorted(progress.steps, s, side="right"))
        before = Curve(progress.steps[max(0, at - 21) : at - 1], progress.values[max(0, at - 21) : at - 1])
        after = Curve(progress.steps[at : at + 10], progress.values[at : at + 10])
        if before.n < 3 or not after:
            return False
        drop = before.mean() - after.mean()
        if level_test(progress, before, after, tests=len(spikes))[1] < 0.05 and drop >= v.th.flat_gain * scale:
            return False
    return True


def _spike_finding(v: View, fid: str, names, what: str, cause: str, rec) -> Optional[Finding]:
    """Spikes (:func:`~sweeprl.analysis.rules.base.spike_points`). Spikes the run recovered from (finite values
    after them, the reward no lower than before beyond its noise) are information."""
    c = v.c(names)
    if c.n < 6:
        return None
    r = v.reward
    idx = spike_points(v, c)
    if not idx:
        return None
    base = float(np.percentile(c.values[: idx[0]], 75))
    worst = float(max(c.values[i] for i in idx))
    first, last = float(c.steps[idx[0]]), float(c.steps[idx[-1]])
    judged = "reward"
    if not r and v.algo == "dpo":  # a preference run: its ranking of the pairs judges the harm
        progress, judged = _preference_progress(v)
        recovered = progress.n >= 6 and _pairs_held(v, progress, [float(c.steps[i]) for i in idx])
    else:
        recovered = not _harmed(v, first, last) and (bool(r) or len(idx) <= 2)
    evidence = (
        f"{len(idx)} {what} spike(s) above {v.th.spike_factor:g}x the upper quartile before them; largest "
        f"{num(worst, 4)} vs {num(base, 4)}"
    )
    if recovered:
        return Finding(
            fid,
            "info",
            evidence + f", and the {judged} went on as before",
            v.steps(c, idx),
            "an outlier batch; gradient clipping held it",
            v.rec("Nothing to change unless spikes recur; the samples at those steps show what caused them."),
            confidence=0.6,
            onset=int(first),
        )
    return Finding(
        fid,
        "critical" if len(idx) >= 3 else "warning",
        evidence,
        v.steps(c, idx),
        cause,
        rec,
        confidence=min(0.95, 0.65 + 0.1 * len(idx)),
        onset=int(first),
    )


def f_grad_norm_spike(v: View) -> Optional[Finding]:
    return _spike_finding(
        v,
        "grad_norm_spike",
        keys.GRAD_NORM,
        "gradient-norm",
        "exploding updates: some batches push the weights far harder than the rest",
        v.rec(
            "Clip gradients harder and lower the learning rate; inspect the samples at the spiking steps.",
            v.change("max_grad_norm", "decrease", 0.5),
            v.change("learning_rate", "decrease", 0.5),
        ),
    )


def f_value_loss_spike(v: View) -> Optional[Finding]:
    return _spike_finding(
        v,
        "value_loss_spike",
        keys.VALUE_LOSS,
        "value-loss",
        "the critic's targets jumped (reward scale change or a bad batch); a large value loss dominates the "
        "shared trunk",
        v.rec(
            "Lower the value-loss weight and clip value updates harder.",
            v.change("vf_coef", "decrease", 0.5),
            v.change("cliprange_value", "decrease", 0.5),
        ),
    )


def f_explained_variance_negative(v: View) -> Optional[Finding]:
    c = v.c(keys.EXPLAINED_VARIANCE)
    if c.n < 4:
        return None
    late = c.late(v.th.window)
    k = 3 if v.short else 10
    onset = first_sustained(c.values < 0, min(k, c.n))
    if late.mean() >= 0 or onset is None:
        return None
    return Finding(
        "explained_variance_negative",
        "warning",
        f"value head explained variance {num(late.mean(), 3)} in the late window (below 0 since step "
        f"{int(c.steps[onset])})",
        [],
        "the value head predicts returns worse than their mean: its advantages are noise",
        v.rec(
            "Lower the learning rate (the value head learns with it) and the value-loss weight.",
            v.change("learning_rate", "decrease", 0.5),
            v.change("vf_coef", "decrease", 0.5),
        ),
        confidence=0.8,
        onset=int(c.steps[onset]),
    )
