#!/usr/bin/env python3
"""Many sweep drivers sharing one PostgreSQL study: is the study exact, are configs repeated, and what do ask and
tell cost as the number of drivers grows?

    .venv/bin/python bench/drivers.py                          # 1, 4, 16, 32 drivers; a 256-trial study each
    .venv/bin/python bench/drivers.py --drivers 1,4 --trials 64 --write

Every driver is a real ``python tests/plain_app/app.py --multirun`` under the sweeprl sweeper (TPE, constant liar,
``n_jobs=1``) on one study in a throwaway PostgreSQL server on 127.0.0.1 (Debian's ``postgresql``, as the tests
use it). The app is a sphere that returns at once, so what is measured is the sweeper, Optuna and the database: a
GPU trial would take minutes to hours instead of milliseconds. Per driver count it prints:

- exactness: COMPLETE trials against ``n_trials`` (must be equal), trials left RUNNING (lost), surplus trials
  (asked past ``n_trials`` by a driver that lost the race, closed FAIL and never run);
- duplicates: configs (x, y) that were run more than once;
- ask and tell latency, in ms (median, 95th percentile, max), from the sweeper's debug lines: ``study.ask`` with
  TPE's proposal, and ``study.tell``;
- throughput: finished trials per second between the first trial's start and the last one's end, and the peak
  number of PostgreSQL connections.

``--same-seed`` gives every driver the same ``hydra.sweeper.sampler.seed``, as a copied command would.
All drivers share this machine's cores, so throughput here is a floor set by the CPU, not by PostgreSQL.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
APP = REPO / "tests" / "plain_app" / "app.py"
LATENCY = re.compile(r"\[trial (\d+)\] (asked|told) in ([0-9.]+) ms")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def connections(url: str, stop: threading.Event, peak: list[int]) -> None:
    """Samples the server's client connections every 0.2 s until ``stop``; the most seen is ``peak[0]``."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    while not stop.is_set():
        try:
            with engine.connect() as conn:
                n = conn.execute(
                    sqlalchemy.text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
                ).scalar()
            peak[0] = max(peak[0], int(n) - 1)  # minus this sampler's own connection
        except Exception:  # noqa: BLE001 - the server refusing a connection is what saturation looks like
            pass
        stop.wait(0.2)
    engine.dispose()


def run(base: str, drivers: int, trials: int, same_seed: bool, work: Path) -> dict:
    import optuna

    from pg import createdb

    name = f"drivers{drivers}{'_seed' if same_seed else ''}"
    storage = createdb(base, name)
    cmd = [
        sys.executable,
        str(APP),
        "--multirun",
        "x=interval(-3.0,3.0)",
        "y=interval(-3.0,3.0)",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=scale",
        f"hydra.sweeper.n_trials={trials}",
        "hydra.sweeper.n_jobs=1",
        "hydra/sweeper/sampler=tpe",
        "hydra.sweeper.sampler.constant_liar=true",
        "hydra.sweeper.progress=off",
        "hydra.verbose=hydra_plugins.sweeprl_sweeper._scheduling",
    ]
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=connections, args=(base + "/postgres", stop, peak), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            cmd + [f"hydra.sweep.dir={work / name / str(i)}"] + (["hydra.sweeper.sampler.seed=0"] if same_seed else []),
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(drivers)
    ]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    failed = [o[-1500:] for p, o in zip(procs, outs) if p.returncode != 0]
    study = optuna.load_study(study_name="scale", storage=storage)
    states = [t.state.name for t in study.trials]
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    configs = [(t.params["x"], t.params["y"]) for t in done]
    asked = [float(m[2]) for o in outs for m in LATENCY.findall(o) if m[1] == "asked"]
    told = [float(m[2]) for o in outs for m in LATENCY.findall(o) if m[1] == "told"]
    first = min(t.datetime_start for t in done)
    last = max(t.datetime_complete for t in done)
    span = (last - first).total_seconds()
    return {
        "drivers": drivers,
        "same_seed": same_seed,
        "failed_drivers": failed,
        "complete": len(done),
        "running": states.count("RUNNING"),
        "surplus": sum(bool(t.user_attrs.get("surplus")) for t in study.trials),
        "other_fail": sum(t.state.name == "FAIL" and not t.user_attrs.get("surplus") for t in study.trials),
        "duplicates": len(configs) - len(set(configs)),
        "ask": asked,
        "tell": told,
        "throughput": len(done) / span if span > 0 else float("nan"),
        "wall": wall,
        "connections": peak[0],
        "ran": sum(1 for o in outs if LATENCY.search(o)),
    }


def line(r: dict) -> str:
    a, t = r["ask"], r["tell"]
    return (
        f"{r['drivers']:>3}{' (same seed)' if r['same_seed'] else '':<12} {r['complete']:>4} {r['running']:>4} "
        f"{r['surplus']:>4} {r['duplicates']:>4}  {statistics.median(a):6.1f} {percentile(a, 0.95):6.1f} "
        f"{max(a):7.1f}  {statistics.median(t):5.1f} {percentile(t, 0.95):6.1f} {max(t):7.1f}  "
        f"{r['throughput']:6.2f} {r['connections']:5d} {r['wall']:6.0f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drivers", default="1,4,16,32", help="comma-separated driver counts, one study each")
    ap.add_argument("--trials", type=int, default=256, help="n_trials of each study")
    ap.add_argument("--same-seed", default="4", help="driver counts also run with one sampler seed for all")
    ap.add_argument("--max-connections", type=int, default=200, help="the PostgreSQL server's max_connections")
    ap.add_argument("--write", action="store_true", help="update the BENCHMARKS.md rows drivers_*")
    args = ap.parse_args()
    from pg import pg_bin, postgres_server

    if pg_bin() is None:
        print("PostgreSQL is not installed (scripts/setup.sh --test installs it)", file=sys.stderr)
        return 2
    runs = [(int(n), False) for n in args.drivers.split(",")]
    runs += [(int(n), True) for n in args.same_seed.split(",") if n]
    print(f"{args.trials}-trial studies; latency in ms; throughput in finished trials/s")
    print(
        "drivers          done  lost surp dup   ask p50    p95     max  tell p50  p95     max   trials/s  conns  wall s"
    )
    results = []
    with postgres_server(args.max_connections) as base, tempfile.TemporaryDirectory() as work:
        for drivers, same in runs:
            r = run(base, drivers, args.trials, same, Path(work))
            results.append(r)
            print(line(r), flush=True)
            for f in r["failed_drivers"]:
                print("a driver failed:\n" + f, file=sys.stderr)
    bad = [r for r in results if r["complete"] != args.trials or r["running"] or r["failed_drivers"]]
    if args.write:
        from benchmarks_md import update_row

        for r in results:
            if r["same_seed"]:
                continue
            a, t = r["ask"], r["tell"]
            update_row(
                f"drivers_{r['drivers']}",
                f"{r['drivers']} sweep drivers (plain app, TPE with constant liar) on one {args.trials}-trial "
                "PostgreSQL study, one 2-core machine",
                "exact n_trials, 0 lost, 0 duplicates",
                f"{r['complete']} complete, {r['running']} lost, {r['surplus']} surplus, {r['duplicates']} duplicates; "
                f"ask p50 {statistics.median(a):.0f} ms p95 {percentile(a, 0.95):.0f} ms; tell p50 "
                f"{statistics.median(t):.0f} ms p95 {percentile(t, 0.95):.0f} ms; {r['throughput']:.1f} trials/s; "
                f"{r['connections']} connections",
            )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
