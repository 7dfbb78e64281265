"""``data=synthetic``: numbered prompts from a template, for rewards that score the completion alone."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from sweeprl.data.registry import Records, builder


@builder("synthetic_prompts")
def synthetic_prompts(data_cfg: DictConfig, tokenizer: Any = None) -> Records:
    """``num_prompts`` prompts from ``prompt_template`` ("Task {i}:") — for rewards that score the completion alone."""
    return [{"id": str(i), "prompt": data_cfg.prompt_template.format(i=i)} for i in range(data_cfg.num_prompts)]
