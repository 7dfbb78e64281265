"""Terminal output of the CLI layer (rich): ranked trial tables and end-of-run summaries."""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from sweeprl.analysis.diagnosis import sweep_level
from sweeprl.analysis.objective import penalty_sum, reward_term
from sweeprl.formatting import num
from sweeprl.study import TrialRow

console = Console(highlight=False)
if not console.is_terminal:
    # CI / SLURM logs / pipes: rich would assume 80 columns and truncate every cell of a trial table.
    console = Console(highlight=False, width=220)


def sweep_wide(rows: Sequence[TrialRow]) -> Dict[str, int]:
    """Findings on most finished trials (sweeprl.analysis.diagnosis.sweep_level) with their trial counts."""
    finished = {r.number: r.findings for r in rows if r.state in ("COMPLETE", "PRUNED")}
    common = sweep_level(finished)
    return {f: sum(f in ids for ids in finished.values()) for f in sorted(common)}


def short_reason(reason: str) -> str:
    """A prune/fail reason cut to what fits a table cell: ``pruned at step 10``, ``guard kl_runaway at step 12``,
    the first clause of an error."""
    if not reason:
        return ""
    first = reason.strip().splitlines()[0]
    m = re.match(r"pruner: .* at step (\d+)", first)
    if m:
        return f"pruned at step {m.group(1)}"
    m = re.match(r"guard:(\w+)", first)
    if m:
        return f"guard {m.group(1)}"
    return first if len(first) <= 60 else first[:59] + "…"


def _param_names(keys: Sequence[str]) -> Dict[str, str]:
    """Column names: the last part of each param path (``algo.learning_rate`` -> ``learning_rate``), the full
    path where two params would share it."""
    leaves = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (leaf if leaves.count(leaf) == 1 else k) for k, leaf in zip(keys, leaves)}


def trials_table(rows: Sequence[TrialRow], title: str, max_rows: int = 50, width: Optional[int] = None) -> Table:
    """Rank, trial, state, objective (with its reward and penalties when there is room), the swept params and
    what to know about each trial: its own findings, or why it was pruned or failed. Findings that fire on most
    trials describe the sweep, not a trial: they go to the caption, once. Fits an 80-column terminal."""
    width = width or console.width
    param_keys: List[str] = sorted({k for r in rows for k in r.params})
    names = _param_names(param_keys)
    show_terms = any(r.terms for r in rows) and width >= 100
    show_seconds = width >= 110
    common = sweep_wide(rows)
    finished = sum(r.state in ("COMPLETE", "PRUNED") for r in rows)
    caption = (
        "on most trials (a property of the sweep, not of a trial): "
        + ", ".join(f"{f} ({n}/{finished})" for f, n in common.items())
        if common
        else None
    )
    table = Table(
        title=title, caption=caption, caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, expand=False
    )
    for col in ("#", "trial", "state", "objective"):
        table.add_column(col, justify="left" if col == "state" else "right", no_wrap=True)
    if show_terms:
        table.add_column("reward", justify="right", no_wrap=True)
        table.add_column("penalty", justify="right", no_wrap=True)
    for k in param_keys:
        table.add_column(names[k], justify="right", no_wrap=True)
    if show_seconds:
        table.add_column("s", justify="right", no_wrap=True)
    table.add_column("findings / why not ranked", overflow="fold", ratio=1, min_width=16)
    rank = 0
    for r in rows[:max_rows]:
        rank_txt = ""
        if r.state == "COMPLETE" and r.value is not None:
            rank += 1
            rank_txt = str(rank)
        cells = [rank_txt, str(r.number), r.state, num(r.value, 4)]
        if show_terms:
            cells += [num(reward_term(r.terms), 3), num(penalty_sum(r.terms), 3) if r.terms else "-"]
        cells += [num(r.params[k], 3) if k in r.params else "-" for k in param_keys]
        if show_seconds:
            cells.append(f"{r.seconds:.0f}" if r.seconds is not None else "-")
        notes = [f for f in r.findings if f not in common]
        if r.state != "COMPLETE" and r.reason:
            notes.insert(0, short_reason(r.reason))
        cells.append(", ".join(notes))
        table.add_row(*cells)
    return table


def print_markdown(text: str) -> None:
    """Markdown as it is when piped or redirected (to save or paste); rendered to the terminal's width when shown."""
    if console.is_terminal:
        from rich.markdown import Markdown

        console.print(Markdown(text, code_theme="ansi_dark"))
    else:
        print(text)


def print_lines(lines: Iterable[str]) -> None:
    for line in lines:
        console.print(line, soft_wrap=True)
