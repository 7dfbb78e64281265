"""What every rule shares: thresholds, the Finding record, the View of a run, and shape helpers."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from sweeprl.analysis import keys
from sweeprl.analysis.advice import Advice, as_dicts
from sweeprl.analysis.curves import Curve, curve, mann_kendall
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
    entropy_rise: float = 0.5  # relative rise from the first to the late window
    entropy_volatility: float = 0.15
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
    _cache: Dict[Any, Curve] = field(default_factory=dict)

    def c(self, names: Sequence[str]) -> Curve:
        key = tuple(names)
        if key not in self._cache:
            self._cache[key] = curve(self.records, *names)
        return self._cache[key]

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


def shape(v: View) -> Dict[str, float]:
    """The reward's coarse shape from 10 block means: start, peak (and its step), late level, gain, and the
    reward's scale: the range the curve spans, at least 1 when every reward lies in [0, 1] (pass rates,
    fractions: a run stuck at 0.04 has not learned, however small its own range)."""
    r = v.reward
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


def policy_moved(v: View) -> Optional[str]:
    """Evidence, as text, that the policy changed a lot: its entropy fell or rose past the entropy thresholds
    between the early and late windows; None when it did not. A reward that stays flat while the policy moves
    this much is not a learning rate too low."""
    ent = v.c(keys.ENTROPY)
    if ent.n < 3:
        return None
    start, end = float(ent.early(v.th.window).mean()), float(ent.late(v.th.window).mean())
    if start <= 0 or -v.th.entropy_drop < end / start - 1 < v.th.entropy_rise:
        return None
    return f"entropy {num(start, 3)} -> {num(end, 3)}"


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


def trend_test(v: View, c: Curve) -> tuple[Optional[float], Optional[float]]:
    """Mann-Kendall (z, p) when the curve has enough points for it, else (None, None)."""
    if c.n < v.th.min_points_trend:
        return None, None
    return mann_kendall(c.values)


def flat_shape(v: View) -> Optional[Dict[str, float]]:
    """The shape of a run whose reward neither ended nor ever got ``flat_gain`` of its scale above its start
    (twice that at its best); None for a run that moved."""
    s = shape(v)
    moved = abs(s["late"] - s["start"]) >= v.th.flat_gain * s["scale"] or s["gain"] >= 2 * v.th.flat_gain * s["scale"]
    return None if moved else s
