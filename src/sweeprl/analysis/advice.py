"""Recommended changes as Hydra overrides that are valid and change what the trainer gets.

A finding recommends *changes*: a parameter (a name of :data:`PARAMS`), a direction and a factor. This module
turns each into a concrete override of the run's config, when the config is known:

- the *effective* config path: the KL coefficient is ``algo.beta`` for every algorithm; the clip range is
  ``algo.cliprange`` for PPO and ``algo.epsilon`` for GRPO/RLOO; parameters an algorithm does not have
  (``vf_coef`` for GRPO) give no change;
- a value that passes validation: ``num_generations`` snaps to a group size that divides the generation batch
  (raising the batch with it when no larger one does), a KL coefficient of 0 is raised to a first real value
  (0.04 — TRL's former default — for GRPO/RLOO, 0.05 for PPO) instead of "0 x 2", ints stay ints;
- with the run's full resolved config, the overridden config is validated with :func:`sweeprl.config.validate`
  and a change that fails it, or leaves the value as it was, is dropped (never printed as advice).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from hydra_plugins.sweeprl_sweeper.api import format_number
from sweeprl.config.algos import ALGOS, Algo

#: param -> config path (GRPO/RLOO); per-algorithm paths in :func:`config_path`
PATHS = {
    "learning_rate": "algo.learning_rate",
    "beta": "algo.beta",
    "temperature": "generation.temperature",
    "num_generations": "algo.num_generations",
    "max_grad_norm": "algo.max_grad_norm",
    "warmup_steps": "algo.warmup_steps",
    "max_completion_length": "generation.max_completion_length",
    "cliprange": "algo.epsilon",
    "cliprange_value": "algo.cliprange_value",
    "vf_coef": "algo.vf_coef",
    "kl_estimator": "algo.kl_estimator",
    "reward_threshold": "reward.funcs.0.kwargs.reward_threshold",
}
PARAMS = tuple(PATHS)
#: each parameter under its name in other tools' configs, for logs that are not sweeprl trials
FOREIGN = {
    "trl": {
        "learning_rate": "learning_rate",
        "beta": "beta",
        "temperature": "temperature",
        "num_generations": "num_generations",
        "max_grad_norm": "max_grad_norm",
        "warmup_steps": "warmup_steps",
        "max_completion_length": "max_completion_length",
        "cliprange": "epsilon",
    },
    "verl": {
        "learning_rate": "actor_rollout_ref.actor.optim.lr",
        "beta": "actor_rollout_ref.actor.kl_loss_coef",
        "temperature": "actor_rollout_ref.rollout.temperature",
        "num_generations": "actor_rollout_ref.rollout.n",
        "max_grad_norm": "actor_rollout_ref.actor.grad_clip",
        "warmup_steps": "actor_rollout_ref.actor.optim.lr_warmup_steps",
        "max_completion_length": "data.max_response_length",
        "cliprange": "actor_rollout_ref.actor.clip_ratio",
    },
    "openrlhf": {
        "learning_rate": "--actor_learning_rate",
        "beta": "--init_kl_coef",
        "temperature": "--temperature",
        "num_generations": "--n_samples_per_prompt",
        "max_grad_norm": "--max_norm",
        "max_completion_length": "--generate_max_len",
    },
    "llamafactory": {
        "learning_rate": "learning_rate",
        "beta": "pref_beta",
        "max_grad_norm": "max_grad_norm",
        "warmup_steps": "warmup_steps",
    },
}
FOREIGN["unsloth"] = FOREIGN["trl"]
FOREIGN["tinker"] = {"learning_rate": "learning_rate", "beta": "kl_penalty_coef", "num_generations": "group_size"}
INT_PARAMS = {"num_generations", "max_completion_length"}
LOG_PARAMS = {"learning_rate", "beta"}
FIRST_KL_COEF = {"grpo": 0.04, "rloo": 0.04, "ppo": 0.05}


@dataclass
class Change:
    param: str
    direction: str  # increase | decrease | set
    factor: Optional[float] = None
    override: Optional[str] = None  # ready Hydra override(s), space-separated, when the config is known
    value: Any = None  # the new value
    setting: Optional[str] = None  # the parameter's name in the tool that wrote a foreign log (TRL, verl ...)


@dataclass
class Advice:
    """What a diagnosis knows of the run's config: values by param name, the algorithm, the resolved config."""

    algo: Optional[str] = None
    values: Dict[str, Any] = field(default_factory=dict)
    resolved: Optional[Dict[str, Any]] = None
    framework: Optional[str] = None  # the tool whose log this is, when not a sweeprl trial

    def path(self, param: str) -> Optional[str]:
        return config_path(param, self.algo, self.resolved)

    def change(self, param: str, direction: str, factor: Optional[float] = None, value: Any = None) -> Optional[Change]:
        """The change, with its override when the current value is known; None when the param does not apply
        to this algorithm or no valid, different value exists."""
        assert param in PATHS and direction in ("increase", "decrease", "set"), (param, direction)
        path = self.path(param)
        if path is None:
            return None
        current = self.current(param)
        c = Change(param, direction, factor)
        # a history without config: direction only, in the tool's terms (a sweeprl override means nothing there)
        if current is None and (value is None or self.framework is not None):
            c.setting = FOREIGN.get(self.framework or "", {}).get(param)
            return c
        extra: List[str] = []
        new = value if value is not None else _scaled(param, direction, factor or 1.0, current, self.algo)
        if param == "num_generations" and direction != "set" and current is not None:
            new, extra = self._group_size(direction, int(current))
        if new is None or (current is not None and _same(new, current)):
            return None
        c.value = new
        c.override = " ".join([f"{path}={_text(new)}", *extra])
        if self.resolved is not None and not self.is_valid(c.override):
            return None
        return c

    def current(self, param: str) -> Any:
        if self.resolved is not None:
            path = self.path(param)
            return select(self.resolved, path) if path else None
        return self.values.get(param)

    def _group_size(self, direction: str, current: int) -> tuple[Optional[int], List[str]]:
        """A valid group size in ``direction``: a divisor (>= 2) of the generation batch; when raising and none is
        larger, double the group and set the per-device batch to keep it a divisor."""
        batch = generation_batch(self.resolved, self.algo) if self.resolved is not None else None
        if batch is None:
            new = max(2, current * 2 if direction == "increase" else current // 2)
            return (new + new % 2 if new > 2 else new), []
        divisors = [d for d in range(2, batch + 1) if batch % d == 0]
        if direction == "increase":
            larger = [d for d in divisors if d > current]
            if larger:
                return larger[0], []
            new = current * 2
            own_batch = _algo(self.algo).generation_batch_field
            if own_batch:
                return new, [f"algo.{own_batch}={max(new, batch)}"]
            per_dev = int(select(self.resolved, "algo.per_device_train_batch_size") or batch)
            accum = int(select(self.resolved, "algo.gradient_accumulation_steps") or 1)
            need = math.ceil(new / accum)
            while (need * accum) % new:
                need += 1
            return new, [f"algo.per_device_train_batch_size={max(need, per_dev)}"]
        smaller = [d for d in divisors if d < current]
        return (smaller[-1] if smaller else None), []

    def is_valid(self, override: str) -> bool:
        """The overridden config validates — or, for a config from an older sweeprl that no longer validates as
        a whole, the override adds no problem of its own."""
        from omegaconf import OmegaConf

        try:
            base = OmegaConf.create(self.resolved)
            new = OmegaConf.merge(base, OmegaConf.from_dotlist(override.split()))
        except Exception:  # noqa: BLE001 - any OmegaConf error means the override does not fit the config
            return False
        after = _problems(new)
        return after is not None and (not after or set(after) <= set(_problems(base) or []))


def _problems(cfg: Any) -> Optional[List[str]]:
    """Validation problems of a config ([] = valid); None when it cannot even be checked."""
    from sweeprl.config import ConfigValidationError, validate

    try:
        validate(cfg)
    except ConfigValidationError as exc:
        return list(exc.problems)
    except Exception:  # noqa: BLE001 - a config that cannot be checked at all
        return None
    return []


def _algo(name: Optional[str]) -> Algo:
    """sweeprl's definition of an algorithm; a foreign log's other algorithm (DPO, REINFORCE) is read as GRPO's."""
    return ALGOS.get(name or "", ALGOS["grpo"])


def config_path(param: str, algo: Optional[str], resolved: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """Where ``param`` lives for ``algo`` (None when the algorithm has no such setting)."""
    path, spec = PATHS[param], _algo(algo)
    if not path.startswith("algo."):
        return path
    name = spec.clip_field if param == "cliprange" else path.removeprefix("algo.")
    return f"algo.{name}" if name in spec.fields else None


def generation_batch(resolved: Mapping[str, Any], algo: Optional[str]) -> Optional[int]:
    """Completions per generation round, which the group size must divide."""
    own_batch = _algo(algo).generation_batch_field
    if own_batch:
        b = select(resolved, f"algo.{own_batch}")
        return int(b) if b else None
    gbs = select(resolved, "algo.generation_batch_size")
    if gbs:
        return int(gbs)
    per_dev = select(resolved, "algo.per_device_train_batch_size")
    accum = select(resolved, "algo.gradient_accumulation_steps") or 1
    return int(per_dev) * int(accum) if per_dev else None


def select(node: Any, path: Optional[str]) -> Any:
    """``a.b.0.c`` in nested dicts/lists; None when absent."""
    if node is None or not path:
        return None
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return None if isinstance(node, (dict, list)) else node


def _scaled(param: str, direction: str, factor: float, current: Any, algo: Optional[str]) -> Any:
    if current is None:
        return None
    if isinstance(current, str):
        return None  # categorical: only ``set`` changes it
    value = float(current)
    if param == "beta" and value == 0:
        return FIRST_KL_COEF.get(algo or "grpo", 0.04) if direction == "increase" else None
    if param == "warmup_steps" and value == 0:
        return 0.1 if direction == "increase" else None  # a tenth of max_steps
    value *= factor
    if param in INT_PARAMS:
        return max(1, int(round(value)))
    return float(f"{value:.3g}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _text(v: Any) -> str:
    return format_number(v) if isinstance(v, float) else str(v)


def as_dicts(changes: List[Optional[Change]]) -> List[Dict[str, Any]]:
    return [asdict(c) for c in changes if c is not None]
