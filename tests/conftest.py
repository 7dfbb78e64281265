"""Shared fixtures: config composition, an isolated model cache and MLflow store, offline hub."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import List

import pytest

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# mlflow ui/server started by tests: no background job runners (they outlive the server and leave /dev/shm dirs)
os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")

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


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One tiny-model cache for the session (the build is deterministic, so sharing it is safe)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def tiny_overrides(model_cache, tmp_path) -> List[str]:
    """Overrides that keep a run fast and its side effects inside tmp_path."""
    return [
        "experiment=quickstart",
        f"model.cache_dir={model_cache}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
    ]
