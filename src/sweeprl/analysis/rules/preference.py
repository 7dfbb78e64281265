"""Rules for preference optimisation logs (DPO, ORPO, KTO, CPO, SimPO): the loss, the implicit rewards of the
chosen and rejected answers, their margin and the pair accuracy (TRL's names; LLaMA-Factory's ``accuracy``).

DPO's loss starts at ln 2 (the policy equals the reference) and falls as the margin grows. Two failures are
visible in these columns: a run that never leaves ln 2 (no preference is learned), and one that drives the loss
to ~0 while the *chosen* answers lose likelihood too (over-optimisation: both log-probabilities fall, the
margin explodes; what more epochs or a small beta do). A pair accuracy near 1 alone is not overfitting: the
chosen reward must fall with it.
"""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.curves import Curve
from sweeprl.analysis.rules.base import (
    SHORT,
    Finding,
    View,
    below_zero,
    evidence_confidence,
    level_test,
    pval,
    trend_test,
    warming_up,
)
from sweeprl.formatting import num

LN2 = math.log(2)
#: the loss of a policy that equals its reference: ln 2 for DPO-type losses, 0.5 for KTO (1 - sigmoid(0))
START = {"kto": 0.5}


def _eval_turn(v: View) -> str:
    """Evidence from the eval curves, read on their own: an eval loss that bottomed out and rose again."""
    ev = v.eval_curve(keys.LOSS)
    if ev.n < 3:
        return ""
    i = int(np.argmin(ev.values))
    if i >= ev.n - 1 or ev.values[-1] < ev.values[i] * 1.1:
        return ""
    return f"; eval loss bottomed at {num(float(ev.values[i]), 3)} (step {int(ev.steps[i])}) and rose to " + num(
        float(ev.values[-1]), 3
    )


def _memorising(v: View, late_loss: float, margin) -> Optional[str]:
    """Evidence, as text, that the pairs are memorised: the loss under 0.01 on most steps (separated at once),
    or under 0.05 (pairs ~e^3 apart) with the margin still rising significantly over the second half (the eval
    margin when only the evaluation records have one: a notebook table of train loss and eval metrics)."""
    loss = v.c(("loss",))
    if loss.n >= 6 and float(np.mean(loss.values < 0.01)) >= 0.5:
        return (
            f"loss under 0.01 on {float(np.mean(loss.values < 0.01)):.0%} of the logged steps (from step "
            f"{int(loss.steps[int(np.argmax(loss.values < 0.01))])}): the pairs were separated at once and the rest "
            "of the run only inflates the margin"
        )
    which = "margin"
    if margin.n < 8 and v.eval_curve(keys.PREF_MARGIN).n >= 8:
        margin, which = v.eval_curve(keys.PREF_MARGIN), "eval margin"
    if late_loss >= 0.05 or margin.n < 8:
        return None
    z, p = trend_test(v, margin.late(0.5))
    if z is None or z <= 0 or p >= 0.05:
        return None
    return (
        f"loss {num(late_loss, 3)} in the late window while the {which} keeps rising "
        f"({num(float(margin.late(0.5).values[0]), 3)} -> {num(margin.late(v.th.window).mean(), 3)}; Mann-Kendall "
        f"z={z:.1f}, {pval(p)})"
    )


def f_preference_overfit(v: View) -> Optional[Finding]:
    if v.algo != "dpo":
        return None
    loss, chosen = v.c(("loss",)), v.c(keys.PREF_CHOSEN)
    acc, margin = v.c(keys.PREF_ACCURACY), v.c(keys.PREF_MARGIN)
    if loss.n < 6:
        return None
    late_loss = loss.late(v.th.window).mean()
    late_acc = acc.late(v.th.window).mean() if acc.n >= 6 else None
    if late_loss > 0.15 and (late_acc is None or late_acc < 0.95):
        return None
    memorised = _memorising(v, late_loss, margin)
    if chosen.n < 6 and not memorised:  # the training rewards are not logged (a loss-only table)
        return None
    if memorised:
        return Finding(
            "preference_overfit",
            "warning",
            memorised + _eval_turn(v),
            [],
            "the training pairs are memorised: the loss is saturated and further steps only widen the margin, "
            "which generalises no better",
            v.rec(
                "Fewer epochs (or the checkpoint before the loss saturated); a larger beta or more pairs.",
                v.change("beta", "increase", 2.0),
            ),
            confidence=0.8,
        )
    # the implicit reward of the reference policy is 0: a chosen reward below 0 (or below where it started)
    # beyond its noise means the chosen answers lost likelihood
    late_c = chosen.late(v.th.window)
    late_chosen = late_c.mean()
    z, p = max(
        level_test(chosen, chosen.early(v.th.window), late_c),
        below_zero(chosen, late_c),
        key=lambda zp: zp[0],
    )
    late_margin = margin.late(v.th.window).mean() if margin.n else None
    fall = float(chosen.early(v.th.window).mean()) - late_chosen
    small_share = late_margin is not None and late_margin > 0 and fall < 0.15 * late_margin and not _eval_turn(v)
    if late_chosen >= 0 or p >= 0.05 or small_share:
        v.weak.append(
            f"preference_overfit: the loss reached {num(late_loss, 3)}"
            + (f" and pair accuracy {num(late_acc, 2)}" if late_acc is not None else "")
            + f", but the chosen reward did not fall beyond its noise ({num(chosen.early(v.th.window).mean(), 3)} "
            f"-> {num(late_chosen, 3)}, {pval(p)}"
            + (f"; a fall under 15% of the margin {num(late_margin, 3)}" if small_share else "")
            + "): the margin grows by pushing the rejected answers down"
        )
        return None
    more = f", margin {num(late_margin, 3)}" if late_margin is not None else ""
    return Finding(
        "preference_overfit",
        "warning",
        f"loss {num(late_loss, 3)} in the late window"
        + (f", pair accuracy {num(late_acc, 2)}" if late_acc is not None else "")
        + f", while the chosen reward fell {num(chosen.early(v.th.window).mean(), 3)} -> {num(late_chosen, 3)} "
        f"(beyond its noise: z={z:.1f}, {pval(p)}){more}{_eval_turn(v)}",
        [],
        "over-optimisation: the policy pushes the rejected answers down and drags the chosen ones with them; "
        "the loss is saturated and further steps only widen the margin",
        v.rec(
            "Stop earlier (fewer epochs, or the checkpoint where the eval loss was lowest) and hold the policy "
            "closer to the reference with a larger beta; an SFT term on the chosen answers (RPO) keeps their "
            "likelihood up. The learning rate is not the evident cause.",
            v.change("beta", "increase", 2.0),
        ),
        confidence=evidence_confidence(p, v.short),
    )


def _no_gradient(v: View, bits: List[str]) -> Finding:
    return Finding(
        "preference_no_learning",
        "critical",
        "; ".join(bits) + "; gradient norm 0 at every step",
        [],
        "no gradient reaches the weights: the policy never changes (frozen or unattached adapters, a loss detached "
        "from the trainable parameters, or a reference that is the policy itself)",
        v.rec("Fix the set-up before any hyperparameter: check which parameters require gradients."),
        confidence=0.95,
    )


def f_preference_no_learning(v: View) -> Optional[Finding]:
    """No preference is learned: a DPO-type loss (or ORPO's odds-ratio term, ``-log_odds_ratio``) that stays at
    ln 2 with the margin ~0 and the pair accuracy ~0.5, or (any preference loss) a margin that never rises above 0
    beyond its noise with the pair accuracy at most 0.5 over the second half (unless both are still rising)."""
    if v.algo != "dpo":
        return None
    loss, acc, margin = v.c(("loss",)), v.c(keys.PREF_ACCURACY), v.c(keys.PREF_MARGIN)
    odds = v.c(keys.PREF_LOG_ODDS)
    if loss.n < 6:
        return None
    term = Curve(odds.steps, -odds.values) if odds.n >= 6 else loss  # the preference part of the loss
    late = term.late(max(v.th.window, 0.5))
    z, p = trend_test(v, term)
    bits = []
    start = START.get(v.named_algo or "", LN2)
    # at its start over the late half, and not falling: a fall of under 1 % of the start over the whole run
    # (0.6934 -> 0.6904 in 3 epochs) is drift, however significant, not a preference learned
    drift = float(term.early(0.2).mean() - term.late(0.2).mean()) < 0.01 * start
    at_ln2 = abs(late.mean() - start) <= 0.05 and not (z is not None and z < 0 and p < 0.05 and not drift)
    tied = margin.n >= 6 and float(np.abs(margin.values).max()) == 0.0  # every pair tied: accuracy reads 0
    gn = v.c(keys.GRAD_NORM)
    dead = gn.n >= 3 and float(np.abs(gn.values).max()) == 0.0
    if dead and not at_ln2 and not (z is not None and z < 0 and p < 0.05):
        # no gradient and a loss that does not fall, wherever it sits (the reference need not be the start)
        return _no_gradient(v, [f"loss {num(late.mean(), 3)} over the last half, not falling"])
    if at_ln2:
        what = "the odds-ratio term -log_odds_ratio" if odds.n >= 6 else "loss"
        where = "KTO's start, 1 - sigmoid(0) = 0.5" if start != LN2 else f"ln 2 = {LN2:.3f}"
        bits.append(f"{what} {num(late.mean(), 3)} ({where}) over the last half")
        if acc.n >= 6 and not tied:
            a = acc.late(0.5).mean()
            if not 0.35 <= a <= 0.7:
                return None
            bits.append(f"pair accuracy {num(a, 2)}")
        if margin.n >= 6:
            m = margin.late(0.5).mean()
            if abs(m) > 0.2:
                return None
            bits.append("margin exactly 0 at every step" if tied else f"margin {num(m, 2)}")
        if z is not None:
            bits.append(f"no downward trend (Mann-Kendall z={z:.1f}, {pval(p)})")
    elif margin.n >= 6 and acc.n >= 6:
        second = margin.late(0.5)
        zm, pm = below_zero(margin, Curve(second.steps, -second.values))  # is the margin above 0?
        a = acc.late(0.5).mean()
        zr, pr = trend_test(v, margin)
        za, pa = trend_test(v, acc)
        rising = zr is not None and za is not None and zr > 0 and pr < 0.05 and za > 0 and pa < 0.05
        if rising and pm >= 0.05 and a <= 0.5:
            v.weak.append(
                f"preference_no_learning: margin {num(second.mean(), 3)} and pair accuracy {num(a, 2)} over the "
                f"second half, but both rise (Mann-Kendall {pval(pr)}, {pval(pa)}): slow, not stuck"
            )
            return None
        if pm < 0.05 or a > 0.5:
            return None
        bits.append(
            f"margin {num(second.mean(), 3)} over the second half, not above 0 beyond its noise, and pair accuracy "
            f"{num(a, 2)}: the policy does not prefer the chosen answers more than the reference does"
        )
        p = pm
    else:
        return None
    if dead:
        return _no_gradient(v, bits)
    lr = v.c(("learning_rate",))
    warming = warming_up(v)
    if warming and loss.n < SHORT:  # a handful of warm-up steps: ln 2 is where DPO starts, not a verdict
        v.weak.append(f"preference_no_learning: {'; '.join(bits)}, but these are {loss.n} warm-up steps")
        return None
    lm_z = trend_test(v, loss)[0] if odds.n >= 6 else None
    lm_fell = lm_z is not None and lm_z < 0
    if not at_ln2 or lm_fell:  # the loss moved (ORPO's language-model term): the preference term is what fails
        return Finding(
            "preference_no_learning",
            "warning",
            "; ".join(bits),
            [],
            "the preference term is not learned (the loss falls through its language-model part): the pairs do not "
            "separate under this weighting or data",
            v.rec(
                "Check the pairs (chosen really better, not near-duplicates of the rejected ones) and give the "
                "preference term more weight (ORPO's beta, DPO's beta); the learning rate is not the evident cause."
            ),
            confidence=evidence_confidence(p, loss.n < SHORT),
        )
    return Finding(
        "preference_no_learning",
        "warning",
        "; ".join(bits) + (f"; the learning rate is still rising ({num(float(lr.values[-1]), 2)})" if warming else ""),
        [],
        "the policy has not moved from the reference: its updates are too small to change which answer it prefers",
        v.rec(
            "Raise the learning rate (or shorten its warm-up); check the chosen and rejected answers really differ.",
            v.change("learning_rate", "increase", 3.0),
        ),
        confidence=evidence_confidence(p, loss.n < SHORT) if p is not None else 0.6,
    )
