"""Where in the searched space each diagnosis finding occurred (the report's "Sweep diagnosis" section)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from sweeprl.formatting import num
from sweeprl.study import TrialRow

log = logging.getLogger(__name__)


@dataclass
class Region:
    """Where in the searched space one finding occurred."""

    finding: str
    trials: List[int]
    n_considered: int
    conditions: List[str]  # e.g. "algo.learning_rate >= 0.0037" (separates the trials with the finding)
    ranges: List[str]  # e.g. "algo.learning_rate in [0.0037, 0.05]" (the trials with the finding)
    text: str


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _param_condition(
    param: str, with_v: List[Any], without_v: List[Any]
) -> Tuple[Optional[str], Optional[Tuple[str, int, int]], str]:
    """For one param and one finding: (separating condition or None, best one-sided condition that is not
    separating as (text, trials there with the finding, trials there), range of the trials with the finding)."""
    if all(_is_num(v) for v in with_v + without_v):
        lo, hi = min(with_v), max(with_v)
        rng = f"{param} = {num(lo)}" if lo == hi else f"{param} in [{num(lo)}, {num(hi)}]"
        if not without_v:
            return None, None, rng
        if lo > max(without_v):
            return f"{param} >= {num(lo)}", None, rng
        if hi < min(without_v):
            return f"{param} <= {num(hi)}", None, rng
        best = None
        for text, inside in (
            (f"{param} >= {num(lo)}", [v for v in without_v if v >= lo]),
            (f"{param} <= {num(hi)}", [v for v in without_v if v <= hi]),
        ):
            if len(inside) == len(without_v):
                continue  # the condition holds everywhere: says nothing
            there = len(with_v) + len(inside)
            if best is None or len(with_v) / there > best[1] / best[2]:
                best = (text, len(with_v), there)
        return None, best, rng
    with_set = sorted({str(v) for v in with_v})
    rng = f"{param} in {{{', '.join(with_set)}}}"
    without_set = {str(v) for v in without_v}
    if without_v and not set(with_set) & without_set:
        return rng, None, rng
    return None, None, rng


def unstable_regions(rows: Sequence[TrialRow], causes: Optional[Mapping[str, str]] = None) -> List[Region]:
    """For each finding id, the trials (COMPLETE or PRUNED) that had it and where they sit in the space.

    A param *separates* a finding when a threshold on it splits the trials with the finding from those
    without (``learning_rate >= 0.0037``: every trial at or above had it, none below did). Without a separating
    param, the purest one-sided threshold is given with its share (``all with learning_rate >= 0.0037, 3 of 4
    trials there``), else the ranges of the trials with the finding. Regions are ordered by trial count.
    """
    considered = [r for r in rows if r.state in ("COMPLETE", "PRUNED")]
    params = sorted({k for r in considered for k in r.params})
    ids: List[str] = []
    for r in considered:
        for f in r.findings:
            if f not in ids:
                ids.append(f)
    out: List[Region] = []
    for fid in ids:
        with_rows = [r for r in considered if fid in r.findings]
        without_rows = [r for r in considered if fid not in r.findings]
        conditions, ranges, partial = [], [], []
        for p in params:
            wv = [r.params[p] for r in with_rows if p in r.params]
            ov = [r.params[p] for r in without_rows if p in r.params]
            if not wv:
                continue
            cond, part, rng = _param_condition(p, wv, ov)
            ranges.append(rng)
            if cond:
                conditions.append(cond)
            elif part:
                partial.append(part)
        n, total = len(with_rows), len(considered)
        head = f"{fid} in {n} of {total} trials" if n < total else f"{fid} in all {total} trials"
        if conditions:
            text = f"{head}, all with {' and '.join(conditions)}" + (" (and none outside)" if n < total else "")
        elif partial and n < total:
            best = max(x[1] / x[2] for x in partial)
            tied = [x for x in partial if x[1] / x[2] == best][:2]
            text = f"{head}, all with " + " and ".join(f"{t} ({k} of the {m} trials there have it)" for t, k, m in tied)
            text += "; no single param separates them"
        elif ranges:
            text = f"{head}, with {', '.join(ranges)}" + ("" if n == total else " (no single param separates them)")
        else:
            text = head
        text += f" — trial{'s' if n > 1 else ''} {', '.join(str(r.number) for r in with_rows)}"
        if causes and causes.get(fid):
            text += f". Why: {causes[fid]}"
        out.append(Region(fid, [r.number for r in with_rows], total, conditions, ranges, text))
    out.sort(key=lambda g: (-len(g.trials), g.finding))
    return out
