"""The autopilot's decisions, on sweeps simulated in process (a known objective with seed noise, real Optuna studies
and storages), so the chain's logic runs in seconds: budget, narrowing, warm start, noise judgement, resume."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Dict, List

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from hydra_plugins.sweeprl_sweeper.search_space import parse_search_space
from sweeprl.analysis.next_sweep import narrow
from sweeprl.autopilot import chain as chain_mod
from sweeprl.autopilot import space as spaces
from sweeprl.autopilot import state as records
from sweeprl.autopilot import steps
from sweeprl.cli import autopilot as cli

MAX_STEPS = 20
SPACE = [
    "algo.learning_rate=tag(log, interval(1e-5, 5e-2))",
    "algo.beta=interval(0.0, 0.2)",
    "generation.temperature=interval(0.7, 1.3)",
]
BASE = [
    "experiment=quickstart",
    f"algo.max_steps={MAX_STEPS}",
    "tracking.enabled=false",
    "hydra.sweeper.sampler.seed=0",
]


def objective(params: Dict[str, Any], seed: int) -> float:
    """Peaks at lr 3e-3; beta and temperature matter a little; seed noise sd 0.01."""
    lr = float(params["algo.learning_rate"])
    value = 1.0 - 0.15 * math.log10(lr / 3e-3) ** 2 - 0.3 * (float(params["algo.beta"]) - 0.05) ** 2
    value -= 0.05 * (float(params["generation.temperature"]) - 1.0) ** 2
    return value + random.Random(hash((round(lr, 12), seed))).gauss(0, 0.01)


class FakeSweeps:
    """Stands in for ``python -m sweeprl -m …``: runs the step's study with TPE on the objective above."""

    def __init__(self, crash_at: int = -1):
        self.calls: List[str] = []
        self.crash_at = crash_at

    def __call__(self, cmd: List[str], cwd: Any = None) -> None:
        args = cmd[4:]
        kv = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}
        name, run_dir, n = (
            kv["hydra.sweeper.study_name"],
            Path(kv["hydra.sweep.dir"]),
            int(kv["hydra.sweeper.n_trials"]),
        )
        self.calls.append(name)
        space, passthrough = parse_search_space(None, [a for a in args if not a.startswith("hydra")])
        plain = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in passthrough}
        seed = int(kv.get("hydra.sweeper.sampler.seed", 0))
        study = optuna.create_study(
            study_name=name,
            storage=steps.storage_url(run_dir, None),
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=seed),
            load_if_exists=True,
        )
        seeds = space.distributions.get("algo.seed")  # a re-run: each seed once, as the grid sampler does
        for s in seeds.choices if seeds is not None else []:
            if all(t.params.get("algo.seed") != s for t in study.trials):
                study.enqueue_trial({"algo.seed": s})
        while sum(t.state.is_finished() for t in study.trials) < n:
            if len(self.calls) - 1 == self.crash_at and sum(t.number >= 0 for t in study.trials) >= 2:
                raise KeyboardInterrupt("killed")
            trial = study.ask(dict(space.distributions))
            params = {**plain, **trial.params}
            trial.set_user_attr("steps", MAX_STEPS)
            study.tell(trial, objective(params, int(params.get("algo.seed", 0))))


def run_chain(tmp_path: Path, fake: FakeSweeps, *extra: str) -> int:
    return cli.main([*BASE, *SPACE, f"--dir={tmp_path / 'chain'}", "--round-trials=8", *extra])


@pytest.fixture
def fake(monkeypatch) -> FakeSweeps:
    f = FakeSweeps()
    monkeypatch.setattr(steps, "run", f)
    return f


def test_chain_narrows_stays_in_budget_and_beats_round_one(tmp_path, fake):
    budget = 40 * MAX_STEPS
    assert run_chain(tmp_path, fake, f"--budget-updates={budget}") == 0
    chain = records.load(tmp_path / "chain")
    assert chain is not None and chain.final is not None
    assert chain.spent().updates <= budget
    assert len(chain.rounds) >= 2 and chain.stop_reason
    r1, r2 = chain.rounds[0], chain.rounds[1]
    # round 2 searched a narrower learning-rate range around round 1's top trials, warm-started with them
    lo1, hi1 = 1e-5, 5e-2
    dist = spaces.next_sweep.parse({"algo.learning_rate": r2.space["algo.learning_rate"]})["algo.learning_rate"]
    assert math.log(dist.high / dist.low) < 0.6 * math.log(hi1 / lo1)
    assert r2.warm >= 3 and "top trials" in r2.reasons["algo.learning_rate"]
    assert r1.confirm is not None and len(r1.confirm.values) == 2
    # the winner's final re-run is close to the true optimum (1.0), and every step ran exactly once
    final = sum(chain.final.values.values()) / len(chain.final.values)
    assert final > 0.95 and len(chain.final.values) == 3
    assert chain.name == "quickstart-autopilot"
    assert len(fake.calls) == len(set(fake.calls))
    report = (tmp_path / "chain" / "autopilot.md").read_text()
    assert "## Winner" in report and "Verdict:" in report and "python" in report


def test_killed_chain_resumes_without_repeating_a_finished_trial(tmp_path, monkeypatch):
    crashing = FakeSweeps(crash_at=2)  # the third step (round 2) dies after two trials
    monkeypatch.setattr(steps, "run", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_chain(tmp_path, crashing, "--budget-updates=800")
    saved = json.loads((tmp_path / "chain" / records.STATE_FILE).read_text())
    assert [r["status"] for r in saved["rounds"]] == ["judged", "planned"]
    resumed = FakeSweeps()
    monkeypatch.setattr(steps, "run", resumed)
    assert run_chain(tmp_path, resumed, "--budget-updates=800") == 0
    chain = records.load(tmp_path / "chain")
    assert resumed.calls[0] == chain.rounds[1].study  # picks up round 2, does not redo round 1 or its re-run
    r2 = steps.load(chain.rounds[1].study, steps.storage_url(Path(chain.rounds[1].dir), None))
    assert len(steps.own_trials(r2)) == chain.rounds[1].new_trials  # 2 before the kill + the rest after it


def test_without_a_final_re_run_and_another_command_in_the_same_dir(tmp_path, fake, capsys):
    assert run_chain(tmp_path, fake, "--budget-updates=800", "--max-rounds=1", "--final-seeds=0") == 0
    chain = records.load(tmp_path / "chain")
    assert chain.final is None and len(fake.calls) == 2  # round 1 and its re-run
    assert "winner: round 1" in capsys.readouterr().out
    assert run_chain(tmp_path, fake, "--budget-updates=900", "--max-rounds=1", "--final-seeds=0") == 2
    assert "holds a chain of another command" in capsys.readouterr().err
    assert run_chain(tmp_path, fake, "--budget-updates=900", "--confirm-seeds=0") == 2
    assert "--confirm-seeds must be >= 1" in capsys.readouterr().err


def test_budget_too_small_for_one_round(tmp_path, fake, capsys):
    assert run_chain(tmp_path, fake, f"--budget-updates={5 * MAX_STEPS}") == 1
    assert "too small for one round" in capsys.readouterr().err
    assert fake.calls == []


def test_a_round_takes_the_budget_no_later_round_could_use(tmp_path):
    """The benchmark's numbers (a full trial 640 completions, 2 confirmation and 3 final seeds): round 2 gets all
    3136 completions left, since half of them would leave less than a round of 3 trials and its 2 re-runs."""
    settings = {"first_share": 0.6, "confirm_seeds": 2, "final_seeds": 3}
    chain = records.Chain("c", [], "completions", 13056, settings)
    setup = chain_mod.Setup([], [], {}, 640, ["maximize"], 0, True, None, None)  # generation batch 1: 640 a trial
    pilot = chain_mod.Autopilot(chain, tmp_path, setup, print)
    assert pilot.round_budget(1) == int(0.6 * (13056 - 5 * 640)) == 5913
    rerun = records.Rerun("r", "d", {}, [1, 2], spent=records.Spent(completions=1280))
    chain.rounds.append(records.Round(1, "s", "d", {}, {}, spent=records.Spent(completions=5440), confirm=rerun))
    assert pilot.round_budget(2) == 13056 - 5440 - 1280 - 5 * 640 == 3136
    chain.budget = 20000  # enough for two more rounds: half of what is left
    assert pilot.round_budget(2) == int((20000 - 5440 - 1280 - 5 * 640) / 2)
    chain.budget = 10000  # less than 3 more trials once the re-runs due are set aside: the chain stops
    assert pilot.round_budget(2) == 0 and pilot.plan_round(2) is None
    assert chain.stop_reason == (
        "budget spent: 6720 of 10000 completions used, 1920 kept for the winner's final re-run; what is left buys "
        "no round of 3 trials and its re-runs"
    )


def test_noise_threshold_is_the_standard_error_of_a_difference():
    reruns = [
        records.Rerun("a", "d", {}, [1, 2], {"1": 0.5, "2": 0.52}),
        records.Rerun("b", "d", {}, [1, 2], {"1": 0.6, "2": 0.6}),
    ]
    sd = chain_mod.pooled_sd(reruns)
    assert sd == pytest.approx(math.sqrt((2 * 0.01**2) / 2))  # (0.02^2 / 2 + 0) / (1 + 1)
    pilot = chain_mod.Autopilot.__new__(chain_mod.Autopilot)
    pilot.chain = records.Chain(
        "c",
        [],
        "updates",
        1,
        {"confirm_seeds": 2},
        rounds=[
            records.Round(1, "s", "d", {}, {}, confirm=reruns[0]),
            records.Round(2, "s", "d", {}, {}, confirm=reruns[1]),
        ],
    )
    gain, got = pilot.threshold(0.6)
    assert got == pytest.approx(sd) and gain == pytest.approx(sd * math.sqrt(2 / 2))
    assert pilot.threshold(100.0)[0] == pytest.approx(0.5)  # never under 0.5 % of the best


def test_narrow_extends_past_an_edge_only_when_asked():
    lr = FloatDistribution(1e-4, 1e-2, log=True)
    rng, why = narrow("algo.learning_rate", lr, [1e-2, 8e-3], extend_edges=True)
    assert rng == "tag(log, interval(0.004, 0.02))" and "extended upward" in why
    rng, why = narrow("algo.learning_rate", lr, [1e-2, 8e-3])
    assert rng == "tag(log, interval(0.004, 0.01))" and "consider widening" in why
    beta = FloatDistribution(0.0, 0.2)
    rng, why = narrow("algo.beta", beta, [0.0, 0.01], extend_edges=True)
    assert rng.startswith("interval(0.0,") and "extended" not in why  # a KL coefficient has nothing below 0


def test_warm_start_copies_the_trials_inside_the_space_once(tmp_path):
    storage = f"sqlite:///{tmp_path / 'db.sqlite'}"
    earlier = optuna.create_study(study_name="r1", storage=storage, direction="maximize")
    dists = {"x": FloatDistribution(0, 10), "g": CategoricalDistribution([2, 4, 8])}
    for x, g in [(1.0, 2), (5.0, 4), (6.0, 8), (9.0, 4)]:
        earlier.add_trial(
            optuna.trial.create_trial(
                params={"x": x, "g": g},
                distributions=dists,
                value=x,
                user_attrs={"steps": 10},
                intermediate_values={5: x},
            )
        )
    space = {"x": "interval(4.0, 7.0)", "g": "choice(4, 8)"}
    assert spaces.warm_start("r2", storage, space, [earlier], ["maximize"]) == 2
    again = spaces.warm_start("r2", storage, space, [earlier], ["maximize"])
    r2 = optuna.load_study(study_name="r2", storage=storage)
    assert again == 2 and len(r2.trials) == 2
    assert sorted(t.params["x"] for t in r2.trials) == [5.0, 6.0]
    assert all(t.user_attrs[steps.WARM_ATTR].startswith("r1#") and t.distributions["x"].high == 7.0 for t in r2.trials)
    assert all(not t.intermediate_values for t in r2.trials)  # the pruner judges new trials among themselves
    assert steps.own_trials(r2) == []


def test_an_unimportant_param_is_fixed(tmp_path):
    storage = f"sqlite:///{tmp_path / 'db.sqlite'}"
    study = optuna.create_study(
        study_name="r1", storage=storage, direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0)
    )
    study.optimize(lambda t: -((t.suggest_float("x", 0, 1) - 0.3) ** 2) + 0 * t.suggest_float("y", 0, 1), n_trials=16)
    space, reasons, fixed = spaces.next_space(study, str(tmp_path))
    assert "y" in fixed and "y" not in space and "fANOVA" in reasons["y"]
    assert "x" in space and fixed["y"] == study.best_params["y"]


def test_one_round_narrows_a_range_by_at_most_half():
    beta = FloatDistribution(0.0, 0.2)
    rng, why = narrow("algo.beta", beta, [0.15, 0.16, 0.17], min_share=0.5)
    # ±10 % of the width around 0.15…0.17 is 0.13…0.19 (30 %): widened to 50 % around 0.16, moved inside 0…0.2
    assert rng == "interval(0.1, 0.2)" and "kept to 50% of the searched width" in why
    lr = FloatDistribution(1e-5, 1e-1, log=True)
    rng, why = narrow("algo.learning_rate", lr, [1e-3], min_share=0.5)
    lo, hi = (float(x) for x in rng[len("tag(log, interval(") : -2].split(","))
    assert math.log10(hi / lo) == pytest.approx(2.0, rel=0.01) and lo < 1e-3 < hi and "kept to 50%" in why
