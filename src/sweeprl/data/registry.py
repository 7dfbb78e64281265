"""The registry of prompt-dataset builders and the helpers every builder shares (validation split, prompt
truncation). Builders register themselves with :func:`builder`; :mod:`sweeprl.data` imports them all."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict, List, Optional

from omegaconf import DictConfig

Records = List[Dict[str, Any]]
#: name -> builder(data_cfg, tokenizer) returning records with at least "id" and "prompt"
BUILDERS: Dict[str, Callable[[DictConfig, Any], Records]] = {}


def builder(name: str):
    def deco(fn: Callable[[DictConfig, Any], Records]):
        BUILDERS[name] = fn
        return fn

    return deco


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
