"""Run the sweeprl command line from a benchmark script: this interpreter, the benchmark's working directory, and
the command's own output in the error when it fails (``check=True`` alone would hide it behind the exit code)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_sweeprl(cwd: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    """``python -m sweeprl ARGS`` in ``cwd``; raises ``SystemExit`` with the tail of its output on failure."""
    cmd = [sys.executable, "-m", "sweeprl", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def quickstart_sweep(cwd: Path, sweep: str, trials: int, seed: int, *overrides: str) -> subprocess.CompletedProcess:
    """The quickstart sweep ``sweep`` (lr, lr_kl, …) of ``trials`` trials, sampler seeded, no report."""
    return run_sweeprl(
        cwd,
        "-m",
        "experiment=quickstart",
        f"sweep={sweep}",
        f"hydra.sweeper.n_trials={trials}",
        f"hydra.sweeper.sampler.seed={seed}",
        "hydra.sweeper.report=false",
        *overrides,
    )
