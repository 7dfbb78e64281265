"""The post-mortem a senior engineer would write, computed from a run's per-step history.

:func:`diagnose` returns a :class:`Diagnosis`: a summary table per window of steps (or per epoch), a list of
findings from a fixed vocabulary (``FINDING_IDS``), each with severity, numeric evidence, the steps involved,
a cause and a recommendation made of concrete changes (``param``, ``direction``, ``factor`` and, when the
run's current value is known, a ready Hydra ``override``), and ``next_sweep``: the search space to run next,
narrowed or shifted from the sweep the run came from. ``python -m sweeprl diagnose SOURCE`` is the CLI.

Thresholds live in :class:`Thresholds` (``--threshold name=value`` on the CLI). Policy-gradient losses that
oscillate around zero (GRPO/RLOO) are normal and are not reported as spikes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from sweeprl.analysis import stability
from sweeprl.analysis.history import CONFIG_KEYS, PPO_OVERRIDES, RunHistory
from sweeprl.analysis.stability import series, steps_of

FINDING_IDS = (
    "loss_spike",
    "loss_oscillation",
    "reward_below_target",
    "reward_flat",
    "reward_variance_rising",
    "reward_cv_high",
    "best_of_n_gap",
    "mode_collapse",
    "entropy_collapse",
    "entropy_unstable",
    "kl_negative",
    "kl_above_target",
    "value_loss_spike",
    "clip_fraction_high",
    "updates_too_small",
    "length_hacking",
    "truncation_high",
    "non_finite",
)
SEVERITIES = ("critical", "warning", "info")
PARAMS = tuple(CONFIG_KEYS)
LOG_PARAMS = {"learning_rate", "kl_coef"}
INT_PARAMS = {"num_generations", "max_completion_length"}
CLIP_KEYS = ("policy/clipfrac_avg", "clip_ratio/region_mean")
APPROX_KL_KEYS = ("policy/approxkl_avg",)


@dataclass
class Thresholds:
    window: float = 0.25  # early/late windows as a fraction of logged steps
    target_reward: Optional[float] = None
    target_kl: float = 0.1
    flat_rel_change: float = 0.1  # |late - early| below this fraction of the reward range = flat
    variance_rise: float = 1.5  # late reward_std / early reward_std
    cv_high: float = 0.5
    best_of_n_gap: float = 0.2  # absolute gap between best-of-N and mean reward (late window)
    mode_collapse: float = 0.5  # late mean frac_reward_zero_std
    entropy_drop: float = 0.7  # relative drop from the first to the late window
    entropy_volatility: float = 0.15
    kl_negative_frac: float = 0.1
    kl_negative_min: float = -1e-3  # ignore negative estimates closer to zero than this (noise)
    kl_above_frac: float = 0.3
    clip_fraction: float = 0.2
    approx_kl_small: float = 1e-4
    length_corr: float = 0.7
    length_change: float = 0.3  # relative change of the mean completion length
    truncation: float = 0.3
    spike_k: float = 6.0
    oscillation_sign_changes: float = 0.6

    @classmethod
    def names(cls) -> List[str]:
        return [f.name for f in fields(cls)]


@dataclass
class Change:
    param: str
    direction: str  # increase | decrease
    factor: Optional[float] = None
    override: Optional[str] = None


@dataclass
class Finding:
    id: str
    severity: str
    evidence: str
    steps: List[int]
    cause: str
    recommendation: Dict[str, Any]

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class Diagnosis:
    source: str
    summary: Dict[str, Any]
    findings: List[Finding] = field(default_factory=list)
    next_sweep: Dict[str, Any] = field(default_factory=lambda: {"params": {}})

    def as_dict(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "summary": self.summary,
            "findings": [f.as_dict() for f in self.findings],
            "next_sweep": self.next_sweep,
        }

    def ids(self) -> List[str]:
        return [f.id for f in self.findings]


# ------------------------------------------------------------------------------------------ helpers
def _w(n: int, th: Thresholds) -> int:
    return stability.window_size(n, th.window)


def _early_late(x: np.ndarray, th: Thresholds) -> tuple[np.ndarray, np.ndarray]:
    w = _w(x.size, th)
    return x[:w], x[-w:]


def _fmt(v: Optional[float]) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return str(v)
    return f"{v:.4g}"


def _param_path(param: str, algo: Optional[str]) -> str:
    if algo == "ppo" and param in PPO_OVERRIDES:
        return PPO_OVERRIDES[param]
    return CONFIG_KEYS[param]


def _new_value(param: str, direction: str, factor: float, current: Any) -> Any:
    if param == "warmup_steps" and direction == "increase" and not current:
        return 0.1  # a tenth of max_steps
    value = float(current) * factor
    if param in INT_PARAMS:
        value = max(2, int(round(value)))
        if param == "num_generations" and value % 2:
            value += 1
        return value
    return float(f"{value:.3g}")


def change(run: RunHistory, param: str, direction: str, factor: float) -> Change:
    assert param in PARAMS and direction in ("increase", "decrease")
    current = run.config.get(param)
    override = None
    if current is not None or (param == "warmup_steps" and direction == "increase"):
        override = f"{_param_path(param, run.algo)}={_new_value(param, direction, factor, current or 0)}"
    return Change(param=param, direction=direction, factor=factor, override=override)


def recommendation(text: str, *changes: Change) -> Dict[str, Any]:
    return {"text": text, "changes": [asdict(c) for c in changes]}


def _steps(run: RunHistory, keys: Sequence[str], idx: Sequence[int]) -> List[int]:
    s = steps_of(run.records, *keys)
    return [int(s[i]) for i in idx if i < s.size][:20]


# ------------------------------------------------------------------------------------------ findings
def f_non_finite(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    bad = [
        int(r.get("step", i + 1))
        for i, r in enumerate(run.records)
        if any(k in r and not math.isfinite(r[k]) for k in stability.FINITE_WATCH)
    ]
    if not bad:
        return None
    return Finding(
        "non_finite",
        "critical",
        f"{len(bad)} of {len(run.records)} logged steps have NaN/inf in reward, loss, KL, entropy or grad norm (first "
        f"at step {bad[0]})",
        bad[:20],
        "numerical blow-up: the update was too large for the model (learning rate, gradient scale) or a reward "
        "returned NaN",
        recommendation(
            "Lower the learning rate and clip gradients harder; check the reward for NaN.",
            change(run, "learning_rate", "decrease", 0.3),
            change(run, "max_grad_norm", "decrease", 0.5),
        ),
    )


def f_loss_spike(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    loss = series(run.records, *stability.LOSS_KEYS)
    idx = stability.robust_spikes(loss, k=th.spike_k)
    if not idx:
        return None
    i = idx[0]
    before = float(np.median(np.abs(loss[:i]))) if i else 0.0
    return Finding(
        "loss_spike",
        "critical" if len(idx) > 2 else "warning",
        f"{len(idx)} loss spike(s); at step {_steps(run, stability.LOSS_KEYS, [i])[0]} |loss| = {_fmt(abs(loss[i]))} "
        f"vs typical {_fmt(before)} ({abs(loss[i]) / max(before, 1e-12):.0f}x)",
        _steps(run, stability.LOSS_KEYS, idx),
        "an update far larger than the ones before it: learning rate too high for this batch, or an outlier batch "
        "without enough gradient clipping",
        recommendation(
            "Lower the learning rate, clip gradients harder and warm up.",
            change(run, "learning_rate", "decrease", 0.5),
            change(run, "max_grad_norm", "decrease", 0.5),
            change(run, "warmup_steps", "increase", 2.0),
        ),
    )


def f_loss_oscillation(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    # GRPO/RLOO losses (and PPO's policy loss) are policy-gradient surrogates: their oscillation is normal.
    # For PPO the value loss is a regression loss and is checked; other runs' plain ``loss`` is checked unless
    # it is centred on zero.
    if run.algo in ("grpo", "rloo"):
        return None
    loss = series(run.records, *stability.VALUE_LOSS_KEYS) if run.algo == "ppo" else series(run.records, "loss")
    if loss.size < 8:
        return None
    _, late = _early_late(loss, th)
    mean, std = float(late.mean()), float(late.std())
    if abs(mean) <= 0.5 * std:  # centred on zero: a policy-gradient loss, oscillation is normal
        return None
    d = np.diff(late)
    flips = float(np.mean(np.sign(d[1:]) != np.sign(d[:-1]))) if d.size > 2 else 0.0
    cv = std / abs(mean)
    if flips < th.oscillation_sign_changes or cv < 0.5:
        return None
    return Finding(
        "loss_oscillation",
        "warning",
        f"late-window loss alternates direction on {flips:.0%} of steps with CV {cv:.2f} around mean {_fmt(mean)}",
        [],
        "updates overshoot: the learning rate is high for the loss landscape",
        recommendation("Lower the learning rate.", change(run, "learning_rate", "decrease", 0.5)),
    )


def _reward(run: RunHistory) -> np.ndarray:
    return series(run.records, *stability.REWARD_KEYS)


def _is_flat(r: np.ndarray, th: Thresholds) -> tuple[bool, float, float]:
    early, late = _early_late(r, th)
    e, l_ = float(early.mean()), float(late.mean())
    scale = max(float(r.max() - r.min()), 1e-9)
    return abs(l_ - e) < th.flat_rel_change * scale, e, l_


def f_reward_below_target(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    r = _reward(run)
    if th.target_reward is None or r.size == 0:
        return None
    _, late = _early_late(r, th)
    if late.mean() >= th.target_reward:
        return None
    flat, _, _ = _is_flat(r, th)
    rec = (
        recommendation(
            "The reward is not moving: raise the learning rate.", change(run, "learning_rate", "increase", 3.0)
        )
        if flat
        else recommendation(
            "The reward is still rising: train longer, or raise the learning rate a little.",
            change(run, "learning_rate", "increase", 1.5),
        )
    )
    return Finding(
        "reward_below_target",
        "warning",
        f"late-window reward {_fmt(float(late.mean()))} < target {_fmt(th.target_reward)}",
        [],
        "the run has not reached the reward it was meant to reach",
        rec,
    )


def f_reward_flat(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    r = _reward(run)
    if r.size < 8:
        return None
    flat, e, l_ = _is_flat(r, th)
    if not flat:
        return None
    return Finding(
        "reward_flat",
        "warning",
        f"reward {_fmt(e)} in the first window, {_fmt(l_)} in the last ({r.size} steps)",
        [],
        "no learning signal is getting through: learning rate too low, KL too tight, or the reward gives the same "
        "score to every sample",
        recommendation(
            "Raise the learning rate; if frac_reward_zero_std is high, raise the temperature too.",
            change(run, "learning_rate", "increase", 3.0),
        ),
    )


def f_reward_variance_rising(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    """The spread of rewards within groups grows faster than the reward itself (a spread that grows with the
    mean, as when learning starts from ~0, is not a problem)."""
    std = series(run.records, "reward_std")
    r = _reward(run)
    if std.size < 8 or r.size < 8:
        return None
    early, late = _early_late(std, th)
    e, l_ = float(early.mean()), float(late.mean())
    re, rl = (float(x.mean()) for x in _early_late(r, th))
    rel_e, rel_l = e / max(abs(re), 0.05), l_ / max(abs(rl), 0.05)
    if e <= 1e-9 or l_ < th.variance_rise * e or rel_l < th.variance_rise * rel_e:
        return None
    return Finding(
        "reward_variance_rising",
        "warning",
        f"within-group reward std rose from {_fmt(e)} to {_fmt(l_)} ({l_ / e:.1f}x) while the mean reward went "
        f"{_fmt(re)} -> {_fmt(rl)}",
        [],
        "the policy is becoming erratic: some samples improve while others degrade",
        recommendation(
            "Lower the learning rate and the sampling temperature.",
            change(run, "learning_rate", "decrease", 0.5),
            change(run, "temperature", "decrease", 0.85),
        ),
    )


def f_reward_cv_high(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    r = _reward(run)
    if r.size < 8:
        return None
    _, late = _early_late(r, th)
    mean = float(late.mean())
    if abs(mean) < 1e-9:
        return None
    cv = float(late.std()) / abs(mean)
    if cv < th.cv_high:
        return None
    return Finding(
        "reward_cv_high",
        "warning",
        f"late-window reward CV {cv:.2f} (std {_fmt(float(late.std()))}, mean {_fmt(mean)})",
        [],
        "the batch reward swings from step to step: too few samples per prompt to average out the noise",
        recommendation(
            "Sample more completions per prompt; lower the temperature.",
            change(run, "num_generations", "increase", 2.0),
            change(run, "temperature", "decrease", 0.85),
        ),
    )


def f_best_of_n_gap(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    best = series(run.records, "reward_best_of_n")
    r = _reward(run)
    if best.size < 4 or r.size < 4:
        return None
    gap = float(_early_late(best, th)[1].mean() - _early_late(r, th)[1].mean())
    if gap < th.best_of_n_gap:
        return None
    return Finding(
        "best_of_n_gap",
        "info",
        f"late-window best-of-N reward exceeds the mean by {_fmt(gap)}",
        [],
        "the model can solve the task but does not do so consistently",
        recommendation(
            "Keep training with more samples per prompt so the good completions dominate the update; lower the "
            "temperature.",
            change(run, "num_generations", "increase", 2.0),
            change(run, "temperature", "decrease", 0.85),
        ),
    )


def f_mode_collapse(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    zs = series(run.records, "frac_reward_zero_std")
    if zs.size < 4:
        return None
    late = float(_early_late(zs, th)[1].mean())
    if late < th.mode_collapse:
        return None
    idx = [i for i, v in enumerate(zs) if v >= th.mode_collapse]
    return Finding(
        "mode_collapse",
        "critical" if late > 0.8 else "warning",
        f"frac_reward_zero_std = {late:.2f} in the late window: in that share of groups every sample got the same "
        "reward",
        _steps(run, ("frac_reward_zero_std",), idx),
        "samples of a prompt have become (nearly) identical, so group-relative advantages are zero and there is no "
        "gradient",
        recommendation(
            "Raise the sampling temperature and sample more completions per prompt.",
            change(run, "temperature", "increase", 1.15),
            change(run, "num_generations", "increase", 2.0),
        ),
    )


def _entropy(run: RunHistory) -> np.ndarray:
    return series(run.records, *stability.ENTROPY_KEYS)


def f_entropy_collapse(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    ent = _entropy(run)
    if ent.size < 4:
        return None
    early, late = _early_late(ent, th)
    e, l_ = float(early.mean()), float(late.mean())
    if e <= 0 or 1 - l_ / e < th.entropy_drop:
        return None
    return Finding(
        "entropy_collapse",
        "critical",
        f"entropy fell from {_fmt(e)} to {_fmt(l_)} ({1 - l_ / e:.0%} drop)",
        [],
        "the policy became nearly deterministic: exploration is gone and the reward can only be hacked, not improved",
        recommendation(
            "Raise the temperature, tighten the KL leash and lower the learning rate.",
            change(run, "temperature", "increase", 1.15),
            change(run, "kl_coef", "increase", 2.0),
            change(run, "learning_rate", "decrease", 0.5),
        ),
    )


def f_entropy_unstable(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    ent = _entropy(run)
    if ent.size < 8:
        return None
    start = float(_early_late(ent, th)[0].mean())
    vol = float(np.std(np.diff(ent)) / start) if start > 0 else 0.0
    if vol < th.entropy_volatility:
        return None
    return Finding(
        "entropy_unstable",
        "warning",
        f"entropy step-to-step volatility {vol:.2f} of its starting level",
        [],
        "the sampling distribution lurches between updates",
        recommendation("Lower the learning rate.", change(run, "learning_rate", "decrease", 0.5)),
    )


def _kl(run: RunHistory) -> np.ndarray:
    return series(run.records, *stability.KL_KEYS)


def f_kl_negative(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    kl = _kl(run)
    if kl.size < 4:
        return None
    frac = float((kl < 0).mean())
    if frac < th.kl_negative_frac or float(kl.min()) > th.kl_negative_min:
        return None
    idx = [i for i, v in enumerate(kl) if v < 0]
    return Finding(
        "kl_negative",
        "warning",
        f"KL estimate negative on {frac:.0%} of steps (min {_fmt(float(kl.min()))})",
        _steps(run, stability.KL_KEYS, idx),
        "sampling/estimator mismatch: the k1 estimator is only non-negative on average when completions are sampled "
        "from exactly the policy that is scored (temperature 1, no top-p/top-k); otherwise, or with too few samples, "
        "it goes negative",
        recommendation(
            "Sample at temperature 1.0 without top-p/top-k truncation, or use the k3 estimator (algo.kl_estimator=k3 "
            "for PPO; GRPO's kl is k3 already).",
            *_temperature_to_one(run),
        ),
    )


def _temperature_to_one(run: RunHistory) -> List[Change]:
    t = run.config.get("temperature")
    if not t or float(t) == 1.0:
        return []
    return [change(run, "temperature", "increase" if float(t) < 1.0 else "decrease", 1.0 / float(t))]


def f_kl_above_target(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    kl = _kl(run)
    if kl.size < 4:
        return None
    frac = float((kl > th.target_kl).mean())
    if frac < th.kl_above_frac:
        return None
    idx = [i for i, v in enumerate(kl) if v > th.target_kl]
    return Finding(
        "kl_above_target",
        "critical" if float(kl[-_w(kl.size, th) :].mean()) > 5 * th.target_kl else "warning",
        f"KL above target {_fmt(th.target_kl)} on {frac:.0%} of steps (late mean "
        f"{_fmt(float(kl[-_w(kl.size, th) :].mean()))}, max {_fmt(float(kl.max()))})",
        _steps(run, stability.KL_KEYS, idx),
        "the policy drifts from the reference faster than the KL penalty holds it: learning rate too high or KL "
        "coefficient too low",
        recommendation(
            "Raise the KL coefficient and lower the learning rate.",
            change(run, "kl_coef", "increase", 2.0),
            change(run, "learning_rate", "decrease", 0.5),
        ),
    )


def f_value_loss_spike(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    vl = series(run.records, *stability.VALUE_LOSS_KEYS)
    idx = stability.robust_spikes(vl, k=th.spike_k)
    if not idx:
        return None
    return Finding(
        "value_loss_spike",
        "warning",
        f"{len(idx)} value-loss spike(s), largest {_fmt(float(max(vl[i] for i in idx)))} vs median "
        f"{_fmt(float(np.median(vl)))}",
        _steps(run, stability.VALUE_LOSS_KEYS, idx),
        "the critic's targets jumped (reward scale change or a bad batch); a large value loss dominates the shared "
        "trunk",
        recommendation(
            "Lower the value-loss weight and clip value updates harder.",
            change(run, "vf_coef", "decrease", 0.5),
            change(run, "cliprange", "decrease", 0.5),
        ),
    )


def f_clip_fraction_high(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    cf = series(run.records, *CLIP_KEYS)
    if cf.size < 4:
        return None
    late = float(_early_late(cf, th)[1].mean())
    if late < th.clip_fraction:
        return None
    return Finding(
        "clip_fraction_high",
        "warning",
        f"clip fraction {late:.2f} in the late window",
        [],
        "most tokens hit the trust-region clip: updates are too large for the clip range",
        recommendation("Lower the learning rate.", change(run, "learning_rate", "decrease", 0.5)),
    )


def f_updates_too_small(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    r = _reward(run)
    if r.size < 8 or not _is_flat(r, th)[0]:
        return None
    akl = series(run.records, *APPROX_KL_KEYS)
    cf = series(run.records, *CLIP_KEYS)
    ent = _entropy(run)
    kl = _kl(run)
    tiny_akl = akl.size > 0 and float(akl.mean()) < th.approx_kl_small
    no_clip = cf.size > 0 and float(cf.mean()) < 1e-4
    ent_still = ent.size > 1 and abs(float(ent[-1] - ent[0])) < 1e-3 * max(abs(float(ent[0])), 1e-9)
    kl_tiny = kl.size > 0 and float(np.abs(kl).mean()) < th.approx_kl_small
    if not (tiny_akl or (no_clip and (ent_still or kl_tiny))):
        return None
    bits = []
    if akl.size:
        bits.append(f"approx-KL {_fmt(float(akl.mean()))}")
    if cf.size:
        bits.append(f"clip fraction {_fmt(float(cf.mean()))}")
    if ent.size > 1:
        bits.append(f"entropy {_fmt(float(ent[0]))} -> {_fmt(float(ent[-1]))}")
    return Finding(
        "updates_too_small",
        "warning",
        "reward flat while the policy barely moves: " + ", ".join(bits),
        [],
        "the learning rate is too low: each update changes the policy by almost nothing",
        recommendation("Raise the learning rate (by 3-10x).", change(run, "learning_rate", "increase", 3.0)),
    )


def f_length_hacking(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    pairs = [
        (rec.get("reward", rec.get("objective/scores")), rec.get("completions/mean_length")) for rec in run.records
    ]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 8:
        return None
    r, length = np.array(pairs).T
    if r.std() < 1e-9 or length.std() < 1e-9:
        return None
    corr = float(np.corrcoef(r, length)[0, 1])
    early, late = _early_late(length, th)
    rel = float(late.mean() / max(early.mean(), 1e-9) - 1)
    if abs(corr) < th.length_corr or abs(rel) < th.length_change:
        return None
    return Finding(
        "length_hacking",
        "warning",
        f"reward–length correlation {corr:+.2f}; mean completion length {_fmt(float(early.mean()))} -> "
        f"{_fmt(float(late.mean()))} ({rel:+.0%})",
        [],
        "the reward is being earned through completion length rather than content",
        recommendation(
            "Cap the completion length (or add a length term to the reward).",
            change(run, "max_completion_length", "decrease" if rel > 0 else "increase", 0.5 if rel > 0 else 2.0),
        ),
    )


def f_truncation_high(run: RunHistory, th: Thresholds) -> Optional[Finding]:
    tr = series(run.records, "completions/clipped_ratio")
    if tr.size < 4:
        return None
    late = float(_early_late(tr, th)[1].mean())
    if late < th.truncation:
        return None
    return Finding(
        "truncation_high",
        "warning",
        f"{late:.0%} of completions hit the maximum length in the late window",
        [],
        "completions are cut off before they finish, so their reward is noise (and runaway penalties dominate)",
        recommendation("Allow longer completions.", change(run, "max_completion_length", "increase", 2.0)),
    )


CHECKS = (
    f_non_finite,
    f_loss_spike,
    f_loss_oscillation,
    f_reward_below_target,
    f_reward_flat,
    f_reward_variance_rising,
    f_reward_cv_high,
    f_best_of_n_gap,
    f_mode_collapse,
    f_entropy_collapse,
    f_entropy_unstable,
    f_kl_negative,
    f_kl_above_target,
    f_value_loss_spike,
    f_clip_fraction_high,
    f_updates_too_small,
    f_length_hacking,
    f_truncation_high,
)


# ------------------------------------------------------------------------------------------ summary
def summary(run: RunHistory, n_windows: int = 8) -> Dict[str, Any]:
    recs = run.records
    # per-epoch records (every record at an integer epoch, as in epoch-level logs): one row per epoch;
    # otherwise (TRL logs fractional epochs per step) windows of steps
    per_epoch = all("epoch" in r and float(r["epoch"]).is_integer() for r in recs)
    epochs = sorted({int(r["epoch"]) for r in recs}) if per_epoch else []
    use_epochs = 1 < len(epochs) <= 50
    groups: List[tuple[str, List[Dict[str, float]]]] = []
    if use_epochs:
        for e in epochs:
            groups.append((f"epoch {e}", [r for r in recs if int(r["epoch"]) == e]))
    else:
        n = len(recs)
        k = max(1, min(n_windows, n))
        bounds = np.linspace(0, n, k + 1).astype(int)
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                groups.append((f"steps {int(recs[a]['step'])}-{int(recs[b - 1]['step'])}", recs[a:b]))
    rows = []
    for label, part in groups:
        rw = series(part, *stability.REWARD_KEYS)
        row = {
            "window": label,
            "reward": float(rw.mean()) if rw.size else None,
            "reward_var": float(rw.var()) if rw.size else None,
            "reward_trend": stability.slope(rw) if rw.size > 1 else 0.0,
        }
        for key, name in (
            ("loss", "loss"),
            ("reward_std", "reward_std"),
            ("kl", "kl"),
            ("entropy", "entropy"),
            ("objective/kl", "kl"),
        ):
            s = series(part, key)
            if s.size and name not in row:
                row[name] = float(s.mean())
        rows.append(row)
    out: Dict[str, Any] = {"steps": len(recs), "algo": run.algo, "config": run.config, "windows": rows}
    try:
        out["stability"] = stability.compute(recs).as_dict()
    except ValueError:
        out["stability"] = None
    return out


# ------------------------------------------------------------------------------------------ next sweep
def _interval(param: str, lo: float, hi: float) -> str:
    if param in LOG_PARAMS:
        return f"tag(log, interval({lo:.3g}, {hi:.3g}))"
    return f"interval({lo:.3g}, {hi:.3g})"


def next_sweep(run: RunHistory, findings: Sequence[Finding]) -> Dict[str, Any]:
    """Shift/narrow the ranges of the sweep the run came from toward the recommended changes."""
    votes: Dict[str, List[float]] = {}
    for f in findings:
        for c in f.recommendation["changes"]:
            if c.get("factor"):
                votes.setdefault(c["param"], []).append(
                    float(c["factor"]) if c["direction"] == "increase" else min(float(c["factor"]), 1.0)
                )
    params: Dict[str, str] = dict(run.sweep_params)
    reasons: Dict[str, str] = {}
    for param, factors in votes.items():
        current = run.config.get(param)
        if current is None or not isinstance(current, (int, float)) or param in ("warmup_steps", "reward_threshold"):
            continue
        factor = float(np.exp(np.mean(np.log(factors))))
        target = float(current) * factor
        key = _param_path(param, run.algo)
        if param in INT_PARAMS:
            choices = sorted(
                {
                    max(2, int(round(target / 2)) * 2),
                    max(2, int(round(current))),
                    max(2, int(round(target * 1.5 / 2)) * 2),
                }
            )
            params[key] = "choice(" + ", ".join(str(c) for c in choices) + ")"
        else:
            lo, hi = (target / 2, target * 2) if param in LOG_PARAMS else (target * 0.8, target * 1.25)
            params[key] = _interval(param, lo, hi)
        reasons[key] = f"{'raise' if factor > 1 else 'lower'} {param} (x{factor:.2g} of {current:g})"
    return {"params": params, "reasons": reasons}


def diagnose(run: RunHistory, thresholds: Optional[Thresholds] = None, target_kl_given: bool = False) -> Diagnosis:
    """All findings of one run. The run's own ``objective.target_kl`` is used unless ``target_kl_given``."""
    th = thresholds or Thresholds()
    if not target_kl_given and run.target_kl is not None:
        th = Thresholds(**{**asdict(th), "target_kl": float(run.target_kl)})
    findings = [f for check in CHECKS if (f := check(run, th)) is not None]
    # a flat reward with tiny updates is one problem, reported once as the more specific finding
    ids = {f.id for f in findings}
    if "updates_too_small" in ids and "reward_flat" in ids:
        findings = [f for f in findings if f.id != "reward_flat"]
    findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    return Diagnosis(source=run.source, summary=summary(run), findings=findings, next_sweep=next_sweep(run, findings))


# ------------------------------------------------------------------------------------------ rendering
def to_markdown(d: Diagnosis) -> str:
    s = d.summary
    lines = [f"# Diagnosis of {d.source}", ""]
    cfg = ", ".join(f"{k}={v}" for k, v in s.get("config", {}).items())
    lines.append(
        f"{s['steps']} logged steps" + (f"; algo {s['algo']}" if s.get("algo") else "") + (f"; {cfg}" if cfg else "")
    )
    lines += ["", "## Summary", ""]
    cols = ["window", "reward", "reward_var", "reward_trend", "loss", "reward_std", "kl", "entropy"]
    cols = [c for c in cols if any(c in r for r in s["windows"])]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in s["windows"]:
        lines.append("| " + " | ".join(r[c] if c == "window" else _fmt(r.get(c)) for c in cols) + " |")
    st = s.get("stability")
    if st:
        lines += [
            "",
            f"Late reward {_fmt(st['late_reward'])} (start {_fmt(st['reward_start'])}, slope "
            f"{_fmt(st['late_slope'])}/step); "
            f"dispersion {_fmt(st['dispersion_time'])}, short-term risk {_fmt(st['short_term_risk'])}, long-term risk "
            f"{_fmt(st['long_term_risk'])} (fractions of the reward range).",
        ]
    lines += ["", "## Findings", ""]
    if not d.findings:
        lines.append("No problems found.")
    for i, f in enumerate(d.findings, 1):
        lines.append(
            f"{i}. **{f.id}** ({f.severity}) — {f.evidence}"
            + (f" (steps {', '.join(map(str, f.steps[:10]))})" if f.steps else "")
        )
        lines.append(f"   - cause: {f.cause}")
        lines.append(f"   - try: {f.recommendation['text']}")
        overrides = [c["override"] for c in f.recommendation["changes"] if c.get("override")]
        if overrides:
            lines.append(f"   - overrides: `{' '.join(overrides)}`")
    if d.next_sweep.get("params"):
        lines += [
            "",
            "## Next sweep",
            "",
            "```bash",
            "python -m sweeprl -m ... +sweep_from=diagnosis.json   # runs these ranges:",
        ]
        for k, v in d.next_sweep["params"].items():
            why = d.next_sweep.get("reasons", {}).get(k)
            lines.append(f"#   {k}: {v}" + (f"   ({why})" if why else ""))
        lines.append("```")
    return "\n".join(lines) + "\n"


def thresholds_from(pairs: Mapping[str, Any]) -> Thresholds:
    names = Thresholds.names()
    unknown = set(pairs) - set(names)
    if unknown:
        raise ValueError(f"unknown threshold(s) {sorted(unknown)}; allowed: {', '.join(names)}")
    return Thresholds(**{k: (None if v is None else float(v)) for k, v in pairs.items()})
