"""Bad input fails before any model is loaded or any study is touched: one clear message, nonzero exit, and an
existing study left exactly as it was."""

from __future__ import annotations

import optuna
import pytest

from conftest import free_port, run_sweeprl

STUDY = "quickstart-lr"

CASES = [
    # (extra overrides, fragment of the message)
    (["algo.learnin_rate=1e-3"], "Did you mean: algo.learning_rate"),
    (["generation.temprature=1.0"], "Did you mean: generation.temperature"),
    (["algo.learning_rate=abc"], "algo.learning_rate"),
    (["algo.learning_rate=0"], "algo.learning_rate=0.0 is invalid"),
    (["algo.learning_rate=-1e-4"], "algo.learning_rate=-0.0001 is invalid"),
    (["generation.temperature=0"], "generation.temperature=0.0 is invalid"),
    (["generation.top_p=1.5"], "generation.top_p=1.5 is invalid"),
    (["algo.num_generations=1"], "algo.num_generations=1 is invalid"),
    (["algo.num_generations=3"], "does not divide the generation batch"),
    (["algo.beta=-0.1"], "algo.beta=-0.1 is invalid"),
    (["algo.max_steps=0"], "algo.max_steps=0 is invalid"),
    (["algo.loss_type=ppo"], "algo.loss_type='ppo' is invalid"),
    (["algo.scale_rewards=maybe"], "algo.scale_rewards='maybe' is invalid"),
    (["+algo.extra.learning_rate=0.5"], "set algo.learning_rate=0.5 instead"),
    (["lora.dropout=1.5"], "lora.dropout=1.5 is invalid"),
    (["model.source=cloud"], "model.source='cloud' is invalid"),
    (["model.dtype=int4"], "model.dtype='int4' is invalid"),
    (["objective.name=best"], "objective.name='best' is invalid"),
    (["objective.window=0"], "objective.window=0.0 is invalid"),
    (["data.validation_fraction=1.0"], "data.validation_fraction=1.0 is invalid"),
    (["pruning.report_every=0"], "pruning.report_every=0 is invalid"),
    (["model=gpt5"], "Could not find 'model/gpt5'"),
    (["algo=dpo"], "Could not find 'algo/dpo'"),
    (["search_space.learning_rate=[0.1,0.01]"], "search_space.learning_rate"),
    (["hydra.sweeper.params.algo.learning_rate=interval(0.1"], "malformed override"),
    (["algo.learning_rate=interval(1e-4,"], "malformed override"),
    (["algo.learning_rate=tag(log,interval(0,1))"], "needs low > 0"),
    (["algo.learning_rate=interval(0.1,0.01)"], "needs low < high"),
    (["algo.lerning_rate=interval(0.1,0.2)"], "does not exist in the config; did you mean algo.learning_rate"),
    (["algo.learning_rate=interval(0.0,0.1)"], "which the config rejects"),
    (["algo.num_generations=choice(3,4)"], "which the config rejects"),
    (["hydra.sweeper.direction=up"], "hydra.sweeper.direction"),
    (["hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0 is invalid"),
    (["hydra.sweeper.max_failure_rate=2"], "max_failure_rate=2.0 is invalid"),
    (["hydra/sweeper/sampler=annealing"], "Could not find 'hydra/sweeper/sampler/annealing'"),
    (["hydra/sweeper/pruner=magic"], "Could not find 'hydra/sweeper/pruner/magic'"),
    (["hydra.sweeper.storage=notadb://x"], "cannot be opened"),
    (["hydra.sweeper.slot_refill=sometimes"], "slot_refill"),
    (["hydra.sweeper.custom_search_space=nowhere.fn"], "cannot be imported"),
    (["hydra.sweep.dir=afile/sweep"], "output dir hydra.sweep.dir="),
    (["tracking.enabled=true", f"tracking.uri=http://127.0.0.1:{free_port()}"], "cannot be reached"),
    (["tracking.enabled=true", "tracking.uri=sqlite:///afile/mlflow.db"], "afile is a file, not a directory"),
]


@pytest.fixture(scope="module")
def existing_study(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("bad")
    storage = f"sqlite:///{cwd}/multirun/{STUDY}/optuna.db"
    (cwd / "multirun" / STUDY).mkdir(parents=True)
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    study.enqueue_trial({"algo.learning_rate": 1e-3})
    (cwd / "afile").write_text("a file where a directory is expected\n")
    return cwd, storage


def snapshot(storage):
    return [
        (t.number, t.state.name, t.params, t.value) for t in optuna.load_study(study_name=STUDY, storage=storage).trials
    ]


def test_at_least_30_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("extra, fragment", CASES, ids=[c[0][0][:48] for c in CASES])
def test_bad_input_is_refused_and_the_study_is_unchanged(existing_study, extra, fragment):
    cwd, storage = existing_study
    before = snapshot(storage)
    args = ["-m", "experiment=quickstart", "sweep=lr", "tracking.enabled=false", *extra]
    proc = run_sweeprl(cwd, *args, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert fragment in out, out[-2000:]
    assert "Loading weights" not in out and not list(cwd.glob("multirun/*/trial_*"))  # nothing was trained
    assert snapshot(storage) == before
