"""Read a training log in any common format into train and eval records with sweeprl's metric names.

Formats, told apart by content (not by file name alone):

- TRL / HF ``trainer_state.json`` (its ``log_history``), a bare JSON list of such records (pretty-printed or
  not), a JSON object of equal-length metric lists (``{"rewards_avg": [...], "kl_avg": [...]}``) or of named runs
  holding such lists (``{"grpo": {"reward_curve": [...]}, "dapo": {...}}``), and JSONL of
  records — nested dicts (verl's ``{"step": 3, "data": {...}}``) are flattened with ``/``;
- CSV exports (experiment trackers, hand-written loops);
- console logs: the ``{'loss': 0.1, ...}`` dicts the HF Trainer prints (TRL, Unsloth, LLaMA-Factory), verl's
  ``step:3 - actor/entropy:0.51 - critic/score/mean:0.4`` lines, ``key: value`` / ``key=value`` lines with a
  step or printed once per step, and the other shapes of :mod:`sweeprl.analysis.console_text`.

Every record is given a step: the first of :data:`sweeprl.analysis.keys.STEP_KEYS` it has (LLaMA-Factory's
``current_steps``, wandb's ``_step`` ...), else its position. Evaluation is kept apart from training: a record
marked ``phase``/``split``/``mode`` = eval, and keys prefixed ``eval_``, ``eval/``, ``val/``, ``val-core/`` or
``test/``, go to the eval records (prefix removed). Records at the same step are merged (a later value of the
same key wins), so an eval row can no longer replace the train row of its step; a log of evaluations only
(trlx's notebook output) is read as the run's curve, and says so (:attr:`Log.eval_only`). HF's end-of-training
summary row (``train_runtime``) is dropped. Names are mapped with :data:`sweeprl.analysis.keys.ALIASES` (and a
``train/`` prefix is removed); what was read and what was ignored is reported in :class:`Log`.

A file may hold several runs (:func:`split_runs`): W&B's panel export has one ``<run> - <metric>`` column per run,
and runs appended to one log restart their step counter. Each is read as a run of its own (:func:`read_runs`):
merged by step, three runs would make one curve of none of them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from sweeprl.analysis import console_text, keys
from sweeprl.analysis.console_text import flatten, number, score
from sweeprl.analysis.keys import EVAL_PREFIXES, canonical

#: ``val/`` names that are TRL's PPO value-head statistics of the training batch, not validation
VALUE_HEAD = (
    "val/explained_var",
    "val/vpred",
    "val/ratio",
    "val/ratio_var",
    "val/clipfrac",
    "val/num_eos_tokens",
    "val/error",
    "val/mean",
    "val/var",
    "val/var_explained",
    "val/advantage",
)
#: names that mean something else in one tool's log: name -> (sweeprl's key, a column that identifies the tool)
CONDITIONAL = {
    "accuracy": ("rewards/accuracies", "current_steps"),  # LLaMA-Factory's preference stages
    "acc": ("rewards/accuracies", "margins"),  # a preference table's short names
}
EVAL_MARKS = {"eval", "evaluation", "val", "valid", "validation", "test"}
SUMMARY_KEYS = ("train_runtime",)  # HF's end-of-training summary row
#: columns that hold a quantity in another form: name -> (sweeprl's key, conversion)
DERIVED = {
    "reward_var": ("reward_std", lambda x: math.sqrt(x) if x >= 0 else float("nan")),
    "env/all/by_group/frac_mixed": ("frac_reward_zero_std", lambda x: 1.0 - x),  # Tinker: groups with spread
}


RUN_KEY = "_run"  # the run a record belongs to, in a file that names several


class LogFormatError(ValueError):
    """The file is none of the formats this module reads; the message says what was tried."""


@dataclass
class Log:
    train: List[Dict[str, float]]
    eval: List[Dict[str, float]] = field(default_factory=list)
    format: str = "jsonl"
    framework: Optional[str] = None  # the tool whose names matched (trl, verl, openrlhf, ...), when one did
    used: List[str] = field(default_factory=list)  # original column names mapped to a key sweeprl reads
    ignored: List[str] = field(default_factory=list)  # numeric columns no rule reads (bookkeeping excluded)
    run: Optional[str] = None  # which run of the file, when it holds several
    eval_only: bool = False  # the file holds evaluation records only: they are the run's curve


# ------------------------------------------------------------------------------------------ parsing
def _json_candidates(text: str) -> List[Tuple[List[Dict[str, Any]], str]]:
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, list) and whole and all(isinstance(r, dict) for r in whole):
        return [(whole, "json_list")]
    if isinstance(whole, dict):
        if isinstance(whole.get("log_history"), list):
            return [(whole["log_history"], "trainer_state")]
        columns = _columns(whole)
        if len(columns) >= 2 and len({len(v) for v in columns.values()}) == 1:  # {"reward": [...], "kl": [...]}
            return [(_column_rows(columns), "json_columns")]
        # {"grpo": {"accuracy": 0.3, "reward_curve": [...]}, "dapo": {...}}: named runs, each of metric lists
        runs = {name: _columns(v) for name, v in whole.items() if isinstance(v, dict)}
        runs = {name: c for name, c in runs.items() if c and len({len(v) for v in c.values()}) == 1}
        if runs:
            return [([{RUN_KEY: name, **row} for name, c in runs.items() for row in _column_rows(c)], "json_runs")]
        return [
            (v, "json_list")
            for v in whole.values()
            if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)
        ]
    rows, bad = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1  # a line cut off (a log copied while it was written, or quoted in part)
            continue
        if isinstance(rec, dict):
            rows.append(rec)
    return [(rows, "jsonl")] if len(rows) >= 2 and bad <= 0.2 * len(rows) else []


def _columns(obj: Dict[str, Any]) -> Dict[str, List[Any]]:
    """The numeric lists of a JSON object (its per-step metric series), at least 2 values each."""
    return {
        k: v for k, v in obj.items() if isinstance(v, list) and len(v) >= 2 and all(number(x) is not None for x in v)
    }


def _column_rows(columns: Dict[str, List[Any]]) -> List[Dict[str, Any]]:
    n = len(next(iter(columns.values())))
    return [{k: v[i] for k, v in columns.items()} for i in range(n)]


def _wandb_panel(rows: List[Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
    """W&B's panel export ("Export panel data" as CSV): a ``Step`` column and a ``<run> - <metric>`` column per run
    (``…__MIN``/``…__MAX``: the range of a grouped run, dropped), blank where a run has no value. One row per run
    and step, the run named in :data:`RUN_KEY`; None for any other CSV."""
    cols = [c for c in (rows[0] if rows else {}) if c and c != "Step"]
    if not rows or "Step" not in rows[0] or not cols or not all(" - " in c for c in cols):
        return None
    out: List[Dict[str, Any]] = []
    for row in rows:
        per_run: Dict[str, Dict[str, float]] = {}
        for c in cols:
            run, _, metric = c.rpartition(" - ")
            value = number(row.get(c))
            if value is not None and not metric.endswith(("__MIN", "__MAX")):
                per_run.setdefault(run, {})[metric] = value
        out += [{"Step": row["Step"], RUN_KEY: run, **metrics} for run, metrics in per_run.items()]
    return out


def parse(path: Path) -> Tuple[List[Dict[str, Any]], str]:
    """Raw records of a log file and the name of its format: every reading that fits is tried and the one with
    the most records of known metrics wins. :class:`LogFormatError` when none has any."""
    text = path.read_text(errors="replace")
    stripped = text.strip()
    candidates: List[Tuple[List[Dict[str, Any]], str]] = []
    if stripped.startswith(("{", "[")):
        candidates += _json_candidates(stripped)
    if path.suffix.lower() in (".csv", ".tsv") or (
        not candidates and "," in stripped.split("\n", 1)[0] and stripped.count("\n") >= 2
    ):
        rows = list(csv.DictReader(io.StringIO(text), delimiter="\t" if path.suffix.lower() == ".tsv" else ","))
        panel = _wandb_panel(rows)
        candidates.append((panel, "wandb_panel_csv") if panel else (rows, "csv"))
    if not any(score(rows) for rows, _ in candidates):
        clean = console_text.clean(text)
        candidates += [(reader(clean), name) for reader, name in console_text.READERS]
    best = max(candidates, key=lambda c: score(c[0]), default=None)
    if best is None or score(best[0]) == 0:
        raise LogFormatError(
            f"{path}: no per-step records of known metrics found (read as trainer_state.json, JSON list, JSON "
            "Lines, CSV, printed {'loss': ...} dicts, 'step:N - key:value' lines, 'Name: value, ...' lines and a "
            "Step table); the metric names sweeprl knows are in sweeprl.analysis.keys"
        )
    return best


# ------------------------------------------------------------------------------------------ normalising
def _is_eval(raw: Dict[str, Any]) -> bool:
    mark = next((raw[k] for k in ("phase", "split", "mode") if isinstance(raw.get(k), str)), None)
    return mark is not None and mark.strip().lower() in EVAL_MARKS


def _step_of(raw: Dict[str, Any], index: int) -> float:
    for k in keys.STEP_KEYS:
        v = number(raw.get(k))
        if v is not None and math.isfinite(v):
            return v
    return float(index + 1)  # a row without a counter in a log that has them: its position


def _never_computed(records: Iterable[Dict[str, float]]) -> set:
    """Keys whose every value is exactly 0 although a policy that samples cannot measure 0 there: a loop that
    logs a placeholder for the entropy it does not compute. Read as measured, they would say "collapsed"."""
    values: Dict[str, List[float]] = {}
    for r in records:
        for k in keys.ENTROPY:
            if k in r:
                values.setdefault(k, []).append(r[k])
    return {k for k, vs in values.items() if len(vs) >= 3 and all(x == 0 for x in vs)}


def normalise(rows: Iterable[Dict[str, Any]]) -> Log:
    """Train and eval records (numeric fields, sweeprl's names, a ``step`` each, merged per step) and what was
    used and ignored."""
    rows = [flatten(r) for r in rows]
    # the trainer's closing summary (train_runtime, ...); a CSV export has those columns, empty, in every row
    rows = [r for r in rows if not any(number(r.get(k)) is not None for k in SUMMARY_KEYS)]
    stepless = not any(number(r.get(k)) is not None for r in rows for k in keys.STEP_KEYS)
    epochs = [number(r.get("epoch")) for r in rows]
    # per-epoch logs are stepped by their epoch; a fractional epoch is a step's progress through the data (TRL's
    # console dicts), so those rows are counted instead
    by_epoch = (
        stepless and all(e is not None and float(e).is_integer() for e in epochs) and len(set(epochs)) == len(epochs)
    )
    train: Dict[float, Dict[str, float]] = {}
    evals: Dict[float, Dict[str, float]] = {}
    seen: Dict[str, str] = {}  # original name -> key
    names = {k for r in rows for k in r}
    position = 0  # train rows so far: the step of a log without step counters (eval rows take the last one's)
    for i, raw in enumerate(rows):
        metrics = [k for k, x in raw.items() if number(x) is not None and k not in keys.STEP_KEYS and k != "epoch"]
        whole_eval = _is_eval(raw) or bool(metrics) and all(k.startswith(EVAL_PREFIXES) for k in metrics)
        position += 0 if whole_eval else 1
        if by_epoch:
            step = float(epochs[i] or 0.0)  # per-epoch logs: the epoch (every row has one)
        elif stepless:
            step = float(max(position, 1))
        else:
            step = _step_of(raw, i)
        for name, value in raw.items():
            num = number(value)
            if num is None or name in keys.STEP_KEYS:
                continue
            to_eval = whole_eval
            key = name
            for p in EVAL_PREFIXES:
                if name.startswith(p) and not name.startswith(VALUE_HEAD):
                    key, to_eval = name[len(p) :], True
                    break
            key = CONDITIONAL[key][0] if key in CONDITIONAL and CONDITIONAL[key][1] in names else canonical(key)
            if key in DERIVED:
                key, num = DERIVED[key][0], DERIVED[key][1](num)
            seen.setdefault(name, key)
            target = (evals if to_eval else train).setdefault(step, {"step": step})
            target[key] = num
    eval_only = not train and bool(evals)  # a trainer that prints only its evaluations: read them as the curve
    train, evals = (evals, {}) if eval_only else (train, evals)
    if not any(k in r for r in train.values() for k in keys.REWARD):  # a task-success rate as the reward
        present = {k for r in train.values() for k in r}
        bare = {k.removeprefix("train_").removeprefix("train/"): k for k in sorted(present, reverse=True)}
        ordered = (*keys.REWARD_STAND_INS, *sorted(bare))  # the listed names first, then the phrases
        stand_in = next((bare[n] for n in ordered if n in bare and keys.stands_in_for_reward(n)), None)
        if stand_in is not None:
            for r in train.values():
                if stand_in in r:
                    r["reward"] = r[stand_in]
            seen.update({n: "reward" for n, k in seen.items() if k == stand_in})
    blank = _never_computed(train.values())
    for r in train.values():
        for k in blank:
            r.pop(k, None)
    used = sorted(n for n, k in seen.items() if (k in keys.READ or k in DERIVED) and k not in blank)
    ignored = sorted(n for n, k in seen.items() if k not in keys.READ and n not in keys.BOOKKEEPING)
    ignored += [f"{n} (0 on every step: not computed)" for n, k in sorted(seen.items()) if k in blank]
    frameworks = {fw for fw, theirs, _ in keys.VOCABULARY if theirs in seen or f"train/{theirs}" in seen}
    if "current_steps" in names:
        frameworks = {"llamafactory"}
    fw = sorted(frameworks - {"custom"}) or sorted(frameworks)
    return Log(
        train=[train[s] for s in sorted(train)],
        eval=[evals[s] for s in sorted(evals)],
        eval_only=eval_only,
        framework=fw[0] if len(fw) == 1 else None,
        used=used,
        ignored=ignored,
    )


# ------------------------------------------------------------------------------------------ runs of a file
def _counter(raw: Dict[str, Any]) -> Optional[float]:
    """The record's own step counter (not its position), None without one."""
    return next((v for v in (number(raw.get(k)) for k in keys.STEP_KEYS) if v is not None and math.isfinite(v)), None)


def _trains(raw: Dict[str, Any]) -> bool:
    metrics = [k for k, x in raw.items() if number(x) is not None and k not in keys.STEP_KEYS and k != "epoch"]
    return bool(metrics) and not _is_eval(raw) and not all(k.startswith(EVAL_PREFIXES) for k in metrics)


def split_runs(rows: List[Dict[str, Any]]) -> List[Tuple[Optional[str], List[Dict[str, Any]]]]:
    """The runs one file holds, each with a name for the reader (None for a file of one run): the runs a W&B panel
    export names, else runs appended to one log, told by a training record's step counter going back to (or below)
    the file's first step. A run resumed from a checkpoint restarts later than that and stays one run (a repeated
    step keeps its last record), and so does a loop whose counter restarts each epoch (its ``epoch`` moves on)."""
    names = list(dict.fromkeys(r[RUN_KEY] for r in rows if isinstance(r.get(RUN_KEY), str)))
    if names:
        return [(f"run {name!r}", [r for r in rows if r.get(RUN_KEY) == name]) for name in names]
    starts: List[int] = [0]
    first: Optional[float] = None
    last: Optional[Tuple[float, Optional[float]]] = None  # (step, epoch) of the last training record
    for i, raw in enumerate(rows):
        flat = flatten(raw)
        step = _counter(flat)
        if step is None or not _trains(flat):
            continue
        epoch = number(flat.get("epoch"))
        if first is None:
            first = step
        elif last is not None and step < last[0] and step <= first:
            if not (epoch is not None and last[1] is not None and epoch > last[1]):
                starts.append(i)
        last = (step, epoch)
    if len(starts) == 1:
        return [(None, rows)]
    bounds = [*starts, len(rows)]
    return [(f"run {k + 1} of {len(starts)}", rows[a:b]) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]


def read_runs(path: Path) -> List[Log]:
    """Read a log file (see the module docstring): one :class:`Log` per run it holds (:func:`split_runs`)."""
    rows, fmt = parse(path)
    logs = []
    for name, part in split_runs(rows):
        log = normalise(part)
        log.format = fmt
        if log.framework is None and fmt in ("trainer_state", "console_dicts", "table"):
            log.framework = "trl"  # the HF Trainer's log (TRL, Unsloth and LLaMA-Factory print the same)
        if name is not None:
            steps = [r["step"] for r in log.train]
            log.run = name + (f", steps {steps[0]:g}-{steps[-1]:g}" if steps else "")
        logs.append(log)
    return logs


def read(path: Path) -> Log:
    """Read a log file of one run; a file of several runs is a :class:`LogFormatError` naming them."""
    logs = read_runs(path)
    if len(logs) > 1:
        raise LogFormatError(f"{path} holds {len(logs)} runs ({'; '.join(str(log.run) for log in logs)})")
    return logs[0]
