"""What a running sweep shows in the terminal.

On a TTY, a rich live panel under the scrolling log: trials finished / running / pruned / failed of
``n_trials``, the best objective so far with its params, one row per running trial (its elapsed time and params,
plus the app's own columns from the hooks — sweeprl shows the step and current reward and KL) and an ETA.
Elsewhere (CI, SLURM logs, pipes) a plain line with the same counts every quarter of the sweep, between the
sweeper's one line per finished trial, so a log file tells the story too.

The sweeper calls :meth:`SweepProgress.trial_started` / :meth:`trial_finished` from its loop; the live panel
refreshes itself from a background thread (rich's auto-refresh), so it keeps moving while an in-process trial
trains on the main thread. While the panel is up, Python logging handlers that wrote to the terminal write
through rich's console instead, so log lines scroll above the panel instead of tearing it.
"""

import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

# Hydra's plugin scan executes this module on every command: rich is imported where it is used, and the dataclass
# has no string annotations.
MODES = ("auto", "live", "plain", "off")


def format_seconds(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class RunningTrial:
    number: int
    params: str
    trial_dir: Path
    started: float = field(default_factory=time.monotonic)


class SweepProgress:
    """Counts, best trial and running trials of one sweep, shown live (TTY) or as plain lines."""

    def __init__(
        self,
        study_name: str,
        n_trials: int,
        *,
        parallel: int = 1,
        mode: str = "auto",
        console: Any = None,  # a rich Console
        maximize: bool = True,
        columns: Sequence[str] = (),
        detail: Optional[Callable[[Path], Sequence[str]]] = None,
    ):
        if mode not in MODES:
            raise ValueError(f"hydra.sweeper.progress={mode!r}; allowed: {', '.join(MODES)}")
        self.study_name = study_name
        self.n_trials = n_trials
        self.columns = tuple(columns)  # the app's columns of a running trial, and their cells (detail)
        self.detail = detail
        self.parallel = max(1, parallel)
        self.maximize = maximize
        from rich.console import Console

        self.console = console or Console(highlight=False, stderr=False)
        self.mode = mode if mode != "auto" else ("live" if self.console.is_terminal else "plain")
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.before = 0  # finished in earlier runs of this study (resume)
        self.best: Optional[tuple[float, int, str]] = None
        self.running: Dict[int, RunningTrial] = {}
        self.durations: List[float] = []
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._live: Any = None  # rich.live.Live while the panel is up
        self._handlers: List[tuple[logging.StreamHandler, Any]] = []

    # ------------------------------------------------------------------ events
    def resume_from(self, finished: int, best: Optional[tuple[float, int, str]]) -> None:
        """Trials finished before this run, and the study's best so far."""
        self.before = finished
        self.best = best

    def trial_started(self, number: int, params: str, trial_dir: Path) -> None:
        with self._lock:
            self.running[number] = RunningTrial(number, params, Path(trial_dir))

    def trial_finished(self, number: int, state: str, value: Optional[float] = None, params: str = "") -> None:
        with self._lock:
            run = self.running.pop(number, None)
            if run is not None:
                self.durations.append(time.monotonic() - run.started)
                params = params or run.params
            key = state if state in self.counts else "FAIL"
            self.counts[key] += 1
            if state == "COMPLETE" and value is not None:
                better = self.best is None or (value > self.best[0] if self.maximize else value < self.best[0])
                if better:
                    self.best = (value, number, params)
        if self.mode == "plain" and self._milestone():
            self.console.print(f"progress: {self.status_line()}", soft_wrap=True, highlight=False)

    def _milestone(self) -> bool:
        """Plain lines: each trial already logs its own outcome line, so the counts come every quarter of the
        sweep, not after every trial (and not at its end, which the sweep's closing lines report)."""
        every = max(1, -(-self.n_trials // 4))
        return sum(self.counts.values()) % every == 0 and self.finished < self.n_trials

    # ------------------------------------------------------------------ numbers
    @property
    def finished(self) -> int:
        return self.before + sum(self.counts.values()) - self.counts["FAIL"]

    def eta_seconds(self) -> Optional[float]:
        """Remaining trial-seconds (mean duration of this run's trials) spread over the parallel slots."""
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        now = time.monotonic()
        queued = max(0, self.n_trials - self.finished - len(self.running))
        left = queued * mean + sum(max(0.0, mean - (now - r.started)) for r in self.running.values())
        return left / self.parallel

    def status_line(self) -> str:
        c = self.counts
        parts = [
            f"{self.finished}/{self.n_trials} finished ({c['COMPLETE']} complete, {c['PRUNED']} pruned, "
            f"{c['FAIL']} failed this run)",
            f"{len(self.running)} running",
        ]
        if self.best is not None:
            parts.append(f"best {self.best[0]:.4g} (trial {self.best[1]}: {self.best[2]})")
        eta = self.eta_seconds() if self.finished < self.n_trials else None
        parts.append(
            f"elapsed {format_seconds(time.monotonic() - self.started)}"
            + (f", ETA {format_seconds(eta)}" if eta is not None else "")
        )
        return "; ".join(parts)

    # ------------------------------------------------------------------ live panel
    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            running = sorted(self.running.values(), key=lambda r: r.number)
            header = Text(f"sweep {self.study_name}: ", style="bold")
            header.append(self.status_line())
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        columns = [("trial", "right"), *((c, "right") for c in self.columns), ("elapsed", "right"), ("params", "left")]
        for col, justify in columns:
            table.add_column(col, justify=justify, no_wrap=col != "params")
        now = time.monotonic()
        for run in running:
            cells = list(self.detail(run.trial_dir)) if self.detail is not None else []
            cells = (cells + ["-"] * len(self.columns))[: len(self.columns)]
            table.add_row(str(run.number), *cells, format_seconds(now - run.started), run.params)
        return Group(header, table) if running else Group(header)

    def __enter__(self) -> "SweepProgress":
        if self.mode == "live":
            from rich.live import Live

            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                refresh_per_second=2,
                redirect_stdout=True,
                redirect_stderr=True,
                transient=False,
            )
            self._live.start()
            self._route_logging()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._restore_logging()
            self._live.stop()
            self._live = None

    def _route_logging(self) -> None:
        """Terminal log handlers write through the live console (above the panel) while it is shown."""
        loggers = [
            logging.getLogger(),
            *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
        ]
        for handler in {h for lg in loggers for h in lg.handlers}:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                if handler.stream in (sys.__stdout__, sys.__stderr__):
                    self._handlers.append((handler, handler.setStream(sys.stdout)))

    def _restore_logging(self) -> None:
        for handler, stream in self._handlers:
            handler.setStream(stream)
        self._handlers.clear()


def best_of(study: Any, maximize: bool, param_text) -> Optional[tuple[float, int, str]]:
    """(value, number, params) of a single-objective study's best trial, or None."""
    from optuna.trial import TrialState

    done = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values and len(t.values) == 1
    ]
    if not done:
        return None
    best = max(done, key=lambda t: t.values[0]) if maximize else min(done, key=lambda t: t.values[0])
    return best.values[0], best.number, param_text(best.params)
