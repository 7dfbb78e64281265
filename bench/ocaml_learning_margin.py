"""How far apart learning rates 1e-4 and 1e-6 end on the OCaml CPU path, seed by seed: the spread that
``tests/test_ocaml_learning.py``'s margin is set against.

One grid sweep of ``experiment=ocaml_cpu`` on the shipped tiny_ocaml model, on the test's setting (one training
problem, 8 completions per update, 8 updates), over learning rate {1e-4, 1e-6} x training seeds; then, as the
test does, each trained model writes 64 completions for the problem with the same random numbers. Prints per
seed both policies' mean reward and their gap (and the trials' objectives, which are noisier), and the smallest
gap against the test's margin.

    .venv/bin/python bench/ocaml_learning_margin.py --seeds 0,1,2,3,4 --write
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STUDY = "ocaml-learning-margin"
MID, LOW = 1e-4, 1e-6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="training seeds (algo.seed), comma-separated")
    ap.add_argument("--steps", type=int, default=8, help="updates per trial (the test's)")
    ap.add_argument("--problem", default="has_duplicates")
    ap.add_argument("--write", action="store_true", help="rewrite BENCHMARKS.md's row ocaml_learning_margin")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    import optuna

    from conftest import compose_cfg
    from sweeprl import trial_record
    from sweeprl.data.ocaml_problems import shipped_problems
    from sweeprl.models.loading import model_path
    from sweeprl.ocaml.quality import sample_quality
    from test_ocaml_learning import MARGIN, SAMPLES

    cfg = compose_cfg(["experiment=ocaml_cpu"])

    seeds = [int(s) for s in args.seeds.split(",")]
    cwd = Path(tempfile.mkdtemp(prefix="ocaml-margin-"))
    (problem,) = [p for p in shipped_problems() if p["id"] == args.problem]
    (cwd / "problem.jsonl").write_text(json.dumps(problem) + "\n")
    cmd = [sys.executable, "-m", "sweeprl", "-m", "experiment=ocaml_cpu", f"algo.learning_rate=choice({MID},{LOW})"]
    cmd += [f"algo.seed=choice({args.seeds})", "hydra/sweeper/sampler=grid", f"hydra.sweeper.study_name={STUDY}"]
    cmd += [f"hydra.sweeper.n_trials={2 * len(seeds)}", "hydra/sweeper/pruner=none", "hydra.sweeper.report=false"]
    cmd += [f"data.kwargs.path={cwd / 'problem.jsonl'}", "data.kwargs.source=file", "data.kwargs.difficulty=null"]
    cmd += ["data.validation_fraction=0", "algo.per_device_train_batch_size=8", f"algo.max_steps={args.steps}"]
    cmd += ["objective.final_steps=4", "tracking.enabled=false"]
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=cwd, check=True, stdin=subprocess.DEVNULL)
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{cwd}/multirun/{STUDY}/optuna.db")
    trials = {(t.params["algo.learning_rate"], t.params["algo.seed"]): t for t in study.trials}
    ended = {
        key: sample_quality(
            trial_record.saved_model(cwd / "multirun" / STUDY / f"trial_{t.number}"), [problem], SAMPLES
        )
        for key, t in trials.items()
    }
    gaps = []
    print(f"\n{'seed':>4}  {'policy 1e-4':>11}  {'policy 1e-6':>11}  {'gap':>6}  {'objective 1e-4':>14}  {'1e-6':>6}")
    for seed in seeds:
        mid, low = ended[(MID, seed)]["reward"], ended[(LOW, seed)]["reward"]
        gaps.append(mid - low)
        print(
            f"{seed:>4}  {mid:11.3f}  {low:11.3f}  {mid - low:6.3f}  {trials[(MID, seed)].value:14.3f}  "
            f"{trials[(LOW, seed)].value:6.3f}"
        )
    mids, lows = [ended[(MID, s)]["reward"] for s in seeds], [ended[(LOW, s)]["reward"] for s in seeds]
    start = sample_quality(model_path(cfg.model), [problem], SAMPLES)["reward"]
    print(
        f"smallest gap {min(gaps):.3f} (test margin {MARGIN}); 1e-4 policies {min(mids):.3f}-{max(mids):.3f}, 1e-6 "
        f"{min(lows):.3f}-{max(lows):.3f}, untrained {start:.3f}; {time.monotonic() - t0:.0f} s"
    )
    if args.write:
        update_row(
            "ocaml_learning_margin",
            f"mean reward of the lr 1e-4 policy minus the lr 1e-6 one, same training seed (ocaml_cpu on one problem, "
            f"{args.steps} updates; {SAMPLES} completions each, same random numbers; seeds {args.seeds}): "
            "smallest / mean gap",
            f"tests/test_ocaml_learning.py margin {MARGIN}",
            f"{min(gaps) / MARGIN:.1f}x ({min(gaps):.3f} / {sum(gaps) / len(gaps):.3f}; 1e-4 {min(mids):.3f}-"
            f"{max(mids):.3f}, 1e-6 {min(lows):.3f}-{max(lows):.3f}, untrained {start:.3f})",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
