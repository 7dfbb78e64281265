"""Every finding id on hand-made histories, positive and negative; sources, aliases, CLI and next_sweep."""

from __future__ import annotations

import csv
import json
import subprocess

import numpy as np
import pytest

from conftest import PYTHON
from sweeprl.analysis.diagnosis import FINDING_IDS, Thresholds, diagnose, to_markdown
from sweeprl.analysis.history import RunHistory, load

N = 60
T = np.arange(N, dtype=float)
CONFIG = {
    "learning_rate": 1e-3,
    "kl_coef": 0.05,
    "temperature": 1.0,
    "num_generations": 4,
    "max_grad_norm": 1.0,
    "max_completion_length": 64,
    "cliprange": 0.2,
    "vf_coef": 0.1,
    "warmup_steps": 0,
}


def healthy(**over):
    """A GRPO run that learns steadily and has nothing wrong with it."""
    g = np.random.default_rng(1)
    cols = {
        "reward": 0.2 + 0.6 * (1 - np.exp(-T / 15)) + g.normal(0, 0.01, N),
        "reward_std": 0.15 - 0.03 * T / N,
        "loss": 0.02 * np.sin(T) + g.normal(0, 0.005, N),  # policy-gradient loss around zero
        "grad_norm": 0.5 + g.normal(0, 0.02, N),
        "kl": 0.01 + 0.04 * T / N,
        "entropy": 4.0 - 1.0 * T / N,
        "frac_reward_zero_std": np.full(N, 0.05),
        "clip_ratio/region_mean": np.full(N, 0.02),
        "completions/mean_length": 40 + g.normal(0, 1, N),
        "completions/clipped_ratio": np.full(N, 0.05),
        "reward_best_of_n": 0.3 + 0.6 * (1 - np.exp(-T / 15)),
    }
    cols.update(over)
    records = [{"step": float(i + 1), **{k: float(v[i]) for k, v in cols.items() if v is not None}} for i in range(N)]
    return RunHistory(source="synthetic", records=records, config=dict(CONFIG), algo="grpo")


def ppo(**over):
    g = np.random.default_rng(2)
    cols = {
        "objective/scores": 0.5 + 0.4 * T / N + g.normal(0, 0.01, N),
        "objective/kl": 0.02 + 0.03 * T / N,
        "objective/entropy": 30 - 5 * T / N,
        "loss/policy_avg": g.normal(0, 0.01, N),
        "loss/value_avg": 0.5 + g.normal(0, 0.02, N),
        "policy/approxkl_avg": np.full(N, 0.01),
        "policy/clipfrac_avg": np.full(N, 0.05),
    }
    cols.update(over)
    records = [{"step": float(i + 1), **{k: float(v[i]) for k, v in cols.items()}} for i in range(N)]
    cfg = dict(CONFIG, kl_coef=0.2)
    return RunHistory(source="synthetic-ppo", records=records, config=cfg, algo="ppo")


def spiked(x, at, value):
    y = np.array(x, dtype=float)
    y[at] = value
    return y


CASES = {
    "loss_spike": lambda: healthy(loss=spiked(0.02 * np.sin(T), 40, 3.0)),
    "loss_oscillation": lambda: ppo(**{"loss/value_avg": 1.0 + 0.8 * np.where(T % 2 == 0, 1, -1)}),
    "reward_below_target": lambda: healthy(),  # with target_reward=0.95
    "reward_flat": lambda: healthy(
        reward=0.3 + np.random.default_rng(3).normal(0, 0.005, N), entropy=4.0 - 1.0 * T / N
    ),
    "reward_variance_rising": lambda: healthy(
        reward=0.5 + np.random.default_rng(5).normal(0, 0.01, N), reward_std=0.05 + 0.2 * T / N
    ),
    "reward_cv_high": lambda: healthy(reward=0.3 + 0.3 * np.where(T % 2 == 0, 1, -1)),
    "best_of_n_gap": lambda: healthy(reward_best_of_n=0.6 + 0.6 * (1 - np.exp(-T / 15))),
    "mode_collapse": lambda: healthy(frac_reward_zero_std=np.minimum(1, T / 20)),
    "entropy_collapse": lambda: healthy(entropy=4.0 * np.exp(-T / 8)),
    "entropy_unstable": lambda: healthy(entropy=4.0 + 1.5 * np.where(T % 2 == 0, 1, -1)),
    "kl_negative": lambda: healthy(kl=-0.05 + 0.02 * np.sin(T)),
    "kl_above_target": lambda: healthy(kl=0.05 + 1.0 * T / N),
    "value_loss_spike": lambda: ppo(**{"loss/value_avg": spiked(0.5 + 0.01 * np.sin(T), 45, 50.0)}),
    "clip_fraction_high": lambda: ppo(**{"policy/clipfrac_avg": np.full(N, 0.4)}),
    "updates_too_small": lambda: ppo(
        **{
            "objective/scores": np.full(N, 0.5) + np.random.default_rng(4).normal(0, 0.002, N),
            "policy/approxkl_avg": np.full(N, 1e-6),
            "policy/clipfrac_avg": np.zeros(N),
        }
    ),
    "length_hacking": lambda: healthy(**{"completions/mean_length": 40 + 100 * (1 - np.exp(-T / 15))}),
    "truncation_high": lambda: healthy(**{"completions/clipped_ratio": np.full(N, 0.6)}),
    "non_finite": lambda: healthy(loss=spiked(0.02 * np.sin(T), 30, np.nan)),
}


def th_for(fid):
    return Thresholds(target_reward=0.95) if fid == "reward_below_target" else Thresholds()


def test_every_finding_id_has_a_case():
    assert set(CASES) == set(FINDING_IDS)


def test_healthy_runs_have_no_findings():
    assert diagnose(healthy()).ids() == []
    assert diagnose(ppo()).ids() == []


@pytest.mark.parametrize("fid", FINDING_IDS)
def test_finding_positive(fid):
    d = diagnose(CASES[fid](), th_for(fid))
    assert fid in d.ids(), d.ids()
    f = next(f for f in d.findings if f.id == fid)
    assert f.severity in ("critical", "warning", "info")
    assert any(ch.isdigit() for ch in f.evidence), "evidence must carry numbers"
    assert f.cause and f.recommendation["text"]
    for c in f.recommendation["changes"]:
        assert c["param"] in (
            "learning_rate",
            "kl_coef",
            "temperature",
            "num_generations",
            "max_grad_norm",
            "warmup_steps",
            "max_completion_length",
            "cliprange",
            "vf_coef",
            "reward_threshold",
        )
        assert c["direction"] in ("increase", "decrease")


@pytest.mark.parametrize("fid", FINDING_IDS)
def test_finding_negative(fid):
    """The healthy runs (GRPO and PPO style) never raise it, even with the finding's thresholds."""
    th = th_for(fid)
    if fid == "reward_below_target":
        th = Thresholds(target_reward=0.5)
    assert fid not in diagnose(healthy(), th).ids()
    assert fid not in diagnose(ppo(), th).ids()


def test_overrides_use_current_values_and_the_right_keys():
    d = diagnose(CASES["kl_above_target"]())
    f = next(f for f in d.findings if f.id == "kl_above_target")
    overrides = {c["param"]: c["override"] for c in f.recommendation["changes"]}
    assert overrides == {"kl_coef": "algo.beta=0.1", "learning_rate": "algo.learning_rate=0.0005"}
    d = diagnose(CASES["value_loss_spike"]())
    f = next(f for f in d.findings if f.id == "value_loss_spike")
    assert {c["override"] for c in f.recommendation["changes"]} == {"algo.vf_coef=0.05", "algo.cliprange=0.1"}


def test_next_sweep_shifts_the_source_ranges():
    run = CASES["kl_above_target"]()
    run.sweep_params = {"algo.learning_rate": "tag(log, interval(1e-4, 1e-2))", "algo.beta": "interval(0.0, 0.2)"}
    nxt = diagnose(run).next_sweep["params"]
    assert nxt["algo.learning_rate"] == "tag(log, interval(0.00025, 0.001))"  # centred on 5e-4
    assert nxt["algo.beta"] == "tag(log, interval(0.05, 0.2))"  # centred on 0.1
    from hydra_plugins.sweeprl_sweeper.search_space import parse_search_space

    space, _ = parse_search_space(nxt, [])  # valid override grammar
    assert space.distributions["algo.learning_rate"].log


def test_pg_loss_oscillation_is_not_a_spike_or_oscillation():
    run = healthy(loss=0.3 * np.where(T % 2 == 0, 1, -1))  # large but centred on zero
    assert {"loss_spike", "loss_oscillation"}.isdisjoint(diagnose(run).ids())
    run = healthy(loss=0.05 + 0.3 * np.where(T % 2 == 0, 1, -1))  # GRPO with a KL term: off zero, still normal
    assert "loss_oscillation" not in diagnose(run).ids()


def test_variance_growing_with_the_reward_is_not_flagged():
    run = healthy(reward=0.02 + 0.6 * T / N, reward_std=0.03 + 0.1 * T / N)
    assert "reward_variance_rising" not in diagnose(run).ids()


# ------------------------------------------------------------------------------------------ sources
def write_sources(tmp_path):
    run = CASES["kl_above_target"]()
    recs = run.records
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    state = {"log_history": [dict(r, step=int(r["step"])) for r in recs] + [{"train_runtime": 1.0, "step": N}]}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    aliased = [
        {
            "step": r["step"],
            "avg_reward": r["reward"],
            "reward_var": r["reward_std"] ** 2,
            "grad": r["grad_norm"],
            "lr": 1e-3,
            "avg_loss": r["loss"],
            "kl": r["kl"],
            "frac_zero_std": r["frac_reward_zero_std"],
        }
        for r in recs
    ]
    with (tmp_path / "m.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(aliased[0]))
        w.writeheader()
        w.writerows(aliased)
    return recs


def test_sources_and_aliases(tmp_path):
    recs = write_sources(tmp_path)
    for name in ("m.jsonl", "trainer_state.json", "m.csv"):
        run = load(str(tmp_path / name))
        assert len(run.records) == N, name
        assert run.records[5]["reward"] == pytest.approx(recs[5]["reward"])
        assert "kl_above_target" in diagnose(run).ids(), name
    csv_run = load(str(tmp_path / "m.csv"))
    assert csv_run.records[5]["reward_std"] == pytest.approx(recs[5]["reward_std"])  # variance -> std
    assert csv_run.records[5]["grad_norm"] == pytest.approx(recs[5]["grad_norm"])
    assert csv_run.records[5]["learning_rate"] == 1e-3 and "frac_reward_zero_std" in csv_run.records[5]


def test_cli_markdown_and_json(tmp_path):
    write_sources(tmp_path)
    md = subprocess.run(
        [PYTHON, "-m", "sweeprl", "diagnose", str(tmp_path / "m.jsonl")], capture_output=True, text=True, timeout=120
    )
    assert md.returncode == 0, md.stderr
    assert "## Findings" in md.stdout and "kl_above_target" in md.stdout
    js = subprocess.run(
        [
            PYTHON,
            "-m",
            "sweeprl",
            "diagnose",
            str(tmp_path / "m.jsonl"),
            "--format",
            "json",
            "--target-kl",
            "5",
            "--target-reward",
            "0.99",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(js.stdout)
    assert set(data) >= {"summary", "findings", "next_sweep"}
    ids = [f["id"] for f in data["findings"]]
    assert "kl_above_target" not in ids and "reward_below_target" in ids  # thresholds from the command line
    for f in data["findings"]:
        assert set(f) == {"id", "severity", "evidence", "steps", "cause", "recommendation"}
    assert (tmp_path / "out" / "diagnosis.json").is_file() and (tmp_path / "out" / "diagnosis.md").is_file()
    bad = subprocess.run(
        [PYTHON, "-m", "sweeprl", "diagnose", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "not a trial directory" in bad.stderr


def test_markdown_rendering_lists_overrides():
    md = to_markdown(diagnose(CASES["entropy_collapse"]()))
    assert "entropy_collapse" in md and "generation.temperature=1.15" in md and "| window |" in md
