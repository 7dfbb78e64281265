"""A new embedded MLflow store starts as a copy of an empty one, not as ~70 schema migrations.

MLflow creates a ``sqlite:///`` store by running its Alembic migrations one by one (68 in MLflow 3.17): 1-2 s of CPU
for every new sweep directory or run directory (each has its own ``mlflow.db``), more than a short trial's logging
costs. The first time this MLflow version needs a store, :func:`seed_sqlite_store` lets MLflow make an empty one in
the cache (``~/.cache/sweeprl/mlflow/empty-<mlflow version>.db``; ``SWEEPRL_CACHE`` moves it); later stores are
copies of that file, made in milliseconds. The template is MLflow's own store (its tables at its schema version)
without its ``Default`` experiment, whose artifact location is the creating process's ``./mlruns``: MLflow adds that
row on opening a store that lacks it, so a copy ends up as the store MLflow would have made where it is opened. An
existing file, another database, or any failure here leaves the creation to MLflow as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

PREFIX = "sqlite:///"


def sqlite_path(uri: str) -> Optional[Path]:
    """The file of a ``sqlite:///`` store URI (``sqlite:////abs/mlflow.db`` or a path relative to the working
    directory), or None for another store, an in-memory database or a URI with query arguments."""
    if not uri.startswith(PREFIX):
        return None
    path = uri[len(PREFIX) :]
    if not path or path == ":memory:" or "?" in path:
        return None
    return Path(path)


def template_path() -> Path:
    import mlflow

    root = Path(os.environ.get("SWEEPRL_CACHE") or "~/.cache/sweeprl").expanduser()
    return root / "mlflow" / f"empty-{mlflow.__version__}.db"


def _place(source: Path, dest: Path) -> None:
    """Copy ``source`` to ``dest`` unless ``dest`` exists by then (another process made it first): the copy goes to
    a private file that is hard-linked into place, so no reader ever sees half a file."""
    part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        shutil.copyfile(source, part)
        try:
            os.link(part, dest)
        except FileExistsError:
            pass
    finally:
        part.unlink(missing_ok=True)


def seed_sqlite_store(uri: str) -> bool:
    """Make the store at ``uri`` a copy of MLflow's empty store when it is a ``sqlite:///`` file that does not
    exist yet in an existing directory; True when it did."""
    path = sqlite_path(uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    try:
        template = template_path()
        if not template.is_file():
            from mlflow.tracking import MlflowClient

            template.parent.mkdir(parents=True, exist_ok=True)
            fresh = template.with_name(f".{template.name}.{os.getpid()}.new")
            fresh.unlink(missing_ok=True)
            MlflowClient(f"{PREFIX}{fresh}").search_experiments()  # MLflow makes its store (migrations run)
            with contextlib.closing(sqlite3.connect(fresh)) as db, db:
                db.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
                db.execute("DELETE FROM experiments WHERE experiment_id = 0")
            _place(fresh, template)
            fresh.unlink(missing_ok=True)
        _place(template, path)
        return True
    except Exception as exc:  # noqa: BLE001 - an optimisation: MLflow creates the store itself instead
        log.debug("MLflow store template not used for %s: %s", uri, exc)
        return False


__all__ = ["seed_sqlite_store", "sqlite_path", "template_path"]
