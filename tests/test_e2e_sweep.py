"""A real sweep through the CLI: real Optuna storage, real MLflow store, the tiny model, then a resume."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from conftest import SHARED_SWEEP_STEPS, load_study, quickstart_sweep, run_sweeprl

pytestmark = pytest.mark.e2e
STEPS = SHARED_SWEEP_STEPS
STUDY = "quickstart-lr_kl"


def sweep(cwd, model_cache, n_trials, *extra):
    overrides = ["sweep=lr_kl", f"hydra.sweeper.n_trials={n_trials}", "hydra.sweeper.sampler.seed=0"]
    return quickstart_sweep(cwd, model_cache, *overrides, f"algo.max_steps={STEPS}", *extra)


@pytest.fixture(scope="module")
def first_sweep(finished_sweep):
    assert finished_sweep.steps == STEPS and finished_sweep.name == STUDY
    return finished_sweep.launch_dir, finished_sweep


def study_of(cwd):
    return load_study(cwd, STUDY)


def client_of(cwd):
    return MlflowClient(f"sqlite:///{cwd}/mlflow.db")


def runs_of(cwd):
    client = client_of(cwd)
    exp = client.get_experiment_by_name(STUDY)
    assert exp is not None, "one MLflow experiment per study"
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweeprl.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("sweeprl.role") == "trial"]
    return client, parents, children


def test_study_has_three_complete_trials(first_sweep):
    cwd, _ = first_sweep
    study = study_of(cwd)
    assert study.metric_names == ["objective (stability_adjusted)"]  # what optuna-dashboard calls the value
    trials = study.trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert [t.number for t in trials] == [0, 1, 2]
    for t in trials:
        assert set(t.params) == {"algo.learning_rate", "algo.beta"}
        assert (cwd / "multirun" / STUDY / f"trial_{t.number}" / "metrics.jsonl").is_file()
        assert set(t.user_attrs["objective_terms"]) >= {"late_reward", "dispersion", "drawdown"}


def test_mlflow_has_one_parent_and_three_children(first_sweep):
    cwd, _ = first_sweep
    client, parents, children = runs_of(cwd)
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == "FINISHED" and run.data.tags["sweeprl.state"] == "COMPLETE"
        assert {"algo.learning_rate", "algo.beta", "generation.temperature", "model.name"} <= set(run.data.params)
        assert "objective" in run.data.metrics and "objective_terms/late_reward" in run.data.metrics
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward")]
        assert steps == list(range(1, STEPS + 1))
        # one-dot charts (raw stability quantities: objective.json) and flat-zero clip ratios stay off its page
        assert not [k for k in run.data.metrics if k.startswith(("stability/", "clip_ratio/"))]
    records = (cwd / "multirun" / STUDY / "trial_0" / "metrics.jsonl").read_text().splitlines()
    clip = [v for line in records for k, v in json.loads(line).items() if k.startswith("clip_ratio/")]
    assert len(clip) == 5 * STEPS and set(clip) == {0.0}  # zero by construction, as withheld
    study = study_of(cwd)
    by_number = {int(r.data.tags["sweeprl.trial_number"]): r for r in children}
    for t in study.trials:
        assert by_number[t.number].data.metrics["objective"] == pytest.approx(t.value)
        params = by_number[t.number].data.params
        assert params["algo.learning_rate"] == f"{t.params['algo.learning_rate']:.4g}"  # as a person reads it
        assert not {"sweeprl.trial_number", "sweeprl.storage", "sweeprl.parent_run_id"} & set(
            params
        )  # tags, not params
    assert_parent_has_the_best(parent, study)


def assert_parent_has_the_best(parent, study):
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best_value"] == pytest.approx(study.best_value)
    assert parent.data.tags["sweeprl.best_trial"] == str(study.best_trial.number)
    for key, value in study.best_params.items():
        assert float(parent.data.tags[f"best.{key}"]) == pytest.approx(value)  # exact: pasteable as an override


def test_results_file_matches_best_trial(first_sweep):
    cwd, proc = first_sweep
    results = yaml.safe_load((cwd / "multirun" / STUDY / "optimization_results.yaml").read_text())
    study = study_of(cwd)
    assert results["best_value"] == pytest.approx(study.best_value)
    assert results["best_params"] == pytest.approx(study.best_params)
    assert results["best_trial"] == study.best_trial.number
    assert results["storage"] == f"sqlite:///{cwd}/multirun/{STUDY}/optuna.db"  # the sweep dir says where its study is
    assert "mlflow ui --backend-store-uri sqlite:///" in proc.stdout
    assert "rank" in proc.stdout and "COMPLETE" in proc.stdout


def test_rerun_with_more_trials_adds_exactly_the_difference(tmp_path, model_cache):
    cwd = tmp_path  # its own sweep: the shared one is read by other tests
    sweep(cwd, model_cache, 1)
    before = {t.number: (t.params, t.value) for t in study_of(cwd).trials}
    # resumed over higher learning rates, which learn more in 12 updates: the two new trials find a new best
    sweep(cwd, model_cache, 3, "search_space.learning_rate=[5e-3,2e-2]")
    trials = study_of(cwd).trials
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert {t.number: (t.params, t.value) for t in trials if t.number in before} == before  # untouched
    _, parents, children = runs_of(cwd)
    assert len(parents) == 1, "the parent run is reused on resume"
    assert sorted(int(r.data.tags["sweeprl.trial_number"]) for r in children) == [0, 1, 2]
    study = study_of(cwd)
    assert study.best_value > max(v for _, v in before.values()), "the resumed trials found a new best"
    assert_parent_has_the_best(parents[0], study)  # the best changed: still FINISHED, with the new best
    # a third run with the same target does nothing
    sweep(cwd, model_cache, 3)
    assert len(study_of(cwd).trials) == 3


def test_diagnosis_of_a_trial_from_mlflow_and_from_its_dir(first_sweep):
    from sweeprl.analysis.diagnosis import diagnose
    from sweeprl.analysis.history import load

    cwd, _ = first_sweep
    client, _, children = runs_of(cwd)
    run = next(r for r in children if r.data.tags["sweeprl.trial_number"] == "0")
    assert "diagnosis.md" in {a.path for a in client.list_artifacts(run.info.run_id)}
    from_mlflow = load(f"runs:/{run.info.run_id}", tracking_uri=f"sqlite:///{cwd}/mlflow.db")
    from_dir = load(str(cwd / "multirun" / STUDY / "trial_0"))
    assert len(from_mlflow.records) == len(from_dir.records) == STEPS
    assert [r["reward"] for r in from_mlflow.records] == pytest.approx([r["reward"] for r in from_dir.records])
    assert from_mlflow.config["learning_rate"] == pytest.approx(from_dir.config["learning_rate"])
    assert from_dir.sweep_params["algo.learning_rate"].startswith("tag(log, interval(")
    assert diagnose(from_mlflow).ids() == diagnose(from_dir).ids()
    tags = {k for k in run.data.tags if k.startswith("diag.")}
    assert tags == {f"diag.{i}" for i in diagnose(from_dir).ids()}


def test_sixteen_trial_console_is_short_and_ends_with_the_next_commands(tmp_path, model_cache):
    """On a pipe, a 16-trial sweep reads in ≤ 40 lines: one per trial event, a short table, then the three commands
    a user types next; the first of them reproduces the best trial exactly."""
    overrides = ["sweep=lr_kl", "hydra.sweeper.sampler.seed=0", "algo.max_steps=6"]
    # COLUMNS unset: a pipe's default width (120)
    proc = quickstart_sweep(tmp_path, model_cache, *overrides, env={"COLUMNS": None}, merge_output=True, timeout=900)
    lines = proc.stdout.splitlines()
    assert len(lines) <= 40, proc.stdout
    assert sum("] [trial " in line for line in lines) == 16  # one line per trial
    assert not any("Launching" in line or "sweeprl.storage=" in line or "mlflow.store" in line for line in lines)
    what = [line.split(": ", 1)[0] for line in lines[-3:]]
    assert what == ["reproduce the best trial", "run the suggested next sweep", "compare the trials in MLflow"]
    reproduce = lines[-3].split(": ", 1)[1].split()
    assert reproduce[1:3] == ["-m", "sweeprl"] and "experiment=quickstart" in reproduce
    assert "/#/experiments/" in lines[-1] and "/runs" in lines[-1]
    study = study_of(tmp_path)
    out = tmp_path / "again"
    again = [f"model.cache_dir={model_cache}", f"hydra.run.dir={out}", "tracking.enabled=false"]
    run_sweeprl(tmp_path, *reproduce[3:], *again)
    value = json.loads((out / "objective.json").read_text())["objective"]
    assert value == pytest.approx(study.best_value, rel=1e-9)  # seeded CPU runs reproduce exactly
