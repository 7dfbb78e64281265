"""Rules on the policy: entropy, KL against the reference, the size of the updates."""

from __future__ import annotations

from typing import Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.curves import Curve
from sweeprl.analysis.rules.base import Finding, View, before_learning, first_sustained, flat_shape, policy_still
from sweeprl.formatting import num


def _entropy_windows(v: View) -> Optional[tuple[Curve, float, float]]:
    ent = v.c(keys.ENTROPY)
    if ent.n < 3:
        return None
    start, end = ent.early(v.th.window).mean(), ent.late(v.th.window).mean()
    return (ent, start, end) if start > 0 else None


def f_entropy_collapse(v: View) -> Optional[Finding]:
    got = _entropy_windows(v)
    if got is None:
        return None
    ent, start, end = got
    drop = 1 - end / start
    if drop < v.th.entropy_drop:
        return None
    onset = first_sustained(ent.values < (1 - v.th.entropy_drop) * start, min(3, ent.n))
    onset_step = int(ent.steps[onset]) if onset is not None else None
    if before_learning(v, onset_step):
        rec = v.rec(
            f"Lower the learning rate 10x: the entropy collapsed by step {onset_step}, before the reward gained "
            "anything, so the first updates were far too large, not a little; raise the KL coefficient too.",
            v.change("learning_rate", "decrease", 0.1),
            v.change("kl_coef", "increase", 2.0),
        )
    else:
        rec = v.rec(
            "Lower the learning rate and raise the KL coefficient (or the temperature).",
            v.change("learning_rate", "decrease", 0.5),
            v.change("kl_coef", "increase", 2.0),
        )
    return Finding(
        "entropy_collapse",
        "critical" if drop > 0.9 else "warning",
        f"entropy fell {drop:.0%} (from {num(start, 3)} to {num(end, 3)})",
        [],
        "the policy became (nearly) deterministic: exploration stopped, later updates only sharpen what it has",
        rec,
        confidence=v.confidence(drop, v.th.entropy_drop, 0.7),
        onset=onset_step,
    )


def f_entropy_rising(v: View) -> Optional[Finding]:
    got = _entropy_windows(v)
    if got is None:
        return None
    ent, start, end = got
    rise = end / start - 1
    if rise < v.th.entropy_rise:
        return None
    return Finding(
        "entropy_rising",
        "warning",
        f"entropy rose {rise:.0%} (from {num(start, 3)} to {num(end, 3)})",
        [],
        "the policy is turning to noise: updates push it away from anything it had learned (divergence)",
        v.rec(
            "Lower the learning rate; raise the KL coefficient to hold the policy near the reference.",
            v.change("learning_rate", "decrease", 0.5),
            v.change("kl_coef", "increase", 2.0),
        ),
        confidence=v.confidence(rise, v.th.entropy_rise, 0.65),
    )


def f_entropy_unstable(v: View) -> Optional[Finding]:
    got = _entropy_windows(v)
    if got is None or got[0].n < 6:
        return None
    ent, start, _ = got
    vol = float(np.std(np.diff(ent.values) / np.sqrt(np.diff(ent.steps)))) / start
    if vol < v.th.entropy_volatility or policy_still(v):  # a still policy: the prompts move the entropy
        return None
    return Finding(
        "entropy_unstable",
        "warning",
        f"entropy step-to-step volatility {vol:.2f} of its starting level",
        [],
        "the sampling distribution lurches between updates",
        v.rec("Lower the learning rate.", v.change("learning_rate", "decrease", 0.5)),
        confidence=v.confidence(vol, v.th.entropy_volatility, 0.65),
    )


def f_kl_negative(v: View) -> Optional[Finding]:
    kl = v.c(keys.KL)
    if kl.n < 3:
        return None
    frac = float((kl.values < 0).mean())
    if frac < v.th.kl_negative_frac or float(kl.values.min()) > v.th.kl_negative_min:
        return None
    idx = [i for i, x in enumerate(kl.values) if x < 0]
    temp = v.advice.current("temperature")
    to_one = v.change("temperature", "set", value=1.0) if temp not in (None, 1, 1.0) else None
    return Finding(
        "kl_negative",
        "warning",
        f"KL estimate negative on {frac:.0%} of steps (min {num(float(kl.values.min()), 3)})",
        v.steps(kl, idx),
        "sampling/estimator mismatch: the k1 estimator is only non-negative on average when completions are sampled "
        "from exactly the policy that is scored (temperature 1, no top-p/top-k); otherwise, or with too few samples, "
        "it goes negative",
        v.rec(
            "Sample at temperature 1.0 without top-p/top-k truncation, or use the k3 estimator (PPO: "
            "algo.kl_estimator=k3; GRPO's kl is k3 already).",
            to_one,
            v.change("kl_estimator", "set", value="k3") if v.algo == "ppo" else None,
        ),
        confidence=v.confidence(frac, v.th.kl_negative_frac, 0.7),
        onset=int(kl.steps[idx[0]]),
    )


def f_kl_above_target(v: View) -> Optional[Finding]:
    kl = v.c(keys.KL)
    if kl.n < 3:
        return None
    target = v.target_kl
    frac = float((kl.values > target).mean())
    late = kl.late(v.th.window).mean()
    if frac < v.th.kl_above_frac or late <= target:
        return None
    idx = [i for i, x in enumerate(kl.values) if x > target]
    onset = first_sustained(kl.values > target, min(3, kl.n))
    return Finding(
        "kl_above_target",
        "critical" if late > 5 * target else "warning",
        f"KL above target {num(target, 3)} on {frac:.0%} of steps (late mean {num(late, 3)}, max "
        f"{num(float(kl.values.max()), 3)})",
        v.steps(kl, idx),
        "the policy drifts from the reference faster than the KL penalty holds it: learning rate too high or KL "
        "coefficient too low",
        v.rec(
            "Raise the KL coefficient and lower the learning rate.",
            v.change("kl_coef", "increase", 2.0),
            v.change("learning_rate", "decrease", 0.5),
        ),
        confidence=v.confidence(late, target, 0.6),
        onset=int(kl.steps[onset]) if onset is not None else None,
    )


def f_clip_fraction_high(v: View) -> Optional[Finding]:
    cf = v.c(keys.CLIP_FRACTION)
    if cf.n < 3:
        return None
    late = cf.late(v.th.window).mean()
    if late < v.th.clip_fraction:
        return None
    return Finding(
        "clip_fraction_high",
        "warning",
        f"clip fraction {late:.2f} in the late window",
        [],
        "most tokens hit the trust-region clip: updates are too large for the clip range",
        v.rec("Lower the learning rate.", v.change("learning_rate", "decrease", 0.5)),
        confidence=v.confidence(late, v.th.clip_fraction, 0.7),
    )


def f_updates_too_small(v: View) -> Optional[Finding]:
    if v.reward.n < 5 or flat_shape(v) is None:
        return None
    akl, cf, ent, kl = v.c(keys.APPROX_KL), v.c(keys.CLIP_FRACTION), v.c(keys.ENTROPY), v.c(keys.KL)
    tiny_akl = akl.n > 0 and akl.mean() < v.th.approx_kl_small
    no_clip = cf.n > 0 and cf.mean() < 1e-4
    ent_still = ent.n > 1 and abs(float(ent.values[-1] - ent.values[0])) < 1e-3 * max(abs(float(ent.values[0])), 1e-9)
    kl_tiny = kl.n > 0 and float(np.abs(kl.values).mean()) < v.th.approx_kl_small
    if not (tiny_akl or (no_clip and (ent_still or kl_tiny))):
        return None
    bits = []
    if akl.n:
        bits.append(f"approx-KL {num(akl.mean(), 3)}")
    if cf.n:
        bits.append(f"clip fraction {num(cf.mean(), 3)}")
    if ent.n > 1:
        bits.append(f"entropy {num(float(ent.values[0]), 4)} -> {num(float(ent.values[-1]), 4)}")
    return Finding(
        "updates_too_small",
        "warning",
        "reward flat while the policy barely moves: " + ", ".join(bits),
        [],
        "the learning rate is too low: each update changes the policy by almost nothing",
        v.rec("Raise the learning rate (by 3-10x).", v.change("learning_rate", "increase", 3.0)),
        confidence=0.85,
    )
