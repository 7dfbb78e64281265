"""Pruning through the study storage, guards, multi-seed trials, objective=pareto and +sweep_from."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import optuna
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from conftest import compose_cfg, run_sweeprl
from sweeprl.training.pruning import Guards, PruningCallback, first_pruning_step

STEPS = 20


def guards(**over):
    cfg = compose_cfg(["experiment=quickstart"])
    return Guards(OmegaConf.merge(cfg.pruning.guards, over), target_kl=0.1)


def test_guards_fire_after_patience_and_not_on_healthy_runs():
    g = guards()
    for i in range(50):
        assert (
            g.check({"step": i, "reward": 0.5, "loss": 0.01, "kl": 0.05, "entropy": 4.0, "frac_reward_zero_std": 0.1})
            is None
        )
    assert "non_finite" in guards().check({"step": 1, "reward": 0.5, "loss": math.nan})
    g = guards(kl_patience=3)
    reasons = [g.check({"step": i, "reward": 0.5, "kl": 0.6}) for i in range(3)]
    assert reasons[:2] == [None, None] and "kl_runaway" in reasons[2]
    g = guards(mode_collapse_patience=2)
    assert g.check({"frac_reward_zero_std": 1.0}) is None and "mode_collapse" in g.check({"frac_reward_zero_std": 0.97})
    g = guards(entropy_patience=2, entropy_floor=0.1)
    g.check({"entropy": 5.0})
    assert g.check({"entropy": 0.2}) is None and "entropy_collapse" in g.check({"entropy": 0.3})
    g = guards(enabled=False)
    assert g.check({"loss": math.nan, "reward": math.nan}) is None


@pytest.mark.parametrize(
    "overrides, pruner, first",
    [
        ([], None, 20),  # quickstart: 80 updates, warm-up 0.25 -> step 20 (min_steps 10 is the smaller gate)
        ([], "rungs", 10),  # the rungs pruner judges at its own rungs: no warm-up, min_steps only
        (["pruning.warmup=0.25"], "rungs", 20),  # a warm-up set by the user holds for every pruner
        (["algo.max_steps=30"], None, 10),  # warm-up gives 8: min_steps wins
        (["algo.max_steps=30", "pruning.min_steps=0"], None, 8),  # ceil(0.25 * 30)
        (["pruning.warmup=0"], None, 10),
        (["pruning.warmup=0.5", "algo.max_steps=300"], None, 150),
        (["experiment=length_ppo", "model=tiny", "algo.max_steps=200"], None, 50),  # same gate for sweeprl's PPO
    ],
)
def test_first_pruning_step_is_the_later_of_min_steps_and_the_warmup_fraction(overrides, pruner, first):
    from hydra_plugins.sweeprl_sweeper.rung_pruner import RungPruner

    study_pruner = RungPruner() if pruner == "rungs" else optuna.pruners.MedianPruner()
    assert first_pruning_step(compose_cfg(["experiment=quickstart", *overrides]), study_pruner) == first


def test_warmup_outside_0_1_is_refused_at_compose_time():
    from sweeprl.config.validate import ConfigValidationError, validate

    with pytest.raises(ConfigValidationError, match=r"pruning.warmup.*\[0, 1\)"):
        validate(compose_cfg(["experiment=quickstart", "pruning.warmup=1.5"]))


def test_pruning_callback_reports_and_prunes_through_the_storage(tmp_path):
    storage = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(
        study_name="s",
        storage=storage,
        direction="maximize",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0),
    )
    good = study.ask()
    for step in (10, 15, 20):
        good.report(1.0, step)
    study.tell(good, 1.0)
    cfg = compose_cfg(["experiment=quickstart", "pruning.report_every=5", "pruning.min_steps=10", "pruning.warmup=0"])
    from sweeprl.training.pruning import load_trial

    study.ask()  # trial 1, left RUNNING: the callback loads it by number, as a trial process does
    cb = PruningCallback(cfg, load_trial(storage, "s", 1, pruner=optuna.pruners.MedianPruner(n_startup_trials=1)))
    control = SimpleNamespace(should_training_stop=False)
    for step in range(1, 16):
        if control.should_training_stop:
            break
        cb.on_log(None, SimpleNamespace(global_step=step), control, logs={"reward": 0.1, "kl": 0.0, "entropy": 4.0})
    assert control.should_training_stop and cb.stopped_at == 10 and cb.reason.startswith("pruner:")
    frozen = optuna.load_study(study_name="s", storage=storage).trials[1]
    assert frozen.intermediate_values == {10: pytest.approx(0.1)}


def run(cwd, model_cache, *overrides, check=True):
    return run_sweeprl(cwd, *overrides, "experiment=quickstart", f"model.cache_dir={model_cache}", check=check)


def load(cwd, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd}/multirun/{name}/optuna.db")


@pytest.mark.e2e
def test_sweep_with_pruner_prunes_and_keeps_partial_records(tmp_path, model_cache):
    run(
        tmp_path,
        model_cache,
        "-m",
        "sweep=lr",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.sampler.seed=1",
        "hydra/sweeper/pruner=percentile",
        "hydra.sweeper.pruner.percentile=99",
        "hydra.sweeper.pruner.n_startup_trials=1",
        f"algo.max_steps={STEPS}",
        "pruning.report_every=5",
        "pruning.min_steps=5",
    )
    study = load(tmp_path, "quickstart-lr")
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.PRUNED) >= 1 and len(states) == 4
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = {
        r.data.tags.get("sweeprl.trial_number"): r
        for r in client.search_runs([client.get_experiment_by_name("quickstart-lr").experiment_id])
    }
    for t in study.trials:
        if t.state == optuna.trial.TrialState.PRUNED:
            assert t.user_attrs["prune_reason"].startswith("pruner:")
            assert 5 <= t.user_attrs["steps"] < STEPS  # stopped early, partial metrics kept
            r = runs[str(t.number)]
            assert r.data.tags["sweeprl.state"] == "PRUNED" and r.data.tags["prune_reason"].startswith("pruner:")
            assert len(client.get_metric_history(r.info.run_id, "reward")) == t.user_attrs["steps"]
            assert json.loads(
                (tmp_path / "multirun" / "quickstart-lr" / f"trial_{t.number}" / "objective.json").read_text()
            )["pruned"]


@pytest.mark.e2e
def test_guard_stops_a_single_run(tmp_path, model_cache):
    proc = run(
        tmp_path,
        model_cache,
        "algo.learning_rate=3e-2",
        "algo.beta=0.05",
        "objective.target_kl=0.01",
        "pruning.guards.kl_factor=1",
        "pruning.guards.kl_patience=3",
        f"algo.max_steps={STEPS}",
        "tracking.enabled=false",
    )
    out = json.loads(next((tmp_path / "outputs").rglob("objective.json")).read_text())
    assert out["pruned"] and out["prune_reason"].startswith("guard:kl_runaway")
    assert out["stopped_at_step"] < STEPS
    assert "objective" in proc.stdout


@pytest.mark.e2e
def test_multi_seed_trials(tmp_path, model_cache):
    run(
        tmp_path,
        model_cache,
        "-m",
        "sweep=lr",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.seeds=[0,1]",
        "hydra.sweeper.sampler.seed=0",
        "algo.max_steps=8",
        "tracking.enabled=false",
    )
    study = load(tmp_path, "quickstart-lr")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    for t in study.trials:
        per_seed = t.user_attrs["seed_values"]
        assert set(per_seed) == {"0", "1"}
        values = list(per_seed.values())
        mean = sum(values) / 2
        std = abs(values[0] - values[1]) / 2
        assert t.value == pytest.approx(mean - 1.0 * std)
        for seed in (0, 1):
            cfg = (
                tmp_path / "multirun" / "quickstart-lr" / f"trial_{t.number}_seed{seed}" / "resolved_config.yaml"
            ).read_text()
            assert f"seed: {seed}" in cfg


@pytest.mark.e2e
def test_pareto_objective_makes_a_two_objective_study(tmp_path, model_cache):
    run(
        tmp_path,
        model_cache,
        "-m",
        "sweep=lr",
        "objective=pareto",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=0",
        "algo.max_steps=8",
        "tracking.enabled=false",
    )
    study = load(tmp_path, "quickstart-lr")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert study.metric_names == ["late_reward", "instability"]  # optuna-dashboard's axis names
    for t in study.trials:
        assert t.state.name == "COMPLETE" and len(t.values) == 2 and t.values[1] >= 0
    import yaml

    results = yaml.safe_load((tmp_path / "multirun" / "quickstart-lr" / "optimization_results.yaml").read_text())
    assert results["solutions"] and all(len(s["values"]) == 2 for s in results["solutions"])


@pytest.mark.e2e
def test_sweep_from_a_diagnosis(tmp_path, model_cache):
    diag = {"next_sweep": {"params": {"algo.learning_rate": "tag(log, interval(0.0002, 0.0004))"}}}
    (tmp_path / "diagnosis.json").write_text(json.dumps(diag))
    run(
        tmp_path,
        model_cache,
        "-m",
        "sweep=lr",
        f"+sweep_from={tmp_path / 'diagnosis.json'}",
        "hydra.sweeper.n_trials=1",
        "algo.max_steps=4",
        "tracking.enabled=false",
    )
    (t,) = load(tmp_path, "quickstart-lr").trials
    dist = t.distributions["algo.learning_rate"]
    assert (dist.low, dist.high, dist.log) == (0.0002, 0.0004, True)
    assert 0.0002 <= t.params["algo.learning_rate"] <= 0.0004
