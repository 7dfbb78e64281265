"""Launcher checks and SLURM job ends without a cluster: the time-out signal rule of check_launcher, and the reason
a lost SLURM job gets from ``sacct`` (a stand-in sacct on PATH; tests/test_slurm.py runs the real one)."""

from __future__ import annotations

import logging

from omegaconf import OmegaConf

from hydra_plugins.sweeprl_sweeper.launchers import check_launcher, slurm_end
from hydra_plugins.sweeprl_sweeper.outcomes import read_place, record_place

SUBMITIT = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def slurm_config(timeout_min: int, signal_delay_s: int):
    launcher = {"_target_": SUBMITIT, "timeout_min": timeout_min, "signal_delay_s": signal_delay_s}
    return OmegaConf.create({"hydra": {"launcher": launcher, "runtime": {"choices": {"hydra/launcher": "x"}}}})


def test_a_time_limit_inside_the_time_out_signal_is_refused_and_one_within_a_minute_of_it_warned(caplog):
    problem = check_launcher(slurm_config(1, 120), 1, None, None)  # hydra-submitit-launcher's default delay
    assert problem and "timeout_min=1 (60 s)" in problem and "signal_delay_s=120" in problem
    with caplog.at_level(logging.WARNING):
        assert check_launcher(slurm_config(2, 90), 1, None, None) is None  # 30 s left: may be signalled at once
    assert "up to 60 s early" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert check_launcher(slurm_config(60, 120), 1, None, None) is None
    assert not caplog.text


def test_a_lost_slurm_job_is_told_by_its_own_accounting_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "40")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-7")
    record_place(str(tmp_path / "trial_1"))
    assert read_place(tmp_path / "trial_1") == {"slurm_job": "40_1", "node": "gpu-7"}
    assert [p.name for p in (tmp_path / "trial_1").iterdir()] == ["job_place.json"]  # written whole, then renamed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sacct = bin_dir / "sacct"  # answers for job 40_1 only, as the real one with -X -n -P -o State,ExitCode
    sacct.write_text('#!/bin/sh\ncase "$*" in *"-j 40_1 "*) echo "OUT_OF_MEMORY|0:125";; esac\n')
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert slurm_end(tmp_path / "trial_1") == (
        "SLURM job 40_1 on gpu-7 ended OUT_OF_MEMORY (exit code 0:125) without a result"
    )
    assert slurm_end(tmp_path / "trial_2") is None  # no record: not a SLURM job
    monkeypatch.delenv("SLURM_JOB_ID")
    record_place(str(tmp_path / "trial_3"))
    assert read_place(tmp_path / "trial_3") == {}  # outside SLURM and Ray nothing is written
