"""Rules on the optimisation itself: non-finite values, loss, gradient and value-loss spikes, the value head."""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.curves import Curve
from sweeprl.analysis.rules.base import Finding, View, first_sustained
from sweeprl.analysis.stability import spike_indices
from sweeprl.formatting import num


def f_non_finite(v: View) -> Optional[Finding]:
    bad = keys.non_finite_steps(v.records)
    if not bad:
        return None
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
    for i in range(1, n):  # a positive loss (SFT-style, value loss, epoch tables): a jump above its running level
        level = float(np.median(x[:i]))
        usual = float(np.median(np.abs(np.diff(x[:i])))) if i >= 3 else 0.0
        rise = float(x[i] - x[i - 1])
        if level > 0 and rise > max(3 * usual, th.loss_jump * level) and x[i] > (1 + th.loss_jump) * level:
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


def f_loss_oscillation(v: View) -> Optional[Finding]:
    """A regression loss (PPO's value loss; a plain positive loss elsewhere) that alternates direction with a
    large amplitude. Policy-gradient losses (GRPO/RLOO, PPO's policy loss) oscillate normally and are skipped."""
    if v.algo in ("grpo", "rloo"):
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
    if flips < v.th.oscillation_sign_changes or cv < 0.5:
        return None
    return Finding(
        "loss_oscillation",
        "warning",
        f"late-window loss alternates direction on {flips:.0%} of steps with CV {cv:.2f} around mean {num(mean, 4)}",
        [],
        "updates overshoot: the learning rate is high for the loss landscape",
        v.rec("Lower the learning rate.", v.change("learning_rate", "decrease", 0.5)),
        confidence=v.confidence(flips, v.th.oscillation_sign_changes, 0.6),
    )


def _spike_finding(v: View, fid: str, names, what: str, cause: str, rec) -> Optional[Finding]:
    c = v.c(names)
    if c.n < 6:
        return None
    idx = spike_indices(c.values, factor=v.th.spike_factor, warmup=max(3, math.ceil(0.05 * c.n)))
    if not idx:
        return None
    med = float(np.median(c.values[: idx[0]]))
    worst = float(max(c.values[i] for i in idx))
    return Finding(
        fid,
        "critical" if len(idx) >= 3 else "warning",
        f"{len(idx)} {what} spike(s) above {v.th.spike_factor:g}x the median before them; largest "
        f"{num(worst, 4)} vs {num(med, 4)}",
        v.steps(c, idx),
        cause,
        rec,
        confidence=min(0.95, 0.65 + 0.1 * len(idx)),
        onset=int(c.steps[idx[0]]),
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
