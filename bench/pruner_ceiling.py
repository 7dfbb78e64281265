#!/usr/bin/env python3
"""How far any rung rule that judges a trial on its latest running objective can go on the curve bank.

    .venv/bin/python bench/pruner_ceiling.py            # 2112 settings, ~2.5 min
    .venv/bin/python bench/pruner_ceiling.py --write    # also the BENCHMARKS.md row pruner_ceiling
    .venv/bin/python bench/pruner_ceiling.py --quick    # 5 settings (a smoke check)

``bench/pruner_replay.py`` replays pruners through real Optuna studies, a few seconds per setting. This script
re-implements the rung rule of ``RungPruner`` in plain Python (the same cut: the (1 - 1/eta) quantile, linearly
interpolated, of the scores every earlier trial had at that rung, once ``min_trials`` of them exist), so that
thousands of settings fit in a minute. ``tests/test_rung_pruner.py`` checks that it decides as the real pruner
does, order by order.

A setting is a rung set (fractions of a trial's updates) x one eta per rung x an optional protection: a trial
below a rung's cut is kept while its running objective is still rising, by a factor of 1.5, 2 or 3 over the report
5 updates earlier. That is the slow starter an RL sweep's best trial tends to be. The protection applies at the
first rung, or at the first two.

Printed: how many settings reach both targets (>= 50 % of updates saved, best trial kept in >= 90 % of orders) on
the tuning half (360 orders), how many of those still reach both on the held-out half (1008 orders), and the best
of them there. Also, as an optimistic bound, the held-out
half's own best settings, which are chosen on the very sweeps they are scored on.
"""

from __future__ import annotations

import argparse
import math
import sys
from itertools import product
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pruner_replay import REPORT_EVERY, Trial, load_bank  # noqa: E402

RUNG_SETS = ((0.125, 0.25, 0.5), (0.125, 0.25, 0.375, 0.5), (0.125, 0.5), (0.25, 0.5))
ETAS = (1.5, 2.0, 2.5, 3.0)
PROTECTIONS = ((None, ()), (0.5, (0,)), (1.0, (0,)), (2.0, (0,)), (0.5, (0, 1)), (1.0, (0, 1)))  # (rise, rungs)
FIRST = 10  # pruning.min_steps: the rungs pruner sees no report before it
MIN_TRIALS = 3  # RungPruner's default: trials scored at a rung before it cuts there


def _quantile(ranked: Sequence[float], q: float) -> float:
    pos = q * (len(ranked) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(ranked) - 1)
    return ranked[lo] + (pos - lo) * (ranked[hi] - ranked[lo])


def replay(
    trials: Sequence[Trial],
    order: Sequence[int],
    rungs: Sequence[float],
    etas: Sequence[float],
    rise: float | None = None,
    protected: Sequence[int] = (),
) -> Dict[str, float]:
    """One sweep in one order under one setting: the figures of ``pruner_replay.replay``."""
    scores: Dict[int, List[float]] = {}  # rung -> every score seen there, stopped trials' too
    run, completed = 0, []
    for i in order:
        t = trials[i]
        stopped = None
        for k, fraction in enumerate(rungs):
            start = max(math.ceil(fraction * t.length), FIRST)
            step = min((s for s in t.reports if s >= start), default=None)
            if step is None:
                continue
            value, seen = t.reports[step], scores.setdefault(k, [])
            below = len(seen) >= MIN_TRIALS and value < _quantile(sorted(seen), 1 - 1 / etas[k])
            seen.append(value)
            if below:
                before = t.reports.get(step - REPORT_EVERY)
                rising = rise is not None and k in protected and before is not None
                if not (rising and value - before > rise * abs(before)):
                    stopped = step
                    break
        run += t.length if stopped is None else stopped
        if stopped is None:
            completed.append(i)
    values = np.array([t.value for t in trials])
    best = int(np.argmax(values))
    kept = float(values[completed].max()) if completed else -math.inf
    return {
        "saved": 1 - run / sum(t.length for t in trials),
        "best_kept": float(best in completed),
        "regret": float((values[best] - kept) / abs(values[best])),
    }


def figures(sweeps: List[List[Trial]], orders: List[List[np.ndarray]], **setting) -> Tuple[float, float, float]:
    """(steps saved, best kept, mean regret) over every order of every sweep."""
    got = [replay(trials, o, **setting) for trials, os_ in zip(sweeps, orders) for o in os_]
    return tuple(float(np.mean([g[k] for g in got])) for k in ("saved", "best_kept", "regret"))  # type: ignore


def settings(quick: bool) -> Iterator[dict]:
    if quick:
        yield dict(rungs=RUNG_SETS[0], etas=(2.0, 2.0, 3.0))
        for rise, protected in PROTECTIONS[1:5]:
            yield dict(rungs=RUNG_SETS[0], etas=(2.0, 2.0, 3.0), rise=rise, protected=protected)
        return
    for rungs in RUNG_SETS:
        for etas in product(ETAS, repeat=len(rungs)):
            for rise, protected in PROTECTIONS:
                yield dict(rungs=rungs, etas=etas, rise=rise, protected=protected)


def name(s: dict) -> str:
    text = f"rungs {'/'.join(f'{r:g}' for r in s['rungs'])}, eta {'/'.join(f'{e:g}' for e in s['etas'])}"
    if s.get("rise") is not None:
        text += f", kept while rising x{1 + s['rise']:g} at rung{'s' if len(s['protected']) > 1 else ''} "
        text += "+".join(str(k + 1) for k in s["protected"])
    return text


def row(f: Tuple[float, float, float]) -> str:
    return f"{f[0]:6.1%} saved {f[1]:6.1%} kept {f[2]:6.2%} regret"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5 settings, 60 orders per half")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md (not with --quick)")
    args = ap.parse_args()
    halves = {h: load_bank(half=h) for h in ("tuning", "held-out")}
    rng = np.random.default_rng(0)
    n_choose, n_score = (60, 60) if args.quick else (360, 1008)

    def orders(sweeps: List[List[Trial]], n: int) -> List[List[np.ndarray]]:
        return [[rng.permutation(len(t)) for _ in range(-(-n // len(sweeps)))] for t in sweeps]

    tuning, held = orders(halves["tuning"], n_choose), orders(halves["held-out"], n_score)
    held_bound = orders(halves["held-out"], n_choose)
    got = [
        (s, figures(halves["tuning"], tuning, **s), figures(halves["held-out"], held_bound, **s))
        for s in settings(args.quick)
    ]
    both = [g for g in got if g[1][0] >= 0.5 and g[1][1] >= 0.9]
    scored = [(s, tune, figures(halves["held-out"], held, **s)) for s, tune, _ in both]
    print(
        f"{len(got)} settings; tuning half {len(halves['tuning'])} sweeps, held-out half {len(halves['held-out'])} "
        f"sweeps. Reach >= 50 % saved and >= 90 % kept on the tuning half: {len(both)}; of those, on the held-out "
        f"half ({sum(len(o) for o in held)} orders): {sum(h[0] >= 0.5 and h[1] >= 0.9 for _, _, h in scored)}"
    )
    for s, tune, own in sorted(scored, key=lambda g: -g[2][1])[:10]:
        print(f"  {name(s):<62} tuning {row(tune)} | held-out {row(own)}")
    bound = [g for g in got if g[2][0] >= 0.5]
    print(
        f"chosen on the held-out half itself (optimistic, {sum(len(o) for o in held_bound)} orders): the best "
        "kept where >= 50 % is saved"
    )
    for s, _, own in sorted(bound, key=lambda g: -g[2][1])[:5]:
        print(f"  {name(s):<62} held-out {row(own)}")
    if args.write and not args.quick:
        from benchmarks_md import update_row

        def brief(f: Tuple[float, float, float]) -> str:
            return f"{f[0]:.1%} saved, {f[1]:.1%} kept, {f[2]:.2%} regret"

        top = max(scored, key=lambda g: g[2][1]) if scored else None
        ceiling = max(bound, key=lambda g: g[2][1]) if bound else None
        update_row(
            "pruner_ceiling",
            f"how far a rung rule on the latest running objective goes over the curve bank: {len(got)} settings "
            "(rung sets x eta per rung x keeping a trial that is still rising), chosen on the tuning half "
            f"({len(halves['tuning'])} sweeps), scored on the held-out half ({len(halves['held-out'])} sweeps)",
            "the targets: >= 50 % of updates saved and the best trial kept in >= 90 % of orders",
            f"{len(both)} settings reach both on the tuning half, "
            f"{sum(h[0] >= 0.5 and h[1] >= 0.9 for _, _, h in scored)} of them on the held-out half"
            + (f" (best kept there: {name(top[0])}: {brief(top[2])})" if top else "")
            + (f"; chosen on the held-out half itself: {name(ceiling[0])}: {brief(ceiling[2])}" if ceiling else ""),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
