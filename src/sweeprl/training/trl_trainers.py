"""GRPO and RLOO on TRL's trainers: map the ``algo``/``generation`` groups onto ``GRPOConfig``/``RLOOConfig``."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from sweeprl.config.validate import ConfigValidationError
from sweeprl.models.loading import DeviceSettings

# algo.<field> -> <Trainer>Config.<same field>, for both trainers
COMMON_FIELDS = (
    "learning_rate",
    "beta",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "num_iterations",
    "max_grad_norm",
    "warmup_steps",
    "lr_scheduler_type",
    "weight_decay",
    "optim",
    "epsilon",
    "epsilon_high",
    "mask_truncated_completions",
    "disable_dropout",
    "gradient_checkpointing",
    "max_steps",
    "logging_steps",
    "seed",
)
ALGO_FIELDS = {
    "grpo": COMMON_FIELDS + ("delta", "loss_type", "scale_rewards", "importance_sampling_level"),
    "rloo": COMMON_FIELDS + ("normalize_advantages",),
}
# generation.<field> -> GRPOConfig.<same field>
GENERATION_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_completion_length")


def trainer_kwargs(
    cfg: DictConfig,
    output_dir: str,
    device: DeviceSettings,
    model_init_kwargs: Dict[str, Any],
    reward_weights: Optional[List[float]] = None,
) -> Dict[str, Any]:
    """Keyword arguments of ``GRPOConfig``/``RLOOConfig`` for this trial (pure; no TRL import)."""
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    gen = OmegaConf.to_container(cfg.generation, resolve=True)
    kwargs: Dict[str, Any] = {k: algo[k] for k in ALGO_FIELDS[algo["name"]]}
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
    eval_every = int(cfg.data.eval_every or 0)
    if eval_every > 0 and float(cfg.data.validation_fraction) > 0:
        # periodic reward on the held-out prompts: logged as eval_reward, used by the objective
        kwargs.update(
            eval_strategy="steps", eval_steps=eval_every, per_device_eval_batch_size=algo["per_device_train_batch_size"]
        )
    kwargs.update(algo.get("extra") or {})
    return kwargs


def trl_classes(algo_name: str) -> tuple[type, type]:
    """(config class, trainer class) of TRL for ``algo.name``."""
    if algo_name == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        return GRPOConfig, GRPOTrainer
    if algo_name == "rloo":
        from trl import RLOOConfig, RLOOTrainer

        return RLOOConfig, RLOOTrainer
    raise ValueError(f"algo.name={algo_name!r} is not a TRL trainer (grpo, rloo)")


def check_extra_fields(config_cls: type, extra: Dict[str, Any]) -> None:
    """``algo.extra`` keys must be fields of the TRL config; fail with suggestions before any model is loaded."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    problems = []
    for key in extra:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            problems.append(f"algo.extra.{key} is not a {config_cls.__name__} field{hint}")
    if problems:
        raise ConfigValidationError(problems)


def build_trl_trainer(
    cfg: DictConfig,
    *,
    model: str,
    tokenizer: Any,
    reward_funcs: List[Any],
    reward_weights: List[float],
    train_dataset: Any,
    eval_dataset: Any,
    output_dir: str,
    device: DeviceSettings,
    model_init_kwargs: Dict[str, Any],
    peft_config: Any,
    callbacks: List[Any],
):
    config_cls, trainer_cls = trl_classes(str(cfg.algo.name))
    check_extra_fields(config_cls, dict(cfg.algo.extra))
    args = config_cls(**trainer_kwargs(cfg, output_dir, device, model_init_kwargs, reward_weights))
    if args.eval_strategy == "no":
        eval_dataset = None  # nothing would use it
    return trainer_cls(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
