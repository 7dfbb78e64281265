"""``python -m sweeprl --help`` is sweeprl's own: usage, experiments, sweeps, options and subcommands, in 80 columns."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import PYTHON


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_names_what_a_user_types_and_fits_80_columns(flag):
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([PYTHON, "-m", "sweeprl", flag], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    for needle in ("-m, --multirun", "experiment=", "sweep=", "quickstart", "ocaml_grpo", "lr_kl", "--hydra-help"):
        assert needle in text
    for command in ("trials STUDY", "report STUDY", "diagnose SOURCE", "score FILE"):
        assert command in text
    assert "base_" not in text and "powered by Hydra" not in text  # schema entries are not options
    assert "algo: grpo, ppo, rloo" in text


def test_hydras_own_help_is_still_there():
    proc = subprocess.run([PYTHON, "-m", "sweeprl", "--hydra-help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--config-dir" in proc.stdout
