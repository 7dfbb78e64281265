"""Generate the held-out validation runs of the objective and the diagnosis: real tiny-model trials on CPU.

    .venv/bin/python scripts/make_validation_runs.py            # writes tests/data/validation_runs.json.gz

GRPO (experiment=quickstart: charset reward, 80 updates) over a learning-rate x KL-coefficient grid and three
seeds, and PPO (experiment=length_ppo on the tiny model, 60 updates) over a learning-rate grid and two seeds.
Every run is a real trial (sweeprl's trial runner, TRL's GRPOTrainer / sweeprl's PPO), deterministic on CPU, so
re-running this script reproduces the file. No rule of the objective or the diagnosis was written on these runs:
the test that reads them (tests/test_validation_runs.py) labels each run by written outcome rules first.

Stored per run: its settings and the history of the metrics the objective and the diagnosis read (4 significant
digits). About 8 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "validation_runs.json.gz"
KEEP = (
    "step",
    "reward",
    "reward_std",
    "reward_best_of_n",
    "frac_reward_zero_std",
    "kl",
    "entropy",
    "loss",
    "grad_norm",
    "completions/mean_length",
    "completions/clipped_ratio",
    "objective/scores",
    "objective/kl",
    "objective/entropy",
    "loss/policy_avg",
    "loss/value_avg",
    "policy/approxkl_avg",
    "policy/clipfrac_avg",
    "val/explained_var",
)
GRPO_LR = (1e-5, 1e-4, 5e-4, 2e-3, 8e-3, 3e-2, 1e-1)
GRPO_BETA = (0.0, 0.05, 0.2)
PPO_LR = (1e-5, 1e-4, 1e-3, 1e-2)


def compose(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from sweeprl.config import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def short(v: float) -> float:
    return float(f"{v:.4g}") if math.isfinite(v) else v


def run(overrides, out_dir: Path):
    from sweeprl import trial_record
    from sweeprl.analysis.objective import ObjectiveError
    from sweeprl.trial import run_trial

    cfg = compose([*overrides, "tracking.enabled=false", "pruning.guards.enabled=false"])
    try:
        run_trial(cfg, out_dir)
    except ObjectiveError:
        pass  # no finite reward: the history says so
    records = trial_record.read_metrics(out_dir)
    return [{k: short(float(r[k])) for k in KEEP if k in r} for r in records]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--quick", action="store_true", help="two runs per algorithm (a smoke test of this script)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    grpo = list(itertools.product(GRPO_LR, GRPO_BETA, (0, 1, 2)))
    ppo = list(itertools.product(PPO_LR, (0.0,), (0, 1)))
    if args.quick:
        grpo, ppo = grpo[:2], ppo[:2]
    runs = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (lr, beta, seed) in enumerate(grpo):
            overrides = ["experiment=quickstart", f"algo.learning_rate={lr}", f"algo.beta={beta}", f"algo.seed={seed}"]
            hist = run(overrides, Path(tmp) / f"grpo_{i}")
            runs.append(
                {"algo": "grpo", "learning_rate": lr, "beta": beta, "seed": seed, "target_kl": 2.5, "history": hist}
            )
            print(f"[{time.monotonic() - t0:5.0f} s] grpo lr={lr:g} beta={beta:g} seed={seed}: {len(hist)} steps")
        for i, (lr, _, seed) in enumerate(ppo):
            overrides = [
                "experiment=length_ppo",
                "model=tiny",
                "algo.max_steps=60",
                f"algo.learning_rate={lr}",
                f"algo.seed={seed}",
            ]
            hist = run(overrides, Path(tmp) / f"ppo_{i}")
            runs.append(
                {"algo": "ppo", "learning_rate": lr, "beta": None, "seed": seed, "target_kl": 0.1, "history": hist}
            )
            print(f"[{time.monotonic() - t0:5.0f} s] ppo lr={lr:g} seed={seed}: {len(hist)} steps")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"generator": "scripts/make_validation_runs.py", "runs": runs}, separators=(",", ":"))
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as fh:  # same bytes on a re-run
        fh.write(data.encode())
    print(f"{len(runs)} runs written to {out} ({out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    sys.exit(main())
