"""Configs and the sweeper plugin resolve from an installed (non-editable) wheel, not only from a checkout."""

from __future__ import annotations

import os
import subprocess
import sysconfig
import zipfile

import pytest

from conftest import PYTHON, REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("sweeprl-*.whl")
    return whl


def test_wheel_contains_configs_and_plugin(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "sweeprl/conf/config.yaml",
        "sweeprl/conf/experiment/quickstart.yaml",
        "sweeprl/conf/sweep/lr_kl.yaml",
        "sweeprl/conf/model/tiny.yaml",
        "hydra_plugins/sweeprl_sweeper/__init__.py",
        "sweeprl/__main__.py",
        *(f"sweeprl/resources/accelerate/{name}.yaml" for name in ("ddp", "zero2", "zero3", "fsdp")),
    ):
        assert required in names, required
    assert not any(n.startswith("hydra_plugins/__init__") for n in names), "hydra_plugins must stay a namespace package"


@pytest.mark.e2e  # trains
def test_installed_wheel_composes_and_trains(wheel, tmp_path, model_cache):
    target = tmp_path / "site"
    subprocess.run(
        [PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # -S: no site processing, so the editable checkout's .pth is not applied; deps come from the venv.
    env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{sysconfig.get_paths()['purelib']}"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-S", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    where = run("-c", "import sweeprl.config as c; print(c.CONFIG_DIR)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(target / "sweeprl" / "conf")
    cfg = run("-m", "sweeprl", "-m", "experiment=quickstart", "sweep=lr_kl", "--cfg", "hydra")
    assert cfg.returncode == 0, cfg.stderr
    assert (
        "study_name: ${name}-lr_kl" in cfg.stdout
        and "hydra_plugins.sweeprl_sweeper.sweeper.SweeprlSweeper" in cfg.stdout
    )
    train = run(
        "-m",
        "sweeprl",
        "experiment=quickstart",
        "algo.max_steps=2",
        "tracking.enabled=false",
        f"model.cache_dir={model_cache}",
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert "objective" in train.stdout
