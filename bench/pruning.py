"""Training steps saved by pruning, measured side by side: the same 16-trial TPE sweep of the quickstart
(learning rate x KL coefficient, same sampler seed) without a pruner and with one (`--pruner`, default median).

    .venv/bin/python bench/pruning.py --trials 16 --seeds 0,1,2 --write

Prints total training steps (updates actually run), wall time and best objective of each sweep, the share of
steps saved and the gap in best objective, per sampler seed and over all of them. One seed says little: after
the first pruned trial the two sweeps' TPE samplers see different histories and propose different configs, so
"best of 16" differs by which configs each happened to try. ``--rerun`` judges "equal best" fairly: each sweep's
best config is re-run on 3 fresh training seeds and the regret is the difference of the means, in % and in seed
standard deviations. Target: >= 50 % of steps saved with the re-run best within 1 seed sd (or 1 %) of the
unpruned sweep's on average and no seed worse than 3 %.

    .venv/bin/python bench/pruning.py --seeds 0,1,2,3,4 --pruner rungs --rerun --id pruning_rungs --write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402
from sweeprl_cli import quickstart_sweep  # noqa: E402

RERUN_SEEDS = (101, 102, 103)  # fresh training seeds for the best config of each sweep


def rerun(params: dict, both: list[str]) -> list[float]:
    """The objective of a config re-run on :data:`RERUN_SEEDS` (in process, no pruner, no guards): what "the best
    of a sweep" is worth beyond the training seed it happened to get."""
    from hydra import compose, initialize_config_dir

    from sweeprl.config import CONFIG_DIR
    from sweeprl.trial import run_trial

    values = []
    for seed in RERUN_SEEDS:
        overrides = ["experiment=quickstart", *both, *(f"{k}={v}" for k, v in params.items()), f"algo.seed={seed}"]
        overrides += ["tracking.enabled=false", "pruning.guards.enabled=false"]
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        with tempfile.TemporaryDirectory() as out:
            values.append(float(run_trial(cfg, Path(out)).value))
    return values


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
    return {
        "steps": steps,
        "wall": wall,
        "best": study.best_value,
        "params": study.best_params,
        "pruned": pruned,
        "trials": len(study.trials),
    }


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
        "--rerun", action="store_true", help="re-run each sweep's best config on 3 fresh training seeds (fair regret)"
    )
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
        if args.rerun:  # the two bests, each re-run on fresh training seeds: regret in % and in seed sd
            base["rerun"], pruned["rerun"] = rerun(base["params"], both), rerun(pruned["params"], both)
            b, q = np.mean(base["rerun"]), np.mean(pruned["rerun"])
            sd = float(np.std(base["rerun"] + pruned["rerun"], ddof=1)) if base["params"] != pruned["params"] else 0.0
            base["rerun_regret"] = ((b - q) / abs(b), (b - q) / sd if sd > 0 else 0.0)
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
        if args.rerun:
            pct, sds = base["rerun_regret"]
            print(
                f"  best configs re-run on seeds {','.join(map(str, RERUN_SEEDS))}: unpruned "
                f"{np.mean(base['rerun']):.4f} (sd {np.std(base['rerun'], ddof=1):.4f}), pruned "
                f"{np.mean(pruned['rerun']):.4f} (sd {np.std(pruned['rerun'], ddof=1):.4f}); regret {pct:+.1%} "
                f"= {sds:+.2f} seed sd"
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
    rerun_text = ""
    if args.rerun:
        pcts = [r[0]["rerun_regret"][0] for r in rows]
        sds = [r[0]["rerun_regret"][1] for r in rows]
        rerun_text = (
            f"; re-run on 3 fresh seeds: regret mean {np.mean(pcts):+.1%} ({np.mean(sds):+.2f} seed sd), worst "
            f"{max(pcts):+.1%}"
        )
        print(f"best configs re-run on fresh seeds{rerun_text[len('; re-run on 3 fresh seeds') :]}")
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
            f"{bests[1]:.3f}, gap {gap:+.1%}, worst seed {worst:+.1%}{rerun_text}; wall {walls[1] / walls[0]:.2f}x)",
        )


if __name__ == "__main__":
    main()
