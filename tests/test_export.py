"""Keep the winner: every COMPLETE trial saves its trained weights (LoRA adapter or full model, + tokenizer) into its
dir and its MLflow run; ``python -m sweeprl export`` copies a trial's into a dir that loads with transformers/PEFT
and continues training with the one command it writes."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml

from conftest import compose_cfg, quickstart_sweep
from sweeprl import trial_record
from sweeprl.cli import export as export_cli

pytestmark = pytest.mark.e2e
STUDY = "export-test"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, model_cache):
    """A real 2-trial quickstart sweep over ``lora.enabled`` (grid: one full-model trial, one LoRA r16 trial)."""
    cwd = tmp_path_factory.mktemp("export")
    overrides = ["lora=r16", "lora.enabled=choice(false,true)", "hydra/sweeper/sampler=grid"]
    overrides += [f"hydra.sweeper.study_name={STUDY}", "hydra.sweeper.n_trials=2", "hydra.sweeper.report=false"]
    quickstart_sweep(cwd, model_cache, *overrides, "algo.max_steps=3")
    return cwd, cwd / "multirun" / STUDY


def trial_of_kind(sweep_dir: Path, kind: str) -> int:
    for d in sorted(sweep_dir.glob("trial_*")):
        if trial_record.read_resolved_config(d)["lora"]["enabled"] == (kind == "adapter"):
            return int(d.name.split("_")[1])
    raise AssertionError(f"no {kind} trial in {sweep_dir}")


def generates(model, tokenizer) -> list:
    import torch

    inputs = tokenizer("Task 1:", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4
    return out[0].tolist()


# ------------------------------------------------------------------------------------------ saved by the trial
def test_every_complete_trial_keeps_its_weights_and_logs_them_to_mlflow(sweep):
    from mlflow.tracking import MlflowClient

    cwd, sweep_dir = sweep
    client = MlflowClient(f"sqlite:///{cwd}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name(STUDY).experiment_id], "tags.`sweeprl.role` = 'trial'")
    assert len(runs) == 2
    for run in runs:
        d = sweep_dir / f"trial_{run.data.tags['sweeprl.trial_number']}"
        model = trial_record.saved_model(d)
        assert model == d / "model"
        lora = trial_record.read_resolved_config(d)["lora"]["enabled"]
        weights = ["adapter_config.json", "adapter_model.safetensors"] if lora else ["config.json", "model.safetensors"]
        assert trial_record.model_kind(model) == ("adapter" if lora else "full")
        for name in [*weights, "tokenizer.json"]:
            assert (model / name).is_file(), name
        logged = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
        assert {f"model/{name}" for name in [*weights, "tokenizer.json"]} <= logged


def test_save_model_false_keeps_nothing(tiny_overrides, tmp_path):
    from sweeprl.trial import run_trial

    cfg = compose_cfg([*tiny_overrides, "tracking.enabled=false", "algo.max_steps=1", "sweeprl.save_model=false"])
    run_trial(cfg, tmp_path / "run")
    assert trial_record.saved_model(tmp_path / "run") is None and not (tmp_path / "run" / "model").exists()


def test_ppo_saves_its_policy_adapter(model_cache, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sweeprl.models.merge import base_model
    from sweeprl.trial import run_trial

    overrides = ["experiment=length_ppo", "model=tiny", f"model.cache_dir={model_cache}", "lora=r16"]
    overrides += ["algo.max_steps=1", "algo.batch_size=4", "algo.mini_batch_size=2", "tracking.enabled=false"]
    cfg = compose_cfg([*overrides, "generation.max_completion_length=8"])
    run_trial(cfg, tmp_path / "ppo")
    model_dir = trial_record.saved_model(tmp_path / "ppo")
    assert model_dir is not None and trial_record.model_kind(model_dir) == "adapter"
    resolved = trial_record.read_resolved_config(tmp_path / "ppo")
    base = AutoModelForCausalLM.from_pretrained(base_model(resolved["model"]))
    generates(PeftModel.from_pretrained(base, str(model_dir)), AutoTokenizer.from_pretrained(str(model_dir)))


# ----------------------------------------------------------------------------------------------------- export
def test_export_takes_the_best_trial_and_never_overwrites_by_accident(sweep, capsys):
    _, sweep_dir = sweep
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{sweep_dir}/optuna.db")
    assert export_cli.main([str(sweep_dir)]) == 0
    out = sweep_dir / "best_model"
    best = sweep_dir / f"trial_{study.best_trial.number}"
    assert (out / "model").is_dir() and (out / "README.md").is_file() and (out / "continue.txt").is_file()
    assert trial_record.model_kind(out / "model") == trial_record.model_kind(best / "model")
    assert (out / "resolved_config.yaml").read_text() == (best / "resolved_config.yaml").read_text()
    printed = capsys.readouterr().out
    assert f"exported trial {study.best_trial.number}'s" in printed and "continue training: " in printed
    assert export_cli.main([str(sweep_dir)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert export_cli.main([str(sweep_dir), "--force"]) == 0


@pytest.mark.parametrize("kind", ["full", "adapter"])
def test_exported_model_loads_generates_and_its_command_continues_training(sweep, kind, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, sweep_dir = sweep
    number = trial_of_kind(sweep_dir, kind)
    out = tmp_path / "export"
    assert export_cli.main([str(sweep_dir), "--trial", str(number), "--out", str(out)]) == 0
    resolved = yaml.safe_load((out / "resolved_config.yaml").read_text())
    assert resolved["sweeprl"]["trial_number"] == number
    tokenizer = AutoTokenizer.from_pretrained(str(out / "model"))
    if kind == "full":
        assert (out / "model" / "model.safetensors").is_file()
        trained = AutoModelForCausalLM.from_pretrained(str(out / "model"))
        train_from = out / "model"
    else:
        from peft import PeftModel

        from sweeprl.models.merge import base_model

        assert (out / "model" / "adapter_model.safetensors").is_file()
        base = AutoModelForCausalLM.from_pretrained(base_model(resolved["model"]))
        trained = PeftModel.from_pretrained(base, str(out / "model"))
        merged = AutoModelForCausalLM.from_pretrained(str(out / "merged"))
        ids = tokenizer("Task 3: hello", return_tensors="pt")["input_ids"]
        with torch.no_grad():  # the merged weights are the adapted model
            torch.testing.assert_close(merged(ids).logits, trained(ids).logits, atol=1e-4, rtol=1e-4)
        assert generates(merged, tokenizer) == generates(trained, tokenizer)
        train_from = out / "merged"
    generates(trained, tokenizer)

    command = (out / "continue.txt").read_text().strip()
    assert f"model.source=hub model.name_or_path={train_from}" in command
    assert "sweeprl.study_name" not in command and "sweep=" not in command
    assert command in (out / "README.md").read_text()
    run_dir = tmp_path / "continued"
    argv = shlex.split(command) + ["algo.max_steps=2", "tracking.enabled=false", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    continued = trial_record.read_resolved_config(run_dir)
    assert continued["model"]["name_or_path"] == str(train_from)
    assert continued["lora"]["enabled"] == (kind == "adapter")  # the trial's settings, from its overrides
    assert trial_record.read_outcome(run_dir).objective is not None


# ------------------------------------------------------------------------------ what export refuses, and why
def fake_sweep(root: Path, directions, trials) -> Path:
    """A sweep dir with an Optuna study of hand-made trials (``(state, values)``); no trial saved a model."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    sweep_dir = root / "multirun" / "fake"
    sweep_dir.mkdir(parents=True)
    study = optuna.create_study(study_name="fake", storage=f"sqlite:///{sweep_dir}/optuna.db", directions=directions)
    for number, (state, values) in enumerate(trials):
        d = trial_record.trial_dir(sweep_dir, number)
        (d / ".hydra").mkdir(parents=True)
        overrides = ["experiment=quickstart", "sweep=lr_kl", "algo.beta=0.1", "sweeprl.device=cpu"]
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*overrides, f"sweeprl.trial_number={number}"]))
        study.add_trial(
            create_trial(
                state=state,
                values=values,
                params={"algo.beta": 0.1},
                distributions={"algo.beta": FloatDistribution(0.0, 0.2)},
                user_attrs={"trial_dir": str(d)},
            )
        )
    return sweep_dir


def test_two_objectives_need_a_trial_and_list_the_pareto_front(tmp_path, capsys):
    done = optuna.trial.TrialState.COMPLETE
    sweep_dir = fake_sweep(tmp_path, ["maximize", "maximize"], [(done, [1.0, 2.0]), (done, [2.0, 1.0])])
    assert export_cli.main([str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert "2 objectives" in err and "--trial N" in err and "trial 0 (1 / 2)" in err and "trial 1 (2 / 1)" in err


def test_no_complete_trial_and_no_saved_model_say_so(tmp_path, capsys):
    state = optuna.trial.TrialState
    sweep_dir = fake_sweep(tmp_path, ["maximize"], [(state.FAIL, None), (state.COMPLETE, [0.5])])
    assert export_cli.main([str(sweep_dir), "--trial", "0"]) == 2
    assert "trial 0 is FAIL, not COMPLETE" in capsys.readouterr().err
    assert export_cli.main([str(sweep_dir), "--trial", "5"]) == 2
    assert "has no trial 5" in capsys.readouterr().err
    assert export_cli.main([str(sweep_dir)]) == 2  # the best trial ran with sweeprl.save_model=false
    err = capsys.readouterr().err
    assert "trial 1 has no saved model" in err and "sweeprl.save_model=false" in err
    assert "re-run it with its settings to get one: " in err and "algo.beta=0.1 sweeprl.device=cpu" in err
    assert "sweep=" not in err and "sweeprl.trial_number" not in err
    failed_only = fake_sweep(tmp_path / "b", ["maximize"], [(state.FAIL, None)])
    assert export_cli.main([str(failed_only)]) == 2
    assert "no COMPLETE trial" in capsys.readouterr().err


def test_continue_command_replaces_the_model_source_and_keeps_user_settings(tmp_path):
    d = tmp_path / "trial_0"
    (d / ".hydra").mkdir(parents=True)
    items = ["experiment=x", "model.source=tiny", "+model.name_or_path=a", "sweeprl.save_model=false", "sweep=lr"]
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*items, "sweeprl.slots=2", "lr=1"]))
    command = export_cli.continue_command(d, Path("/m/my model"), {"model": {"revision": "v1"}})
    args = shlex.split(command)[1:]
    assert args == [
        "-m",
        "sweeprl",
        "experiment=x",
        "sweeprl.save_model=false",
        "lr=1",
        "model.source=hub",
        "model.name_or_path=/m/my model",
        "model.revision=null",
    ]
