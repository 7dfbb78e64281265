"""Command line entry point: ``python -m sweeprl`` / ``sweeprl``. Dispatch only; the commands live in cli/.

``python -m sweeprl [hydra overrides]``        one trial (e.g. experiment=quickstart algo.learning_rate=3e-4)
``python -m sweeprl -m [overrides] sweep=...``  an Optuna sweep through the sweeprl Hydra sweeper
``python -m sweeprl score ...``                 score completions with a reward (see ``score --help``)
``python -m sweeprl diagnose SOURCE``           the post-mortem of one run (see ``diagnose --help``)
``python -m sweeprl report STUDY``              report.html/md + plots of a sweep; ``trials STUDY``: ranked table
``python -m sweeprl build-model tiny_ocaml``    build (pretrain) a local model into the model cache
``python -m sweeprl plan [overrides]``          GPU memory and time per trial, before launch
``python -m sweeprl export STUDY``              the best trial's trained weights + a command to continue training
``python -m sweeprl autopilot [overrides]``     a chain of sweeps that narrows itself within a budget
``python -m sweeprl import-recipe RECIPE.yaml``  a TRL/open-r1 GRPO recipe as an experiment preset in ./conf
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import List, Optional

SUBCOMMANDS = {
    "score": "sweeprl.cli.score",
    "diagnose": "sweeprl.cli.diagnose",
    "report": "sweeprl.cli.report",
    "trials": "sweeprl.cli.report:trials_main",
    "build-model": "sweeprl.cli.build_model",
    "plan": "sweeprl.cli.plan",
    "export": "sweeprl.cli.export",
    "import-recipe": "sweeprl.cli.import_recipe",
    "autopilot": "sweeprl.cli.autopilot",
}
APP = "sweeprl.cli.app"  # everything else: Hydra overrides of one run or a sweep


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    module, _, func = SUBCOMMANDS.get(args[0] if args else "", APP).partition(":")
    if module != APP:
        args = args[1:]
    try:
        code = getattr(importlib.import_module(module), func or "main")(args)
    except BrokenPipeError:  # output piped into a reader that stopped early (`| head`): its choice, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not fail again
        code = 0
    finally:
        if argv is None:  # the process's own command line: it ends right after this (a caller's argv: it may not)
            skip_exit_collection()
    sys.exit(code)


def skip_exit_collection() -> None:
    """Spare the interpreter's exit-time garbage collection over everything torch/transformers/TRL allocated
    (over a second per process: BENCHMARKS.md row exit_gc_freeze). ``gc.freeze()`` moves the surviving objects
    to the permanent generation, which that collection skips; ``atexit`` handlers still run. What is no longer
    finalized is an object kept alive only by a reference cycle, and by now sweeprl has no file or connection
    left open that way (its writes are ``with`` blocks; the tracking worker has been told to finish).
    """
    gc.freeze()


if __name__ == "__main__":
    main()
