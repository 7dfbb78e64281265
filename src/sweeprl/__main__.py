"""Command line entry point: ``python -m sweeprl`` / ``sweeprl``. Dispatch only; the commands live in cli/.

``python -m sweeprl [hydra overrides]``        one trial (e.g. experiment=quickstart algo.learning_rate=3e-4)
``python -m sweeprl -m [overrides] sweep=...``  an Optuna sweep through the sweeprl Hydra sweeper
``python -m sweeprl score ...``                 score completions with a reward (see ``score --help``)
``python -m sweeprl diagnose SOURCE``           the post-mortem of one run (see ``diagnose --help``)
``python -m sweeprl report STUDY``              report.html/md + plots of a sweep; ``trials STUDY``: ranked table
"""

from __future__ import annotations

import importlib
import sys
from typing import List, Optional

SUBCOMMANDS = {
    "score": "sweeprl.cli.score",
    "diagnose": "sweeprl.cli.diagnose",
    "report": "sweeprl.cli.report",
    "trials": "sweeprl.cli.report:trials_main",
}
APP = "sweeprl.cli.app"  # everything else: Hydra overrides of one run or a sweep


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    module, _, func = SUBCOMMANDS.get(args[0] if args else "", APP).partition(":")
    if module != APP:
        args = args[1:]
    sys.exit(getattr(importlib.import_module(module), func or "main")(args))


if __name__ == "__main__":
    main()
