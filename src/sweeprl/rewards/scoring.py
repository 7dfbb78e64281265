"""What every sandboxed reward does around scoring: its share of the CPUs, a batch scored in parallel threads, and
per step the mean of each component (``rewards/<kind>/<component>``) and every scored completion appended to
``completions.jsonl`` in the trial dir."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, TypeVar

from sweeprl import trial_record
from sweeprl.rewards import completion_text

T = TypeVar("T")
R = TypeVar("R")


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask (taskset, cgroups cpusets, SLURM) where the OS has one."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def default_workers(slots: int = 1, cpus: Optional[int] = None) -> int:
    """``workers: 0``: this trial's share of the CPUs, ``max(1, cpus // slots)`` (``slots``: trials at once)."""
    cpus = available_cpus() if cpus is None else cpus
    return max(1, int(cpus) // max(1, int(slots)))


def resolve_workers(workers: int, slots: int) -> int:
    """An explicit ``workers: N`` stays N; 0 is this trial's share of the CPUs."""
    return int(workers) if workers else default_workers(slots)


def parallel_map(fn: Callable[[T], R], jobs: Sequence[T], workers: int) -> List[R]:
    """``fn`` over ``jobs`` in ``workers`` threads (each score waits on a sandboxed process), in input order."""
    if workers <= 1 or len(jobs) <= 1:
        return [fn(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, jobs))


class ScoreLog:
    """Per-step component means through TRL's ``log_metric`` and the scored completions of a trial."""

    def __init__(self, kind: str, components: Sequence[str], output_dir: Optional[str]):
        self.kind, self.components = kind, tuple(components)
        self.sink = Path(output_dir) / trial_record.COMPLETIONS if output_dir else None
        self.lock = threading.Lock()

    @staticmethod
    def texts(completions: Sequence[Any]) -> List[str]:
        return [completion_text(c) for c in completions]

    @staticmethod
    def step(trainer_state: Any) -> int:
        return int(getattr(trainer_state, "global_step", 0) or 0)

    def write(
        self,
        scores: Sequence[Any],
        texts: Sequence[str],
        ids: Optional[Sequence[Any]],
        trainer_state: Any,
        log_metric: Optional[Callable[[str, float], None]],
    ) -> None:
        if log_metric is not None:
            for comp in self.components:
                log_metric(f"rewards/{self.kind}/{comp}", sum(getattr(s, comp) for s in scores) / max(1, len(scores)))
        if self.sink is None:
            return
        step = self.step(trainer_state)
        with self.lock, self.sink.open("a") as fh:
            for i, (text, s) in enumerate(zip(texts, scores)):
                pid = ids[i] if ids is not None else None
                fh.write(json.dumps({"step": step, "problem_id": pid, "completion": text, **s.as_dict()}) + "\n")
