"""Value checks that a dataclass type cannot express, run before any model is loaded.

Types and unknown keys are already enforced by the structured schema at compose time; this module adds
ranges, choices and cross-field rules (the generation batch must be a multiple of num_generations, …).
Every message names the key, the bad value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional

from omegaconf import DictConfig, OmegaConf

from sweeprl.config.schema import ALGO_SCHEMAS

GRPO_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
SCALE_REWARDS = ("group", "batch", "none")
IS_LEVELS = ("token", "sequence")
MODEL_SOURCES = ("tiny", "hub")
DTYPES = ("auto", "float32", "bfloat16", "float16")
OBJECTIVES = ("stability_adjusted", "pareto", "reward")
DEVICES = ("auto", "cpu", "cuda")
LORA_BIAS = ("none", "all", "lora_only")


class ConfigValidationError(ValueError):
    """One or more config values are out of range; ``problems`` lists one message per key."""

    def __init__(self, problems: List[str]):
        self.problems = problems
        super().__init__("invalid config:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class Rule:
    key: str
    ok: Callable[[Any], bool]
    allowed: str


def _positive(v: Any) -> bool:
    return v is not None and v > 0


def _non_negative(v: Any) -> bool:
    return v is not None and v >= 0


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v is not None and v >= n


def _choice(key: str, choices: Iterable[str]) -> Rule:
    choices = tuple(choices)
    return Rule(key, lambda v: v in choices, "one of " + ", ".join(choices))


COMMON_RULES: List[Rule] = [
    Rule("generation.temperature", _positive, "a float > 0 (e.g. 0.7–1.3)"),
    Rule("generation.top_p", lambda v: 0 < v <= 1, "a float in (0, 1]"),
    Rule("generation.top_k", _non_negative, "an int >= 0 (0 = off)"),
    Rule("generation.min_p", lambda v: v is None or 0 <= v <= 1, "null or a float in [0, 1]"),
    Rule("generation.repetition_penalty", _positive, "a float > 0 (1 = off)"),
    Rule("generation.max_completion_length", _at_least(1), "an int >= 1"),
    _choice("model.source", MODEL_SOURCES),
    _choice("model.dtype", DTYPES),
    Rule("lora.r", _at_least(1), "an int >= 1"),
    Rule("lora.alpha", _positive, "a number > 0"),
    Rule("lora.dropout", lambda v: 0 <= v < 1, "a float in [0, 1)"),
    _choice("lora.bias", LORA_BIAS),
    Rule("data.num_prompts", _at_least(1), "an int >= 1"),
    Rule("data.max_prompt_length", lambda v: v is None or v >= 1, "null or an int >= 1"),
    Rule("data.validation_fraction", lambda v: 0 <= v < 1, "a float in [0, 1)"),
    _choice("objective.name", OBJECTIVES),
    Rule("objective.window", lambda v: 0 < v <= 1, "a float in (0, 1]"),
    Rule("objective.final_steps", _at_least(1), "an int >= 1"),
    Rule("objective.target_kl", lambda v: v is None or v > 0, "null (the algorithm's default) or a float > 0"),
    Rule("objective.entropy_rise_free", _non_negative, "a float >= 0"),
    Rule("objective.min_scale", _positive, "a float > 0"),
    Rule("objective.entropy_drop_free", lambda v: 0 <= v <= 1, "a float in [0, 1]"),
    Rule("objective.zero_std_free", lambda v: 0 <= v <= 1, "a float in [0, 1]"),
    Rule("data.eval_every", _non_negative, "an int >= 0 (0 = no periodic validation)"),
    Rule("pruning.report_every", _at_least(1), "an int >= 1"),
    Rule("pruning.min_steps", _non_negative, "an int >= 0"),
    _choice("sweeprl.device", DEVICES),
]

# GRPO's rules; RLOO uses the subset of fields it has
GRPO_RULES: List[Rule] = [
    Rule("algo.learning_rate", _positive, "a float > 0 (e.g. 1e-6 for a 1.5B model, 1e-3 for the tiny one)"),
    Rule("algo.beta", _non_negative, "a float >= 0 (0 disables the KL term and the reference model)"),
    Rule("algo.num_generations", _at_least(2), "an int >= 2 (group-relative advantages need 2 samples)"),
    Rule("algo.per_device_train_batch_size", _at_least(1), "an int >= 1"),
    Rule("algo.gradient_accumulation_steps", _at_least(1), "an int >= 1"),
    Rule("algo.generation_batch_size", lambda v: v is None or v >= 1, "null or an int >= 1"),
    Rule("algo.num_iterations", _at_least(1), "an int >= 1"),
    Rule("algo.max_grad_norm", _positive, "a float > 0"),
    Rule("algo.warmup_steps", _non_negative, "a number >= 0 (a count, or a fraction of max_steps when < 1)"),
    Rule("algo.weight_decay", _non_negative, "a float >= 0"),
    Rule("algo.epsilon", _positive, "a float > 0"),
    Rule("algo.epsilon_high", lambda v: v is None or v > 0, "null or a float > 0"),
    Rule("algo.delta", lambda v: v is None or v > 1, "null or a float > 1"),
    _choice("algo.loss_type", GRPO_LOSS_TYPES),
    _choice("algo.scale_rewards", SCALE_REWARDS),
    _choice("algo.importance_sampling_level", IS_LEVELS),
    Rule("algo.max_steps", _at_least(1), "an int >= 1"),
    Rule("algo.logging_steps", _at_least(1), "an int >= 1"),
]


def _check(cfg: DictConfig, rules: Iterable[Rule]) -> List[str]:
    problems = []
    for rule in rules:
        value = OmegaConf.select(cfg, rule.key, throw_on_missing=False)
        try:
            good = rule.ok(value)
        except TypeError:
            good = False
        if not good:
            problems.append(f"{rule.key}={value!r} is invalid; allowed: {rule.allowed}")
    return problems


def _grpo_cross_checks(cfg: DictConfig) -> List[str]:
    algo = cfg.algo
    n, per_dev, accum = algo.num_generations, algo.per_device_train_batch_size, algo.gradient_accumulation_steps
    if not (isinstance(n, int) and n >= 2 and per_dev >= 1 and accum >= 1):
        return []  # already reported
    problems = []
    if algo.generation_batch_size is not None:
        gen_batch, key = algo.generation_batch_size, "algo.generation_batch_size"
        if gen_batch % per_dev:
            problems.append(
                f"algo.generation_batch_size={gen_batch} is invalid; allowed: a multiple of "
                f"algo.per_device_train_batch_size={per_dev}"
            )
    else:
        gen_batch, key = per_dev * accum, "algo.per_device_train_batch_size x algo.gradient_accumulation_steps"
    if gen_batch % n:
        problems.append(
            f"algo.num_generations={n} does not divide the generation batch ({key} = {gen_batch}); allowed: "
            f"num_generations in {_divisors(gen_batch)}, or a batch that is a multiple of {n}"
        )
    return problems


def _divisors(n: int) -> List[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


def _search_space_checks(cfg: DictConfig) -> List[str]:
    space = cfg.get("search_space")
    if space is None:
        return []
    problems = []
    for key in ("learning_rate", "beta", "temperature"):
        lo_hi = list(space[key])
        if len(lo_hi) != 2 or not lo_hi[0] < lo_hi[1]:
            problems.append(f"search_space.{key}={lo_hi} is invalid; allowed: [low, high] with low < high")
    if space.learning_rate[0] <= 0:
        problems.append(
            f"search_space.learning_rate={list(space.learning_rate)} is invalid; allowed: low > 0 (log scale)"
        )
    if not all(int(g) >= 1 for g in space.num_generations):
        problems.append(
            f"search_space.num_generations={list(space.num_generations)} is invalid; allowed: ints >= 1 (>= 2 for "
            "GRPO/RLOO)"
        )
    return problems


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigValidationError` naming every bad key; return None when all is well."""
    problems = _check(cfg, COMMON_RULES)
    algo_name: Optional[str] = OmegaConf.select(cfg, "algo.name")
    if algo_name not in ALGO_SCHEMAS:
        problems.append(f"algo.name={algo_name!r} is invalid; allowed: one of {', '.join(ALGO_SCHEMAS)}")
    elif algo_name == "ppo":
        from sweeprl.config.ppo import ppo_cross_checks, ppo_rules

        problems += _check(cfg, ppo_rules())
        problems += ppo_cross_checks(cfg)
    elif algo_name in ("grpo", "rloo"):
        present = set(cfg.algo.keys())
        problems += _check(cfg, [r for r in GRPO_RULES if r.key.split(".", 1)[1] in present])
        problems += _grpo_cross_checks(cfg)
    if cfg.model.source == "hub" and not cfg.model.name_or_path:
        problems.append("model.name_or_path=None is invalid; allowed: a hub id or local path when model.source=hub")
    if cfg.lora.enabled and not cfg.lora.target_modules:
        problems.append("lora.target_modules=[] is invalid; allowed: a non-empty list of module names")
    if not cfg.reward.funcs:
        problems.append("reward.funcs=[] is invalid; allowed: at least one {name, weight, kwargs} entry")
    problems += _search_space_checks(cfg)
    if problems:
        raise ConfigValidationError(problems)
