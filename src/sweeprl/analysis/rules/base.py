"""What every rule shares: thresholds, the Finding record, the View of a run, and shape helpers."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.advice import Advice, as_dicts
from sweeprl.analysis.curves import Curve, curve, mann_kendall, noise_per_step
from sweeprl.formatting import num

SHORT = 12  # histories with fewer logged points than this are "short": person-sized evidence


@dataclass
class Thresholds:
    window: float = 0.25  # early/late windows as a share of the trained steps
    target_reward: Optional[float] = None
    target_kl: Optional[float] = None  # None: the run's objective.target_kl, else the algorithm's default
    flat_gain: float = 0.1  # best block mean less than this share of the reward scale above the start = flat
    collapse_drop: float = 0.4  # late level below the peak by this share of the gain = collapse
    variance_rise: float = 1.5  # late reward_std / early reward_std
    cv_high: float = 0.5
    best_of_n_gap: float = 0.2  # absolute gap between best-of-N and mean reward (late window)
    mode_collapse: float = 0.25  # late mean frac_reward_zero_std
    entropy_drop: float = 0.7  # relative drop from the first to the late window
    narrowing: float = 0.5  # an entropy drop that makes groups of alike scores a policy that narrowed
    entropy_rise: float = 0.5  # relative rise from the first to the late window
    entropy_volatility: float = 0.15
    entropy_floor: float = 0.01  # nats per token: below this in the late window a sampling policy is deterministic
    kl_negative_frac: float = 0.1
    kl_negative_min: float = -1e-3  # ignore negative estimates closer to zero than this (noise)
    kl_above_frac: float = 0.3
    clip_fraction: float = 0.2
    approx_kl_small: float = 1e-4
    length_corr: float = 0.7
    length_change: float = 0.3  # relative change of the mean completion length
    truncation: float = 0.3
    spike_factor: float = 10.0  # gradient norm, value loss, signed losses: x the median of the values before
    signed_loss_floor: float = 1.0  # policy-gradient losses: a spike is at least this large in magnitude
    loss_jump: float = 0.25  # positive losses: a rise above the running level by this share (and 3x the usual step)
    oscillation_sign_changes: float = 0.6
    min_points_trend: int = 8

    @classmethod
    def names(cls) -> List[str]:
        return [f.name for f in fields(cls)]


@dataclass
class Finding:
    id: str
    severity: str  # critical | warning | info
    evidence: str
    steps: List[int]
    cause: str
    recommendation: Dict[str, Any]  # {"text", "changes": [Change as dict]}
    confidence: float = 0.7
    onset: Optional[int] = None  # the step where the problem began

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class View:
    """A run as the rules see it: records, its algorithm, its config (for advice), the thresholds."""

    records: List[Dict[str, float]]
    algo: Optional[str]
    advice: Advice
    th: Thresholds
    target_kl: float
    target_kl_known: bool = True  # False: the default target for a log without config (foreign logs)
    weak: List[str] = field(default_factory=list)  # candidates below the evidence bar, as notes
    eval_records: List[Dict[str, float]] = field(default_factory=list)  # evaluation, read on its own
    named_algo: Optional[str] = None  # the algorithm the log's text names (kto within the dpo family)
    _cache: Dict[Any, Any] = field(default_factory=dict)

    def c(self, names: Sequence[str]) -> Curve:
        key = tuple(names)
        if key not in self._cache:
            self._cache[key] = curve(self.records, *names)
        return self._cache[key]

    def eval_curve(self, names: Sequence[str]) -> Curve:
        return curve(self.eval_records, *names)

    @property
    def reward(self) -> Curve:
        return self.c(keys.REWARD)

    @property
    def short(self) -> bool:
        return self.reward.n < SHORT

    def rec(self, text: str, *changes) -> Dict[str, Any]:
        return {"text": text, "changes": as_dicts(list(changes))}

    def change(self, param: str, direction: str, factor: Optional[float] = None, value: Any = None):
        return self.advice.change(param, direction, factor, value)

    def steps(self, c: Curve, idx: Sequence[int]) -> List[int]:
        return [int(c.steps[i]) for i in idx if 0 <= i < c.n][:20]

    def confidence(self, value: float, threshold: float, base: float = 0.7) -> float:
        """How far past its threshold the evidence is: base at the threshold, +0.3 per threshold multiple,
        in [0.5, 0.99]; 0.1 lower on short histories."""
        ratio = abs(value / threshold) if threshold else 2.0
        conf = base + 0.3 * (ratio - 1) - (0.1 if self.short else 0.0)
        return float(min(0.99, max(0.5, conf)))


def one_sided_p(z: float, df: Optional[int] = None) -> float:
    """P(T > z): Student's t with ``df`` degrees of freedom (the noise estimated from that many residuals; a
    short log's noise estimate is itself uncertain), a standard normal when ``df`` is None."""
    if df is None or df >= 200:
        return 0.5 * math.erfc(z / math.sqrt(2))
    if math.isinf(z):
        return 0.0 if z > 0 else 1.0
    df = max(1, df)
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + z * z))  # P(|T| > |z|) / 2
    return tail if z >= 0 else 1.0 - tail


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) by its continued fraction (modified Lentz), for
    Student's t above without a scipy dependency."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1) / (a + b + 2):  # the continued fraction converges fast on this side
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    tiny = 1e-300

    def clamp(v: float) -> float:
        return v if abs(v) > tiny else tiny

    c, d = 1.0, 1.0 / clamp(1.0 - (a + b) * x / (a + 1))
    h = d
    for m in range(1, 300):
        for coef in (
            m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m)),
        ):
            d = 1.0 / clamp(1.0 + coef * d)
            c = clamp(1.0 + coef / c)
            h *= d * c
        if abs(d * c - 1.0) < 1e-13:
            break
    front = math.exp(a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))
    return front * h / a


def pval(p: float) -> str:
    """``p=0.031`` / ``p<1e-06`` for evidence text."""
    return "p<1e-06" if p < 1e-6 else f"p={p:.2g}"


def _noise_df(c: Curve) -> int:
    """Degrees of freedom of the noise estimate: the interior points of the curve, less one."""
    return max(1, c.n - 3)


def level_test(c: Curve, high: Curve, low: Curve, tests: int = 1) -> tuple[float, float]:
    """(z, p): is the mean of ``high`` above the mean of ``low`` by more than the curve's own noise explains?
    The noise of one logged point comes from the whole curve (:func:`noise_per_step`, per point), the standard
    error from the points each window holds; ``tests`` corrects p for a window picked among that many (the peak
    block among 10: Bonferroni). A confidence quoted with a finding is ``1 - p``."""
    if not high or not low:
        return 0.0, 1.0
    per_point = noise_per_step(c) / math.sqrt(max(c.gap, 1e-12))
    diff = float(high.values.mean() - low.values.mean())
    if per_point <= 0:
        return (math.inf, 0.0) if diff > 0 else (0.0, 1.0)
    z = diff / (per_point * math.sqrt(1 / high.n + 1 / low.n))
    return z, min(1.0, tests * one_sided_p(z, _noise_df(c)))


def below_zero(c: Curve, window: Curve) -> tuple[float, float]:
    """(z, p): is the mean of ``window`` below 0 by more than the curve's noise explains?"""
    per_point = noise_per_step(c) / math.sqrt(max(c.gap, 1e-12))
    if not window or per_point <= 0:
        return 0.0, 1.0
    z = -float(window.values.mean()) / (per_point / math.sqrt(window.n))
    return z, one_sided_p(z, _noise_df(c))


def evidence_confidence(p: float, short: bool = False) -> float:
    """The confidence of a finding backed by a test with this p-value: 1 - p, in [0.5, 0.99] (0.1 less on a
    short history, whose noise estimate rests on a few points)."""
    return float(min(0.99, max(0.5, 1.0 - p - (0.1 if short else 0.0))))


def spike_points(v: View, c: Curve) -> List[int]:
    """Indices of the points of ``c`` (a gradient norm, a value loss) above ``spike_factor`` x the upper quartile
    of the values before them on steps with a learning signal: a sparse reward makes a gradient norm bimodal (~0
    where every group scored alike), so neither the median nor those steps are a baseline. A jump that lasts
    (the next points stay above a third of it) while the reward rises is the run starting to learn, not a spike."""
    warm = max(3, math.ceil(0.05 * c.n))
    zs = {float(r["step"]): r.get("frac_reward_zero_std") for r in v.records if "step" in r}
    signal = np.array([(z := zs.get(float(s))) is None or z < 1.0 for s in c.steps])
    r = v.reward
    idx = []
    for i in range(warm, c.n):
        prev = c.values[:i][signal[:i]] if signal[:i].sum() >= 3 else c.values[:i]
        base = float(np.percentile(prev, 75))
        if base <= 0 or c.values[i] <= v.th.spike_factor * base:
            continue
        after = c.values[i + 1 : i + 4]
        if after.size >= 2 and float(np.median(after)) >= c.values[i] / 3 and r:
            before_r, after_r = r.slice(r.steps < c.steps[i]), r.slice(r.steps >= c.steps[i])
            if before_r and after_r and after_r.mean() >= before_r.mean():
                continue
        idx.append(i)
    return idx


def missing_measures(v: View) -> str:
    """A sentence asking for the measures of the update size the log lacks (KL, entropy); "" when it has both."""
    missing = [
        name for name, names in (("the KL to the reference", keys.KL), ("the entropy", keys.ENTROPY)) if not v.c(names)
    ]
    if not missing:
        return ""
    return f" Log {' and '.join(missing)} to tell an update problem from a reward problem."


def update_size(v: View) -> tuple[Optional[str], str]:
    """What the log says about the size of the policy updates: ``("large", evidence)`` when they moved the
    policy a lot (entropy rose past its threshold, KL far above its target and rising, clip fraction or approx-KL
    high, gradient-norm spikes), ``("small", evidence)`` when they barely moved it (KL to the reference and
    approx-KL tiny, entropy and clip fraction still), ``(None, why)`` when the log has no measure of it. A
    learning-rate direction needs this evidence: the shape of the reward alone does not tell a step too large
    from a reward that stopped separating samples. Computed once per view."""
    if "update_size" not in v._cache:
        v._cache["update_size"] = _update_size(v)
    return v._cache["update_size"]


def dead_gradient(v: View) -> Optional[str]:
    """Evidence, as text, that no update reached the weights: the gradient norm is exactly 0 or not finite on at
    least 80 % of the logged steps that had a learning signal (a step whose groups all scored alike has a zero
    gradient by design). None otherwise."""
    rows = [r for r in v.records if any(k in r for k in keys.GRAD_NORM)]
    rows = [r for r in rows if r.get("frac_reward_zero_std", 0.0) < 1.0]
    if len(rows) < 5:
        return None
    values = [float(next(r[k] for k in keys.GRAD_NORM if k in r)) for r in rows]
    dead = sum(1 for x in values if x == 0 or not math.isfinite(x))
    if dead < 0.8 * len(values):
        return None
    return f"the gradient norm is 0 or NaN on {dead} of {len(values)} logged steps with a learning signal"


def _update_size(v: View) -> tuple[Optional[str], str]:
    th = v.th
    dead = dead_gradient(v)
    if dead:
        return None, f"{dead}: no update was applied"
    large: List[str] = []
    ent = v.c(keys.ENTROPY)
    if ent.n >= 3 and ent.early(th.window).mean() > 0:
        e0, e1 = ent.early(th.window).mean(), ent.late(th.window).mean()
        first = float(ent.values[0])
        if e1 / e0 - 1 >= th.entropy_rise:
            large.append(f"entropy {num(e0, 3)} -> {num(e1, 3)}")
        elif first > 0 and float(ent.values.max()) / first - 1 >= 2 * th.entropy_rise:
            large.append(f"entropy spiked {num(first, 3)} -> {num(float(ent.values.max()), 3)}")
        elif 1 - e1 / e0 >= th.entropy_drop and v.reward.n >= 3 and flat_shape(v) is not None:
            large.append(f"entropy {num(e0, 3)} -> {num(e1, 3)} while the reward did not rise")
        elif 1 - e1 / e0 >= th.entropy_drop and v.reward.n >= 3 and shape(v)["late"] < shape(v)["start"]:
            large.append(f"entropy {num(e0, 3)} -> {num(e1, 3)} while the reward fell")
    kl = v.c(keys.KL)
    if kl.n >= 3:
        late = float(np.median(kl.late(th.window).values))
        z, p = trend_test(v, kl)
        if late > 5 * v.target_kl or (late > v.target_kl and z is not None and z > 0 and p < 0.05):
            large.append(f"KL to the reference {num(late, 3)} (target {num(v.target_kl, 3)})")
    cf = v.c(keys.CLIP_FRACTION)
    if cf.n >= 3 and cf.late(th.window).mean() >= th.clip_fraction:
        large.append(f"clip fraction {num(cf.late(th.window).mean(), 3)}")
    akl = v.c(keys.APPROX_KL)
    if akl.n >= 3 and akl.late(th.window).mean() > 0.05:
        large.append(f"approx-KL {num(akl.late(th.window).mean(), 3)}")
    gn = v.c(keys.GRAD_NORM)
    if gn.n >= 6 and len(spikes := spike_points(v, gn)) >= 2:
        large.append(f"{len(spikes)} gradient-norm spikes")
    direct_small = []  # direct measures of the step: they outweigh the entropy, which the objective moves too
    if cf.n >= 3 and cf.mean() < 0.01:
        direct_small.append(f"clip fraction {num(cf.late(th.window).mean(), 2)}")
    if akl.n >= 3 and abs(akl.mean()) < 0.01:
        direct_small.append(f"approx-KL {num(akl.mean(), 2)}")
    if large and len(large) == 1 and large[0].startswith("entropy") and direct_small:
        return None, f"{large[0]}, but {' and '.join(direct_small)} show small steps: the objective moved it"
    if large:
        return "large", "; ".join(large)
    if ent.n >= 3 and ent.late(th.window).mean() < th.entropy_floor:
        return None, (
            f"entropy {num(ent.late(th.window).mean(), 2)}: a deterministic policy changes little at any learning rate"
        )
    small: List[str] = []
    if kl.n >= 3 and float(np.abs(kl.late(th.window).values).mean()) < 0.1 * v.target_kl:
        small.append(f"KL to the reference {num(float(np.abs(kl.values).max()), 2)} at most")
    if akl.n >= 3 and akl.mean() < th.approx_kl_small:
        small.append(f"approx-KL {num(akl.mean(), 2)}")
    if not (kl.n >= 3 or akl.n >= 3) and ent.n >= SHORT and float(ent.values[0]) > 0:
        e0, e1 = ent.early(th.window).mean(), ent.late(th.window).mean()
        if abs(e1 / e0 - 1) < 0.05:  # no KL logged: an entropy that never moved is the evidence left
            small.append(f"entropy {num(e0, 3)} -> {num(e1, 3)}")
    if small and policy_moved(v, share=0.5) is None and left_reference(v) is None:
        return "small", "; ".join(small)
    if kl.n or akl.n or ent.n or cf.n or gn.n:
        return None, "the KL, entropy, clip fraction and gradient norm in the log show neither large nor tiny updates"
    return None, "the log has no KL, entropy, clip fraction or gradient norm to tell the size of the updates"


def first_sustained(mask: np.ndarray, k: int) -> Optional[int]:
    """Start index of the last run of ``k``+ consecutive True values that lasts to the end, else of the first
    such run, else None."""
    runs, start = [], None
    for i, m in enumerate(list(mask) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            if i - start >= k:
                runs.append((start, i))
            start = None
    if not runs:
        return None
    last = runs[-1]
    return last[0] if last[1] == len(mask) else runs[0][0]


def shape(v: View, curve: Optional[Curve] = None) -> Dict[str, float]:
    """The reward's (or ``curve``'s) coarse shape from 10 block means: start, peak (and its step), late level,
    gain, and the scale: the range the curve spans, at least 1 when every value lies in [0, 1] (pass rates,
    fractions: a run stuck at 0.04 has not learned, however small its own range)."""
    r = v.reward if curve is None else curve
    blocks = r.blocks(10)
    start, late = float(blocks.values[0]), float(blocks.values[-1])
    if blocks.n >= 4:
        late = float(blocks.values[-2:].mean()) if r.n >= 20 else late
    p = int(np.argmax(blocks.values))
    peak = float(blocks.values[p])
    scale = max(abs(peak), abs(start), float(blocks.values.max() - blocks.values.min()), 1e-9)
    if r.values.min() >= 0 and r.values.max() <= 1:
        scale = max(scale, 1.0)
    return {
        "start": start,
        "late": late,
        "peak": peak,
        "peak_step": float(blocks.steps[p]),
        "peak_index": p,
        "blocks": blocks.n,
        "gain": peak - start,
        "scale": scale,
    }


def saturated(v: View) -> Optional[str]:
    """Evidence, as text, that the reward is at its ceiling: a 0-1 reward at 0.9 or more in the late window, or
    groups that score alike (``frac_reward_zero_std`` >= 0.5) with the reward near its best after a real gain.
    Such a run has nothing left to learn from these prompts: a sharpened policy and a flat reward are what it
    should show."""
    r = v.reward
    if r.n < 3:
        return None
    late = r.late(v.th.window).mean()
    if r.values.min() >= 0 and r.values.max() <= 1 and late >= 0.9:
        return f"the reward is at {num(late, 3)} on a 0-1 scale"
    zs, s = v.c(keys.ZERO_STD), shape(v)
    learned = s["gain"] >= 2 * v.th.flat_gain * s["scale"] and late >= s["start"] + 0.8 * s["gain"]
    if zs.n >= 3 and zs.late(v.th.window).mean() >= 0.5 and learned:  # not a collapse at a low reward
        return f"{zs.late(v.th.window).mean():.0%} of groups score alike with the reward at its best ({num(late, 3)})"
    return None


def eval_rising(v: View) -> Optional[str]:
    """Evidence, as text, that the eval reward rises (Mann-Kendall, p < 0.05, or first vs last beyond noise)."""
    ev = v.eval_curve(keys.REWARD)
    if ev.n < 4:
        return None
    z, p = mann_kendall(ev.values)
    if z > 0 and p < 0.05:
        return f"the eval reward rises ({num(float(ev.values[0]), 3)} -> {num(float(ev.values[-1]), 3)}, {pval(p)})"
    return None


def policy_moved(v: View, share: float = 1.0) -> Optional[str]:
    """Evidence, as text, that the policy changed a lot: its entropy fell or rose past ``share`` of the entropy
    thresholds between the early and late windows; None when it did not. A reward that stays flat while the
    policy moves this much is not a learning rate too low."""
    ent = v.c(keys.ENTROPY)
    if ent.n < 3:
        return None
    start, end = float(ent.early(v.th.window).mean()), float(ent.late(v.th.window).mean())
    if start <= 0 or -v.th.entropy_drop * share < end / start - 1 < v.th.entropy_rise * share:
        return None
    return f"entropy {num(start, 3)} -> {num(end, 3)}"


def left_reference(v: View) -> Optional[str]:
    """Evidence, as text, that the updates moved the policy off its reference: the logged KL to the reference at
    a tenth of its target or more in the late window (an approx-KL between consecutive policies stays ~0 for one
    on-policy update per batch, whatever the learning rate); None otherwise."""
    kl = v.c(keys.KL)
    if kl.n < 3:
        return None
    late = float(np.median(kl.late(v.th.window).values))
    return f"KL to the reference {num(late, 3)}" if late >= 0.1 * v.target_kl else None


def policy_still(v: View) -> Optional[str]:
    """Evidence, as text, that the policy never left the reference: the logged KL stayed below
    ``approx_kl_small`` at every step; None when it moved or no KL is logged. The reward and entropy of such a
    run still move from step to step, with the prompts drawn and the completions sampled, and no update is to
    blame: a rule that would lower the learning rate for that must stay silent (it is far too low, if anything)."""
    kl = v.c(keys.KL)
    if kl.n < 3:
        return None
    peak = float(np.abs(kl.values).max())
    return f"KL to the reference at most {num(peak, 2)}" if peak < v.th.approx_kl_small else None


def warming_up(v: View) -> bool:
    """The logged learning rate is still rising at the end (above every value of the log's first half): the run
    is in its warm-up, where a loss that has not moved yet is no verdict."""
    lr = v.c(("learning_rate",))
    return lr.n >= 3 and float(lr.values[-1]) > float(lr.values[: max(1, lr.n // 2)].max()) * 1.01


def before_learning(v: View, onset: Optional[int]) -> bool:
    """Whether a problem that began at step ``onset`` began early, before the reward had gained
    ``flat_gain`` of its scale: the first updates broke the policy, so the learning rate is far too high, not
    a little."""
    r = v.reward
    if onset is None or r.n < 3:
        return False
    # the early window, or the first 4 logged points on a short log (an onset needs 3 points in a row)
    if int((r.steps <= onset).sum()) > max(4, math.ceil(v.th.window * r.n)):
        return False
    gained = float(r.values[r.steps <= onset].max() - r.values[0])
    return gained < v.th.flat_gain * shape(v)["scale"]


def trend_test(v: View, c: Curve) -> tuple[Optional[float], float]:
    """Mann-Kendall (z, p) when the curve has enough points for it, else (None, 1.0): no test, no evidence."""
    if c.n < v.th.min_points_trend:
        return None, 1.0
    return mann_kendall(c.values)


def flat_shape(v: View) -> Optional[Dict[str, float]]:
    """The shape of a run whose reward neither ended nor ever got ``flat_gain`` of its scale above its start
    (twice that at its best), or moved that much but not beyond its noise (then ``s["within_noise"]`` is 1.0);
    None for a run that moved."""
    s = shape(v)
    moved = abs(s["late"] - s["start"]) >= v.th.flat_gain * s["scale"] or s["gain"] >= 2 * v.th.flat_gain * s["scale"]
    s["within_noise"] = float(moved)
    half = abs(s["late"] - s["start"]) >= 0.5 * v.th.flat_gain * s["scale"]
    if (moved or half) and v.reward.n >= 6:  # moved by the scale; but beyond the noise? (a reward of a few samples a
        r = v.reward  # step swings by far more than its scale suggests)
        blocks = r.blocks(10)
        first = r.slice(r.steps <= blocks.steps[0] + 0.5 * r.block_steps(10))
        late = r.late(v.th.window)
        _, p_up = level_test(r, late, first)
        _, p_down = level_test(r, first, late)
        peak = r.slice(np.abs(r.steps - s["peak_step"]) <= 0.5 * r.block_steps(10))
        _, p_peak = level_test(r, peak, first, tests=blocks.n)
        moved = min(p_up, p_down) * 2 < 0.05 or p_peak < 0.05
    return None if moved else s
