"""Several sweep drivers share one study through a real PostgreSQL server on 127.0.0.1 (no coordinator)."""

from __future__ import annotations

import subprocess

import optuna
import pytest
from mlflow.tracking import MlflowClient

from conftest import PYTHON
from pg import createdb, pg_bin, postgres_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL not installed (scripts/setup.sh --test installs it)"),
]


def test_three_drivers_share_one_postgres_study(tmp_path, model_cache):
    with postgres_server() as base:
        storage = createdb(base, "optuna")
        tracking = createdb(base, "mlflow")
        cmd = [
            PYTHON,
            "-m",
            "sweeprl",
            "-m",
            "experiment=quickstart",
            "sweep=lr",
            "hydra.sweeper.n_trials=9",
            f"hydra.sweeper.storage={storage}",
            f"tracking.uri={tracking}",
            "algo.max_steps=4",
            f"model.cache_dir={model_cache}",
        ]
        drivers = [
            subprocess.Popen(
                cmd + [f"hydra.sweep.dir=driver{i}"],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(3)
        ]
        outs = [d.communicate(timeout=900)[0] for d in drivers]
        assert all(d.returncode == 0 for d in drivers), "\n".join(o[-2000:] for o in outs)
        study = optuna.load_study(study_name="quickstart-lr", storage=storage)
        finished = [
            t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        ]
        assert len(finished) == 9
        numbers = [t.number for t in study.trials]
        assert len(numbers) == len(set(numbers))
        assert all(t.user_attrs.get("surplus") for t in study.trials if t not in finished)  # only never-run surplus
        client = MlflowClient(tracking)
        exp = client.get_experiment_by_name("quickstart-lr")
        children = [
            r
            for r in client.search_runs([exp.experiment_id], max_results=100)
            if r.data.tags.get("sweeprl.role") == "trial"
        ]
        assert sorted(int(r.data.tags["sweeprl.trial_number"]) for r in children) == sorted(t.number for t in finished)
        ran = [o.count("] COMPLETE") + o.count("] PRUNED") for o in outs]
        assert sum(ran) == 9 and sum(1 for r in ran if r > 0) >= 2  # the work really was shared
