"""Fault injection for tests of the sweep machinery; off unless the config has a ``fault`` node.

Add with ``+fault.<name>=<value>`` on the command line (the config schema has no ``fault`` key, so nothing can
turn it on by accident):

- ``raise_at_step=K``   raise RuntimeError at update K;
- ``kill_at_step=K``    SIGKILL the trial's own process at update K (as the OOM killer would);
- ``sleep_per_step=S``  sleep S seconds after every update (slow trials, timeouts, unequal lengths);
- ``objective_nan=true`` make the trial's objective NaN;
- ``only_trials=[n,…]`` apply the faults only to these trial numbers.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Optional

from transformers import TrainerCallback

KNOWN = {"raise_at_step", "kill_at_step", "sleep_per_step", "objective_nan", "only_trials"}


def fault_config(cfg: Any) -> Optional[dict]:
    node = cfg.get("fault") if hasattr(cfg, "get") else None
    if not node:
        return None
    from omegaconf import OmegaConf

    spec = OmegaConf.to_container(node, resolve=True)
    unknown = set(spec) - KNOWN
    if unknown:
        raise ValueError(f"fault.{sorted(unknown)[0]} is not a fault hook; allowed: {', '.join(sorted(KNOWN))}")
    only = spec.get("only_trials")
    if only is not None and cfg.sweeprl.trial_number not in list(only):
        return None
    return spec


class FaultCallback(TrainerCallback):
    def __init__(self, spec: dict):
        self.spec = spec

    def on_step_end(self, args, state, control, **kwargs):
        step = int(state.global_step)
        if self.spec.get("sleep_per_step"):
            time.sleep(float(self.spec["sleep_per_step"]))
        if self.spec.get("raise_at_step") is not None and step >= int(self.spec["raise_at_step"]):
            raise RuntimeError(f"fault injected: raise_at_step={self.spec['raise_at_step']}")
        if self.spec.get("kill_at_step") is not None and step >= int(self.spec["kill_at_step"]):
            os.kill(os.getpid(), signal.SIGKILL)
