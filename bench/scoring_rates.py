"""Completions scored per second by a sandboxed reward, parallel (workers = cores) vs sequential, side by side: the
measurement and command line shared by bench/ocaml_scoring.py and bench/python_scoring.py."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, List, Sequence, Tuple

from benchmarks_md import update_row


def rate(scorer: Any, jobs: Sequence[Any]) -> Tuple[float, list]:
    t0 = time.perf_counter()
    scores = scorer.score_many(jobs)
    return len(jobs) / (time.perf_counter() - t0), scores


def compare(seq: Any, par: Any, jobs: Sequence[Any], repeats: int, cores: int) -> Tuple[float, float, list]:
    """(best sequential rate, best parallel rate, the parallel scores); the two must give the same rewards."""
    seq_rates, par_rates, scores = [], [], []
    for i in range(repeats):
        r_seq, s_seq = rate(seq, jobs)
        r_par, scores = rate(par, jobs)
        assert [s.reward for s in s_seq] == [s.reward for s in scores], "parallel scoring changed a reward"
        seq_rates.append(r_seq)
        par_rates.append(r_par)
        print(f"repeat {i + 1}: sequential {r_seq:.1f}/s, parallel ({cores} workers) {r_par:.1f}/s", flush=True)
    return max(seq_rates), max(par_rates), scores


def main(doc: str, scorer: Callable[[int], Any], completions: Callable[[int], List[Any]], row: str, what: str) -> None:
    """The benchmark's command line: ``scorer(workers)`` on ``completions(problems)``; with ``--write`` the row
    ``row`` of BENCHMARKS.md, its metric starting with ``what``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--problems", type=int, default=0, help="use only the first N problems (0 = all)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    jobs = completions(args.problems)
    cores = os.cpu_count() or 1
    seq, par = scorer(1), scorer(cores)
    best_seq, best_par, scores = compare(seq, par, jobs, args.repeats, cores)
    mix = {"correct (1.0)": sum(abs(s.reward - 1) < 1e-9 for s in scores)}
    mix["other"] = len(scores) - mix["correct (1.0)"]
    ratio = best_par / best_seq
    print(
        f"\n{len(jobs)} completions ({mix}), isolation={seq.sandbox.isolation}: sequential {best_seq:.1f}/s, "
        f"parallel {best_par:.1f}/s, speed-up {ratio:.2f}x on {cores} cores"
    )
    if args.write:
        update_row(
            row,
            f"{what}: completions scored/s, {cores} workers ({len(jobs)} mixed completions, {seq.sandbox.isolation})",
            f"same scorer, 1 worker ({best_seq:.1f}/s)",
            f"{ratio:.2f}x ({best_par:.1f}/s)",
        )
