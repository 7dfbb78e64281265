"""The algorithms sweeprl trains with, one module each: its ``algo`` fields with help and checks, and its
cross-field checks. :data:`ALGOS` is the registry (written out, no registration by import side effect)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from omegaconf import DictConfig

from sweeprl.config.algos import grpo, ppo, rloo


@dataclass(frozen=True)
class Algo:
    name: str
    schema: type
    cross_checks: Callable[[DictConfig], List[str]]
    trl_config: Optional[str] = None  # TRL config class ("GRPOConfig"); None = sweeprl's own trainer
    trl_trainer: Optional[str] = None  # TRL trainer class ("GRPOTrainer")

    @property
    def uses_trl(self) -> bool:
        return self.trl_config is not None


ALGOS: Dict[str, Algo] = {
    a.name: a
    for a in (
        Algo("grpo", grpo.GRPOAlgoConfig, grpo.cross_checks, "GRPOConfig", "GRPOTrainer"),
        Algo("rloo", rloo.RLOOAlgoConfig, rloo.cross_checks, "RLOOConfig", "RLOOTrainer"),
        Algo("ppo", ppo.PPOAlgoConfig, ppo.cross_checks),
    )
}

__all__ = ["ALGOS", "Algo"]
