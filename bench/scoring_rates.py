"""Completions scored per second by a sandboxed reward, parallel (workers = cores) vs sequential, side by side:
shared by bench/ocaml_scoring.py and bench/python_scoring.py."""

from __future__ import annotations

import time
from typing import Any, Sequence, Tuple


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
