"""RLOO on TRL's ``RLOOTrainer`` (REINFORCE with a leave-one-out baseline): the fields beyond
:class:`~sweeprl.config.algos.trl_base.TRLAlgoConfig` and the defaults that differ from GRPO's."""

from __future__ import annotations

from dataclasses import dataclass

from sweeprl.config.algos.trl_base import TRLAlgoConfig, batch_cross_checks
from sweeprl.config.fields import f, redefault


@dataclass
class RLOOAlgoConfig(TRLAlgoConfig):
    name: str = f("rloo", "Algorithm: rloo (TRL RLOOTrainer, REINFORCE leave-one-out baseline).", trl=False)
    beta: float = redefault(TRLAlgoConfig, "beta", 0.05)
    num_generations: int = redefault(
        TRLAlgoConfig, "num_generations", 4, "Completions sampled per prompt (the leave-one-out group)."
    )
    normalize_advantages: bool = f(False, "Whiten the leave-one-out advantages.")


cross_checks = batch_cross_checks
