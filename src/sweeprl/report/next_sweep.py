"""The next search space suggested by a sweep report: ranges narrowed around the top trials, shifted where the
top trials' diagnoses agree."""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from sweeprl.formatting import num, override_float
from sweeprl.report.study import TrialInfo, distributions_of, read_diagnosis, top_trials

log = logging.getLogger(__name__)


LOG_WIDEN = 2.0  # next sweep: log-scale params span [min / 2, max * 2] of the top-k trials
LIN_PAD = 0.1  # next sweep: linear params are padded by 10 % of the searched width


def _grammar(dist: BaseDistribution, lo: float, hi: float) -> str:
    if isinstance(dist, IntDistribution):
        lo_i, hi_i = int(math.floor(lo)), int(math.ceil(hi))
        if hi_i <= lo_i:
            hi_i = lo_i + max(1, dist.step)
        if dist.step and dist.step > 1:
            return f"range({lo_i}, {hi_i + dist.step}, {dist.step})"
        body = f"int(interval({lo_i}, {hi_i}))"
        return f"tag(log, {body})" if dist.log else body
    assert isinstance(dist, FloatDistribution)
    if dist.step is not None:
        return f"range({override_float(lo)}, {override_float(hi + dist.step)}, {override_float(dist.step)})"
    body = f"interval({override_float(lo)}, {override_float(hi)})"
    return f"tag(log, {body})" if dist.log else body


def _unit(dist: BaseDistribution, v: float) -> Optional[float]:
    """Position of ``v`` in the searched range, 0 (low) … 1 (high), in log space for log params."""
    low, high = float(dist.low), float(dist.high)  # type: ignore[attr-defined]
    if high <= low:
        return None
    if getattr(dist, "log", False):
        return (math.log(v) - math.log(low)) / (math.log(high) - math.log(low)) if v > 0 and low > 0 else None
    return (v - low) / (high - low)


def _narrow(dist: BaseDistribution, values: List[Any], shift: Optional[Tuple[str, float, str]]) -> Tuple[str, str]:
    """(search-space text, reason) of one param around the top-k values (best first); ``shift`` =
    (direction, factor, who) that the top trials' diagnoses agree on, which extends the range that way
    (beyond the searched range if need be)."""
    if isinstance(dist, CategoricalDistribution):
        keep = [c for c in dist.choices if c in values] or list(dist.choices)
        return "choice(" + ", ".join(
            str(c) for c in keep
        ) + ")", f"the values of the top trials ({', '.join(map(str, keep))})"
    assert isinstance(dist, (FloatDistribution, IntDistribution))
    vmin, vmax = float(min(values)), float(max(values))
    low, high = float(dist.low), float(dist.high)
    if dist.log:
        lo, hi = vmin / LOG_WIDEN, vmax * LOG_WIDEN
        how = f"x{LOG_WIDEN:g} around"
    else:
        pad = LIN_PAD * (high - low)
        lo, hi = vmin - pad, vmax + pad
        how = f"±{LIN_PAD:.0%} of the searched width around"
    lo, hi = max(lo, low), min(hi, high)
    reason = f"{how} the top trials' {num(vmin)}…{num(vmax)} (searched {num(low)}…{num(high)})"
    if shift:
        direction, factor, who = shift
        if direction == "decrease":
            new_lo = vmin * factor / LOG_WIDEN if dist.log else vmin * factor - LIN_PAD * (high - low)
            if new_lo < lo:
                lo = new_lo
                reason += f"; extended downward (x{factor:.2g} of the lowest): {who} say lower it, none says raise it"
        else:
            new_hi = vmax * factor * LOG_WIDEN if dist.log else vmax * factor + LIN_PAD * (high - low)
            if new_hi > hi:
                hi = new_hi
                reason += f"; extended upward (x{factor:.2g} of the highest): {who} say raise it, none says lower it"
    else:
        u = _unit(dist, float(values[0]))
        if u is not None and u >= 0.95:
            reason += "; the best trial sits at the top of the searched range: consider widening it upward"
        elif u is not None and u <= 0.05:
            reason += "; the best trial sits at the bottom of the searched range: consider widening it downward"
    if hi <= lo:
        hi = lo * 1.5 if dist.log else lo + max(1e-12, 0.1 * (high - low))
    return _grammar(dist, lo, hi), reason


def _diagnosis_changes(info: TrialInfo) -> List[Tuple[str, str, float]]:
    """(config path, direction, factor) of every recommended change in the trial's diagnosis.json."""
    from sweeprl.analysis.history import CONFIG_KEYS, PPO_OVERRIDES

    data = read_diagnosis(info)
    if not data:
        return []
    algo = (data.get("summary") or {}).get("algo")
    out = []
    for f in data.get("findings", []):
        for c in (f.get("recommendation") or {}).get("changes", []):
            param, direction = c.get("param"), c.get("direction")
            if param not in CONFIG_KEYS or direction not in ("increase", "decrease"):
                continue
            path = PPO_OVERRIDES[param] if algo == "ppo" and param in PPO_OVERRIDES else CONFIG_KEYS[param]
            out.append((path, direction, float(c.get("factor") or 1.0)))
    return out


def suggest_next_sweep(study: optuna.Study, infos: Sequence[TrialInfo], top_k: int) -> Dict[str, Any]:
    """The next search space: every swept param narrowed around the top-k trials (log-interval x2 around them
    for log params), extended outward where the top trials' diagnoses agree on a direction (at least half of
    them, none against) that the sweep has not explored yet (no finished trial beyond the top trials on that
    side); plus the diagnoses' recommendations counted over all diagnosed trials.
    Returns ``{"params", "reasons", "votes", "top"}``."""
    top = top_trials(infos, study, top_k)
    dists = distributions_of(study)
    votes: Dict[str, Counter] = {}
    per_trial: Dict[int, Dict[str, Tuple[str, float]]] = {}
    for info in infos:
        changes = _diagnosis_changes(info)
        mine: Dict[str, Tuple[str, float]] = {}
        for path, direction, factor in changes:
            mine.setdefault(path, (direction, factor))
        for path, (direction, _) in mine.items():
            votes.setdefault(path, Counter())[direction] += 1
        per_trial[info.number] = mine
    params: Dict[str, str] = {}
    reasons: Dict[str, str] = {}
    if top:
        for p, dist in dists.items():
            values = [i.row.params[p] for i in top if p in i.row.params]
            if not values:
                continue
            shift = None
            recs = [per_trial.get(i.number, {}).get(p) for i in top]
            given = [r for r in recs if r]
            if (
                given
                and len(given) * 2 >= len(top)
                and len({d for d, _ in given}) == 1
                and not isinstance(dist, CategoricalDistribution)
            ):
                direction = given[0][0]
                factors = [f for _, f in given]
                factor = float(math.exp(sum(math.log(max(f, 1e-12)) for f in factors) / len(factors)))
                # only toward a side the sweep has not explored: below (above) the top trials, no finished trial
                others = [i.row.params[p] for i in infos if i.row.state in ("COMPLETE", "PRUNED") and p in i.row.params]
                unexplored = (
                    all(v >= min(values) for v in others)
                    if direction == "decrease"
                    else all(v <= max(values) for v in others)
                )
                if unexplored and (
                    (direction == "decrease" and factor < 1) or (direction == "increase" and factor > 1)
                ):
                    shift = (direction, factor, f"the diagnoses of {len(given)} of the {len(top)} top trials")
            params[p], reasons[p] = _narrow(dist, values, shift)
    return {
        "params": params,
        "reasons": reasons,
        "votes": {p: dict(c) for p, c in sorted(votes.items())},
        "top": [i.number for i in top],
    }


def _launch_overrides(infos: Sequence[TrialInfo], swept: Iterable[str]) -> List[str]:
    """The task overrides the sweep was launched with (``experiment=…``, ``sweep=…``), without the sampled
    params and the per-trial ``sweeprl.*`` plumbing."""
    import yaml

    swept = {k.lstrip("+~") for k in swept}
    for info in infos:
        for d in info.dirs:
            p = os.path.join(d, ".hydra", "overrides.yaml")
            if not os.path.isfile(p):
                continue
            try:
                items = yaml.safe_load(Path(p).read_text()) or []
            except (OSError, yaml.YAMLError):
                continue
            out = []
            for item in items:
                key = str(item).split("=", 1)[0].lstrip("+~")
                if key in swept or key.startswith("sweeprl."):
                    continue
                out.append(str(item))
            return out
    return []
