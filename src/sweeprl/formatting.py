"""How sweeprl writes numbers for people (tables, reports, findings). Override text for Hydra is written by
:mod:`hydra_plugins.sweeprl_sweeper.search_space` (``format_value``, ``format_number``, ``format_distribution``)."""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any


def num(v: Any, digits: int = 3) -> str:
    """A value for a table or a sentence: ``digits`` significant digits for floats, ``-`` for None, ints and
    other values as they are, ``nan``/``inf`` spelled out."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or not math.isfinite(v):
        return str(v)
    return f"{v:.{digits}g}"


def executable(name: str = "python") -> str:
    """How a person in the current directory runs this environment's ``name`` (``python``, ``mlflow``) in a
    command sweeprl prints: the bare name when that is what ``PATH`` finds, else the venv's path relative to here
    (``.venv/bin/mlflow``) or absolute."""
    exe = Path(sys.executable) if name == "python" else Path(sys.executable).with_name(name)
    found = shutil.which(name)
    if found and Path(found).resolve() == exe.resolve():
        return name
    try:
        return str(exe.relative_to(Path.cwd()))
    except ValueError:
        return str(exe)


#: set to 1 by ``python -m sweeprl -v …`` (and inherited by trial processes): a sweep's log keeps every trial's
#: start and step lines, Hydra's launch lines and the libraries' INFO messages, which are otherwise left out
VERBOSE_ENV = "SWEEPRL_VERBOSE"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def short_reason(reason: str) -> str:
    """A prune/fail reason cut to what fits a table cell: ``pruned at step 10``, ``guard kl_runaway at step 12``,
    the first clause of an error."""
    if not reason:
        return ""
    first = reason.strip().splitlines()[0]
    m = re.match(r"pruner: .* at step (\d+)", first)
    if m:
        return f"pruned at step {m.group(1)}"
    m = re.match(r"guard:(\w+)", first)
    if m:
        return f"guard {m.group(1)}"
    return first if len(first) <= 60 else first[:59] + "…"
