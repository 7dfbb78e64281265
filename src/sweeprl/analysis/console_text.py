"""Console text read as raw per-step records: each reader turns a log's printed text into records, or none.

Training loops print their metrics in many shapes: the HF Trainer's ``{'loss': 0.1, ...}`` dicts (TRL, Unsloth,
LLaMA-Factory), verl's ``step:3 - actor/entropy:0.51`` lines, hand-written ``Iter 3: loss 0.2, reward 0.4`` lines,
``Step N`` headers followed by values, blocks between rules, and tables. :data:`READERS` lists one reader per
shape; :func:`sweeprl.analysis.readers.parse` tries them all and keeps the reading with the most values of metrics
sweeprl knows (:func:`score`).
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from sweeprl.analysis import keys


def number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def flatten(record: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, dict):
            inner = flatten(v, "" if prefix == "" and k in ("data", "metrics") else f"{prefix}{k}/")
            for ik, iv in inner.items():
                out.setdefault(ik, iv)
        else:
            out[f"{prefix}{k}"] = v
    return out


def score(rows: List[Dict[str, Any]]) -> int:
    """Values of metrics sweeprl reads, over all records: how well a reading of the file fits (a reading that
    finds more steps but fewer metrics per step loses to the richer one). A record with none of them counts its
    task-success rates, which stand in for a reward (``Percentage of correct examples: 0.3``)."""

    def count(record: Dict[str, Any]) -> int:
        names = [keys.canonical(k) for k in flatten(record)]
        read = sum(k in keys.READ and k != "learning_rate" for k in names)
        return read or sum(keys.stands_in_for_reward(k) for k in names)

    return sum(count(r) for r in rows)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WRAPPED = re.compile(r"\b(?:np\.float\d*|np\.int\d*|numpy\.float\d*|tensor|float)\(\s*([^(),\[\]]+?)\s*(?:,[^()]*)?\)")
_NUMBER = r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)|-?nan|-?inf|NaN"


def clean(text: str) -> str:
    """Console text without colour codes, with ``np.float64(0.5)`` / ``tensor(0.5, ...)`` as plain numbers."""
    return _WRAPPED.sub(r"\1", _ANSI.sub("", text))


def dict_lines(text: str) -> List[Dict[str, Any]]:
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
    known = [r for r in rows if any(keys.canonical(keys.unprefixed(k)) in keys.READ for k in r)]
    return known or rows  # a printed config dict (vLLM's) among the metric dicts is no step


_PAIR = re.compile(rf"([A-Za-z_][\w./@-]*)\s*[:=]\s*({_NUMBER})(?![\w.])")


_DICT_PAIR = re.compile(r"([A-Za-z_][\w./@-]*)\s*:\s*(\{[^{}\n]*\})")


def _inline_dicts(line: str) -> Dict[str, float]:
    """``name: {'a': 1, ...}`` dicts printed inside a line, as ``name/a`` values; a dict of totals with a count
    (``{'total_num': 256, 'total_reward': 144.0}``) also gives each total's mean under its own name (``reward``)."""
    out: Dict[str, float] = {}
    for name, chunk in _DICT_PAIR.findall(line):
        try:
            value = ast.literal_eval(chunk)
        except (ValueError, SyntaxError):
            continue
        if not isinstance(value, dict):
            continue
        nums = {str(k): float(v) for k, v in value.items() if number(v) is not None}
        out.update({f"{name}/{k}": v for k, v in nums.items()})
        count = nums.get("total_num")
        for k, v in nums.items():
            if count and k.startswith("total_") and k != "total_num":
                out.setdefault(k[len("total_") :], v / count)
    return out


def pair_lines(text: str) -> List[Dict[str, Any]]:
    """verl's ``step:3 - actor/entropy:0.51 - ...`` lines and other ``key: value`` / ``key=value`` lines that
    name a step; a line needs a step and at least two other numbers. A log whose lines never name a step but print
    the same ``key: value, ...`` set each step (a hand-written loop's logger; dicts in the line are read too) gets
    one record per such line, numbered in order (at least 3 of them)."""
    rows, stepless = [], []
    for line in text.splitlines():
        pairs = {k: float(v) for k, v in _PAIR.findall(_DICT_PAIR.sub("", line))}
        if len(pairs) >= 3 and any(k in pairs for k in keys.STEP_KEYS):
            rows.append(pairs)
        elif len(pairs) >= 3:
            stepless.append({**pairs, **_inline_dicts(line)})
    if rows or len(stepless) < 3:
        return rows
    shapes = [frozenset(r) for r in stepless]
    common = max(set(shapes), key=shapes.count)  # what each step prints
    steps = [r for r, shape in zip(stepless, shapes) if shape == common]
    return [{"step": float(i + 1), **r} for i, r in enumerate(steps)] if len(steps) >= 3 else []


_PHRASE = re.compile(rf"^\s*([A-Za-z][A-Za-z _/()-]*?)\s*[:=]?\s+({_NUMBER})\s*[A-Za-z%/]*\s*$")
_OF = re.compile(r"\((\d+)/(\d+)\)|\[(\d+)/(\d+)\]")


def phrase_lines(text: str) -> List[Dict[str, Any]]:
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
_EVAL_WORD = re.compile(r"\b(?:eval(?:uat(?:e|es|ing|ion))?|validat(?:e|es|ing|ion))\b", re.I)


def _opens_eval(line: str) -> bool:
    """A step line that announces an evaluation (``Iteration 5, Evaluating...``) and holds no metric itself: a
    train line that also prints ``eval_loss=`` or ``validation loss: x`` stays a train line."""
    counters = ("step", "iter", "iteration", "epoch")
    return bool(_EVAL_WORD.search(line)) and all(n.lower() in counters for n, _ in _PAIR.findall(line))


_PROSE = re.compile(rf"^\s*([A-Za-z]+(?: [A-Za-z]+)+)\s*:\s*({_NUMBER})\s*$")  # "Percentage of correct examples: 0.3"


_SPACED = re.compile(rf"([A-Za-z_][\w./@-]*)\s+({_NUMBER})(?:/\d+)?(?=\s|$)")  # "step 3/128 lr 5e-06 reward 0.05"


def _line_pairs(line: str) -> List[Tuple[str, str]]:
    """A line's ``name: value`` pairs; a whole line of ``Words of a phrase: value`` is one pair named by the
    phrase (``percentage_of_correct_examples``) unless its last word is a metric sweeprl reads (``Average
    Reward: 0.7`` is the reward). A line with no ``:`` or ``=`` that alternates names and numbers (``pass 1/4 step
    1/128 lr 5e-06 reward 0.055``) gives its ``name value`` pairs."""
    m = _PROSE.match(line)
    if m and keys.canonical(m.group(1).split()[-1].lower()) not in keys.READ:
        return [("_".join(m.group(1).lower().split()), m.group(2))]
    if ":" not in line and "=" not in line:
        pairs = _SPACED.findall(line)
        tokens = [t for t in line.split() if not re.fullmatch(r"/\d+", t)]  # a removed counter's "/128" aside
        if len(pairs) >= 2 and len(pairs) * 2 >= len(tokens):  # names and numbers, not a sentence
            return pairs
    return _PAIR.findall(line)


_LIST = re.compile(r"(?<![\w.])([A-Za-z_][\w./ -]*?)\s*[:=]\s*(?:tensor\()?\[([-+0-9.eE, naif]+)\]")


def _step_head(line: str) -> Optional[re.Match]:
    """The line's step counter: a ``step`` one before an ``iter``/``iteration`` one, and never an outer loop of
    one (``Iteration 1/1, Step 3/500``)."""
    found = [m for m in _STEP_HEAD.finditer(line) if not re.match(r"\s*/\s*1\b", line[m.end() :])]
    return next((m for m in found if "step" in m.group(0).lower()), found[0] if found else None)


def step_blocks(text: str) -> List[Dict[str, Any]]:
    """Logs that print ``Step N`` (or ``[step N]``, ``epoch: 0|step: 12|...``) and then the step's values, on the
    same line or the lines after it, as ``key=value`` / ``key: value`` pairs or ``Rewards: [r1, r2, ...]`` lists
    (a list gives its mean and, as ``<key>_std``, its spread; ``tensor([...])`` too), or a line of prose
    (``Percentage of correct examples: 0.3``). A step line that says it evaluates (``Evaluating...``) starts an
    evaluation record. A log that never prints a step counter (simple_GRPO's ``rewards: tensor([...])`` lines)
    gets one record per line with a list."""
    rows: List[Dict[str, Any]] = []
    row: Optional[Dict[str, Any]] = None
    lines = text.splitlines()
    heads = [_step_head(line) for line in lines]
    stepless = not any(heads)
    # a loop that prints a step's values before its step line ("Average Reward: 0.7" then "Step 1/500, loss: 0"):
    # the values between two step lines belong to the next one
    first_head = next((i for i, h in enumerate(heads) if h), len(lines))
    before = any(
        keys.canonical(name) in keys.READ or keys.stands_in_for_reward(name)
        for line in lines[max(0, first_head - 3) : first_head]
        for name, _ in _line_pairs(line)
    )  # a known metric just above the first step line
    pending: Dict[str, Any] = {}
    evaluating: Optional[Dict[str, Any]] = None  # an evaluation opened by its step line, in a values-before log
    for line, head in zip(lines, heads):
        if stepless and _LIST.search(line):
            row = {"step": float(len(rows) + 1)}
            rows.append(row)
        elif head and before and _opens_eval(line):
            # its values follow it, up to a name it already has: the next step's values, printed before that step
            evaluating = {"step": float(head.group(1)), "phase": "eval"}
            rows.append(evaluating)
            continue
        elif head:
            row = {"step": float(head.group(1)), **pending}
            row.update({"phase": "eval"} if _opens_eval(line) else {})
            pending, evaluating = {}, None
            rows.append(row)
            line = line[: head.start()] + " " + line[head.end() :]
        elif before:
            for name, value in _line_pairs(line):
                if evaluating is not None and name not in evaluating:
                    evaluating[name] = float(value)
                else:
                    evaluating = None
                    pending.setdefault(name, float(value))
            continue
        if row is None:
            continue
        for name, values in _LIST.findall(line):
            nums = [x for x in (number(v) for v in values.split(",")) if x is not None]
            if nums:
                key = re.sub(r"\s+", "_", name.strip().lower())
                mean = sum(nums) / len(nums)
                row[key] = mean
                row[f"{key}_std"] = math.sqrt(sum((x - mean) ** 2 for x in nums) / len(nums))
        for name, value in _line_pairs(_LIST.sub("", line)):
            row.setdefault(name, float(value))
    return [r for r in rows if len(set(r) - {"phase"}) >= 2]


_EVAL_COUNTER = re.compile(r"\b(?:eval(?:uation)?|validation)\s*#\s*(\d+)", re.I)


def eval_lines(text: str) -> List[Dict[str, Any]]:
    """A trainer that prints only its evaluations, numbered (trlx: ``Evaluation #3 reward/mean: 0.78``): one
    evaluation record per such line."""
    rows = []
    for line in text.splitlines():
        m = _EVAL_COUNTER.search(line)
        pairs = _PAIR.findall(line[m.end() :]) if m else []
        if m and pairs:
            rows.append({"step": float(m.group(1)), "phase": "eval", **{k: float(v) for k, v in pairs}})
    return rows


_RULE = re.compile(r"^\W*[-=_*]{10,}(?:\\n)?\W*$", re.M)  # a rule line, also as a notebook's JSON string


def separated_blocks(text: str) -> List[Dict[str, Any]]:
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


def table_lines(text: str) -> List[Dict[str, Any]]:
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
                nums = [number(c) for c in vals]
                if len(nums) != len(header) or nums[0] is None:
                    if rows:
                        break
                    continue
                rows.append({h: x for h, x in zip(header, nums) if x is not None})  # "No Log" cells: no value
            if rows:
                tables.append(rows)
    return max(tables, key=score, default=[])


#: every console reader with the format name it gives, in the order they are tried
READERS: Tuple[Tuple[Callable[[str], List[Dict[str, Any]]], str], ...] = (
    (dict_lines, "console_dicts"),
    (pair_lines, "console_pairs"),
    (phrase_lines, "console_phrases"),
    (step_blocks, "console_steps"),
    (separated_blocks, "console_blocks"),
    (eval_lines, "console_evals"),
    (table_lines, "table"),
)
