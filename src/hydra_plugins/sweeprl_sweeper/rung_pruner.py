""":class:`RungPruner` (``hydra/sweeper/pruner=rungs``), loaded on first use.

Hydra imports every public module of a plugin package when it scans for plugins, and an app that never prunes
should not pay for importing Optuna then: the class lives in ``_rung_pruner`` (a name the scan skips) and this
module hands it out when it is first asked for (``from ... import RungPruner``, or Hydra's ``_target_``).
"""

from __future__ import annotations

from typing import Any

LAZY = ("MAX_RESOURCE_ATTR", "RungPruner", "noise")


def __getattr__(name: str) -> Any:
    if name in LAZY:
        from hydra_plugins.sweeprl_sweeper import _rung_pruner

        return getattr(_rung_pruner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
