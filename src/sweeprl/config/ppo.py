"""Config schema and value checks of the ``algo`` group for PPO (:mod:`sweeprl.training.ppo`).

``PPOAlgoConfig`` follows :class:`sweeprl.config.schema.GRPOAlgoConfig`: every field carries a one-line help
string through :func:`sweeprl.config.schema.f`. Range checks that a type cannot express are
:class:`sweeprl.config.validate.Rule` objects (:func:`ppo_rules`) plus one cross-field check
(:func:`ppo_cross_checks`); both name the key, the bad value and what is allowed, like the GRPO checks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from sweeprl.config.schema import f
from sweeprl.config.validate import Rule, _at_least, _check, _choice, _non_negative, _positive

KL_ESTIMATORS = ("k1", "k3")
VALUE_MODELS = ("shared", "separate")


@dataclass
class PPOAlgoConfig:
    name: str = f("ppo", "Algorithm: ppo (sweeprl's RLHF PPO with a value head, sweeprl.training.ppo).")
    learning_rate: float = f(1e-5, "Peak learning rate of AdamW (policy and value head).")
    batch_size: int = f(
        24, "Completions sampled per PPO update (24 is divisible by the default num_generations choices 4, 6, 8)."
    )
    mini_batch_size: int = f(4, "Completions per forward/backward pass; must divide batch_size.")
    ppo_epochs: int = f(1, "Optimisation passes over each sampled batch.")
    gradient_accumulation_steps: int = f(1, "Mini-batches accumulated per optimizer step.")
    max_grad_norm: float = f(1.0, "Gradient clipping norm.")
    cliprange: float = f(0.2, "Clipping range of the policy importance ratio (1 ± cliprange).")
    cliprange_value: float = f(0.2, "Clipping range of the value prediction around the rollout value.")
    vf_coef: float = f(0.1, "Weight of the value loss in the total loss.")
    gamma: float = f(1.0, "Discount factor over completion tokens.")
    lam: float = f(0.95, "GAE lambda (bias/variance trade-off of the advantages).")
    whiten_advantages: bool = f(True, "Normalise advantages to zero mean and unit variance over the batch.")
    kl_estimator: str = f("k1", "Per-token KL estimator of the reward penalty: k1 (log-ratio) or k3 (non-negative).")
    adap_kl_ctrl: bool = f(True, "Adapt the KL coefficient towards target_kl (Ziegler et al. 2019); false = fixed.")
    init_kl_coef: float = f(0.2, "Initial (or fixed) KL coefficient of the reward penalty.")
    beta: Optional[float] = f(
        None,
        "The KL coefficient under the name every algorithm shares (sweeps over algo.beta); when set it replaces "
        "init_kl_coef.",
    )
    num_generations: int = f(
        1, "Completions sampled per prompt (batch_size / num_generations prompts per update); must divide batch_size."
    )
    target_kl: float = f(6.0, "Target per-sequence KL of the adaptive controller (nats).")
    kl_horizon: int = f(10000, "Horizon of the adaptive KL controller (in sampled completions).")
    early_stop_approx_kl: Optional[float] = f(
        None, "Stop the remaining epochs/mini-batches of an update when approx-KL exceeds this (None = off)."
    )
    value_model: str = f(
        "shared", "Value function: shared (value head on the policy trunk) or separate (own trunk, same init)."
    )
    warmup_steps: float = f(0, "Warmup updates (an int count, or a fraction of max_steps when < 1).")
    lr_scheduler_type: str = f("constant", "Learning-rate schedule (transformers names: constant, linear, cosine, …).")
    weight_decay: float = f(0.0, "AdamW weight decay (matrices only; biases and norms are not decayed).")
    max_steps: int = f(100, "Number of PPO updates (sampled batches) of the trial.")
    logging_steps: int = f(1, "Log metrics every this many updates.")
    seed: int = f(42, "Training seed (prompt order, sampling, value-head init).")
    extra: Dict[str, Any] = f({}, "Unused passthrough (kept for symmetry with the GRPO group).")


def ppo_rules() -> List[Rule]:
    """Range and choice checks of the PPO ``algo`` group (keys are full config paths, ``algo.*``)."""
    return [
        Rule("algo.learning_rate", _positive, "a float > 0 (e.g. 1e-6 for a 1.5B model, 1e-3 for the tiny one)"),
        Rule("algo.batch_size", _at_least(1), "an int >= 1"),
        Rule("algo.mini_batch_size", _at_least(1), "an int >= 1"),
        Rule("algo.ppo_epochs", _at_least(1), "an int >= 1"),
        Rule("algo.gradient_accumulation_steps", _at_least(1), "an int >= 1"),
        Rule("algo.max_grad_norm", _positive, "a float > 0"),
        Rule("algo.cliprange", _positive, "a float > 0"),
        Rule("algo.cliprange_value", _positive, "a float > 0"),
        Rule("algo.vf_coef", _non_negative, "a float >= 0"),
        Rule("algo.gamma", lambda v: 0 < v <= 1, "a float in (0, 1]"),
        Rule("algo.lam", lambda v: 0 <= v <= 1, "a float in [0, 1]"),
        _choice("algo.kl_estimator", KL_ESTIMATORS),
        Rule("algo.init_kl_coef", _non_negative, "a float >= 0 (0 = no KL penalty)"),
        Rule("algo.beta", lambda v: v is None or v >= 0, "null or a float >= 0 (replaces init_kl_coef)"),
        Rule("algo.num_generations", _at_least(1), "an int >= 1"),
        Rule("algo.target_kl", _positive, "a float > 0"),
        Rule("algo.kl_horizon", _at_least(1), "an int >= 1"),
        Rule("algo.early_stop_approx_kl", lambda v: v is None or v > 0, "null or a float > 0"),
        _choice("algo.value_model", VALUE_MODELS),
        Rule("algo.warmup_steps", _non_negative, "a number >= 0 (a count, or a fraction of max_steps when < 1)"),
        Rule("algo.weight_decay", _non_negative, "a float >= 0"),
        Rule("algo.max_steps", _at_least(1), "an int >= 1"),
        Rule("algo.logging_steps", _at_least(1), "an int >= 1"),
    ]


def ppo_cross_checks(cfg: DictConfig) -> List[str]:
    """Cross-field checks of the PPO ``algo`` group: ``mini_batch_size`` must divide ``batch_size``."""
    batch, mini, gens = cfg.algo.batch_size, cfg.algo.mini_batch_size, cfg.algo.num_generations
    if not (isinstance(batch, int) and isinstance(mini, int) and batch >= 1 and mini >= 1):
        return []  # already reported by the rules
    divisors = [d for d in range(1, batch + 1) if batch % d == 0]
    problems = []
    if batch % mini:
        problems.append(
            f"algo.mini_batch_size={mini} is invalid; allowed: a divisor of algo.batch_size={batch} (one of {divisors})"
        )
    if isinstance(gens, int) and gens >= 1 and batch % gens:
        problems.append(
            f"algo.num_generations={gens} is invalid; allowed: a divisor of algo.batch_size={batch} (one of {divisors})"
        )
    return problems


def ppo_problems(cfg: DictConfig) -> List[str]:
    """Every problem of the PPO ``algo`` group of ``cfg`` (rules, then cross checks); empty when valid."""
    return _check(cfg, ppo_rules()) + ppo_cross_checks(cfg)


def as_ppo_config(algo: Any) -> PPOAlgoConfig:
    """A :class:`PPOAlgoConfig` from a DictConfig, a mapping or any object with (some of) its attributes;
    missing fields take their defaults, unknown ones are ignored."""
    if isinstance(algo, PPOAlgoConfig):
        return dataclasses.replace(algo)
    if isinstance(algo, DictConfig):
        algo = OmegaConf.to_container(algo, resolve=True)
    values: Dict[str, Any] = {}
    for fld in dataclasses.fields(PPOAlgoConfig):
        if isinstance(algo, dict):
            present, value = fld.name in algo, algo.get(fld.name)
        else:
            present, value = hasattr(algo, fld.name), getattr(algo, fld.name, None)
        if present:
            values[fld.name] = dict(value) if fld.name == "extra" and value is not None else value
    return PPOAlgoConfig(**values)


__all__ = [
    "KL_ESTIMATORS",
    "VALUE_MODELS",
    "PPOAlgoConfig",
    "as_ppo_config",
    "ppo_cross_checks",
    "ppo_problems",
    "ppo_rules",
]
