"""Failures, retries, process slots, timeouts, a killed driver and Ctrl-C — real processes, bounded time."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient

from conftest import PYTHON, run_sweeprl

pytestmark = pytest.mark.e2e
STUDY = "quickstart-lr"


def cmd(model_cache, *extra):
    return [
        PYTHON,
        "-m",
        "sweeprl",
        "-m",
        "experiment=quickstart",
        "sweep=lr",
        "hydra.sweeper.sampler.seed=0",
        f"model.cache_dir={model_cache}",
        "hydra.sweeper.max_failure_rate=1.0",
        *extra,
    ]


def run(cwd, model_cache, *extra, timeout=600):
    return run_sweeprl(cwd, *cmd(model_cache, *extra)[3:], timeout=timeout)


def trials(cwd):
    return optuna.load_study(study_name=STUDY, storage=f"sqlite:///{cwd}/multirun/{STUDY}/optuna.db").trials


def test_raising_trial_fails_with_reason_and_is_retried(tmp_path, model_cache):
    run(
        tmp_path,
        model_cache,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.retries=1",
        "algo.max_steps=6",
        "+fault.raise_at_step=3",
        "+fault.only_trials=[0]",
    )
    ts = trials(tmp_path)
    assert [t.state.name for t in ts] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert "fault injected: raise_at_step=3" in ts[0].user_attrs["fail_reason"]
    (retry,) = [t for t in ts if t.user_attrs.get("retry_of") == 0]
    assert retry.number == 1 and retry.params == ts[0].params  # same config, new trial, picked up next
    tail = (tmp_path / "multirun" / STUDY / "trial_0" / "last_50_lines.log").read_text()
    assert "fault injected" in tail
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name(STUDY)
    (failed,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("sweeprl.trial_number") == "0"]
    assert failed.info.status == "FAILED" and "fault injected" in failed.data.tags["sweeprl.fail_reason"]
    assert "last_50_lines.log" in {a.path for a in client.list_artifacts(failed.info.run_id)}


def test_nan_objective_fails(tmp_path, model_cache):
    run(
        tmp_path,
        model_cache,
        "hydra.sweeper.n_trials=1",
        "algo.max_steps=4",
        "tracking.enabled=false",
        "+fault.objective_nan=true",
        "+fault.only_trials=[0]",
    )
    ts = trials(tmp_path)
    assert ts[0].state.name == "FAIL" and "not a finite number" in ts[0].user_attrs["fail_reason"]
    assert ts[1].state.name == "COMPLETE"


def test_process_slots_sigkill_and_timeout(tmp_path, model_cache):
    t0 = time.monotonic()
    run(
        tmp_path,
        model_cache,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.slots=2",
        "hydra.sweeper.trial_timeout=40",
        "algo.max_steps=6",
        "tracking.enabled=false",
        "+fault.kill_at_step=2",
        "+fault.only_trials=[0]",
    )
    ts = trials(tmp_path)
    states = {t.number: t.state.name for t in ts}
    assert states[0] == "FAIL" and "killed by SIGKILL" in ts[0].user_attrs["fail_reason"]
    assert sum(s == "COMPLETE" for s in states.values()) == 2
    assert (tmp_path / "multirun" / STUDY / "trial_0" / "trial_process.log").is_file()
    # timeout: a trial that sleeps 10 s per update (60 s in all) with a 40 s budget is killed and marked FAIL;
    # an ordinary trial (imports, model, 6 updates) fits the budget easily
    run(
        tmp_path,
        model_cache,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.trial_timeout=40",
        "algo.max_steps=6",
        "tracking.enabled=false",
        "+fault.sleep_per_step=10",
        "+fault.only_trials=[3]",
    )
    t3 = trials(tmp_path)[3]
    assert t3.state.name == "FAIL" and t3.user_attrs["fail_reason"].startswith("timeout")
    assert 40 <= t3.user_attrs["seconds"] < 40 + 5
    assert [t.state.name for t in trials(tmp_path)[4:]] == ["COMPLETE"]
    assert time.monotonic() - t0 < 500


def _lines(path):
    try:
        return path.read_text().count("\n")
    except OSError:
        return 0


def _kill_driver_when(cwd, args, ready) -> None:
    """Start a driver, kill -9 its whole process group as soon as ``ready(before)`` holds (``before``: the trial
    dirs that existed at start), then wait until its heartbeats are stale (grace_period 3 s)."""
    root = cwd / "multirun" / STUDY
    before = {p.name for p in root.glob("trial_*")} if root.is_dir() else set()
    driver = subprocess.Popen(
        args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None and not ready(root, before):
        time.sleep(0.05)
    assert driver.poll() is None, "the driver ended before the kill moment"
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    time.sleep(4)


def _mid_trial(root, before):  # a new trial has logged 2 steps and not finished
    return any(
        _lines(d / "metrics.jsonl") >= 2 and not (d / "objective.json").exists()
        for d in root.glob("trial_*")
        if d.name not in before
    )


def _trial_just_finished(root, before):  # a new trial wrote its result; the driver is about to tell the study
    return any((d / "objective.json").exists() for d in root.glob("trial_*") if d.name not in before)


def test_killed_driver_at_several_moments_resumes_to_exactly_n_trials(tmp_path, model_cache):
    """kill -9 mid-trial, right after a trial wrote its result (racing the tell), and mid-trial again; every
    re-run of the same command resumes; the study ends at exactly n_trials COMPLETE, none lost or duplicated."""
    common = (
        "hydra.sweeper.n_trials=3",
        "algo.max_steps=8",
        "hydra.sweeper.heartbeat_interval=1",
        "hydra.sweeper.grace_period=3",
        "hydra.sweeper.retries=5",
    )
    args = cmd(model_cache, *common, "+fault.sleep_per_step=0.5")
    seen_complete = {}
    for ready in (_mid_trial, _trial_just_finished, _mid_trial):
        _kill_driver_when(tmp_path, args, ready)
        ts = trials(tmp_path)
        for t in ts:
            if t.state.name == "COMPLETE":
                assert seen_complete.setdefault(t.number, t.value) == t.value  # a finished trial never changes
        assert sum(t.state.name == "RUNNING" for t in ts) == 1  # the killed trial, until the next driver fails it
    run(tmp_path, model_cache, *common)
    ts = trials(tmp_path)
    complete = [t for t in ts if t.state.name == "COMPLETE"]
    assert len(complete) == 3 and not [t for t in ts if t.state.name in ("RUNNING", "WAITING")]
    assert all(t.number in {c.number for c in complete} for t in ts if t.number in seen_complete)  # none lost
    assert len({t.number for t in ts}) == len(ts)
    failed = [t for t in ts if t.state.name == "FAIL"]
    assert len(failed) >= 2  # at least the two mid-trial kills
    for t in failed:  # every killed config was re-queued: a later trial has its params
        assert any(u.number > t.number and u.params == t.params for u in ts), t.number
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name(STUDY)
    runs = client.search_runs([exp.experiment_id])
    done = [r for r in runs if r.data.tags.get("sweeprl.state") == "COMPLETE"]
    assert sorted(int(r.data.tags["sweeprl.trial_number"]) for r in done) == sorted(t.number for t in complete)
    assert len([r for r in runs if r.data.tags.get("sweeprl.role") == "sweep"]) == 1


def test_ctrl_c_stops_gracefully(tmp_path, model_cache):
    args = cmd(
        model_cache,
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.slots=2",
        "algo.max_steps=30",
        "tracking.enabled=false",
        "+fault.sleep_per_step=0.5",
    )
    driver = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    log = tmp_path / "multirun" / STUDY / "trial_0" / "trial_process.log"
    while time.monotonic() < deadline and not (log.is_file() and "step" in log.read_text()):
        time.sleep(0.3)
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=120)
    assert driver.returncode != 0
    ts = trials(tmp_path)
    assert all(t.state.name != "RUNNING" for t in ts), ([t.state.name for t in ts], out[-3000:])
    assert any(t.user_attrs.get("fail_reason", "").startswith("interrupted") for t in ts)
    assert "interrupted" in out and "rank" in out  # summary printed
