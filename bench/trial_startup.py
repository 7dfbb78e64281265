"""Per-trial start-up cost of process slots vs. in-process trials, measured side by side.

Two sweeps of the same short quickstart trials (``--trials`` of ``--steps`` updates, MLflow on, no pruner):
one runs every trial in its own process (``hydra.sweeper.process=true``: a fresh ``python -m sweeprl``
per trial, as process slots do), the other runs them inside the driver. A trial's start-up (and tear-down) is
its span in the study (Optuna's ``datetime_start`` → ``datetime_complete``) minus its training loop
(``train_runtime`` of its ``objective.json``); the figure is the mean over trials of each sweep. Runs
alternate (process, in-process, in-process, process, …) ``--repeats`` times; medians are reported.

    .venv/bin/python bench/trial_startup.py --trials 4 --repeats 2 --write
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402
from sweeprl_cli import quickstart_sweep  # noqa: E402


def sweep(cwd: Path, trials: int, steps: int, process: bool, cache: Path) -> float:
    """Mean start-up seconds per trial (span - training loop) of one sweep."""
    import optuna

    quickstart_sweep(
        cwd,
        "lr",
        trials,
        0,
        f"hydra.sweeper.process={str(process).lower()}",
        "hydra/sweeper/pruner=none",
        "hydra.sweeper.progress=off",
        f"algo.max_steps={steps}",
        f"model.cache_dir={cache}",
    )
    sweep_dir = cwd / "multirun" / "quickstart-lr"
    study = optuna.load_study(study_name="quickstart-lr", storage=f"sqlite:///{sweep_dir}/optuna.db")
    startups = []
    for t in study.trials:
        span = (t.datetime_complete - t.datetime_start).total_seconds()
        summary = json.loads((sweep_dir / f"trial_{t.number}" / "objective.json").read_text())["trainer_summary"]
        startups.append(span - summary["train_runtime"])
    return statistics.mean(startups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5, help="algo.max_steps of every trial")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    proc, inproc = [], []
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "models"
        for i in range(args.repeats):
            order = [True, False] if i % 2 == 0 else [False, True]
            for process in order:
                cwd = Path(d) / f"{'process' if process else 'inprocess'}-{i}"
                cwd.mkdir()
                (proc if process else inproc).append(sweep(cwd, args.trials, args.steps, process, cache))
            print(f"repeat {i + 1}: process trial start-up {proc[-1]:.2f}s, in-process {inproc[-1]:.2f}s", flush=True)
    p, q = statistics.median(proc), statistics.median(inproc)
    print(
        f"\nper-trial start-up (span - training loop, mean of {args.trials} trials, median of {args.repeats}): "
        f"process {p:.2f}s, in-process {q:.2f}s, overhead of a process {p - q:+.2f}s"
    )
    if args.write:
        update_row(
            "trial_startup",
            f"per-trial start-up of a process-slot trial (span minus training; {args.trials} quickstart trials of "
            f"{args.steps} updates, MLflow on)",
            f"in-process trial of the same sweep ({q:.2f} s)",
            f"{p / q:.2f}x ({p:.2f} s; {p - q:+.2f} s per trial)",
        )


if __name__ == "__main__":
    main()
