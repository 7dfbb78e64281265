"""``python -m sweeprl diagnose SOURCE``: the post-mortem of one run.

SOURCE: a trial/run directory, an MLflow run id (``runs:/<id>`` or the bare id), or another tool's log: TRL's
``trainer_state.json``, JSON/JSONL/CSV exports, console logs of TRL, Unsloth, LLaMA-Factory, verl or mlx.
Prints markdown (default) or JSON; ``--out DIR`` also writes ``diagnosis.md`` and ``diagnosis.json`` there.
A log that holds several runs (a W&B panel export, runs appended to one file) gets one diagnosis per run, in the
file's order (JSON: ``{"source": …, "runs": [...]}``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List

from sweeprl import trial_record
from sweeprl.analysis.diagnosis import Thresholds, diagnose, thresholds_from, to_markdown
from sweeprl.analysis.history import load_runs
from sweeprl.analysis.objective import DEFAULT_TARGET_KL
from sweeprl.console import help_text, print_markdown


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sweeprl diagnose",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("source")
    ap.add_argument("--target-reward", type=float, help="report reward_below_target under this late-window reward")
    ap.add_argument(
        "--target-kl",
        type=float,
        help="KL target (default: the run's objective.target_kl when SOURCE has its config, e.g. a trial dir; else "
        f"{DEFAULT_TARGET_KL['per_token']:g} for a per-token KL as GRPO/RLOO log it, "
        f"{DEFAULT_TARGET_KL['per_sequence']:g} for PPO's per-completion KL)",
    )
    ap.add_argument("--format", choices=("markdown", "json"), default="markdown")
    ap.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a threshold: " + ", ".join(Thresholds.names()),
    )
    ap.add_argument(
        "--tracking-uri", help="MLflow tracking URI for run-id sources (default: MLFLOW_TRACKING_URI or ./mlflow.db)"
    )
    ap.add_argument("--out", help="also write diagnosis.md and diagnosis.json into this directory")
    args = ap.parse_args(argv)

    pairs = {}
    for item in args.threshold:
        name, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--threshold {item!r}: expected NAME=VALUE")
        pairs[name] = value
    if args.target_reward is not None:
        pairs["target_reward"] = args.target_reward
    if args.target_kl is not None:
        pairs["target_kl"] = args.target_kl
    try:
        th = thresholds_from(pairs)
        runs = [r for r in load_runs(args.source, tracking_uri=args.tracking_uri) if r.records]
    except (ValueError, FileNotFoundError) as exc:  # readers.LogFormatError is a ValueError
        print(f"sweeprl diagnose: {exc}", file=sys.stderr)
        return 2
    if not runs:
        print(f"sweeprl diagnose: {args.source} has no metric records", file=sys.stderr)
        return 2
    ds = [diagnose(run, th, target_kl_given=args.target_kl is not None) for run in runs]
    if len(ds) == 1:
        md, data = to_markdown(ds[0]), ds[0].as_dict()
    else:
        intro = f"{args.source} holds {len(ds)} runs; each is diagnosed on its own.\n\n"
        md, data = (
            intro + "\n\n".join(to_markdown(d) for d in ds),
            {"source": args.source, "runs": [d.as_dict() for d in ds]},
        )
    js = json.dumps(data, indent=2, default=str)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        trial_record.write_diagnosis(out, md, data)
    if args.format == "markdown":
        print_markdown(md)
    else:
        print(js)
    return 0
