"""The sweeper with Hydra launchers other than the basic one: submitit (local for real, SLURM up to the sbatch
script), Ray (a local Ray instance) and joblib. Each sweep is a real CLI run on the tiny model."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from conftest import PYTHON, run_sweeprl

pytestmark = pytest.mark.e2e
STUDY = "quickstart-lr"
DOCS_CONF = Path(__file__).resolve().parents[1] / "docs" / "examples" / "conf"
COMPLETE, FAIL, RUNNING = (
    optuna.trial.TrialState.COMPLETE,
    optuna.trial.TrialState.FAIL,
    optuna.trial.TrialState.RUNNING,
)


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_submitit = pytest.mark.skipif(
    not has("hydra_plugins.hydra_submitit_launcher"), reason="pip install -e '.[slurm]'"
)
needs_ray = pytest.mark.skipif(
    not (has("hydra_plugins.hydra_ray_launcher") and has("ray")), reason="pip install -e '.[ray]'"
)
needs_joblib = pytest.mark.skipif(not has("hydra_plugins.hydra_joblib_launcher"), reason="pip install -e '.[joblib]'")


def sweep(cwd: Path, model_cache, *overrides: str, timeout: float = 150, env=None, ok: bool = True, flags=()):
    common = ["sweep=lr", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", "hydra.sweeper.report=false"]
    common += ["hydra.sweeper.sampler.seed=0", f"model.cache_dir={model_cache}"]
    args = ["-m", *flags, "experiment=quickstart", *common, *overrides]
    return run_sweeprl(cwd, *args, timeout=timeout, env=env, check=ok)


def trials_of(cwd: Path):
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{cwd}/multirun/{STUDY}/optuna.db")
    return sorted(study.trials, key=lambda t: t.number)


def assert_two_complete_trials(cwd: Path):
    trials = trials_of(cwd)
    assert [t.number for t in trials] == [0, 1]  # no duplicate or skipped numbers
    assert [t.state for t in trials] == [COMPLETE, COMPLETE]
    for t in trials:
        assert math.isfinite(t.value)
        trial_dir = Path(t.user_attrs["trial_dir"])
        assert trial_dir == cwd / "multirun" / STUDY / f"trial_{t.number}"
        objective = json.loads((trial_dir / "objective.json").read_text())
        assert objective["values"] == [pytest.approx(t.value)]
        assert t.user_attrs["steps"] == 2 and "late_reward" in t.user_attrs["objective_terms"]
    assert trials[0].params != trials[1].params
    return trials


# ------------------------------------------------------------------------------------------------- submitit
@needs_submitit
@pytest.mark.timeout(170)
def test_submitit_local_runs_a_round_of_two_trials_in_parallel(tmp_path, model_cache):
    from mlflow.tracking import MlflowClient

    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    proc = sweep(tmp_path, model_cache, "hydra/launcher=submitit_local", "algo.max_steps=2", f"tracking.uri={tracking}")
    assert "Submitit 'local' sweep output dir" in proc.stderr + proc.stdout
    trials = assert_two_complete_trials(tmp_path)
    jobs = [d for d in (tmp_path / "multirun" / STUDY / ".submitit").iterdir() if list(d.glob("*_result.pkl"))]
    assert len(jobs) == 2, "each trial ran as its own submitit job"
    client = MlflowClient(tracking)
    exp = client.get_experiment_by_name(STUDY)
    runs = client.search_runs([exp.experiment_id], max_results=10)
    parent = [r for r in runs if r.data.tags.get("sweeprl.role") == "sweep"]
    children = sorted(
        (r for r in runs if r.data.tags.get("sweeprl.role") == "trial"),
        key=lambda r: int(r.data.tags["sweeprl.trial_number"]),
    )
    assert len(parent) == 1 and len(children) == 2
    for run, t in zip(children, trials):
        assert run.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        assert run.info.status == "FINISHED" and run.data.metrics["objective"] == pytest.approx(t.value)
    # the two job processes of the round overlapped in time: they really ran side by side (their MLflow runs,
    # a second of 2-step training each, need not overlap on a loaded machine; the processes' lifetimes do)
    spans = [submitit_span(job) for job in jobs]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans


def submitit_span(job_dir):
    """(start, end) of a submitit job process, from the timestamps of its log's first and last submitit lines."""
    import datetime
    import re

    stamps = [
        datetime.datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f")
        for log in job_dir.glob("*_log.*")
        for m in re.findall(r"submitit \w+ \((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\)", log.read_text())
    ]
    assert stamps, f"no submitit log lines in {job_dir}"
    return min(stamps), max(stamps)


@needs_submitit
@pytest.mark.timeout(170)
def test_submitit_job_killed_mid_trial_fails_only_that_trial(tmp_path, model_cache):
    """A job that dies without a result makes submitit raise for the whole round; the sweeper keeps the other
    trial's result (from its trial dir), fails the lost one with the launcher's error and leaves nothing RUNNING."""
    proc = sweep(
        tmp_path,
        model_cache,
        "hydra/launcher=submitit_local",
        "algo.max_steps=2",
        "tracking.enabled=false",
        "+fault.kill_at_step=1",
        "+fault.only_trials=[0]",
        "hydra.sweeper.max_failure_rate=0",
        "hydra.sweeper.heartbeat_interval=1",
        "hydra.sweeper.grace_period=5",
        ok=False,
    )
    assert proc.returncode != 0 and "sweep aborted: 1 of 1 trials failed" in proc.stderr
    lost, done = trials_of(tmp_path)
    assert lost.state == FAIL and "UncompletedJobError" in lost.user_attrs["fail_reason"]
    assert done.state == COMPLETE and math.isfinite(done.value)
    assert (tmp_path / "multirun" / STUDY / "trial_0" / "last_50_lines.log").is_file()


@needs_submitit
@pytest.mark.timeout(60)
def test_submitit_slurm_composes_with_the_sweeper(tmp_path):
    cmd = [
        PYTHON,
        "-m",
        "sweeprl",
        "-m",
        "experiment=quickstart",
        "sweep=lr",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.gpus_per_node=2",
        "hydra.launcher.timeout_min=240",
        "hydra.sweeper.n_jobs=8",
        "--cfg",
        "hydra",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hydra_cfg = yaml.safe_load(proc.stdout)["hydra"]
    assert hydra_cfg["launcher"]["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert hydra_cfg["sweeper"]["_target_"] == "hydra_plugins.sweeprl_sweeper.sweeper.SweeprlSweeper"
    assert (
        hydra_cfg["launcher"]["partition"],
        hydra_cfg["launcher"]["gpus_per_node"],
        hydra_cfg["launcher"]["timeout_min"],
    ) == ("gpu", 2, 240)
    assert hydra_cfg["sweeper"]["n_jobs"] == 8


FAKE_SBATCH = """#!/bin/sh
cp "$1" "{keep}/submitted_$$.sh"
echo "sbatch: error: fake SLURM: submission recorded, not run" >&2
exit 1
"""


@needs_submitit
@pytest.mark.skipif(not DOCS_CONF.is_dir(), reason="docs/ is not in the sdist")
@pytest.mark.timeout(90)
def test_submitit_slurm_sbatch_script_carries_the_users_settings(tmp_path, model_cache):
    """No SLURM here: a fake sbatch keeps the script submitit generates and refuses the job. The launcher preset of
    docs/distributed.md plus command-line overrides reach the #SBATCH lines, one array of n_jobs tasks is
    submitted, and the refused round leaves both trials FAIL with sbatch's message (the study stays consistent)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH.format(keep=tmp_path))
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    proc = sweep(
        tmp_path,
        model_cache,
        "hydra/launcher=slurm_gpu",
        "tracking.enabled=false",
        "hydra.launcher.partition=a100",
        "hydra.launcher.timeout_min=120",
        "hydra.launcher.mem_gb=32",
        "+hydra.launcher.additional_parameters.qos=high",
        "hydra.sweeper.grace_period=1",
        "hydra.sweeper.max_failure_rate=0",
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
        timeout=80,
        ok=False,
        flags=["--config-dir", str(DOCS_CONF)],
    )
    assert proc.returncode != 0
    scripts = list(tmp_path.glob("submitted_*.sh"))
    assert len(scripts) == 1, "one sbatch call: the round is one job array"
    text = scripts[0].read_text()
    lines = set(text.splitlines())
    for expected in (
        "#SBATCH --partition=a100",
        "#SBATCH --time=120",
        "#SBATCH --mem=32GB",  # command line
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --account=my_project",  # preset
        "#SBATCH --mail-type=FAIL",
        "#SBATCH --qos=high",
        "#SBATCH --array=0-1%2",
        "#SBATCH --job-name=trial",
        "export HF_HOME=$SCRATCH/hf",
    ):
        assert expected in lines, f"{expected} not in:\n{text}"
    assert any(line.startswith("srun ") and f"{sys.executable} -u -m submitit.core._submit" in line for line in lines)
    trials = trials_of(tmp_path)
    assert [t.state for t in trials] == [FAIL, FAIL]
    assert all("fake SLURM: submission recorded" in t.user_attrs["fail_reason"] for t in trials)


@needs_submitit
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "launcher, setting",
    [("submitit_local", "hydra.sweeper.slots=2"), ("submitit_slurm", "hydra.sweeper.trial_timeout=60")],
)
def test_process_slots_with_a_launcher_are_refused(tmp_path, model_cache, launcher, setting):
    proc = sweep(
        tmp_path, model_cache, f"hydra/launcher={launcher}", setting, "tracking.enabled=false", timeout=50, ok=False
    )
    assert proc.returncode != 0
    assert (
        f"runs trials as local processes of the sweep driver, which would bypass hydra/launcher={launcher}"
        in proc.stderr
    )
    assert "use hydra.sweeper.n_jobs" in proc.stderr
    assert not (tmp_path / "multirun" / STUDY / "optuna.db").exists(), "refused before the study is touched"


# ------------------------------------------------------------------------------------------------- ray
@needs_ray
@pytest.mark.timeout(170)
def test_ray_local_runs_a_round_of_two_trials(tmp_path, model_cache):
    # -v: the trials log their start lines, which Ray forwards prefixed "(_run_job pid=…)", the proof checked below
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "SWEEPRL_VERBOSE": "1"}
    proc = sweep(
        tmp_path,
        model_cache,
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        "+hydra.launcher.ray.remote.max_retries=0",
        "algo.max_steps=2",
        "tracking.enabled=false",
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert "Ray Launcher is launching 2 jobs" in out and "(_run_job pid=" in out  # trials ran in Ray workers
    assert_two_complete_trials(tmp_path)


# ------------------------------------------------------------------------------------------------- joblib
@needs_joblib
@pytest.mark.timeout(170)
def test_joblib_runs_a_round_of_two_trials(tmp_path, model_cache):
    proc = sweep(
        tmp_path,
        model_cache,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "algo.max_steps=2",
        "tracking.enabled=false",
    )
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout + proc.stderr
    assert_two_complete_trials(tmp_path)
