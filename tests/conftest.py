"""Shared fixtures: config composition, an isolated model cache and MLflow store, offline hub."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# mlflow ui/server started by tests: no background job runners (they outlive the server and leave /dev/shm dirs)
os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")

# Test processes share the cores: each xdist worker (and every trial it starts, which inherits this) gets its share
# of threads. Two workers each running 2-thread torch on 2 cores made trials up to 5x slower (OpenMP threads wait on
# each other's time slices); the sweeper's slots share OMP_NUM_THREADS out too (slots.cpu_budget).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and "OMP_NUM_THREADS" not in os.environ:
    _share = str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.update(OMP_NUM_THREADS=_share, MKL_NUM_THREADS=_share)

# Hydra's plugin scan (re-)executes every hydra_plugins module; run it once now, before the test modules
# import plugin classes, so that the classes they hold are the ones the sweeper raises and returns.
from hydra.core.plugins import Plugins  # noqa: E402

Plugins.instance()

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of the call)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compose_cfg(overrides: List[str], return_hydra_config: bool = False):
    from hydra import compose, initialize_config_dir

    from sweeprl.config import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def session_dir(tmp_path_factory, name: str) -> Path:
    """A directory that every test process of this session shares: under pytest-xdist, the workers' common parent
    of their base temp dirs; otherwise a fresh temp dir."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / name
        path.mkdir(exist_ok=True)
        return path
    return tmp_path_factory.mktemp(name)


@contextmanager
def session_lock(directory: Path):
    """Held by one test process at a time (an flock on a file in ``directory``): the first one to make what the
    directory holds, the others wait and reuse it."""
    with open(directory / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture
def private_tempdir(monkeypatch) -> Path:
    """``tempfile``'s directory for this test alone (mode 1777, so the sandbox's user can use what is made in
    it): tests that look for leftover temp dirs see their own, not those of a test running beside them."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sweeprl-test-tmp-"))
    path.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One tiny-model cache for the session and its workers (builds are deterministic and renamed into place, so
    sharing it is safe)."""
    return session_dir(tmp_path_factory, "models")


@pytest.fixture
def tiny_overrides(model_cache, tmp_path) -> List[str]:
    """Overrides that keep a run fast and its side effects inside tmp_path."""
    return [
        "experiment=quickstart",
        f"model.cache_dir={model_cache}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
    ]


# The modules that take longest, longest first: pytest-xdist hands modules to its workers in collection order, so
# these start at once instead of ending the run on one worker while the other waits (CONTRIBUTING.md: the times).
# The first three start together, one per worker: the SLURM test mostly waits on SLURM, beside the two that
# compute the most.
SLOW_MODULES = (
    "test_readme.py",
    "test_slurm.py",
    "test_ocaml_learning.py",
    "test_resilience.py",
    "test_autopilot_e2e.py",
    "test_e2e_sweep.py",
    "test_launchers.py",
    "test_mlflow_server.py",
    "test_pruning_and_sweeps.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


# ------------------------------------------------------------------------------------------ the CLI in tests
def output_tail(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout or "")[-3000:] + (proc.stderr or "")[-5000:]


def run_sweeprl(
    cwd: Path,
    *args: str,
    timeout: float = 600,
    check: bool = True,
    env: Optional[Dict[str, str]] = None,
    merge_output: bool = False,
) -> subprocess.CompletedProcess:
    """``python -m sweeprl ARGS`` in ``cwd``, as a user runs it (no stdin; ``env`` is added to the environment,
    a value of None removes a variable). With ``check``, a non-zero exit fails the test with the output's tail;
    ``merge_output`` sends stderr into stdout, in the order a terminal shows them."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    proc = subprocess.run(
        [PYTHON, "-m", "sweeprl", *args],
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_output else subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, output_tail(proc)
    return proc


def quickstart_sweep(cwd: Path, model_cache: Path, *overrides: str, **kwargs) -> subprocess.CompletedProcess:
    """A ``-m experiment=quickstart`` sweep on the session's tiny model; ``overrides`` come after the preset."""
    return run_sweeprl(cwd, "-m", "experiment=quickstart", f"model.cache_dir={model_cache}", *overrides, **kwargs)


def wait_for(check, timeout: float, what: str):
    """Poll ``check`` every 0.5 s until it returns something true (returned), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def sweep_with_fault(cwd: Path, args: List[str], fault, env: Optional[Dict[str, str]] = None, timeout: float = 300):
    """``python -m sweeprl ARGS`` in the background while ``fault()`` (which may wait for the sweep) breaks
    something, then the sweep must end with exit 0; its output is in ``cwd/driver.log``. Returns the trials of
    the study ``quickstart-lr`` by number."""
    log_path = cwd / "driver.log"
    with open(log_path, "w") as log:
        full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        driver = subprocess.Popen([PYTHON, "-m", "sweeprl", *args], cwd=cwd, env=full_env, stdout=log, stderr=log)
        try:
            fault(driver)
            assert driver.wait(timeout=timeout) == 0, log_path.read_text()[-4000:]
        finally:
            driver.kill()
    return sorted(load_study(cwd, "quickstart-lr").trials, key=lambda t: t.number)


def load_study(launch_dir: Path, name: str):
    """The Optuna study of sweep ``name`` launched in ``launch_dir`` (the default SQLite storage)."""
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{launch_dir}/multirun/{name}/optuna.db")


@dataclass(frozen=True)
class FinishedSweep:
    """A sweep that has ended: where it was launched, its study name, console output and updates per trial."""

    launch_dir: Path
    name: str
    stdout: str
    steps: int

    @property
    def sweep_dir(self) -> Path:
        return self.launch_dir / "multirun" / self.name

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.launch_dir}/mlflow.db"

    def study(self):
        return load_study(self.launch_dir, self.name)


SHARED_SWEEP_STEPS = 12


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory, model_cache) -> FinishedSweep:
    """The quickstart learning rate × β sweep (3 trials of 12 updates, sampler seed 0, report and MLflow on), run
    once per test session for every test that only reads a finished sweep: console, study, MLflow runs, results
    file, report, trials table, diagnosis. Tests must not add to it; a test that resumes or changes a sweep runs
    its own."""
    cwd = session_dir(tmp_path_factory, "finished_sweep")
    console = cwd / "console.txt"
    with session_lock(cwd):
        if not console.is_file():
            overrides = ["sweep=lr_kl", "hydra.sweeper.n_trials=3", "hydra.sweeper.sampler.seed=0"]
            proc = quickstart_sweep(cwd, model_cache, *overrides, f"algo.max_steps={SHARED_SWEEP_STEPS}")
            console.write_text(proc.stdout)
    return FinishedSweep(cwd, "quickstart-lr_kl", console.read_text(), SHARED_SWEEP_STEPS)
