"""A throwaway PostgreSQL server on 127.0.0.1 for tests (Debian's postgresql package; run as user postgres
when the tests run as root)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

from conftest import free_port


def pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


@contextmanager
def postgres_server(max_connections: int = 100) -> Iterator[str]:
    """Yields a base URL ``postgresql+psycopg2://sweeprl@127.0.0.1:<port>``; databases via ``createdb``."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
    root = tempfile.mkdtemp(prefix="sweeprl-pg-")
    data = os.path.join(root, "data")
    prefix = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    try:
        subprocess.run(
            [*prefix, f"{bindir}/initdb", "-D", data, "-U", "sweeprl", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                *prefix,
                f"{bindir}/pg_ctl",
                "-D",
                data,
                "-l",
                os.path.join(root, "log"),
                "-w",
                "start",
                "-o",
                f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections={max_connections}",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"postgresql+psycopg2://sweeprl@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60
        )
        shutil.rmtree(root, ignore_errors=True)


def createdb(base_url: str, name: str) -> str:
    import sqlalchemy

    engine = sqlalchemy.create_engine(base_url + "/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return f"{base_url}/{name}"
