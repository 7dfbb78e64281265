"""A bank of complete, unpruned quickstart trial curves, for replaying pruners without training.

    .venv/bin/python bench/curve_bank.py --seeds 0,1,2,3,4,5,6,7,8,9,10,11 --samplers tpe,random --trials 16

Runs one learning rate x KL coefficient sweep of the quickstart per sampler and seed, with no pruner and no guard
stopping a trial, and writes ``tests/data/curve_bank/<sampler>_seed<k>.json.gz``: per trial its params, its final
objective and every logged step's metrics that an early-stopping rule can read (reward, its spread, KL, entropy,
loss, gradient norm, completion length, the share of zero-spread groups). Every figure of a pruner replay is
reproducible from these files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweeprl_cli import quickstart_sweep  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "curve_bank"
KEPT = (
    "reward",
    "reward_std",
    "kl",
    "entropy",
    "loss",
    "grad_norm",
    "frac_reward_zero_std",
    "completions/mean_length",
    "learning_rate",
)


def bank(sampler: str, seed: int, trials: int, steps: int) -> dict:
    import optuna

    from sweeprl import trial_record

    with tempfile.TemporaryDirectory(prefix="sweeprl-bank-") as tmp:
        cwd = Path(tmp)
        t0 = time.perf_counter()
        quickstart_sweep(
            cwd,
            "lr_kl",
            trials,
            seed,
            f"hydra/sweeper/sampler={sampler}",
            "hydra/sweeper/pruner=none",
            "pruning.guards.enabled=false",
            "tracking.enabled=false",
            f"algo.max_steps={steps}",
        )
        wall = time.perf_counter() - t0
        sweep_dir = cwd / "multirun" / "quickstart-lr_kl"
        study = optuna.load_study(study_name="quickstart-lr_kl", storage=f"sqlite:///{sweep_dir}/optuna.db")
        rows = []
        for t in study.trials:
            records = trial_record.read_metrics(sweep_dir / trial_record.dir_name(t.number, ""))
            curve = {k: [r.get(k) for r in records] for k in ("step", *KEPT)}
            rows.append(
                {"number": t.number, "state": t.state.name, "params": t.params, "value": t.value, "curve": curve}
            )
    return {"sampler": sampler, "seed": seed, "max_steps": steps, "wall_seconds": round(wall, 1), "trials": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--samplers", default="tpe,random")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--steps", type=int, default=80, help="updates per trial (the quickstart's own length)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for sampler in args.samplers.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            data = bank(sampler, seed, args.trials, args.steps)
            path = args.out / f"{sampler}_seed{seed}.json.gz"
            with gzip.open(path, "wt") as fh:
                json.dump(data, fh, separators=(",", ":"))
            complete = sum(r["state"] == "COMPLETE" for r in data["trials"])
            print(f"{path.name}: {complete}/{len(data['trials'])} complete in {data['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
