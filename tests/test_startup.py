"""Start-up that a trial pays once: the config is validated once per trial process, a trial process launched by
a sweep driver skips the pre-pass, and MLflow logging runs off the training thread."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import PYTHON, REPO, free_port

# Runs ``python -m sweeprl <args>`` and prints how often the config was validated and composed in that process.
COUNTING_MAIN = f"""
import atexit, importlib, sys
sys.path.insert(0, {str(REPO / "src")!r})
v = importlib.import_module("sweeprl.config.validate")  # (the package exports a function of the same name)
from hydra._internal.config_loader_impl import ConfigLoaderImpl
calls = {{"validate": 0, "compose": 0}}
real_validate, real_load = v.validate, ConfigLoaderImpl.load_configuration
def validate(cfg):
    calls["validate"] += 1
    return real_validate(cfg)
def load_configuration(self, *a, **k):
    calls["compose"] += 1
    return real_load(self, *a, **k)
v.validate, ConfigLoaderImpl.load_configuration = validate, load_configuration
atexit.register(lambda: print("COUNTS", calls["validate"], calls["compose"], file=sys.stderr))
from sweeprl.__main__ import main
main(sys.argv[1:])
"""


def run_counted(args, cwd, env=None):
    proc = subprocess.run(
        [PYTHON, "-c", COUNTING_MAIN, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    counts = [line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("COUNTS")]
    return proc, tuple(int(c) for c in counts[-1]) if counts else None


@pytest.mark.e2e  # trains
@pytest.mark.parametrize("driver_checked", [False, True], ids=["single run", "trial process of a sweep driver"])
def test_a_trial_process_validates_once(tmp_path, model_cache, driver_checked):
    args = [
        "experiment=quickstart",
        "algo.max_steps=2",
        f"model.cache_dir={model_cache}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"hydra.run.dir={tmp_path}/run",
    ]
    proc, counts = run_counted(args, tmp_path, {"SWEEPRL_PRECHECKED": "1"} if driver_checked else None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts == (1, 1)  # validated once, composed once (the pre-pass's config is the one that runs)
    assert (tmp_path / "run" / "objective.json").is_file()


def test_a_driver_checked_trial_still_refuses_a_bad_value(tmp_path):
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "sweeprl",
            "experiment=quickstart",
            "algo.learning_rate=0",
            f"tracking.uri=http://127.0.0.1:{free_port()}",  # the pre-pass would refuse it; a driver probed it
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
        env={**os.environ, "SWEEPRL_PRECHECKED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "algo.learning_rate=0.0 is invalid" in proc.stderr
    assert "sweeprl: invalid configuration" not in proc.stderr and "cannot be reached" not in proc.stderr
    assert "Loading weights" not in proc.stderr + proc.stdout


# ------------------------------------------------------------------------------------- MLflow off-thread
def logged_run(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("bench")
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


@pytest.mark.parametrize("in_process", [False, True], ids=["worker process", "thread"])
def test_trial_run_logs_everything_in_order(tmp_path, in_process):
    from sweeprl.tracking_worker import TrialRun

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    artifact = tmp_path / "objective.json"
    artifact.write_text("{}\n")
    run = TrialRun(uri, "bench", "trial-0", {"sweeprl.role": "trial"}, {"algo.learning_rate": "0.001"}, in_process)
    assert (run._proc is None) == in_process
    for step in range(1, 31):
        run.log_metrics([("reward", step / 10, step), ("kl", float("0.5"), step)])
    run.set_tags({"sweeprl.state": "COMPLETE"})
    run.log_artifact(str(artifact))
    run_id = run.finish("FINISHED")
    client, logged = logged_run(uri)
    assert logged.info.run_id == run_id and logged.info.status == "FINISHED"
    assert logged.data.params == {"algo.learning_rate": "0.001"}
    assert logged.data.tags["sweeprl.state"] == "COMPLETE" and logged.data.tags["mlflow.runName"] == "trial-0"
    history = client.get_metric_history(run_id, "reward")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(1, 31))
    assert [a.path for a in client.list_artifacts(run_id)] == ["objective.json"]
    if not in_process:
        assert run._proc.returncode == 0


@pytest.mark.parametrize("gpu,nvml,wanted", [(False, True, False), (True, False, False), (True, True, True)])
def test_system_metrics_only_with_a_gpu_and_nvidia_ml_py(monkeypatch, gpu, nvml, wanted):
    """GPU utilisation/memory go to MLflow only when torch sees CUDA and pynvml imports (no GPU here: simulated)."""
    import sys
    import types

    import torch

    from sweeprl.tracking import system_metrics_wanted

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml") if nvml else None)  # None: ImportError
    assert system_metrics_wanted() is wanted


def test_trial_run_logs_system_metrics_and_a_model_dir(tmp_path, monkeypatch):
    """MLflow's SystemMetricsMonitor on a client-created run, in the worker process (a thread runs the same
    ``serve`` loop); on this CPU-only machine it logs CPU/memory (``system/*``), on a GPU machine also
    ``system/gpu_*``."""
    from sweeprl.tracking_worker import TrialRun

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")  # inherited by the worker process
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}\n")
    run = TrialRun(uri, "bench", "trial-0", {}, {}, in_process=False)
    run.start_system_metrics()
    run.log_artifacts(str(tmp_path / "model"), "model")
    assert run.run_id  # the run exists (the store is set up) ...
    time.sleep(1.5)  # ... and the monitor samples and logs a few times before the run ends
    run_id = run.finish("FINISHED")
    client, logged = logged_run(uri)
    assert logged.info.run_id == run_id and logged.info.status == "FINISHED"
    assert "system/cpu_utilization_percentage" in logged.data.metrics
    assert [a.path for a in client.list_artifacts(run_id, "model")] == ["model/config.json"]


def test_logging_never_waits_for_a_slow_store(tmp_path, monkeypatch):
    from sweeprl import tracking
    from sweeprl.tracking_worker import TrialRun

    slow_calls, started = [], []
    store_seconds = 2.0

    def slow_log_metrics(self, run_id, records):
        started.append(time.perf_counter())
        slow_calls.append(len(list(records)))
        time.sleep(store_seconds)
        return True

    monkeypatch.setattr(tracking.SafeTracker, "log_metrics", slow_log_metrics)
    run = TrialRun(f"sqlite:///{tmp_path}/mlflow.db", "bench", "t", {}, {}, in_process=True, interval=0.05)
    for step in range(200):  # what the training thread does at every logging step
        run.log_metrics([("reward", 1.0, step)])
    logged = time.perf_counter()
    run.finish("FINISHED")
    # the 200 steps were logged before the store's first call returned (an ordering, not a speed: a loaded
    # machine slows both sides), and the store got them in batches, not one call per step
    assert logged < started[0] + store_seconds
    assert sum(slow_calls) == 200 and len(slow_calls) < 20


@pytest.mark.parametrize("in_process", [False, True], ids=["worker process", "thread"])
def test_a_dead_executor_does_not_stop_the_trial(tmp_path, monkeypatch, in_process):
    from sweeprl import tracking_worker
    from sweeprl.tracking_worker import TrialRun

    if in_process:

        def broken_store(uri, commands, reply):
            next(iter(commands))
            raise RuntimeError("the store went away")

        monkeypatch.setattr(tracking_worker, "serve", broken_store)
    run = TrialRun(f"sqlite:///{tmp_path}/mlflow.db", "bench", "t", {}, {}, in_process=in_process)
    if not in_process:
        run._proc.kill()
    for step in range(50):
        run.log_metrics([("reward", 1.0, step)])
    t0 = time.perf_counter()
    run.finish("FINISHED")
    assert time.perf_counter() - t0 < 30


def test_metrics_file_is_written_on_the_training_thread_and_mlflow_is_queued(tmp_path):
    from types import SimpleNamespace

    from sweeprl.training.callbacks import MetricsRecorder

    class Queued:
        def __init__(self):
            self.records = []

        def log_metrics(self, records):
            self.records.append(list(records))

    queued = Queued()
    recorder = MetricsRecorder(tmp_path, queued)
    state = SimpleNamespace(is_world_process_zero=True, global_step=3)
    recorder.on_log(None, state, None, logs={"reward": 0.5, "kl": float("nan"), "note": "text"})
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1  # the record, written at once
    assert queued.records == [[("reward", 0.5, 3)]]  # NaN stays out of MLflow, in metrics.jsonl


def test_clip_ratios_zero_by_construction_stay_out_of_mlflow(tmp_path):
    """On-policy GRPO (TRL's condition: no old log-probs) has a policy ratio of exactly 1, so its clip ratios are
    0 at every step: they stay in metrics.jsonl but are not MLflow charts. Off-policy GRPO and RLOO keep them."""
    from types import SimpleNamespace

    from trl import GRPOConfig, RLOOConfig

    from sweeprl.training.callbacks import MetricsRecorder, unclipped_by_construction

    cpu = {"output_dir": str(tmp_path), "per_device_train_batch_size": 4, "use_cpu": True, "bf16": False}

    def grpo(**kw):
        return GRPOConfig(num_generations=4, **cpu, **kw)

    assert unclipped_by_construction(grpo())
    assert unclipped_by_construction(grpo(gradient_accumulation_steps=4, steps_per_generation=2))
    assert not unclipped_by_construction(grpo(num_iterations=2))
    assert not unclipped_by_construction(grpo(gradient_accumulation_steps=2, steps_per_generation=4))
    assert not unclipped_by_construction(RLOOConfig(num_generations=4, **cpu))

    sent = []
    recorder = MetricsRecorder(tmp_path, SimpleNamespace(log_metrics=lambda records: sent.extend(records)))
    recorder.on_train_begin(grpo(), None, None)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    recorder.on_log(None, state, None, logs={"reward": 0.5, "clip_ratio/low_mean": 0.0})
    assert sent == [("reward", 0.5, 1)]
    assert '"clip_ratio/low_mean": 0.0' in (tmp_path / "metrics.jsonl").read_text()
