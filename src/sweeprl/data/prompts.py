"""``data=prompts``: your own prompt dataset — a local JSONL/JSON/CSV/Parquet file or a hub dataset — with its
columns mapped to what training needs.

``data.kwargs`` (defaults in ``conf/data/prompts.yaml``):

- ``path`` (a local file; the format from its suffix) or ``hub_id`` (+ ``hub_config``, ``split``; network);
- ``columns``: our name -> your column: ``prompt`` (required), ``id`` (else a hash of the prompt text, so the
  validation split survives reordering the file), ``system`` (a per-row system prompt). Every other column of
  the dataset is kept and reaches the reward functions as a keyword of the same name (``tests``,
  ``reference_solution``, …); ``keep_columns`` (a list) keeps only those;
- ``system_prompt``: one system prompt for every row (a ``columns.system`` value wins); ``template``: the user
  message around the prompt, ``{prompt}`` marks it;
- ``chat``: ``auto`` (a list of messages when the tokenizer has a chat template, TRL applies it; else plain
  text), ``true`` or ``false``. A prompt column that already holds messages is used as it is;
- ``max_prompt_tokens``: drop rows whose prompt is longer (``data.max_prompt_length`` truncates instead);
  ``limit``: the first N rows.

The deterministic validation split by id (``data.validation_fraction``) is the one every dataset shares.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping

from omegaconf import DictConfig, OmegaConf

from sweeprl.data.registry import Records, builder

log = logging.getLogger(__name__)

DEFAULTS: Dict[str, Any] = {
    "path": None,
    "hub_id": None,
    "hub_config": None,
    "split": "train",
    "columns": {"prompt": "prompt", "id": None, "system": None},
    "keep_columns": None,
    "system_prompt": None,
    "template": "{prompt}",
    "chat": "auto",
    "max_prompt_tokens": None,
    "limit": None,
}
FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
CHAT = ("auto", True, False)


def options(data_cfg: DictConfig | Mapping[str, Any]) -> Dict[str, Any]:
    """``data.kwargs`` with the defaults filled in; a wrong key or value fails naming it and what is allowed."""
    kwargs = data_cfg.get("kwargs") if hasattr(data_cfg, "get") else None
    given = OmegaConf.to_container(kwargs, resolve=True) if isinstance(kwargs, DictConfig) else dict(kwargs or {})
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise KeyError(
            f"data.kwargs has unknown key(s) {sorted(unknown)} for data=prompts; allowed: {', '.join(DEFAULTS)}"
        )
    opts = {**DEFAULTS, **given}
    opts["columns"] = {**DEFAULTS["columns"], **(given.get("columns") or {})}
    if bool(opts["path"]) == bool(opts["hub_id"]):
        raise ValueError("data=prompts needs exactly one of data.kwargs.path (a local file) or data.kwargs.hub_id")
    if opts["path"]:
        suffix = Path(str(opts["path"])).suffix.lower()
        if suffix not in FORMATS:
            raise ValueError(
                f"data.kwargs.path={opts['path']!r}: unknown format {suffix!r}; allowed: {', '.join(FORMATS)}"
            )
        if not Path(str(opts["path"])).expanduser().is_file():
            raise FileNotFoundError(f"data.kwargs.path={opts['path']!r}: no such file (relative to {Path.cwd()})")
    if opts["chat"] not in CHAT:
        raise ValueError(f"data.kwargs.chat={opts['chat']!r}; allowed: auto, true, false")
    if not opts["columns"].get("prompt"):
        raise ValueError("data.kwargs.columns.prompt is required: the column that holds the prompt")
    if "{prompt}" not in str(opts["template"]):
        raise ValueError(f"data.kwargs.template={opts['template']!r} must contain {{prompt}}")
    return opts


def load_rows(opts: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The dataset's rows, through ``datasets.load_dataset`` (a local file, or the hub: network)."""
    from datasets import load_dataset

    if opts["path"]:
        path = str(Path(str(opts["path"])).expanduser())
        ds = load_dataset(FORMATS[Path(path).suffix.lower()], data_files=path, split="train")
    else:
        ds = load_dataset(opts["hub_id"], opts["hub_config"], split=opts["split"])
    if opts["limit"]:
        ds = ds.select(range(min(int(opts["limit"]), len(ds))))
    return [dict(row) for row in ds]


def check_columns(rows: List[Dict[str, Any]], opts: Mapping[str, Any], source: str) -> None:
    have = sorted(rows[0]) if rows else []
    for ours, theirs in opts["columns"].items():
        if theirs and theirs not in have:
            raise KeyError(
                f"data.kwargs.columns.{ours}={theirs!r} is not a column of {source}; its columns: {', '.join(have)}"
            )
    for name in opts["keep_columns"] or []:
        if name not in have:
            raise KeyError(
                f"data.kwargs.keep_columns: {name!r} is not a column of {source}; its columns: {', '.join(have)}"
            )


def row_id(text: Any) -> str:
    return hashlib.sha1(str(text).encode()).hexdigest()[:16]


def make_prompt(row: Mapping[str, Any], opts: Mapping[str, Any], chat: bool) -> Any:
    raw = row[opts["columns"]["prompt"]]
    if isinstance(raw, list):  # already messages
        return raw
    system = row.get(opts["columns"]["system"]) if opts["columns"].get("system") else None
    system = system or opts["system_prompt"]
    user = str(opts["template"]).replace("{prompt}", str(raw))
    if not chat:
        return f"{system}\n\n{user}" if system else user
    return ([{"role": "system", "content": str(system)}] if system else []) + [{"role": "user", "content": user}]


def prompt_tokens(prompt: Any, tokenizer: Any) -> int:
    text = prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def source_name(opts: Mapping[str, Any]) -> str:
    return str(opts["path"] or opts["hub_id"])


@builder("prompts")
def prompts(data_cfg: DictConfig, tokenizer: Any = None) -> Records:
    opts = options(data_cfg)
    rows = load_rows(opts)
    source = source_name(opts)
    if not rows:
        raise ValueError(f"data=prompts: {source} has no rows")
    check_columns(rows, opts, source)
    chat = bool(getattr(tokenizer, "chat_template", None)) if opts["chat"] == "auto" else bool(opts["chat"])
    cols = opts["columns"]
    mapped = {c for c in cols.values() if c}
    keep = opts["keep_columns"]
    records, seen, dropped = [], set(), 0
    for row in rows:
        rid = str(row[cols["id"]]) if cols.get("id") else row_id(row[cols["prompt"]])
        if rid in seen:
            raise ValueError(f"data=prompts: duplicate id {rid!r} in {source} (map columns.id to a unique column)")
        seen.add(rid)
        prompt = make_prompt(row, opts, chat)
        if opts["max_prompt_tokens"] and tokenizer is not None:
            if prompt_tokens(prompt, tokenizer) > int(opts["max_prompt_tokens"]):
                dropped += 1
                continue
        extra = {k: v for k, v in row.items() if k not in mapped and (keep is None or k in keep)}
        records.append({**extra, "id": rid, "prompt": prompt})
    if dropped:
        log.info(
            "data=prompts: %d of %d rows dropped, longer than max_prompt_tokens=%s",
            dropped,
            len(rows),
            opts["max_prompt_tokens"],
        )
    if not records:
        raise ValueError(
            f"data=prompts: every row of {source} is longer than max_prompt_tokens={opts['max_prompt_tokens']}"
        )
    return records


def problems(data_cfg: Any) -> List[str]:
    """What is wrong with a ``data=prompts`` config before any trial: options, the file, the mapped columns (the
    first rows of a local file are read; a hub dataset is checked in the trial)."""
    from datasets.utils import logging as datasets_logging

    bars = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()  # a check, not a load: no "Generating train split" bar
    try:
        opts = options(data_cfg)
        if opts["path"]:
            check_columns(load_rows({**opts, "limit": 5}), opts, source_name(opts))
    except (KeyError, ValueError, FileNotFoundError) as exc:
        return [str(exc.args[0]) if exc.args else str(exc)]
    finally:
        if bars:
            datasets_logging.enable_progress_bar()
    return []
