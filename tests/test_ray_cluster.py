"""A sweep on a multi-node Ray cluster (a head and two worker nodes on this machine, from Ray's own
``ray.cluster_utils``; started once for this module): trials land on both workers, and a worker node killed while
its trial runs leaves that trial FAIL and replaced, nothing lost."""

from __future__ import annotations

import importlib.util
import json
import os

import optuna
import pytest

from conftest import sweep_with_fault, wait_for

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
    args = ["-m", "experiment=quickstart", "sweep=lr", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2"]
    args += ["hydra.sweeper.sampler.seed=0", f"model.cache_dir={model_cache}", "algo.max_steps=2"]
    args += ["tracking.enabled=false", "hydra.sweeper.report=false", "hydra/launcher=ray"]
    args += [f"+hydra.launcher.ray.init.address={cluster.address}", "+hydra.launcher.ray.remote.max_retries=0"]
    args += ["+fault.sleep_per_step=120", "+fault.only_trials=[0]", "hydra.sweeper.max_failure_rate=0.5"]
    args += ["hydra.sweeper.grace_period=5"]
    place = tmp_path / "multirun" / "quickstart-lr" / "trial_0" / "job_place.json"
    killed = []

    def kill_the_node_of_trial_0(driver):
        wait_for(lambda: place.is_file() or driver.poll() is not None, 180, "trial 0 to start")
        assert place.is_file(), (tmp_path / "driver.log").read_text()[-4000:]
        killed.append(json.loads(place.read_text())["ray_node"])
        cluster.remove_node(next(w for w in workers if w.node_id == killed[0]), allow_graceful=False)

    trials = sweep_with_fault(tmp_path, args, kill_the_node_of_trial_0)
    # the killed node's trials FAIL (trial 0, and the round's other trial when Ray queued it there too), the
    # study still ends with its 4 COMPLETE trials
    assert sum(t.state == COMPLETE for t in trials) == 4
    lost = [t for t in trials if t.state == FAIL]
    assert trials[0] in lost and all("NodeDiedError" in t.user_attrs["fail_reason"] for t in lost)
    assert trials[0].user_attrs["ray_node"] == killed[0]
    ran_on = {t.user_attrs["ray_node"] for t in trials if "ray_node" in t.user_attrs}
    assert len(ran_on) == 2  # both worker nodes ran trials, each recorded
    assert all("ray_node" in t.user_attrs for t in trials if t.state == COMPLETE)
