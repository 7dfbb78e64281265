#!/usr/bin/env python3
"""Early-stopping rules replayed over the curve bank, without training.

    .venv/bin/python bench/pruner_replay.py                 # every pruner, 1000 trial orders
    .venv/bin/python bench/pruner_replay.py --write         # also the BENCHMARKS.md rows pruner_replay_*
    .venv/bin/python bench/pruner_replay.py --frontier      # the rungs pruner's settings: saved vs best kept

The bank (``tests/data/curve_bank``: 18 quickstart sweeps x 16 complete, unpruned trials) holds every trial's
per-step curves. It has two halves: the sweeps of sampler seeds 0-2 (6 sweeps), on which the rungs pruner's
settings were chosen, and those of seeds 3-11 (18 sweeps), banked afterwards and only scored: the held-out figures
say how the choice holds on sweeps it was not made on.

A replay feeds one sweep's trials, in a random order, to a real Optuna study with the pruner under test, each trial
reporting its running objective as a sweeprl trial does (every ``pruning.report_every`` = 5 updates from the
warm-up on: 25 % for the pruners that compare every step, ``pruning.min_steps`` = 10 for the rungs pruner, which
judges only at its rungs; hyperband and Wilcoxon, which need early reports, from update 5) and stopping when the
pruner says so.

Per pruner, over the orders of each half (spread evenly over its sweeps):

- steps saved: the share of the updates of the unpruned sweep that were not run;
- best kept: the share of orders in which the sweep's best trial (unpruned) ran to its end;
- regret: how far the best trial that ran to its end falls below the sweep's best, in % (mean and worst);
- rank correlation (all sweeps): Spearman's rho, over a sweep's trials, between the score the pruner sees at
  12.5 %, 25 %, 50 % and 75 % of the updates (the latest running objective, or the best so far for Optuna's
  percentile pruners) and the final objective, averaged over the sweeps.

A random order mixes TPE's late, good proposals among its random start-up trials; a live sweep runs the
start-up first, and its late trials are good ones no pruner should stop, so it saves less. "As run" replays each
TPE sweep once in the order it ran, which matched live sweeps within a few points of saving (``bench/pruning.py``).
No replay shows how a sampler would have proposed differently after a pruned trial; live sweeps do.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
BANK = Path(__file__).resolve().parents[1] / "tests" / "data" / "curve_bank"
REPORT_EVERY = 5
RHO_AT = (0.125, 0.25, 0.5, 0.75)  # fractions of the updates at which the rank correlation is measured
TUNING_SEEDS = (0, 1, 2)  # the bank's half the rungs pruner's settings were chosen on; the rest is held out


@dataclass
class Trial:
    value: float  # the final objective
    reports: Dict[int, float]  # step -> running objective of the curve up to that step
    length: int


@functools.lru_cache(maxsize=1)
def objective_cfg():
    from hydra import compose, initialize_config_dir

    from sweeprl.config import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=quickstart"]).objective


def load_bank(path: Path = BANK, half: str = "all", sampler: str = "") -> List[List[Trial]]:
    """The sweeps of the bank (``half``: all, tuning or held-out; ``sampler``: only its sweeps) as their trials,
    each with its running objective at every report step."""
    sweeps = []
    for f in sorted(path.glob("*.json.gz")):
        kind, seed, trials = banked_sweep(f)
        if half != "all" and (seed in TUNING_SEEDS) != (half == "tuning"):
            continue
        if sampler and kind != sampler:
            continue
        sweeps.append(list(trials))
    return sweeps


@functools.lru_cache(maxsize=None)
def banked_sweep(path: Path) -> Tuple[str, int, Tuple[Trial, ...]]:
    """One banked sweep's (sampler, seed, trials); read once per process (the running objectives take ~0.5 s)."""
    from sweeprl.analysis.objective import ObjectiveError, compute_objective

    cfg = objective_cfg()
    data = json.loads(gzip.decompress(path.read_bytes()))
    trials = []
    for t in data["trials"]:
        curve = t["curve"]
        records = [{k: v[i] for k, v in curve.items() if v[i] is not None} for i in range(len(curve["step"]))]
        reports = {}
        for step in range(REPORT_EVERY, data["max_steps"] + 1, REPORT_EVERY):
            try:
                reports[step] = compute_objective([r for r in records if r["step"] <= step], cfg).value
            except ObjectiveError:
                continue
        trials.append(Trial(float(t["value"]), reports, int(data["max_steps"])))
    return data["sampler"], int(data["seed"]), tuple(trials)


def replay(trials: List[Trial], order: np.ndarray, make_pruner: Callable, first: int) -> Dict[str, float]:
    """One sweep in one order: which trials ran to their end and how many updates were run."""
    import optuna

    study = optuna.create_study(direction="maximize", pruner=make_pruner(), sampler=optuna.samplers.RandomSampler(0))
    run, completed = 0, []
    for i in order:
        t = trials[i]
        trial = study.ask()
        trial.set_user_attr("max_steps", t.length)
        stopped = None
        for step, value in t.reports.items():
            if step < first:
                continue
            trial.report(value, step)
            if trial.should_prune():
                stopped = step
                break
        if stopped is None:
            study.tell(trial, t.value)
            completed.append(i)
            run += t.length
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            run += stopped
    values = np.array([t.value for t in trials])
    best = int(np.argmax(values))
    kept = max(values[completed]) if completed else -np.inf
    return {
        "saved": 1 - run / sum(t.length for t in trials),
        "best_kept": float(best in completed),
        "regret": float((values[best] - kept) / abs(values[best])),
    }


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def rank_correlation(sweeps: List[List[Trial]], fraction: float, best_so_far: bool) -> float:
    rhos = []
    for trials in sweeps:
        step = int(round(fraction * trials[0].length / REPORT_EVERY)) * REPORT_EVERY
        seen = [max(v for s, v in t.reports.items() if s <= step) if best_so_far else t.reports[step] for t in trials]
        rhos.append(spearman(np.array(seen), np.array([t.value for t in trials])))
    return float(np.mean(rhos))


def pruners() -> Dict[str, tuple]:
    """name -> (factory, first report step, score the pruner sees: 'best' so far or 'latest', BENCHMARKS.md row)."""
    import optuna

    from hydra_plugins.sweeprl_sweeper.rung_pruner import RungPruner

    p = optuna.pruners
    return {
        "none": (p.NopPruner, 20, "latest", ""),
        "median (the plugin's default)": (p.MedianPruner, 20, "best", "median"),
        "percentile 25 (keep top 75 %)": (lambda: p.PercentilePruner(25.0), 20, "best", "percentile25"),
        "patient median (patience 3)": (
            lambda: p.PatientPruner(p.MedianPruner(), patience=3),
            20,
            "best",
            "patient_median",
        ),
        "successive halving (auto)": (p.SuccessiveHalvingPruner, 20, "latest", "successive_halving"),
        "successive halving (min 20, rf 3)": (
            lambda: p.SuccessiveHalvingPruner(min_resource=20, reduction_factor=3),
            20,
            "latest",
            "sh_min20_rf3",
        ),
        "hyperband (min 5, max 80)": (
            lambda: p.HyperbandPruner(min_resource=5, max_resource=80),
            5,
            "latest",
            "hyperband",
        ),
        "wilcoxon (p 0.1)": (lambda: p.WilcoxonPruner(p_threshold=0.1), 5, "latest", "wilcoxon"),
        "rungs (default: 0.125/0.25/0.5, eta 2/2/3)": (RungPruner, 10, "latest", "rungs"),
        "rungs (0.2/0.5, eta 3: the earlier default)": (
            lambda: RungPruner(rungs=(0.2, 0.5), eta=3.0),
            10,
            "latest",
            "rungs_two",
        ),
        "rungs (0.125/0.5, eta 2.5)": (lambda: RungPruner(rungs=(0.125, 0.5), eta=2.5), 10, "latest", "rungs_early"),
        "rungs (0.125/0.25/0.5, eta 2)": (lambda: RungPruner(eta=2.0), 10, "latest", "rungs_eta2"),
        "rungs (0.125/0.25/0.5, eta 2/2.5/3)": (lambda: RungPruner(eta=(2, 2.5, 3)), 10, "latest", "rungs_eta2_25_3"),
        "rungs (default, margin 1 noise sd)": (lambda: RungPruner(margin=1.0), 10, "latest", "rungs_margin1"),
        "rungs (default, min 2 trials)": (lambda: RungPruner(min_trials=2), 10, "latest", "rungs_min2"),
    }


def replay_half(sweeps: List[List[Trial]], orders: List[List[np.ndarray]], factory: Callable, first: int) -> tuple:
    """(steps saved, best kept, mean regret, worst regret) of one pruner over every order of every sweep."""
    got = [replay(trials, o, factory, first) for trials, os_ in zip(sweeps, orders) for o in os_]
    regret = np.array([g["regret"] for g in got])
    return (
        float(np.mean([g["saved"] for g in got])),
        float(np.mean([g["best_kept"] for g in got])),
        float(regret.mean()),
        float(regret.max()),
    )


def summary(figures: tuple) -> str:
    saved, kept, mean, worst = figures
    return (
        f"{saved:.1%} of updates saved, best trial kept in {kept:.1%} of orders, regret mean {mean:.2%} "
        f"(worst {worst:.1%})"
    )


#: the settings --frontier tries: rung sets (fractions of a trial's length) x one eta per rung from ETAS
FRONTIER_RUNGS = ((0.125, 0.25, 0.5), (0.125, 0.25, 0.375, 0.5), (0.125, 0.5), (0.25, 0.5))
ETAS = (1.5, 2.0, 2.5, 3.0)


def frontier(orders: int) -> None:
    """Every setting of :data:`FRONTIER_RUNGS` x :data:`ETAS` replayed over all the banked sweeps (``orders`` random
    orders): the settings no other beats on both steps saved and best kept, and the best kept where >= 50 % is
    saved. Tells whether any setting of a last-value rung pruner reaches the issue's pair of targets."""
    from itertools import product

    from hydra_plugins.sweeprl_sweeper.rung_pruner import RungPruner

    sweeps = load_bank()
    rng = np.random.default_rng(0)
    plan = [[rng.permutation(len(t)) for _ in range(-(-orders // len(sweeps)))] for t in sweeps]
    got = []
    for rungs in FRONTIER_RUNGS:
        for etas in product(ETAS, repeat=len(rungs)):
            figures = replay_half(sweeps, plan, lambda r=rungs, e=etas: RungPruner(rungs=r, eta=e), 10)
            got.append((f"rungs {'/'.join(f'{r:g}' for r in rungs)}, eta {'/'.join(f'{e:g}' for e in etas)}", figures))

    def beaten(a: tuple) -> bool:  # another setting saves at least as much and keeps the best at least as often
        return any(b[:2] != a[:2] and b[0] >= a[0] and b[1] >= a[1] for _, b in got)

    best = [g for g in got if not beaten(g[1])]
    print(f"{len(got)} settings, {len(sweeps)} sweeps x {len(plan[0])} orders; not beaten on both saved and best kept:")
    for name, figures in sorted(best, key=lambda g: -g[1][0]):
        print(f"  {name:<42} {summary(figures)}")
    half = [g for g in got if g[1][0] >= 0.5]
    if half:
        name, figures = max(half, key=lambda g: g[1][1])
        print(f"best kept where >= 50 % is saved: {name}: {summary(figures)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orders", type=int, default=1000, help="trial orders per half (spread over its sweeps)")
    ap.add_argument("--only", default="", help="comma-separated substrings of the pruner names to run")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    ap.add_argument(
        "--frontier", action="store_true", help="the rungs pruner's settings, 360 orders in all (295 s over 18 sweeps)"
    )
    args = ap.parse_args()
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if args.frontier:
        frontier(360)
        return 0
    halves = {h: load_bank(half=h) for h in ("tuning", "held-out")}
    rng = np.random.default_rng(0)
    orders = {
        h: [[rng.permutation(len(trials)) for _ in range(-(-args.orders // len(sweeps)))] for trials in sweeps]
        for h, sweeps in halves.items()
    }
    counts = {h: sum(len(o) for o in orders[h]) for h in halves}
    tpe = load_bank(sampler="tpe")  # in the order TPE proposed them: what a live sweep sees
    as_run = [[np.arange(len(trials))] for trials in tpe]
    every = [s for sweeps in halves.values() for s in sweeps]
    rho = {kind: [rank_correlation(every, f, kind == "best") for f in RHO_AT] for kind in ("best", "latest")}
    print(
        ", ".join(f"{h}: {len(halves[h])} sweeps x {counts[h] // len(halves[h])} orders" for h in halves)
        + f"; as run: the {len(tpe)} TPE sweeps in their own order (saved / best kept / regret mean / worst)"
    )
    print(f"{'pruner':<40} {'tuning half':>29}  {'held-out half':>29}  {'as run':>29}  rho@12/25/50/75%   s")
    rows = {}
    for name, (factory, first, kind, row) in pruners().items():
        if args.only and not any(x.strip() in name for x in args.only.split(",")):
            continue
        t0 = time.perf_counter()
        got = {h: replay_half(halves[h], orders[h], factory, first) for h in halves}
        got["as run"] = replay_half(tpe, as_run, factory, first)
        rows[name] = (got, row)
        cells = [f"{g[0]:>6.1%} {g[1]:>6.1%} {g[2]:>6.2%} {g[3]:>6.1%}" for g in got.values()]
        print(
            f"{name:<40} {cells[0]:>29}  {cells[1]:>29}  {cells[2]:>29}  {'/'.join(f'{x:.2f}' for x in rho[kind])}  "
            f"{time.perf_counter() - t0:4.0f}"
        )
    if args.write:
        from benchmarks_md import update_row

        for name, (got, row) in rows.items():
            if not row:
                continue
            update_row(
                f"pruner_replay_{row}",
                f"pruner replay over the curve bank: {name} (held-out half: {len(halves['held-out'])} sweeps, "
                f"{counts['held-out']} trial orders; tuning half: {len(halves['tuning'])} sweeps, {counts['tuning']})",
                "no pruner: 0 % saved, best kept in 100 % of orders",
                f"held-out: {summary(got['held-out'])}; tuning: {summary(got['tuning'])}; the {len(tpe)} TPE sweeps "
                f"as they ran: {summary(got['as run'])}",
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
