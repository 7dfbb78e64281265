"""A sweep on a multi-node Ray cluster (a head and two worker nodes on this machine, from Ray's own
``ray.cluster_utils``; started once for this module): trials land on both workers, and a worker node killed while
its trial runs leaves that trial FAIL and replaced, nothing lost."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time

import optuna
import pytest

from conftest import PYTHON

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") and importlib.util.find_spec("ray")),
        reason="pip install -e '.[ray]'",
    ),
]
COMPLETE, FAIL = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL


@pytest.fixture(scope="module")
def ray_cluster():
    """A head with no CPUs (it only coordinates) and two worker nodes of one CPU each: a round of two trials uses
    both workers."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, workers
    cluster.shutdown()


@pytest.mark.timeout(400)
def test_a_sweep_spreads_over_ray_nodes_and_survives_a_lost_node(tmp_path, model_cache, ray_cluster):
    cluster, workers = ray_cluster
    cmd = [PYTHON, "-m", "sweeprl", "-m", "experiment=quickstart", "sweep=lr", "hydra.sweeper.n_trials=4"]
    cmd += ["hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler.seed=0", f"model.cache_dir={model_cache}"]
    cmd += ["algo.max_steps=2", "tracking.enabled=false", "hydra.sweeper.report=false", "hydra/launcher=ray"]
    cmd += [f"+hydra.launcher.ray.init.address={cluster.address}", "+hydra.launcher.ray.remote.max_retries=0"]
    cmd += ["+fault.sleep_per_step=120", "+fault.only_trials=[0]", "hydra.sweeper.max_failure_rate=0.5"]
    cmd += ["hydra.sweeper.grace_period=5"]
    place = tmp_path / "multirun" / "quickstart-lr" / "trial_0" / "job_place.json"
    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while not place.is_file() and time.monotonic() < deadline and driver.poll() is None:
                time.sleep(0.5)
            assert place.is_file(), (tmp_path / "driver.log").read_text()[-4000:]
            node_id = json.loads(place.read_text())["ray_node"]
            lost = next(w for w in workers if w.node_id == node_id)
            cluster.remove_node(lost, allow_graceful=False)  # the node of trial 0 dies mid-trial
            assert driver.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()[-4000:]
        finally:
            driver.kill()
    study = optuna.load_study(
        study_name="quickstart-lr", storage=f"sqlite:///{tmp_path}/multirun/quickstart-lr/optuna.db"
    )
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.state for t in trials] == [FAIL] + [COMPLETE] * 4
    assert trials[0].user_attrs["ray_node"] == node_id and "NodeDiedError" in trials[0].user_attrs["fail_reason"]
    ran_on = {t.user_attrs.get("ray_node") for t in trials}
    assert len(ran_on) == 2 and None not in ran_on  # both worker nodes ran trials, each recorded
