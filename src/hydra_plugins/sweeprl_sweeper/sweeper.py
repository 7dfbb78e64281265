"""The ``sweeprl`` Hydra sweeper (``override hydra/sweeper: sweeprl``): an Optuna study driving Hydra jobs.

This module is what Hydra instantiates. Hydra's plugin scan imports every ``hydra_plugins`` module on every command,
so it imports nothing heavy: the implementation (:mod:`._impl`, which imports Optuna) is loaded when a sweep is set
up. Keys and behaviour are hydra-optuna-sweeper 1.3's (see :mod:`.config` and docs/sweeper.md); what an app adds
comes through :mod:`.hooks`.
"""

from __future__ import annotations

from typing import Any, List, Optional

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class SweeprlSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self.settings = settings  # the hydra.sweeper keys (config.SweeprlSweeperConf), checked in setup()
        self.impl: Optional[Any] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra_plugins.sweeprl_sweeper._impl import SweepImpl

        self.impl = SweepImpl(self.settings, hydra_context, task_function, config)

    def sweep(self, arguments: List[str]) -> None:
        assert self.impl is not None, "setup() first"
        self.impl.sweep(arguments)
