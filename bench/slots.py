"""Slot occupancy of asynchronous process slots vs. the stock batch approach, measured side by side.

Both sweeps run the same quickstart trials (2 slots, one process per trial) whose lengths are made deliberately
unequal (``+fault.sleep_per_step`` on every other pair of trials). ``slot_refill=async`` refills a slot the
moment it frees; ``slot_refill=batch`` waits for the whole round like Hydra's stock launchers. Occupancy =
trial-seconds / (slots x sweep span), from each trial's start/end time.

    .venv/bin/python bench/slots.py --trials 16 --write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402
from sweeprl_cli import quickstart_sweep  # noqa: E402


def sweep(cwd: Path, trials: int, refill: str, slots: int, steps: int) -> float:
    import optuna

    slow = [i for i in range(trials) if i % 4 in (0, 3)]
    quickstart_sweep(
        cwd,
        "lr",
        trials,
        0,
        f"hydra.sweeper.slots={slots}",
        f"hydra.sweeper.slot_refill={refill}",
        "hydra/sweeper/pruner=none",
        "tracking.enabled=false",
        f"algo.max_steps={steps}",
        "+fault.sleep_per_step=0.6",
        f"+fault.only_trials={slow}",
    )
    study = optuna.load_study(study_name="quickstart-lr", storage=f"sqlite:///{cwd}/multirun/quickstart-lr/optuna.db")
    spans = [(t.user_attrs["started_at"], t.user_attrs["ended_at"]) for t in study.trials]
    busy = sum(b - a for a, b in spans)
    wall = max(b for _, b in spans) - min(a for a, _ in spans)
    return busy / (slots * wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20, help="algo.max_steps of every trial")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        occ_async = sweep(Path(a), args.trials, "async", args.slots, args.steps)
        occ_batch = sweep(Path(b), args.trials, "batch", args.slots, args.steps)
    print(
        f"slot occupancy with {args.slots} slots, {args.trials} trials of unequal length: async {occ_async:.1%}, "
        f"batch {occ_batch:.1%}"
    )
    if args.write:
        update_row(
            "slot_occupancy",
            f"slot occupancy, {args.slots} process slots, {args.trials} quickstart trials of unequal length (async "
            "refill)",
            f"stock batch refill, same trials ({occ_batch:.1%})",
            f"{occ_async / occ_batch:.2f} ({occ_async:.1%})",
        )


if __name__ == "__main__":
    main()
