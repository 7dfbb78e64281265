"""Training/validation prompt datasets, built by name from the ``data`` config group."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict, List, Optional, Tuple

from omegaconf import DictConfig

Records = List[Dict[str, Any]]
#: name -> builder(data_cfg, tokenizer) returning records with at least "id" and "prompt"
BUILDERS: Dict[str, Callable[[DictConfig, Any], Records]] = {}


def builder(name: str):
    def deco(fn: Callable[[DictConfig, Any], Records]):
        BUILDERS[name] = fn
        return fn

    return deco


@builder("synthetic_prompts")
def synthetic_prompts(data_cfg: DictConfig, tokenizer: Any = None) -> Records:
    """``num_prompts`` prompts from ``prompt_template`` ("Task {i}:") — for rewards that score the completion alone."""
    return [{"id": str(i), "prompt": data_cfg.prompt_template.format(i=i)} for i in range(data_cfg.num_prompts)]


def in_validation(record_id: str, fraction: float) -> bool:
    """Deterministic split by id: a record is held out when the hash of its id falls below ``fraction``."""
    if fraction <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(record_id.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def _keep_last_tokens(text: str, tokenizer: Any, max_tokens: int) -> str:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[-max_tokens:]) if len(ids) > max_tokens else text


def truncate_prompts(records: Records, tokenizer: Any, max_tokens: Optional[int]) -> Records:
    """Keep the *last* ``max_tokens`` tokens of every prompt (of the user message of chat prompts): the end of
    the task statement and the answer instructions matter most."""
    if not max_tokens:
        return records
    out = []
    for r in records:
        prompt = r["prompt"]
        if isinstance(prompt, str):
            r = {**r, "prompt": _keep_last_tokens(prompt, tokenizer, max_tokens)}
        else:
            r = {
                **r,
                "prompt": [
                    {**m, "content": _keep_last_tokens(m["content"], tokenizer, max_tokens)}
                    if m.get("role") == "user"
                    else m
                    for m in prompt
                ],
            }
        out.append(r)
    return out


def build_datasets(data_cfg: DictConfig, tokenizer: Any = None) -> Tuple[Any, Any]:
    """(train, validation) as ``datasets.Dataset``; validation is None when ``validation_fraction`` is 0."""
    from datasets import Dataset

    _load_builtin()
    if data_cfg.name not in BUILDERS:
        raise KeyError(
            f"data.name={data_cfg.name!r} is not a registered dataset; available: {', '.join(sorted(BUILDERS))}"
        )
    records = BUILDERS[data_cfg.name](data_cfg, tokenizer)
    if tokenizer is not None:
        records = truncate_prompts(records, tokenizer, data_cfg.max_prompt_length)
    train = [r for r in records if not in_validation(r["id"], data_cfg.validation_fraction)]
    val = [r for r in records if in_validation(r["id"], data_cfg.validation_fraction)]
    if not train:
        raise ValueError(
            f"data: no training prompts left after holding out validation_fraction={data_cfg.validation_fraction}"
        )
    return Dataset.from_list(train), (Dataset.from_list(val) if val else None)


def _load_builtin() -> None:
    from sweeprl import ocaml_data  # noqa: F401  (registers ocaml_problems)
