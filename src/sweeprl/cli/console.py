"""Terminal output of the CLI layer (rich): ranked trial tables and end-of-run summaries."""

from __future__ import annotations

from typing import Iterable, List, Sequence

from rich.console import Console
from rich.table import Table

from sweeprl.analysis.objective import penalty_sum, reward_term
from sweeprl.formatting import num
from sweeprl.study import TrialRow

console = Console(highlight=False)
if not console.is_terminal:
    # CI / SLURM logs / pipes: rich would assume 80 columns and truncate every cell of a trial table.
    console = Console(highlight=False, width=220)


def trials_table(rows: Sequence[TrialRow], title: str, max_rows: int = 50) -> Table:
    """Rank, trial, state, objective, its terms and the swept params of each trial."""
    param_keys: List[str] = sorted({k for r in rows for k in r.params})
    show_terms = any(r.terms for r in rows)
    table = Table(title=title, show_lines=False)
    for col in ("rank", "trial", "state", "objective"):
        table.add_column(col, justify="right" if col != "state" else "left")
    if show_terms:
        table.add_column("late_reward", justify="right")
        table.add_column("penalties", justify="right")
    for k in param_keys:
        table.add_column(k, justify="right")
    table.add_column("s", justify="right")
    table.add_column("findings", no_wrap=True, max_width=48, overflow="ellipsis")
    table.add_column("reason", no_wrap=True, max_width=60, overflow="ellipsis")
    rank = 0
    for r in rows[:max_rows]:
        rank_txt = ""
        if r.state == "COMPLETE" and r.value is not None:
            rank += 1
            rank_txt = str(rank)
        cells = [rank_txt, str(r.number), r.state, num(r.value, 4)]
        if show_terms:
            late = reward_term(r.terms)
            penalties = penalty_sum(r.terms) if r.terms else None
            cells += [num(late, 4), num(penalties, 4)]
        cells += [
            num(r.params[k], 4) if isinstance(r.params.get(k), float) else str(r.params.get(k, "-")) for k in param_keys
        ]
        cells += [f"{r.seconds:.0f}" if r.seconds is not None else "-", ",".join(r.findings), r.reason]
        table.add_row(*cells)
    return table


def print_lines(lines: Iterable[str]) -> None:
    for line in lines:
        console.print(line, soft_wrap=True)
