"""Against a real `mlflow server` on 127.0.0.1: nesting, params, step metrics, objective and the report on the
parent run; then the server stopped mid-sweep and restarted — trials never fail because of tracking."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from conftest import PYTHON, free_port, quickstart_sweep

pytestmark = pytest.mark.e2e
STUDY = "quickstart-lr"
MLFLOW = str(Path(sys.executable).parent / "mlflow")


def start_server(root: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            MLFLOW,
            "server",
            "--backend-store-uri",
            f"sqlite:///{root}/backend.db",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=open(root / f"server-{time.time_ns()}.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            MlflowClient(f"http://127.0.0.1:{port}").search_experiments()
            return proc
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError("mlflow server did not start")


def stop_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait()


def sweep(cwd, model_cache, uri, *extra) -> subprocess.CompletedProcess:
    overrides = ["sweep=lr", "hydra.sweeper.sampler.seed=0", f"tracking.uri={uri}", *extra]
    return quickstart_sweep(cwd, model_cache, *overrides, check=False)


def test_runs_nested_under_the_parent_on_a_real_server(tmp_path, model_cache):
    port = free_port()
    server = start_server(tmp_path, port)
    try:
        uri = f"http://127.0.0.1:{port}"
        proc = sweep(tmp_path, model_cache, uri, "hydra.sweeper.n_trials=2", "algo.max_steps=8")
        assert proc.returncode == 0, proc.stderr[-3000:]
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(STUDY)
        runs = client.search_runs([exp.experiment_id])
        (parent,) = [r for r in runs if r.data.tags.get("sweeprl.role") == "sweep"]
        children = [r for r in runs if r.data.tags.get("sweeprl.role") == "trial"]
        assert len(children) == 2
        for r in children:
            assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
            assert "algo.learning_rate" in r.data.params and "objective" in r.data.metrics
            assert [m.step for m in client.get_metric_history(r.info.run_id, "reward")] == list(range(1, 9))
        report = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
        assert "report/report.html" in report and "report/report.md" in report
        assert "optimization_results.yaml" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    finally:
        stop_server(server)


def test_server_stopped_mid_sweep_and_restarted(tmp_path, model_cache):
    port = free_port()
    server = start_server(tmp_path, port)
    uri = f"http://127.0.0.1:{port}"
    cmd = [
        PYTHON,
        "-m",
        "sweeprl",
        "-m",
        "experiment=quickstart",
        "sweep=lr",
        "hydra.sweeper.sampler.seed=0",
        f"tracking.uri={uri}",
        f"model.cache_dir={model_cache}",
        "hydra.sweeper.n_trials=3",
        "algo.max_steps=12",
        "+fault.sleep_per_step=0.5",
        "hydra/sweeper/pruner=none",
    ]
    driver = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    storage = f"sqlite:///{tmp_path}/multirun/{STUDY}/optuna.db"
    try:
        deadline = time.monotonic() + 300

        def finished() -> int:
            try:
                return sum(
                    t.state.name == "COMPLETE" for t in optuna.load_study(study_name=STUDY, storage=storage).trials
                )
            except Exception:  # noqa: BLE001 - study not created yet
                return 0

        while finished() < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        stop_server(server)  # the tracking server goes away during trial 1
        while finished() < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        server = start_server(tmp_path, port)  # and comes back for trial 2
        out, _ = driver.communicate(timeout=300)
        assert driver.returncode == 0, out[-3000:]
        trials = optuna.load_study(study_name=STUDY, storage=storage).trials
        assert [t.state.name for t in trials] == ["COMPLETE"] * 3  # tracking failures never fail a trial
        assert "MLflow" in out and "failed" in out  # the outage was reported as a warning
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(STUDY)
        numbers = {r.data.tags.get("sweeprl.trial_number") for r in client.search_runs([exp.experiment_id])}
        assert {"0", "2"} <= numbers  # before and after the outage
    finally:
        driver.kill()
        stop_server(server)


def test_unreachable_server_falls_back_to_the_local_store_only_when_asked(tmp_path, model_cache):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    refused = sweep(tmp_path, model_cache, uri, "hydra.sweeper.n_trials=1", "algo.max_steps=2")
    assert (
        refused.returncode == 2
        and "cannot be reached" in refused.stderr
        and "tracking.fallback_local=true" in refused.stderr
    )
    assert not (tmp_path / "multirun").exists() and not (tmp_path / "mlflow.db").exists()  # nothing started

    proc = sweep(
        tmp_path,
        model_cache,
        uri,
        "hydra.sweeper.n_trials=1",
        "algo.max_steps=2",
        "tracking.fallback_local=true",
        "hydra.sweeper.report=false",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"tracking.uri={uri} cannot be reached" in proc.stderr and "logs to the local store" in proc.stderr
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")  # the sweep and its trial went to the local store
    runs = client.search_runs([client.get_experiment_by_name(STUDY).experiment_id])
    assert sorted(r.data.tags.get("sweeprl.role") for r in runs) == ["sweep", "trial"]
    (trial,) = [r for r in runs if r.data.tags.get("sweeprl.role") == "trial"]
    assert [m.step for m in client.get_metric_history(trial.info.run_id, "reward")] == [1, 2]
