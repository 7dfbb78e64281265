"""Training steps saved by pruning, measured side by side: the same 16-trial TPE sweep of the quickstart
(learning rate x KL coefficient, same sampler seed) without a pruner and with the median pruner.

    .venv/bin/python bench/pruning.py --trials 16 --write

Prints total training steps (updates actually run), wall time and best objective of each sweep, the share of
steps saved and the gap in best objective. Target: >= 40 % of steps saved with the best objective within 5 %.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402


def sweep(cwd: Path, trials: int, pruner: str, seed: int, extra: list[str]) -> dict:
    import optuna

    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeprl",
            "-m",
            "experiment=quickstart",
            "sweep=lr_kl",
            f"hydra.sweeper.n_trials={trials}",
            f"hydra.sweeper.sampler.seed={seed}",
            f"hydra/sweeper/pruner={pruner}",
            "tracking.enabled=false",
            *extra,
        ],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=3600,
    )
    wall = time.perf_counter() - t0
    study = optuna.load_study(
        study_name="quickstart-lr_kl", storage=f"sqlite:///{cwd}/multirun/quickstart-lr_kl/optuna.db"
    )
    steps = sum(int(t.user_attrs.get("steps", 0)) for t in study.trials)
    pruned = sum(t.state.name == "PRUNED" for t in study.trials)
    return {"steps": steps, "wall": wall, "best": study.best_value, "pruned": pruned, "trials": len(study.trials)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0, help="algo.max_steps of every trial (0 = the quickstart's 80)")
    ap.add_argument("--id", default="pruning_steps", help="BENCHMARKS.md row to write")
    ap.add_argument("--write", action="store_true")
    ap.add_argument(
        "extra",
        nargs="*",
        help="extra Hydra overrides for the pruned sweep (e.g. hydra.sweeper.pruner.n_startup_trials=3)",
    )
    args = ap.parse_args()
    both = [f"algo.max_steps={args.steps}"] if args.steps else []
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        base = sweep(Path(a), args.trials, "none", args.seed, both)
        pruned = sweep(Path(b), args.trials, "median", args.seed, both + args.extra)
    saved = 1 - pruned["steps"] / base["steps"]
    gap = (base["best"] - pruned["best"]) / abs(base["best"]) if base["best"] else 0.0
    print(f"no pruner: {base['steps']} steps, {base['wall']:.0f} s, best {base['best']:.4f}")
    print(
        f"median   : {pruned['steps']} steps, {pruned['wall']:.0f} s, best {pruned['best']:.4f}, {pruned['pruned']} "
        f"of {pruned['trials']} trials pruned"
    )
    print(
        f"steps saved {saved:.1%}; wall time ratio {pruned['wall'] / base['wall']:.2f}; best objective gap {gap:+.1%} "
        "(positive = pruned sweep worse)"
    )
    if args.write:
        settings = " ".join(args.extra) or "defaults"
        update_row(
            args.id,
            f"training steps of a {args.trials}-trial TPE quickstart sweep with the median pruner ({settings})",
            f"same sweep without pruner ({base['steps']} steps, best {base['best']:.3f})",
            f"{pruned['steps'] / base['steps']:.2f} ({saved:.1%} saved; {pruned['pruned']} of {pruned['trials']} "
            "pruned; "
            f"best {pruned['best']:.3f}, gap {gap:+.1%}; wall {pruned['wall'] / base['wall']:.2f}x)",
        )


if __name__ == "__main__":
    main()
