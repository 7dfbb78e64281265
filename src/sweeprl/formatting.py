"""How sweeprl writes numbers for people (tables, reports, findings) and for Hydra (override values)."""

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


def override_float(v: float, digits: int = 3) -> str:
    """A float as Hydra override text that Hydra parses as a float (never ``1`` for 1.0)."""
    s = f"{v:.{digits}g}"
    if not any(c in s for c in ".eEn"):
        s += ".0"
    return s
