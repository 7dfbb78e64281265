"""Read a training log in any common format into train and eval records with sweeprl's metric names.

Formats, told apart by content (not by file name alone):

- TRL / HF ``trainer_state.json`` (its ``log_history``), a bare JSON list of such records (pretty-printed or
  not), a JSON object of equal-length metric lists (``{"rewards_avg": [...], "kl_avg": [...]}``), and JSONL of
  records — nested dicts (verl's ``{"step": 3, "data": {...}}``) are flattened with ``/``;
- CSV exports (experiment trackers, hand-written loops);
- console logs: the ``{'loss': 0.1, ...}`` dicts the HF Trainer prints (TRL, Unsloth, LLaMA-Factory), verl's
  ``step:3 - actor/entropy:0.51 - critic/score/mean:0.4`` lines, and ``key: value`` / ``key=value`` lines with
  a step.

Every record is given a step: the first of :data:`sweeprl.analysis.keys.STEP_KEYS` it has (LLaMA-Factory's
``current_steps``, wandb's ``_step`` ...), else its position. Evaluation is kept apart from training: a record
marked ``phase``/``split``/``mode`` = eval, and keys prefixed ``eval_``, ``eval/``, ``val/``, ``val-core/`` or
``test/``, go to the eval records (prefix removed). Records at the same step are merged (a later value of the
same key wins), so an eval row can no longer replace the train row of its step. HF's end-of-training summary
row (``train_runtime``) is dropped. Names are mapped with :data:`sweeprl.analysis.keys.ALIASES` (and a
``train/`` prefix is removed); what was read and what was ignored is reported in :class:`Log`.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from sweeprl.analysis import keys

EVAL_PREFIXES = ("eval_", "eval/", "val/", "val_", "val-core/", "val-aux/", "test/", "validation/")
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
#: task-success columns that stand in for the reward of a log that has none (hand-written loops log these)
REWARD_STAND_INS = ("success_rate", "accuracy", "acc", "answer_accuracy", "pass_rate", "correct_rate")
EVAL_MARKS = {"eval", "evaluation", "val", "valid", "validation", "test"}
SUMMARY_KEYS = ("train_runtime",)  # HF's end-of-training summary row
#: columns that hold a quantity in another form: name -> (sweeprl's key, conversion)
DERIVED = {
    "reward_var": ("reward_std", lambda x: math.sqrt(x) if x >= 0 else float("nan")),
    "env/all/by_group/frac_mixed": ("frac_reward_zero_std", lambda x: 1.0 - x),  # Tinker: groups with spread
}


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


# ------------------------------------------------------------------------------------------ parsing
def _flatten(record: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, dict):
            inner = _flatten(v, "" if prefix == "" and k in ("data", "metrics") else f"{prefix}{k}/")
            for ik, iv in inner.items():
                out.setdefault(ik, iv)
        else:
            out[f"{prefix}{k}"] = v
    return out


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WRAPPED = re.compile(r"\b(?:np\.float\d*|np\.int\d*|numpy\.float\d*|tensor|float)\(\s*([^(),\[\]]+?)\s*(?:,[^()]*)?\)")
_NUMBER = r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)|-?nan|-?inf|NaN"


def _clean(text: str) -> str:
    """Console text without colour codes, with ``np.float64(0.5)`` / ``tensor(0.5, ...)`` as plain numbers."""
    return _WRAPPED.sub(r"\1", _ANSI.sub("", text))


def _dict_lines(text: str) -> List[Dict[str, Any]]:
    """Python/JSON dict literals printed on one line (``{'loss': 0.5, 'grad_norm': 1.2, ...}``), also inside
    progress-bar text."""
    rows = []
    for m in re.finditer(r"\{[^{}\n]*\}", text):
        chunk = m.group(0)
        if ":" not in chunk:
            continue
        try:  # a printed Python dict: nan and inf are bare words there
            bare = re.sub(
                r"\b(-?)(nan|inf)\b", lambda g: "None" if g.group(2) == "nan" else f"{g.group(1)}1e999", chunk
            )
            value, missing = ast.literal_eval(bare), float("nan")
        except (ValueError, SyntaxError):
            try:  # a JSON object: null is a value that was not logged
                value, missing = json.loads(chunk), None
            except ValueError:
                continue
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            rows.append({k: (missing if v is None else v) for k, v in value.items() if v is not None or missing})
    known = [r for r in rows if any(canonical(_unprefixed(k)) in keys.READ for k in r)]
    return known or rows  # a printed config dict (vLLM's) among the metric dicts is no step


def _unprefixed(name: str) -> str:
    """The name without an evaluation prefix (``eval_reward`` -> ``reward``)."""
    return next((name[len(p) :] for p in EVAL_PREFIXES if name.startswith(p)), name)


_PAIR = re.compile(rf"([A-Za-z_][\w./@-]*)\s*[:=]\s*({_NUMBER})(?![\w.])")


def _pair_lines(text: str) -> List[Dict[str, Any]]:
    """verl's ``step:3 - actor/entropy:0.51 - ...`` lines and other ``key: value`` / ``key=value`` lines that
    name a step; a line needs a step and at least two other numbers."""
    rows = []
    for line in text.splitlines():
        pairs = {k: float(v) for k, v in _PAIR.findall(line)}
        if len(pairs) >= 3 and any(k in pairs for k in keys.STEP_KEYS):
            rows.append(pairs)
    return rows


_PHRASE = re.compile(rf"^\s*([A-Za-z][A-Za-z _/()-]*?)\s*[:=]?\s+({_NUMBER})\s*[A-Za-z%/]*\s*$")
_OF = re.compile(r"\((\d+)/(\d+)\)|\[(\d+)/(\d+)\]")


def _phrase_lines(text: str) -> List[Dict[str, Any]]:
    """Comma-separated ``Name words: value`` lines of hand-written loops and mlx (``Iter 31: Train loss 0.002,
    Chosen reward -5.4, ...``; ``Epoch:[1/1](12/9751), Reward: -2.3, KL_ref: 0.01``): names lower-cased with
    ``_``; the step is an ``Iter``/``Step`` number, else the last ``(i/n)`` counter of the line."""
    rows = []
    for line in text.splitlines():
        pieces = [p for p in re.split(r",\s*|\s+\|\s+|;\s*|:\s+(?=[A-Z][a-z])", line) if p.strip()]
        row: Dict[str, Any] = {}
        for piece in pieces:
            m = _PHRASE.match(piece.replace(":", " ", 1) if ":" in piece else piece)
            if m:
                row.setdefault(re.sub(r"[\s/()-]+", "_", m.group(1).strip().lower()).strip("_"), float(m.group(2)))
        if not any(k in row for k in keys.STEP_KEYS):
            counters = _OF.findall(line)
            if counters:
                last = counters[-1]
                row["step"] = float(last[0] or last[2])
        if len(row) >= 3 and any(k in row for k in keys.STEP_KEYS):
            rows.append(row)
    return rows


_STEP_HEAD = re.compile(r"(?:^|[\s|,\[])(?:step|iter(?:ation)?)\s*[:=]?\s*(\d+)\b\]?", re.I)
_LIST = re.compile(r"(?<![\w.])([A-Za-z_][\w./ -]*?)\s*[:=]\s*(?:tensor\()?\[([-+0-9.eE, naif]+)\]")


def _step_head(line: str) -> Optional[re.Match]:
    """The line's step counter: a ``step`` one before an ``iter``/``iteration`` one, and never an outer loop of
    one (``Iteration 1/1, Step 3/500``)."""
    found = [m for m in _STEP_HEAD.finditer(line) if not re.match(r"\s*/\s*1\b", line[m.end() :])]
    return next((m for m in found if "step" in m.group(0).lower()), found[0] if found else None)


def _step_blocks(text: str) -> List[Dict[str, Any]]:
    """Logs that print ``Step N`` (or ``[step N]``, ``epoch: 0|step: 12|...``) and then the step's values, on the
    same line or the lines after it, as ``key=value`` / ``key: value`` pairs or ``Rewards: [r1, r2, ...]`` lists
    (a list gives its mean and, as ``<key>_std``, its spread; ``tensor([...])`` too). A log that never prints a
    step counter (simple_GRPO's ``rewards: tensor([...])`` lines) gets one record per line with a list."""
    rows: List[Dict[str, Any]] = []
    row: Optional[Dict[str, Any]] = None
    lines = text.splitlines()
    heads = [_step_head(line) for line in lines]
    stepless = not any(heads)
    # a loop that prints a step's values before its step line ("Average Reward: 0.7" then "Step 1/500, loss: 0"):
    # the values between two step lines belong to the next one
    first_head = next((i for i, h in enumerate(heads) if h), len(lines))
    before = any(
        canonical(name) in keys.READ
        for line in lines[max(0, first_head - 3) : first_head]
        for name, _ in _PAIR.findall(line)
    )  # a known metric just above the first step line
    pending: Dict[str, Any] = {}
    for line, head in zip(lines, heads):
        if stepless and _LIST.search(line):
            row = {"step": float(len(rows) + 1)}
            rows.append(row)
        elif head:
            row = {"step": float(head.group(1)), **pending}
            pending = {}
            rows.append(row)
            line = line[: head.start()] + " " + line[head.end() :]
        elif before:
            for name, value in _PAIR.findall(line):
                pending.setdefault(name, float(value))
            continue
        if row is None:
            continue
        for name, values in _LIST.findall(line):
            nums = [x for x in (_number(v) for v in values.split(",")) if x is not None]
            if nums:
                key = re.sub(r"\s+", "_", name.strip().lower())
                mean = sum(nums) / len(nums)
                row[key] = mean
                row[f"{key}_std"] = math.sqrt(sum((x - mean) ** 2 for x in nums) / len(nums))
        for name, value in _PAIR.findall(_LIST.sub("", line)):
            row.setdefault(name, float(value))
    return [r for r in rows if len(r) >= 2]


_RULE = re.compile(r"^\W*[-=_*]{10,}(?:\\n)?\W*$", re.M)  # a rule line, also as a notebook's JSON string


def _separated_blocks(text: str) -> List[Dict[str, Any]]:
    """A loop that prints each step's ``key: value`` lines without a step counter, the steps separated by a rule
    (``-----``; TRL's old PPO notebooks): one record per block, numbered in order (at least 3 blocks)."""
    blocks = [dict((k, float(v)) for k, v in _PAIR.findall(b)) for b in _RULE.split(text)]
    shapes = [frozenset(b) for b in blocks if len(b) >= 2]
    if not shapes:
        return []
    stats = max(set(shapes), key=shapes.count)  # what each step prints; the first block also holds the set-up's
    steps = [{k: b[k] for k in stats} for b in blocks if stats <= b.keys()]
    return [{"step": float(i + 1), **b} for i, b in enumerate(steps)] if len(steps) >= 3 else []


def _split_cells(line: str) -> List[str]:
    return [c.strip() for c in re.split(r"\t|\s*\|\s*|\s{2,}", line.strip().strip("|")) if c.strip()]


def _table_lines(text: str) -> List[Dict[str, Any]]:
    """A whitespace, tab or ``|`` separated table whose header has a ``Step`` column, or starts with ``Epoch`` (the
    trainer table Jupyter shows, as in Unsloth's notebooks, also as HTML ``<tr>`` rows; a markdown table): one row
    per line of numbers under it. In the HF Trainer's table the columns after ``Validation Loss`` are evaluation
    metrics. A notebook often shows several (an SFT warm-up, then the RL run): the one with the most known metrics
    wins."""
    if "<tr" in text:  # an HTML table: one line per row, cells tab-separated
        text = "\n".join(
            "\t".join(re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S))
            for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", text, re.S)
        )
    lines = [ln for ln in text.splitlines() if ln.strip()]
    tables: List[List[Dict[str, Any]]] = []
    for i, ln in enumerate(lines):
        cells = _split_cells(ln)
        lower = [c.lower() for c in cells]
        if len(cells) >= 2 and ("step" in lower or lower[0] == "epoch"):  # per-epoch tables count epochs
            header = [re.sub(r"\s*/\s*", "/", c).replace(" ", "_") for c in lower]
            header = ["loss" if h == "training_loss" else "eval_loss" if h == "validation_loss" else h for h in header]
            if "eval_loss" in header:  # the HF Trainer's table: the metrics after Validation Loss are evaluation's
                first = header.index("eval_loss") + 1
                header = header[:first] + [f"eval_{h}" for h in header[first:]]
            rows: List[Dict[str, float]] = []
            for row in lines[i + 1 :]:
                vals = _split_cells(row) if "\t" in row or "|" in row else row.split()
                nums = [_number(c) for c in vals]
                if len(nums) != len(header) or nums[0] is None:
                    if rows:
                        break
                    continue
                rows.append({h: x for h, x in zip(header, nums) if x is not None})  # "No Log" cells: no value
            if rows:
                tables.append(rows)
    return max(tables, key=_score, default=[])


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
        columns = {
            k: v for k, v in whole.items() if isinstance(v, list) and v and all(_number(x) is not None for x in v)
        }
        if len(columns) >= 2 and len({len(v) for v in columns.values()}) == 1:  # {"reward": [...], "kl": [...]}
            n = len(next(iter(columns.values())))
            return [([{k: v[i] for k, v in columns.items()} for i in range(n)], "json_columns")]
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


def _score(rows: List[Dict[str, Any]]) -> int:
    """Values of metrics sweeprl reads, over all records: how well a reading of the file fits (a reading that
    finds more steps but fewer metrics per step loses to the richer one)."""
    return sum(sum(canonical(k) in keys.READ and canonical(k) != "learning_rate" for k in _flatten(r)) for r in rows)


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
        candidates.append((rows, "csv"))
    if not any(_score(rows) for rows, _ in candidates):
        clean = _clean(text)
        for reader, name in (
            (_dict_lines, "console_dicts"),
            (_pair_lines, "console_pairs"),
            (_phrase_lines, "console_phrases"),
            (_step_blocks, "console_steps"),
            (_separated_blocks, "console_blocks"),
            (_table_lines, "table"),
        ):
            candidates.append((reader(clean), name))
    best = max(candidates, key=lambda c: _score(c[0]), default=None)
    if best is None or _score(best[0]) == 0:
        raise LogFormatError(
            f"{path}: no per-step records of known metrics found (read as trainer_state.json, JSON list, JSON "
            "Lines, CSV, printed {'loss': ...} dicts, 'step:N - key:value' lines, 'Name: value, ...' lines and a "
            "Step table); the metric names sweeprl knows are in sweeprl.analysis.keys"
        )
    return best


# ------------------------------------------------------------------------------------------ normalising
def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _is_eval(raw: Dict[str, Any]) -> bool:
    mark = next((raw[k] for k in ("phase", "split", "mode") if isinstance(raw.get(k), str)), None)
    return mark is not None and mark.strip().lower() in EVAL_MARKS


def _step_of(raw: Dict[str, Any], index: int) -> float:
    for k in keys.STEP_KEYS:
        v = _number(raw.get(k))
        if v is not None and math.isfinite(v):
            return v
    return float(index + 1)  # a row without a counter in a log that has them: its position


def canonical(name: str) -> str:
    """sweeprl's name for a column: the vocabulary's, after a ``train/`` (or, for a name the vocabulary knows
    without it, ``train_``) prefix is removed."""
    if name.startswith("train/") and name != "train/global_step":
        name = name[len("train/") :]
    if name.startswith("train_") and name[len("train_") :] in keys.ALIASES:
        name = name[len("train_") :]
    if name not in keys.ALIASES and name.lower() in keys.ALIASES | {k: k for k in keys.READ}:
        name = name.lower()  # ``KL``, ``Reward``
    for suffix in ("_avg", "_mean", "_average"):  # ``rewards_avg``, ``kl_mean``: the averaged quantity itself
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and name not in keys.ALIASES and name not in keys.READ and stem:
            if stem in keys.ALIASES or stem in keys.READ:
                name = stem
    return keys.ALIASES.get(name, name)


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
    rows = [_flatten(r) for r in rows]
    rows = [r for r in rows if not any(k in r for k in SUMMARY_KEYS)]
    stepless = not any(_number(r.get(k)) is not None for r in rows for k in keys.STEP_KEYS)
    epochs = [_number(r.get("epoch")) for r in rows]
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
        metrics = [k for k, x in raw.items() if _number(x) is not None and k not in keys.STEP_KEYS and k != "epoch"]
        whole_eval = _is_eval(raw) or bool(metrics) and all(k.startswith(EVAL_PREFIXES) for k in metrics)
        position += 0 if whole_eval else 1
        if by_epoch:
            step = float(epochs[i] or 0.0)  # per-epoch logs: the epoch (every row has one)
        elif stepless:
            step = float(max(position, 1))
        else:
            step = _step_of(raw, i)
        for name, value in raw.items():
            num = _number(value)
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
    if not any(k in r for r in train.values() for k in keys.REWARD):  # a task-success rate as the reward
        present = {k for r in train.values() for k in r}
        bare = {k.removeprefix("train_").removeprefix("train/"): k for k in sorted(present, reverse=True)}
        stand_in = next((bare[n] for n in REWARD_STAND_INS if n in bare), None)
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
        framework=fw[0] if len(fw) == 1 else None,
        used=used,
        ignored=ignored,
    )


def read(path: Path) -> Log:
    """Read a log file (see the module docstring)."""
    rows, fmt = parse(path)
    log = normalise(rows)
    log.format = fmt
    if log.framework is None and fmt in ("trainer_state", "console_dicts", "table"):
        log.framework = "trl"  # the HF Trainer's log (TRL, Unsloth and LLaMA-Factory print the same)
    return log
