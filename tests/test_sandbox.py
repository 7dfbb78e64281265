"""The sandbox contains hostile programs: bounded time, nothing left behind, no escape, no network."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from sweeprl.sandbox import Limits, Sandbox, bwrap_available

LIMITS = Limits(
    wall_seconds=4,
    cpu_seconds=3,
    memory_bytes=512 << 20,
    max_processes=32,
    file_size_bytes=4 << 20,
    tmpfs_bytes=16 << 20,
)
ISOLATIONS = ["bwrap", "rlimits"] if bwrap_available() else ["rlimits"]
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap not usable here (CI installs it)")


def leftovers() -> set:
    return set(Path(tempfile.gettempdir()).glob("sweeprl-sandbox-*"))


FORK_BOMB = "f() { f | f & }; f; sleep 30"


def sandbox_user_processes() -> int:
    """Live (non-zombie) fork-bomb processes (forks keep the shell's command line; a sandbox of a test running
    beside this one is not counted)."""
    out = subprocess.run(["ps", "-e", "-o", "stat=,args="], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if not line.lstrip().startswith("Z") and FORK_BOMB in line)


@pytest.fixture(params=ISOLATIONS)
def box(request, private_tempdir):
    before = leftovers()
    yield Sandbox(LIMITS, isolation=request.param)
    assert leftovers() == before, "the sandbox left its temp dir behind"


def test_runs_code_in_a_private_dir_with_the_given_files(box):
    r = box.run(["sh", "-c", "cat in.txt; echo out > made.txt; cat made.txt"], files={"in.txt": "hello\n"})
    assert r.ok and r.stdout == "hello\nout\n"


def test_infinite_loop_ends_at_the_wall_limit(box):
    t0 = time.monotonic()
    r = box.run(["sh", "-c", "while :; do :; done"])
    assert not r.ok  # killed by the CPU limit (3 s) or the wall clock (4 s), whichever comes first
    assert time.monotonic() - t0 < LIMITS.wall_seconds + 3
    r = box.run(["sh", "-c", "sleep 60"])  # no CPU use: only the wall clock can stop it
    assert r.timed_out and r.returncode is None


def test_fork_bomb_is_contained(box):
    base = sandbox_user_processes()
    t0 = time.monotonic()
    r = box.run(["sh", "-c", FORK_BOMB])
    assert time.monotonic() - t0 < LIMITS.wall_seconds + 3
    assert not r.ok
    deadline = time.monotonic() + 5
    while sandbox_user_processes() > base and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sandbox_user_processes() <= base, "fork bomb processes survived the sandbox"


def test_memory_hog_is_stopped(box):
    # the address-space limit stops it, not the clock: a wall limit that CPU contention cannot reach first
    limits = dataclasses.replace(LIMITS, wall_seconds=30)
    r = box.run(["bash", "-c", "x=$(head -c 2000000000 /dev/zero | tr '\\0' a); echo allocated ${#x}"], limits=limits)
    assert not r.timed_out and r.returncode != 0
    assert "allocated" not in r.stdout and "cannot allocate" in r.stderr


def test_disk_filler_is_stopped(box):
    t0 = time.monotonic()
    r = box.run(["sh", "-c", "i=0; while :; do head -c 3000000 /dev/zero > f$i || exit 9; i=$((i+1)); done"])
    assert not r.ok
    assert time.monotonic() - t0 < LIMITS.wall_seconds + 3


def test_output_flood_is_bounded(box):
    r = box.run(["sh", "-c", "yes flood"])
    assert len(r.stdout) <= LIMITS.output_bytes and not r.ok


@needs_bwrap
def test_writes_outside_the_workdir_do_not_reach_the_host(tmp_path):
    target = Path(tempfile.gettempdir()) / f"sweeprl-escape-{os.getpid()}"
    home_target = tmp_path / "escape.txt"
    os.chmod(tmp_path, 0o777)
    r = Sandbox(LIMITS, isolation="bwrap").run(
        ["sh", "-c", f"echo x > {target}; echo x > {home_target}; echo y > /etc/sweeprl-escape; true"]
    )
    assert r.ok
    assert not target.exists() and not home_target.exists() and not Path("/etc/sweeprl-escape").exists()


@needs_bwrap
def test_no_network_even_to_host_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    # positive control: the same command outside the sandbox does reach the listener
    subprocess.run(["bash", "-c", f"echo hi > /dev/tcp/127.0.0.1/{port}"], check=True, timeout=10)
    conn, _ = server.accept()
    assert conn.recv(16) == b"hi\n"
    conn.close()
    r = Sandbox(LIMITS, isolation="bwrap").run(["bash", "-c", f"echo leak > /dev/tcp/127.0.0.1/{port} && echo sent"])
    assert "sent" not in r.stdout and r.returncode != 0
    assert "Connection refused" in r.stderr or "Network is unreachable" in r.stderr, r.stderr
    with pytest.raises(socket.timeout):
        server.accept()  # nothing ever connected
    server.close()


def test_rlimits_fallback_warns_once(caplog):
    import sweeprl.sandbox as sb

    sb._warned_reduced = False
    with caplog.at_level("WARNING", logger="sweeprl.sandbox"):
        Sandbox(LIMITS, isolation="rlimits")
        Sandbox(LIMITS, isolation="rlimits")
    msgs = [r.getMessage() for r in caplog.records if "ISOLATION REDUCED" in r.getMessage()]
    assert len(msgs) == 1 and "bubblewrap" in msgs[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="the drop to a user id of its own happens when sweeprl runs as root")
def test_each_run_has_a_user_id_of_its_own_so_process_limits_are_not_shared(box):
    """RLIMIT_NPROC counts per user: runs under one id would share one budget of processes."""
    from sweeprl.sandbox import SANDBOX_UIDS

    ids = {int(box.run(["id", "-u"]).stdout) for _ in range(3)}
    first, size = SANDBOX_UIDS
    assert len(ids) == 3 and all(first <= i < first + size for i in ids)
