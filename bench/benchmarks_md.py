"""Rewrite one row of BENCHMARKS.md's table (keyed by an id), keeping the others."""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
HEADER = (
    "| id | metric | anchor (measured in the same run) | ratio (value) | date | machine |\n|---|---|---|---|---|---|\n"
)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def update_row(row_id: str, metric: str, anchor: str, ratio: str) -> None:
    text = PATH.read_text() if PATH.exists() else "# Benchmarks\n\n" + HEADER
    if HEADER not in text:
        text = text.rstrip() + "\n\n" + HEADER
    row = f"| {row_id} | {metric} | {anchor} | {ratio} | {datetime.date.today().isoformat()} | {machine()} |\n"
    pattern = re.compile(rf"^\| {re.escape(row_id)} \|.*\n", re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: row, text)
    else:
        head, sep, rest = text.partition(HEADER)
        table_end = re.search(r"^(?!\|)", rest, re.M)
        cut = table_end.start() if table_end else len(rest)
        text = head + sep + rest[:cut] + row + rest[cut:]
    PATH.write_text(text)
    print(f"BENCHMARKS.md: row {row_id} updated")
