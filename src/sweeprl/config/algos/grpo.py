"""GRPO on TRL's ``GRPOTrainer``: the fields beyond :class:`~sweeprl.config.algos.trl_base.TRLAlgoConfig`.

The accepted values of ``loss_type``, ``scale_rewards`` and ``importance_sampling_level`` are TRL's, read from
TRL's source when a config is validated (:mod:`sweeprl.config.library_choices`): a TRL upgrade that adds a
loss type makes it valid here without a change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sweeprl.config.algos.trl_base import TRLAlgoConfig, batch_cross_checks
from sweeprl.config.fields import f, greater_than, optional
from sweeprl.config.library_choices import LibraryChoice

TRL_CONFIG = ("trl.trainer.grpo_config", "GRPOConfig")
TRL_TRAINER = "trl.trainer.grpo_trainer"


def _trl(attr: str) -> LibraryChoice:
    return LibraryChoice(attr, config=TRL_CONFIG, compared_in=TRL_TRAINER)


@dataclass
class GRPOAlgoConfig(TRLAlgoConfig):
    name: str = f("grpo", "Algorithm: grpo (TRL GRPOTrainer).", trl=False)
    delta: Optional[float] = f(
        None, "Two-sided clipping bound of the ratio (None = off).", optional(greater_than(1, "a float > 1"))
    )
    loss_type: str = f("dapo", "Loss aggregation (TRL's loss types: dapo, grpo, dr_grpo, bnpo, …).", _trl("loss_type"))
    scale_rewards: str = f("group", "Advantage scaling (TRL's: group, batch or none).", _trl("scale_rewards"))
    importance_sampling_level: str = f(
        "token", "Importance ratio level (TRL's: token, or sequence for GSPO).", _trl("importance_sampling_level")
    )


cross_checks = batch_cross_checks
