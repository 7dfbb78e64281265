"""sweeprl's Hydra sweeper plugin (select with ``override hydra/sweeper: sweeprl``)."""

from hydra_plugins.sweeprl_sweeper.config import register as _register

_register()
