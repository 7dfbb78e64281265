"""The sweep's terminal display: the live panel (TTY) and the plain one-line-per-event output."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import time

import pytest
from rich.console import Console

from conftest import PYTHON
from sweeprl.progress import SweepProgress, format_seconds
from sweeprl.trial_record import last_metrics


def console(terminal: bool) -> Console:
    return Console(file=io.StringIO(), force_terminal=terminal, width=200, highlight=False, color_system=None)


def text_of(renderable) -> str:
    c = console(False)
    c.print(renderable)
    return c.file.getvalue()


def write_metrics(trial_dir, records):
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_auto_mode_is_live_on_a_terminal_and_plain_elsewhere():
    assert SweepProgress("s", 4, console=console(True)).mode == "live"
    assert SweepProgress("s", 4, console=console(False)).mode == "plain"
    assert SweepProgress("s", 4, console=console(True), mode="plain").mode == "plain"
    with pytest.raises(ValueError, match="allowed: auto, live, plain, off"):
        SweepProgress("s", 4, mode="fancy")


def test_live_panel_shows_counts_best_and_each_running_trial(tmp_path):
    p = SweepProgress("quickstart-lr", 10, max_steps=8, parallel=2, console=console(True))
    p.resume_from(2, (0.5, 1, "algo.learning_rate=0.001"))  # a resumed study: 2 finished before
    write_metrics(
        tmp_path / "trial_3", [{"step": 3, "reward": 0.1, "kl": 0.01}, {"step": 4, "reward": 0.25, "kl": 0.02}]
    )
    p.trial_started(3, "algo.learning_rate=0.002", tmp_path / "trial_3")
    p.trial_started(4, "algo.learning_rate=0.004", tmp_path / "trial_4")  # no metrics yet
    out = text_of(p.render())
    assert "sweep quickstart-lr: 2/10 finished (0 complete, 0 pruned, 0 failed this run); 2 running" in out
    assert "best 0.5 (trial 1: algo.learning_rate=0.001)" in out
    row3 = next(line for line in out.splitlines() if line.strip().startswith("3 "))
    assert re.search(r"3\s+4/8\s+0\.25\s+0\.02\s+\d+s\s+algo\.learning_rate=0\.002", row3), row3
    row4 = next(line for line in out.splitlines() if line.strip().startswith("4 "))
    assert re.search(r"4\s+-\s+-\s+-", row4), row4
    write_metrics(tmp_path / "trial_4_seed1", [{"step": 2, "reward": 0.5}])  # multi-seed trial dirs
    row4 = next(line for line in text_of(p.render()).splitlines() if line.strip().startswith("4 "))
    assert re.search(r"4\s+2/8\s+0\.5\s+-", row4), row4
    p.trial_finished(3, "COMPLETE", 0.7)
    p.trial_finished(4, "PRUNED")
    out = text_of(p.render())
    assert "4/10 finished (1 complete, 1 pruned, 0 failed this run); 0 running" in out
    assert "best 0.7 (trial 3: algo.learning_rate=0.002)" in out


def test_best_follows_the_direction_and_failures_do_not_count_as_finished():
    p = SweepProgress("s", 5, console=console(False), maximize=False)
    p.trial_finished(0, "COMPLETE", 0.3, "x=1")
    p.trial_finished(1, "COMPLETE", 0.1, "x=2")
    p.trial_finished(2, "COMPLETE", 0.2, "x=3")
    p.trial_finished(3, "FAIL", None, "x=4")
    assert p.best == (0.1, 1, "x=2") and p.finished == 3 and p.counts["FAIL"] == 1


def test_plain_mode_prints_one_line_per_finished_trial():
    c = console(False)
    p = SweepProgress("s", 3, console=c)
    with p:  # no live panel, nothing printed on enter/exit
        p.trial_started(0, "x=1", "/nonexistent")
        p.trial_finished(0, "COMPLETE", 0.5)
        p.trial_started(1, "x=2", "/nonexistent")
        p.trial_finished(1, "FAIL")
    lines = c.file.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "progress: 1/3 finished (1 complete, 0 pruned, 0 failed this run); 0 running; best 0.5 (trial 0: x=1)"
    )
    assert lines[1].startswith("progress: 1/3 finished (1 complete, 0 pruned, 1 failed this run)")


def test_plain_mode_prints_counts_every_quarter_of_a_longer_sweep():
    c = console(False)
    p = SweepProgress("s", 16, console=c)
    with p:
        for n in range(16):
            p.trial_started(n, f"x={n}", "/nonexistent")
            p.trial_finished(n, "PRUNED" if n % 3 else "COMPLETE", float(n))
    lines = c.file.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["4/16", "8/16", "12/16"]  # the end: the sweep's summary


def test_eta_spreads_remaining_trial_time_over_the_slots():
    p = SweepProgress("s", 10, parallel=2, console=console(False))
    assert p.eta_seconds() is None  # nothing to extrapolate from yet
    p.durations = [10.0, 30.0]  # mean 20 s
    p.counts["COMPLETE"] = 2
    p.trial_started(2, "", "/nonexistent")
    p.running[2].started = time.monotonic() - 5  # 15 s left of a mean trial
    # 10 - 2 finished - 1 running = 7 queued x 20 s + 15 s, over 2 slots
    assert p.eta_seconds() == pytest.approx((7 * 20 + 15) / 2, abs=0.5)


def test_last_metrics_reads_the_last_complete_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "reward": i / 10}) + "\n" for i in range(1, 2000)) + '{"step": 20')
    assert last_metrics(tmp_path) == {"step": 1999, "reward": 199.9}
    assert last_metrics(tmp_path / "missing") is None
    assert [format_seconds(s) for s in (None, 5, 75, 3725)] == ["-", "5s", "1m15s", "1h02m"]


@pytest.mark.e2e
def test_sweep_on_a_tty_shows_the_live_panel(tmp_path, model_cache):
    """A real 2-trial sweep under a pseudo-terminal: the live panel appears, log lines still scroll."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "TERM")}
    env.update(TERM="xterm-256color", COLUMNS="200", LINES="50")
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "sweeprl",
            "-m",
            "experiment=quickstart",
            "sweep=lr",
            "hydra.sweeper.n_trials=2",
            "algo.max_steps=6",
            "hydra.sweeper.report=false",
            "tracking.enabled=false",
            f"model.cache_dir={model_cache}",
            "hydra.sweeper.slots=2",
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", errors="replace"))
    assert proc.returncode == 0, out[-3000:]
    assert "sweep quickstart-lr: 0/2 finished (0 complete, 0 pruned, 0 failed this run); 2 running" in out
    assert re.search(r"\b[01]\s+\d/6\s+0\.\d+", out), out[-3000:]  # a running trial's step and reward
    assert "2/2 finished (2 complete, 0 pruned, 0 failed this run); 0 running; best" in out
    assert "[trial 1] COMPLETE" in out and "progress: " not in out  # log lines scroll; no plain lines on a TTY
