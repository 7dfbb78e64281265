"""Rules on the policy: entropy, KL against the reference, the size of the updates."""

from __future__ import annotations

from typing import Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.advice import FIRST_KL_COEF
from sweeprl.analysis.curves import Curve
from sweeprl.analysis.rules.base import (
    Finding,
    View,
    before_learning,
    first_sustained,
    flat_shape,
    left_reference,
    policy_moved,
    policy_still,
    saturated,
    shape,
    trend_test,
    update_size,
)
from sweeprl.formatting import num


def _entropy_windows(v: View) -> Optional[tuple[Curve, float, float]]:
    ent = v.c(keys.ENTROPY)
    if ent.n < 3:
        return None
    start, end = ent.early(v.th.window).mean(), ent.late(v.th.window).mean()
    return (ent, start, end) if start > 0 else None


def _calm(v: View, text: str, factor: float, kl: bool = True) -> dict:
    """Advice for an entropy that moves too much: a smaller step where the log shows large updates; where the
    direct measures of the step (clip fraction, approx-KL) say the steps were small, the objective moved it."""
    size, why = update_size(v)
    if size == "large":
        return v.rec(
            text, v.change("learning_rate", "decrease", factor), v.change("beta", "increase", 2.0) if kl else None
        )
    return v.rec(
        f"Not the learning rate: {why}. Look at what the reward pays for (length, format, a term that favours "
        "noise) and hold the policy near the reference with a larger KL coefficient.",
        v.change("beta", "increase", 2.0) if kl else None,
    )


def f_entropy_collapse(v: View) -> Optional[Finding]:
    got = _entropy_windows(v)
    if got is None:
        return None
    ent, start, end = got
    drop = 1 - end / start
    if drop < v.th.entropy_drop:
        return _deterministic(v, end)
    onset = first_sustained(ent.values < (1 - v.th.entropy_drop) * start, min(3, ent.n))
    onset_step = int(ent.steps[onset]) if onset is not None else None
    s = shape(v) if v.reward.n >= 5 else None
    z, p = trend_test(v, v.reward)
    rising = z is not None and z > 0 and p < 0.05  # a small gain on a 0-1 scale, but beyond the reward's noise
    learned = s is not None and (
        (s["gain"] >= 2 * v.th.flat_gain * s["scale"] and s["late"] >= s["start"] + 0.5 * s["gain"])
        or (rising and s["late"] > s["start"])
    )
    after = _collapse_after_plateau(v, ent) if learned or saturated(v) else None
    if after is not None:
        text, rec = after
        return Finding(
            "entropy_collapse",
            "warning",
            text,
            [],
            "the policy keeps sharpening with nothing left to gain on these prompts: it drifts from the reference "
            "and loses the diversity that generalises",
            rec,
            confidence=v.confidence(drop, v.th.entropy_drop, 0.7),
            onset=onset_step,
        )
    if learned or saturated(v):
        return Finding(  # the policy sharpened onto what earns reward: what RL fine-tuning does
            "entropy_collapse",
            "info",
            f"entropy fell {drop:.0%} (from {num(start, 3)} to {num(end, 3)}) while "
            + (
                f"the reward rose ({num(s['start'], 3)} -> {num(s['late'], 3)})"
                if learned and s is not None
                else str(saturated(v))
            ),
            [],
            "the policy sharpened onto what earns reward; exploration is lower from here on",
            v.rec("Nothing to change while the reward holds; watch for a plateau (then raise the temperature)."),
            confidence=v.confidence(drop, v.th.entropy_drop, 0.7),
            onset=onset_step,
        )
    if before_learning(v, onset_step):
        rec = v.rec(
            f"Lower the learning rate 10x: the entropy collapsed by step {onset_step}, before the reward gained "
            "anything, so the first updates were far too large, not a little; raise the KL coefficient too.",
            v.change("learning_rate", "decrease", 0.1),
            v.change("beta", "increase", 2.0),
        )
    else:
        rec = v.rec(
            "Lower the learning rate and raise the KL coefficient (or the temperature).",
            v.change("learning_rate", "decrease", 0.5),
            v.change("beta", "increase", 2.0),
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


def _collapse_after_plateau(v: View, ent: Curve) -> Optional[tuple[str, dict]]:
    """(text, advice) when the entropy went on falling by ``entropy_drop`` or more after the reward reached its
    plateau (the first of 10 blocks at 90 % of the gain), over at least a third of the run, while the reward
    did not rise any more (no upward Mann-Kendall trend after it): the sharpening no longer buys reward."""
    r, s = v.reward, shape(v)
    if r.n < 10 or s["gain"] <= 0:
        return None
    blocks = r.blocks(10)
    reached = np.nonzero(blocks.values >= s["start"] + 0.9 * s["gain"])[0]
    if not reached.size or reached[0] > 6:
        return None
    plateau = float(blocks.steps[reached[0]])
    rest, later = ent.after(plateau), r.after(plateau)
    if rest.n < max(6, ent.n // 3) or later.n < 6:
        return None
    at, end = float(rest.values[: max(2, rest.n // 10)].mean()), rest.late(v.th.window).mean()
    if at <= 0 or 1 - end / at < v.th.entropy_drop:
        return None
    z, p = trend_test(v, later)
    if z is not None and z > 0 and p < 0.05:
        return None
    text = (
        f"entropy fell {1 - end / at:.0%} more ({num(at, 3)} -> {num(end, 3)}) after the reward reached its plateau "
        f"at step {int(plateau)} ({num(s['start'], 3)} -> {num(s['late'], 3)}), and the reward did not rise after "
        "it" + (f" (Mann-Kendall z={z:.1f})" if z is not None else "")
    )
    return text, _calm(v, "Lower the learning rate and raise the KL coefficient, or stop at the plateau.", 0.5)


def _deterministic(v: View, end: float) -> Optional[Finding]:
    """An entropy already near zero when the log begins (an excerpt of a long run, a resumed run): no fall to
    see, but a policy below ``entropy_floor`` nats per token samples one completion per prompt. With the reward
    flat and below its ceiling, that is the collapse; when it happened and why, the log does not show, so no
    learning-rate direction."""
    if end >= v.th.entropy_floor or v.reward.n < 5 or saturated(v) or flat_shape(v) is None:
        return None
    s = shape(v)
    return Finding(
        "entropy_collapse",
        "warning",
        f"entropy {num(end, 3)} nats per token in the late window (under {num(v.th.entropy_floor, 2)}: one "
        f"completion per prompt) while the reward stays flat ({num(s['start'], 3)} -> {num(s['late'], 3)})",
        [],
        "the policy is (nearly) deterministic: every sample of a prompt is the same completion, so there is nothing "
        "left to explore or compare",
        v.rec(
            "Restart from a checkpoint from before the entropy fell, with more sampling diversity (a higher "
            "temperature) and a larger KL coefficient to hold the policy near the reference.",
            v.change("temperature", "increase", 1.15),
            v.change("beta", "increase", 2.0),
        ),
        confidence=v.confidence(v.th.entropy_floor / max(end, 1e-9), 1.0, 0.7),
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
        _calm(v, "Lower the learning rate; raise the KL coefficient to hold the policy near the reference.", 0.5),
        confidence=v.confidence(rise, v.th.entropy_rise, 0.65),
    )


def f_entropy_unstable(v: View) -> Optional[Finding]:
    """The entropy lurches from step to step more in the late window than it did early (at least twice): the
    updates began to shake the policy. A volatility present from the start is the sampling noise of small
    batches, not instability."""
    got = _entropy_windows(v)
    if got is None or got[0].n < 8 or saturated(v):
        return None
    ent, start, _ = got

    def volatility(c: Curve) -> float:
        return float(np.std(np.diff(c.values) / np.sqrt(np.diff(c.steps)))) / start if c.n >= 3 else 0.0

    half = max(0.5, v.th.window)
    early, late = volatility(ent.early(half, 4)), volatility(ent.late(half, 4))
    if late < v.th.entropy_volatility or late < 2 * early or policy_still(v):
        return None
    return Finding(
        "entropy_unstable",
        "warning",
        f"entropy step-to-step volatility {late:.2f} of its starting level in the late half, {early:.2f} early",
        [],
        "the sampling distribution lurches between updates",
        _calm(v, "Lower the learning rate.", 0.5, kl=False),
        confidence=v.confidence(late / max(early, 1e-12), 2.0, 0.65),
    )


def f_kl_negative(v: View) -> Optional[Finding]:
    kl = v.c(keys.KL)
    if kl.n < 3 or v.algo == "dpo":  # KTO's kl is its reference point, not a sampled estimate
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
            v.change("kl_estimator", "set", value="k3"),
        ),
        confidence=v.confidence(frac, v.th.kl_negative_frac, 0.7),
        onset=int(kl.steps[idx[0]]),
    )


def f_kl_above_target(v: View) -> Optional[Finding]:
    kl = v.c(keys.KL)
    if kl.n < 3 or v.algo == "dpo":
        return None
    target = v.target_kl
    frac = float((kl.values > target).mean())
    late = float(np.median(kl.late(v.th.window).values))  # the level, not one-step outliers (a reference mismatch)
    if frac < v.th.kl_above_frac or late <= target:
        return None
    idx = [i for i, x in enumerate(kl.values) if x > target]
    onset = first_sustained(kl.values > target, min(3, kl.n))
    severity = "critical" if late > 5 * target else "warning"
    coef = v.c(keys.KL_COEF)
    unpenalised = coef.n >= 3 and float(np.abs(coef.values).max()) == 0.0  # the learning rate is not the lever
    if not v.target_kl_known and not unpenalised:  # a default target: only a KL that keeps growing is a problem
        z, p = trend_test(v, kl.late(0.5))
        growing = z is not None and z > 0 and p < 0.05
        if not growing and late < 10 * target:
            v.weak.append(
                f"kl_above_target: KL {num(late, 3)} is above the default target {num(target, 3)} but not growing "
                "(give --target-kl if the run had one)"
            )
            return None
    if unpenalised:
        cause = (
            "there is no KL penalty: nothing holds the policy near the reference, and it drifts as far as the "
            "reward pays"
        )
        rec = v.rec(
            "Add a KL penalty (a coefficient above 0); the learning rate is not the evident cause.",
            v.change("beta", "increase", value=FIRST_KL_COEF.get(v.algo or "grpo", 0.04)),
        )
    else:
        cause = (
            "the policy drifts from the reference faster than the KL penalty holds it: learning rate too high or "
            "KL coefficient too low"
        )
        rec = v.rec(
            "Raise the KL coefficient and lower the learning rate.",
            v.change("beta", "increase", 2.0),
            v.change("learning_rate", "decrease", 0.5),
        )
    return Finding(
        "kl_above_target",
        severity,
        f"KL above target {num(target, 3)} on {frac:.0%} of steps (late median {num(late, 3)}, max "
        f"{num(float(kl.values.max()), 3)})"
        + (" with the KL coefficient 0 at every logged step" if unpenalised else ""),
        v.steps(kl, idx),
        cause,
        rec,
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
    still = policy_still(v)
    if still:  # a clipped update moves the policy; a KL that never left ~0 says this column counts something else
        v.weak.append(
            f"clip_fraction_high: clip fraction {late:.2f} on a policy that never moved ({still}): the column "
            "disagrees with the KL"
        )
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
    if ent.n >= 3 and ent.late(v.th.window).mean() < v.th.entropy_floor:
        return None  # a deterministic policy: its updates are small because its samples never differ
    # an entropy that moved by half the collapse threshold, or a KL to the reference at a tenth of its target,
    # already says the updates changed the policy
    moved = policy_moved(v, share=0.5) or left_reference(v)
    if moved:  # a tiny (or rounded: verl prints 3 decimals) approx-KL is then not the story
        v.weak.append(f"updates_too_small: the approx-KL or clip fraction is tiny, but the policy moved ({moved})")
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
