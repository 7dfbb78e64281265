"""The bank of complete quickstart curves (``tests/data/curve_bank``, written by ``bench/curve_bank.py``) that pruner
replays read instead of training: what it holds, so a replay's figures rest on full, unpruned trials."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

BANK = Path(__file__).resolve().parent / "data" / "curve_bank"


def banks():
    return [json.load(gzip.open(p, "rt")) for p in sorted(BANK.glob("*.json.gz"))]


def test_the_bank_holds_twelve_seeds_of_both_samplers_with_every_trial_complete():
    found = banks()
    assert {(b["sampler"], b["seed"]) for b in found} == {(s, k) for s in ("tpe", "random") for k in range(12)}
    trials = [t for b in found for t in b["trials"]]
    assert len(trials) == 384 and all(t["state"] == "COMPLETE" and math.isfinite(t["value"]) for t in trials)
    for b in found:
        for t in b["trials"]:
            assert t["curve"]["step"] == list(range(1, b["max_steps"] + 1))  # not pruned, not stopped by a guard
            assert 1e-5 <= t["params"]["algo.learning_rate"] <= 5e-2 and 0 <= t["params"]["algo.beta"] <= 0.2
            assert all(v is not None for v in t["curve"]["reward"])


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_the_same_seed_proposes_other_configs_per_sampler(sampler):
    """Each sweep of a sampler is its own draw of configs: replays over several seeds are not one sweep repeated."""
    params = [tuple(sorted(t["params"].items())) for b in banks() if b["sampler"] == sampler for t in b["trials"]]
    assert len(set(params)) == len(params)
