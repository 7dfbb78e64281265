"""Training steps saved by pruning, measured side by side: the same 16-trial TPE sweep of the quickstart
(learning rate x KL coefficient, same sampler seed) without a pruner and with one (`--pruner`, default median).

    .venv/bin/python bench/pruning.py --trials 16 --seeds 0,1,2 --write

Prints total training steps (updates actually run), wall time and best objective of each sweep, the share of
steps saved and the gap in best objective, per sampler seed and over all of them. One seed says little: after
the first pruned trial the two sweeps' TPE samplers see different histories and propose different configs, so
"best of 16" differs by which configs each happened to try. Target: >= 50 % of steps saved with the mean best
objective within 5 %.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402
from sweeprl_cli import quickstart_sweep  # noqa: E402


def sweep(cwd: Path, trials: int, pruner: str, seed: int, extra: list[str]) -> dict:
    import optuna

    t0 = time.perf_counter()
    quickstart_sweep(cwd, "lr_kl", trials, seed, f"hydra/sweeper/pruner={pruner}", "tracking.enabled=false", *extra)
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
    ap.add_argument(
        "--pruner", default="median", help="hydra/sweeper/pruner of the pruned sweep (median, percentile, …)"
    )
    ap.add_argument(
        "--seeds", default="", help="comma-separated sampler seeds (one pair of sweeps each); overrides --seed"
    )
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
    seeds = [int(x) for x in str(args.seeds).split(",")] if args.seeds else [args.seed]
    rows = []
    for seed in seeds:
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            base = sweep(Path(a), args.trials, "none", seed, both)
            pruned = sweep(Path(b), args.trials, args.pruner, seed, both + args.extra)
        saved = 1 - pruned["steps"] / base["steps"]
        gap = (base["best"] - pruned["best"]) / abs(base["best"]) if base["best"] else 0.0
        rows.append((base, pruned, saved, gap))
        print(f"sampler seed {seed}")
        print(f"  no pruner: {base['steps']} steps, {base['wall']:.0f} s, best {base['best']:.4f}")
        print(
            f"  {args.pruner:<9}: {pruned['steps']} steps, {pruned['wall']:.0f} s, best {pruned['best']:.4f}, "
            f"{pruned['pruned']} of {pruned['trials']} trials pruned"
        )
        print(
            f"  steps saved {saved:.1%}; wall time ratio {pruned['wall'] / base['wall']:.2f}; best objective gap "
            f"{gap:+.1%} (positive = pruned sweep worse)"
        )
    steps = [sum(r[i]["steps"] for r in rows) for i in (0, 1)]
    walls = [sum(r[i]["wall"] for r in rows) for i in (0, 1)]
    bests = [sum(r[i]["best"] for r in rows) / len(rows) for i in (0, 1)]
    saved = 1 - steps[1] / steps[0]
    gap = (bests[0] - bests[1]) / abs(bests[0]) if bests[0] else 0.0
    worst = max(r[3] for r in rows)
    print(
        f"over {len(rows)} sampler seed(s): steps saved {saved:.1%}; mean best {bests[1]:.4f} vs {bests[0]:.4f} "
        f"(gap {gap:+.1%}, worst seed {worst:+.1%}); wall time ratio {walls[1] / walls[0]:.2f}"
    )
    if args.write:
        settings = " ".join(args.extra) or "defaults"
        pruned_n = sum(r[1]["pruned"] for r in rows)
        trials_n = sum(r[1]["trials"] for r in rows)
        update_row(
            args.id,
            f"training steps of a {args.trials}-trial TPE quickstart sweep with the {args.pruner} pruner ({settings}), "
            f"sampler seeds {','.join(map(str, seeds))}",
            f"same sweeps without pruner ({steps[0]} steps, mean best {bests[0]:.3f})",
            f"{steps[1] / steps[0]:.2f} ({saved:.1%} saved; {pruned_n} of {trials_n} pruned; mean best "
            f"{bests[1]:.3f}, gap {gap:+.1%}, worst seed {worst:+.1%}; wall {walls[1] / walls[0]:.2f}x)",
        )


if __name__ == "__main__":
    main()
