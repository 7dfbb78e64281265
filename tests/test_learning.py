"""The quickstart reward is learnable: it rises at a good learning rate, stays flat at 1e-9, and a seeded CPU
run reproduces exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import compose_cfg
from sweeprl.trial import run_trial

pytestmark = pytest.mark.e2e
STEPS = 60


def train(tmp_path, name, tiny_overrides, *extra):
    cfg = compose_cfg([*tiny_overrides, "tracking.enabled=false", f"algo.max_steps={STEPS}", *extra])
    result = run_trial(cfg, tmp_path / name)
    history = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return result, history


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_cache):
    tmp = tmp_path_factory.mktemp("learning")
    over = ["experiment=quickstart", f"model.cache_dir={model_cache}"]
    return {
        "good": train(tmp, "good", over, "algo.learning_rate=3e-3"),
        "good_again": train(tmp, "good_again", over, "algo.learning_rate=3e-3"),
        "tiny_lr": train(tmp, "tiny_lr", over, "algo.learning_rate=1e-9"),
    }


def rewards(history):
    return np.array([h["reward"] for h in history])


def test_metrics_jsonl_has_one_record_per_step_with_trl_names(runs):
    result, history = runs["good"]
    assert [h["step"] for h in history] == list(range(1, STEPS + 1))
    for key in (
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "loss",
        "grad_norm",
        "entropy",
        "learning_rate",
        "completions/mean_length",
        "completions/clipped_ratio",
        "rewards/charset/mean",
    ):
        assert key in history[0], key
    assert result.steps == STEPS


def test_reward_rises_at_a_good_learning_rate(runs):
    r = rewards(runs["good"][1])
    first, last = r[:10].mean(), r[-10:].mean()
    assert first < 0.15  # random-init byte model: ~27 of 256 bytes allowed, few distinct
    assert last > first + 0.3, (first, last)


def test_reward_stays_flat_at_learning_rate_1e_9(runs):
    r = rewards(runs["tiny_lr"][1])
    assert abs(r[-10:].mean() - r[:10].mean()) < 0.05
    assert r.max() < 0.2


def test_seeded_cpu_runs_reproduce_exactly(runs):
    a, b = runs["good"][1], runs["good_again"][1]
    assert [h["reward"] for h in a] == [h["reward"] for h in b]
    assert [h["loss"] for h in a] == [h["loss"] for h in b]
    assert runs["good"][0].value == runs["good_again"][0].value


def test_objective_file_matches_result(runs, tmp_path_factory):
    result, _ = runs["good"]
    data = json.loads((tmp_path_factory.getbasetemp() / "learning0" / "good" / "objective.json").read_text())
    assert data["objective"] == result.value
    assert data["name"] == "stability_adjusted"
    assert data["objective"] == pytest.approx(
        data["terms"]["late_reward"] - sum(v for k, v in data["terms"].items() if k != "late_reward")
    )
