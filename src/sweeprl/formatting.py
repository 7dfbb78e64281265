"""How sweeprl writes numbers for people (tables, reports, findings). Override text for Hydra is written by
:mod:`hydra_plugins.sweeprl_sweeper.search_space` (``format_value``, ``format_number``, ``format_distribution``)."""

from __future__ import annotations

import math
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
