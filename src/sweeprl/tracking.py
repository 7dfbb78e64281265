"""MLflow as the record: one experiment per study, a parent run per sweep, a child run per trial.

Everything goes through :class:`MlflowClient` with explicit run ids (no fluent "active run" state), so the
sweeper process and in-process trials never step on each other. Tracking must never kill a trial: every call
is wrapped by :class:`SafeTracker`, which logs one warning on the first failure and carries on (further calls
are skipped until ``retry_after`` seconds have passed, so a server that comes back is used again).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from sweeprl.formatting import executable, num

log = logging.getLogger(__name__)

TAG_STUDY = "sweeprl.study_name"
TAG_ROLE = "sweeprl.role"
TAG_TRIAL = "sweeprl.trial_number"
TAG_STATE = "sweeprl.state"
PARENT_TAG = "mlflow.parentRunId"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
RUN_NAME_TAG = "mlflow.runName"


def default_tracking_uri(cwd: Optional[str] = None) -> str:
    """The embedded store: ``sqlite:///<launch dir>/mlflow.db`` — the same file a plain ``mlflow ui`` opens there."""
    return f"sqlite:///{os.path.join(os.path.abspath(cwd or os.getcwd()), 'mlflow.db')}"


def resolve_uri(uri: Optional[str]) -> str:
    return uri or default_tracking_uri()


MLFLOW_UI = "http://127.0.0.1:5000"  # where ``mlflow ui`` serves by default


def runs_page(base: str, experiment_id: Optional[str]) -> str:
    """The MLflow UI page of an experiment's runs table (MLflow 3's route), or the UI's start page."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs" if experiment_id else base


def run_page(base: str, run_id: str) -> str:
    """The MLflow UI page of one run (the UI finds its experiment)."""
    return f"{base.rstrip('/')}/#/runs/{run_id}"


def ui_command(uri: str, experiment_id: Optional[str] = None) -> str:
    """What to type to see this store's runs: the page of a tracking server, or the ``mlflow ui`` of this
    environment (the venv's, which need not be on PATH) and the page it will serve."""
    if uri.startswith(("http://", "https://")):
        return f"open {runs_page(uri, experiment_id)}  (tracking server)"
    return f"{executable('mlflow')} ui --backend-store-uri {uri}   then open {runs_page(MLFLOW_UI, experiment_id)}"


def flatten(node: Mapping[str, Any], prefix: str = "") -> Dict[str, str]:
    """Nested config -> ``{"algo.learning_rate": "0.001259", ...}`` as a person reads it in the MLflow UI: floats
    to 4 significant digits (the exact values are in the run's ``config.yaml`` artifact and the Optuna study),
    MLflow's 6000-char value limit."""
    out: Dict[str, str] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = (num(value, 4) if isinstance(value, float) else str(value))[:6000]
    return out


# MLflow's HTTP client retries a refused connection 7 times with exponential backoff (about 2 minutes per call),
# so a tracking-server outage would stall training for minutes at every metric flush. sweeprl's tracker already
# tolerates failures (warn, skip for retry_after seconds, try again), so each call gives up after seconds
# instead. Values the user sets in the environment win.
FAIL_FAST_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


class SafeTracker:
    """MlflowClient calls that warn instead of raising."""

    def __init__(self, uri: str, retry_after: float = 30.0):
        for key, value in FAIL_FAST_HTTP.items():
            os.environ.setdefault(key, value)
        self.uri = uri
        self.retry_after = retry_after
        self._client = None
        self._failed_at: Optional[float] = None
        self.failures = 0

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            from sweeprl.tracking_store import seed_sqlite_store

            seed_sqlite_store(self.uri)  # a new embedded store: a copy of an empty one, not ~1-2 s of migrations
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def call(self, what: str, fn: Callable[..., Any], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        if self._failed_at is not None and time.monotonic() - self._failed_at < self.retry_after:
            return default
        try:
            result = fn(*args, **kwargs)
            self._failed_at = None
            return result
        except Exception as exc:  # noqa: BLE001 - tracking must never kill a trial
            self.failures += 1
            if self._failed_at is None:
                log.warning(
                    "MLflow %s failed (%s: %s); training continues without tracking for now",
                    what,
                    type(exc).__name__,
                    exc,
                )
            self._failed_at = time.monotonic()
            return default

    # ---- experiments and runs
    def experiment_id(self, name: str) -> Optional[str]:
        def get_or_create() -> str:
            exp = self.client.get_experiment_by_name(name)
            if exp is not None:
                if exp.lifecycle_stage == "deleted":
                    self.client.restore_experiment(exp.experiment_id)
                return exp.experiment_id
            try:
                # a training experiment: MLflow 3's UI then opens on the runs table, not on the GenAI traces view
                return self.client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: "custom_model_development"})
            except Exception:  # created concurrently by another trial/driver
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                return exp.experiment_id

        # the first contact may race other drivers creating the same database schema: retry briefly
        for attempt in range(4):
            try:
                return get_or_create()
            except Exception:  # noqa: BLE001 - handled by call() on the last attempt
                self._client = None
                time.sleep(1.0 + attempt)
        return self.call("get/create experiment", get_or_create)

    def find_run(self, experiment_id: str, tags: Mapping[str, str]) -> Optional[str]:
        """Id of the newest run whose tags match ``tags`` exactly."""
        filt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())

        def search() -> Optional[str]:
            runs = self.client.search_runs(
                [experiment_id], filter_string=filt, max_results=1, order_by=["attributes.start_time DESC"]
            )
            return runs[0].info.run_id if runs else None

        return self.call("search runs", search)

    def start_run(self, experiment_id: str, name: str, tags: Mapping[str, str]) -> Optional[str]:
        def create() -> str:
            return self.client.create_run(experiment_id, run_name=name, tags=dict(tags)).info.run_id

        return self.call("create run", create)

    def end_run(self, run_id: Optional[str], status: str) -> None:
        if run_id:
            self.call("end run", self.client.set_terminated, run_id, status=status)

    # ---- data
    def log_params(self, run_id: Optional[str], params: Mapping[str, Any]) -> None:
        if not run_id or not params:
            return
        from mlflow.entities import Param

        self.call(
            "log params", self.client.log_batch, run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()]
        )

    def set_tags(self, run_id: Optional[str], tags: Mapping[str, Any]) -> None:
        if not run_id or not tags:
            return
        from mlflow.entities import RunTag

        self.call("set tags", self.client.log_batch, run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_metrics(self, run_id: Optional[str], records: Iterable[tuple]) -> bool:
        """Log ``(key, value, step)`` or ``(key, value, step, timestamp_ms)`` records (batches of 1000, MLflow's
        limit); returns False when they could not all be logged."""
        if not run_id:
            return False
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(r[0], float(r[1]), int(r[3]) if len(r) > 3 else now, int(r[2])) for r in records]
        return all(
            self.call("log metrics", self._log_batch_ok, run_id, metrics[i : i + 1000], default=False)
            for i in range(0, len(metrics), 1000)
        )

    def _log_batch_ok(self, run_id: str, metrics: List[Any]) -> bool:
        self.client.log_batch(run_id, metrics=metrics)
        return True

    def log_artifact(self, run_id: Optional[str], path: str, artifact_path: Optional[str] = None) -> None:
        if run_id and os.path.exists(path):
            self.call("log artifact", self.client.log_artifact, run_id, path, artifact_path)

    def log_artifacts(self, run_id: Optional[str], directory: str, artifact_path: Optional[str] = None) -> None:
        """Every file under ``directory``, under ``artifact_path`` of the run."""
        if run_id and os.path.isdir(directory):
            self.call("log artifacts", self.client.log_artifacts, run_id, directory, artifact_path)

    # ---- system metrics (GPU utilisation and memory, CPU, disk, network) of a client-created run
    def start_system_metrics(self, run_id: Optional[str]) -> Any:
        """MLflow's :class:`SystemMetricsMonitor` on ``run_id``, started (a thread sampling every 10 s, or
        ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL``; metrics ``system/*``), or None when it cannot start."""
        if not run_id:
            return None

        def start() -> Any:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            monitor = SystemMetricsMonitor(run_id, tracking_uri=self.uri)
            monitor.start()
            return monitor

        return self.call("start system metrics", start)

    def stop_system_metrics(self, monitor: Any) -> None:
        if monitor is not None:
            self.call("stop system metrics", monitor.finish)


def system_metrics_wanted() -> bool:
    """Whether a trial's MLflow run should log system metrics: only when torch sees a CUDA GPU and the monitor's
    dependencies import (``nvidia-ml-py``'s ``pynvml`` for the GPU, ``psutil``). Without a GPU: nothing."""
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        import psutil  # noqa: F401
        import pynvml  # noqa: F401
    except ImportError:
        log.info("GPU present but nvidia-ml-py/psutil are not installed: no GPU system metrics in MLflow")
        return False
    return True
