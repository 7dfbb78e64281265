"""GRPO on TRL's GRPOTrainer: map the ``algo``/``generation`` groups onto ``GRPOConfig``."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from sweeprl.config.validate import ConfigValidationError
from sweeprl.models.loading import DeviceSettings

# algo.<field> -> GRPOConfig.<same field>
ALGO_FIELDS = (
    "learning_rate", "beta", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "generation_batch_size", "num_iterations", "max_grad_norm", "warmup_steps", "lr_scheduler_type",
    "weight_decay", "optim", "epsilon", "epsilon_high", "delta", "loss_type", "scale_rewards",
    "importance_sampling_level", "mask_truncated_completions", "disable_dropout", "gradient_checkpointing",
    "max_steps", "logging_steps", "seed",
)  # fmt: skip
# generation.<field> -> GRPOConfig.<same field>
GENERATION_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_completion_length")


def grpo_kwargs(cfg: DictConfig, output_dir: str, device: DeviceSettings, model_init_kwargs: Dict[str, Any],
                reward_weights: Optional[List[float]] = None) -> Dict[str, Any]:  # fmt: skip
    """Keyword arguments of ``GRPOConfig`` for this trial (pure; no TRL import)."""
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    gen = OmegaConf.to_container(cfg.generation, resolve=True)
    kwargs: Dict[str, Any] = {k: algo[k] for k in ALGO_FIELDS}
    kwargs.update({k: gen[k] for k in GENERATION_FIELDS})
    if kwargs["epsilon_high"] is None:
        kwargs.pop("epsilon_high")  # TRL defaults it to epsilon
    kwargs.update(
        output_dir=output_dir,
        report_to="none",
        save_strategy="no",
        use_cpu=device.use_cpu,
        bf16=device.bf16,
        model_init_kwargs=model_init_kwargs,
        reward_weights=reward_weights,
        data_seed=algo["seed"],
        log_completions=False,
    )
    kwargs.update(algo.get("extra") or {})
    return kwargs


def check_extra_fields(extra: Dict[str, Any]) -> None:
    """``algo.extra`` keys must be GRPOConfig fields; fail with suggestions before any model is loaded."""
    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    problems = []
    for key in extra:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            problems.append(f"algo.extra.{key} is not a GRPOConfig field{hint}")
    if problems:
        raise ConfigValidationError(problems)


def build_grpo_trainer(cfg: DictConfig, *, model: str, tokenizer: Any, reward_funcs: List[Any],
                       reward_weights: List[float], train_dataset: Any, eval_dataset: Any, output_dir: str,
                       device: DeviceSettings, model_init_kwargs: Dict[str, Any], peft_config: Any,
                       callbacks: List[Any]):  # fmt: skip
    from trl import GRPOConfig, GRPOTrainer

    check_extra_fields(dict(cfg.algo.extra))
    args = GRPOConfig(**grpo_kwargs(cfg, output_dir, device, model_init_kwargs, reward_weights))
    return GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
