"""A new embedded MLflow store is a copy of MLflow's own empty store, and ends up as the store MLflow makes."""

from __future__ import annotations

import sqlite3

import pytest

from sweeprl.tracking_store import seed_sqlite_store, sqlite_path, template_path


def contents(path, where):
    """Every table's rows, timestamps (ms since 1970) left out and the store's directory ``where`` named ``DIR``.
    The tables' DDL is not compared: MLflow's migrations order a table's constraints by string hashing, so two
    stores MLflow makes differ there."""
    con = sqlite3.connect(path)

    def value(v):
        return v.replace(f"/{where}/", "/DIR/") if isinstance(v, str) else v

    tables = [n for (n,) in con.execute("select name from sqlite_master where type = 'table' order by name")]
    query = 'select * from "{}"'.format
    return {
        t: sorted(tuple(value(v) for v in r if not (isinstance(v, int) and v > 10**12)) for r in con.execute(query(t)))
        for t in tables
    }


def test_a_seeded_store_is_the_store_mlflow_makes_where_it_is_opened(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("SWEEPRL_CACHE", str(tmp_path / "cache"))
    for name in ("made", "seeded", "again"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "made")
    MlflowClient(f"sqlite:///{tmp_path}/made/mlflow.db").search_experiments()
    made = MlflowClient(f"sqlite:///{tmp_path}/made/mlflow.db").get_experiment("0").artifact_location
    for name in ("seeded", "again"):  # the first makes the template, the second copies it
        monkeypatch.chdir(tmp_path / name)
        assert seed_sqlite_store(f"sqlite:///{tmp_path}/{name}/mlflow.db")
        client = MlflowClient(f"sqlite:///{tmp_path}/{name}/mlflow.db")
        default = client.get_experiment("0")
        assert default.name == "Default" and default.artifact_location == made.replace("/made/", f"/{name}/")
        assert contents(tmp_path / name / "mlflow.db", name) == contents(tmp_path / "made" / "mlflow.db", "made")
        exp = client.create_experiment("study")  # and it works as a store: the next experiment id, runs, metrics
        run = client.create_run(exp)
        client.log_metric(run.info.run_id, "reward", 0.5, step=1)
        assert exp == "1" and client.get_metric_history(run.info.run_id, "reward")[0].value == 0.5
    assert template_path().is_file() and template_path().parent == tmp_path / "cache" / "mlflow"


@pytest.mark.parametrize(
    "uri",
    ["http://127.0.0.1:5000", "postgresql://u@h/db", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "file:./mlruns"],
)
def test_only_a_new_sqlite_file_is_seeded(uri, tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert sqlite_path(uri) is None and not seed_sqlite_store(uri)
    assert not (tmp_path / "cache").exists()


def test_an_existing_file_or_a_missing_directory_is_left_to_mlflow(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPRL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "mlflow.db").write_text("not touched")
    assert not seed_sqlite_store(f"sqlite:///{tmp_path}/mlflow.db")
    assert (tmp_path / "mlflow.db").read_text() == "not touched"
    assert not seed_sqlite_store(f"sqlite:///{tmp_path}/missing/mlflow.db")
    assert not (tmp_path / "missing").exists()
