"""Steps/s of one sweeprl trial vs. the same settings in a bare TRL script, measured side by side.

Both run as fresh processes, in alternating pairs (sweeprl first, then bare first, …), ``--repeats`` times each,
after one unmeasured sweeprl warm-up run, on the same tiny model; the figure is TRL's
own ``train_runtime`` (the training loop: generation, reward, update) for ``--steps`` updates, plus the whole
process wall time (imports, model load, MLflow logging) for context. sweeprl runs exactly as a user would,
MLflow on. Prints a table and the ratio; ``--write`` updates BENCHMARKS.md.

    .venv/bin/python bench/trial_vs_bare_trl.py --steps 80 --repeats 9 --write
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchmarks_md import update_row  # noqa: E402
from sweeprl_cli import run_sweeprl  # noqa: E402


def sweeprl_single_run(tmp: Path, steps: int, cache: Path) -> dict:
    out = tmp / f"sweeprl-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    run_sweeprl(
        tmp,
        "experiment=quickstart",
        f"algo.max_steps={steps}",
        f"model.cache_dir={cache}",
        f"hydra.run.dir={out}",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        timeout=1200,
    )
    wall = time.perf_counter() - t0
    summary = json.loads((out / "objective.json").read_text())["trainer_summary"]
    return {"train_runtime": summary["train_runtime"], "wall": wall}


def run_bare(tmp: Path, steps: int, model_dir: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE / "bare_trl_grpo.py"), model_dir, str(steps), str(tmp / "bare")],
        check=True,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    wall = time.perf_counter() - t0
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()

    from omegaconf import OmegaConf

    from sweeprl.config.schema import ModelConfig
    from sweeprl.models.loading import model_path

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cache = tmp / "models"
        mcfg = OmegaConf.merge(
            OmegaConf.structured(ModelConfig), {"name": "tiny", "source": "tiny", "cache_dir": str(cache)}
        )
        model_dir = model_path(mcfg)
        sw, bare = [], []
        sweeprl_single_run(tmp, 2, cache)  # warm-up, not measured: creates the MLflow store and the file caches
        for i in range(args.repeats):
            if i % 2 == 0:  # alternate which runs first, so a drift in machine load does not favour one side
                sw.append(sweeprl_single_run(tmp, args.steps, cache))
                bare.append(run_bare(tmp, args.steps, model_dir))
            else:
                bare.append(run_bare(tmp, args.steps, model_dir))
                sw.append(sweeprl_single_run(tmp, args.steps, cache))
            print(
                f"repeat {i + 1}: sweeprl train {sw[-1]['train_runtime']:.2f}s (wall {sw[-1]['wall']:.1f}s) | "
                f"bare TRL train {bare[-1]['train_runtime']:.2f}s (wall {bare[-1]['wall']:.1f}s)",
                flush=True,
            )
    sw_sps = args.steps / statistics.median(r["train_runtime"] for r in sw)
    bare_sps = args.steps / statistics.median(r["train_runtime"] for r in bare)
    sw_wall = statistics.median(r["wall"] for r in sw)
    bare_wall = statistics.median(r["wall"] for r in bare)
    ratio = sw_sps / bare_sps
    # each pair ran back to back, so its ratio is the least disturbed by a drift in machine speed between pairs
    pair_wall = statistics.median(a["wall"] / b["wall"] for a, b in zip(sw, bare))
    pair_sps = statistics.median(b["train_runtime"] / a["train_runtime"] for a, b in zip(sw, bare))
    print(
        f"\nsteps/s (median of {args.repeats}, {args.steps} updates): sweeprl {sw_sps:.2f}, bare TRL {bare_sps:.2f}, "
        f"ratio {ratio:.3f}"
    )
    print(f"process wall time: sweeprl {sw_wall:.1f}s, bare TRL {bare_wall:.1f}s, ratio {sw_wall / bare_wall:.3f}")
    print(f"median of the per-pair ratios: steps/s {pair_sps:.3f}, wall {pair_wall:.3f}")
    if args.write:
        update_row(
            "trial_steps_per_s",
            f"sweeprl trial steps/s ({args.steps} updates, quickstart, MLflow on)",
            f"bare TRL GRPO script, same settings ({bare_sps:.2f} steps/s)",
            f"{ratio:.3f} ({sw_sps:.2f} steps/s; per-pair median {pair_sps:.3f}, {args.repeats} pairs)",
        )
        update_row(
            "trial_wall",
            "sweeprl single-run process wall time (imports, model, MLflow, training)",
            f"bare TRL script process wall time ({bare_wall:.1f} s)",
            f"{sw_wall / bare_wall:.3f} ({sw_wall:.1f} s; per-pair median {pair_wall:.3f}, {args.repeats} pairs)",
        )


if __name__ == "__main__":
    main()
