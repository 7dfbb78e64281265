"""Command line entry point: ``python -m sweeprl`` / ``sweeprl``.

``python -m sweeprl [hydra overrides]``        one trial (e.g. experiment=quickstart algo.learning_rate=3e-4)
``python -m sweeprl -m [overrides] sweep=...``  an Optuna sweep through the sweeprl Hydra sweeper
``python -m sweeprl score ...``                 score completions with a reward (see ``score --help``)
``python -m sweeprl diagnose SOURCE``           the post-mortem of one run (see ``diagnose --help``)
``python -m sweeprl report STUDY``              report.html/md + plots of a sweep; ``trials STUDY``: ranked table
"""

from __future__ import annotations

import sys
from typing import List, Optional

SUBCOMMANDS = {
    "score": "sweeprl.cli.score",
    "diagnose": "sweeprl.cli.diagnose",
    "report": "sweeprl.cli.report",
    "trials": "sweeprl.cli.report:trials_main",
}


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        import importlib

        module, _, func = SUBCOMMANDS[args[0]].partition(":")
        sys.exit(getattr(importlib.import_module(module), func or "main")(args[1:]))
    printing = any(a in ("--cfg", "-c") or a.startswith("--cfg=") for a in args)
    if printing:
        # Hydra refuses --cfg together with --multirun; printing the composed config is what is meant.
        args = [a for a in args if a not in ("-m", "--multirun")]
    from sweeprl.config.precheck import check

    problem, cfg = check(args)
    if problem:
        print(f"sweeprl: invalid configuration: {problem}", file=sys.stderr)
        sys.exit(2)
    if cfg is not None and not printing:
        from sweeprl.config.preflight import preflight

        problem, args, warnings = preflight(cfg, args)
        for warning in warnings:
            print(f"sweeprl: {warning}", file=sys.stderr)
        if problem:
            print(f"sweeprl: cannot run here: {problem}", file=sys.stderr)
            sys.exit(2)
    from sweeprl.cli.app import run_hydra

    sys.argv = [sys.argv[0] or "sweeprl", *args]
    run_hydra()


if __name__ == "__main__":
    main()
