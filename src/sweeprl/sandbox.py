"""Run model-written code under limits: the only place sweeprl executes a completion.

Two isolation levels, chosen once per process:

- **bubblewrap** (``bwrap`` on PATH and usable): read-only view of the root file system, a private
  size-limited tmpfs as ``/tmp`` (the working directory lives there, so nothing reaches the host disk and
  everything vanishes with the sandbox), new network/PID/IPC/UTS namespaces (no network at all, not even the
  host's loopback), ``--die-with-parent``, a new session.
- **fallback** (no usable bubblewrap): the same limits via rlimits and a process-group kill in a fresh host
  temp dir that is removed afterwards. There is *no* network or file-system isolation; this is logged once,
  loudly, as a warning.

In both cases the child runs with rlimits — CPU seconds, address space, number of processes, file size — and,
when sweeprl runs as root, as an unprivileged user id of its own (so the process limit is enforced: the kernel
does not apply RLIMIT_NPROC to root). Each run gets another id from an unused range: the kernel counts
RLIMIT_NPROC per user, so under one shared id (``nobody``) a fork bomb in one completion would leave the
completions scored beside it unable to start their compiler. A wall-clock timeout kills the whole process group
(and with it the PID namespace). The caller gets a :class:`RunResult`; the sandbox never raises for what the code
did.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

log = logging.getLogger(__name__)

NOBODY = 65534  # the bubblewrap probe's user
SANDBOX_UIDS = (1_800_000_000, 100_000_000)  # first id and size of the range a run's user id is drawn from
_next_run = itertools.count()
_warned_reduced = False
_probe_lock = threading.Lock()
_bwrap_usable: Optional[bool] = None


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30  # address space
    max_processes: int = 64
    file_size_bytes: int = 16 << 20  # largest single file
    tmpfs_bytes: int = 64 << 20  # total size of the working tmpfs (bubblewrap only)
    output_bytes: int = 1 << 20  # stdout/stderr kept per stream


@dataclass
class RunResult:
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    isolation: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run_uid() -> int:
    """A user id for one sandboxed run, from a range that no distribution assigns (:data:`SANDBOX_UIDS`); this
    process's id and a counter select it, so two runs share one only when their process ids collide in the range."""
    first, size = SANDBOX_UIDS
    return first + (os.getpid() * 4096 + next(_next_run)) % size


def demote_argv(uid: int) -> List[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def limit_prefix(limits: Limits, uid: Optional[int]) -> List[str]:
    """``prlimit … [setpriv …] --``: rlimits (and the drop to user ``uid``, unless None) applied by util-linux
    wrappers instead of a ``preexec_fn``, which is unsafe in the threads that score completions in parallel."""
    prefix = [
        "prlimit",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}",
        f"--nproc={limits.max_processes}",
        "--core=0",
        "--",
    ]
    if uid is not None:
        prefix += demote_argv(uid)
    return prefix


def bwrap_available() -> bool:
    """True when ``bwrap`` exists and can create its namespaces here (probed once)."""
    global _bwrap_usable
    with _probe_lock:
        if _bwrap_usable is None:
            exe = shutil.which("bwrap")
            if exe is None:
                _bwrap_usable = False
            else:
                demote = demote_argv(NOBODY) if os.geteuid() == 0 else []
                try:
                    probe = subprocess.run(
                        [*demote, exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "true"],
                        capture_output=True,
                        timeout=20,
                    )
                    _bwrap_usable = probe.returncode == 0
                    if not _bwrap_usable:
                        log.warning(
                            "bubblewrap is installed but cannot create namespaces here: %s",
                            probe.stderr.decode(errors="replace").strip(),
                        )
                except (OSError, subprocess.SubprocessError) as exc:
                    log.warning("bubblewrap probe failed: %s", exc)
                    _bwrap_usable = False
        return _bwrap_usable


def _warn_reduced() -> None:
    global _warned_reduced
    if not _warned_reduced:
        _warned_reduced = True
        log.warning(
            "SANDBOX ISOLATION REDUCED: bubblewrap (bwrap) is not available, so model-written code runs with "
            "rlimits and a process-group kill only — it can reach the network and write wherever this user "
            "can. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) for full isolation."
        )


class Sandbox:
    """Runs commands on files in a fresh, private working directory under :class:`Limits`."""

    def __init__(self, limits: Optional[Limits] = None, isolation: str = "auto"):
        if isolation not in ("auto", "bwrap", "rlimits"):
            raise ValueError(f"sandbox isolation={isolation!r}; allowed: auto, bwrap, rlimits")
        if isolation == "bwrap" and not bwrap_available():
            raise RuntimeError("sandbox isolation=bwrap requested but bubblewrap is not usable here")
        self.limits = limits if limits is not None else Limits()
        self.isolation = "bwrap" if isolation == "bwrap" or (isolation == "auto" and bwrap_available()) else "rlimits"
        self.demote = os.geteuid() == 0
        if self.isolation == "rlimits":
            _warn_reduced()

    def run(
        self,
        argv: Sequence[str],
        files: Mapping[str, str] | None = None,
        limits: Optional[Limits] = None,
        env: Optional[Dict[str, str]] = None,
    ) -> RunResult:
        """Write ``files`` into a fresh working directory, run ``argv`` there, remove everything afterwards."""
        limits = limits or self.limits
        host_dir = Path(tempfile.mkdtemp(prefix="sweeprl-sandbox-"))
        uid = run_uid() if self.demote else None
        try:
            for name, content in (files or {}).items():
                path = host_dir / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
            if uid is not None:
                for p in [host_dir, *host_dir.rglob("*")]:
                    os.chown(p, uid, uid)
            if self.isolation == "bwrap":
                cmd = self._bwrap_argv(host_dir, list(argv), limits)
                cwd = "/"
            else:
                cmd, cwd = list(argv), str(host_dir)
            return self._execute(cmd, cwd, limits, env, uid)
        finally:
            shutil.rmtree(host_dir, ignore_errors=True)

    def _bwrap_argv(self, host_dir: Path, argv: List[str], limits: Limits) -> List[str]:
        # The code works in /tmp/work, a copy of the input on a private size-limited tmpfs.
        setup = 'cp -R /tmp/input/. /tmp/work/ && cd /tmp/work && exec "$@"'
        return [
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--size",
            str(limits.tmpfs_bytes),
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            str(host_dir),
            "/tmp/input",
            "--dir",
            "/tmp/work",
            "--chdir",
            "/tmp/work",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--setenv",
            "HOME",
            "/tmp/work",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "SANDBOX_PIDNS",
            "1",  # tells scripts they own the PID namespace
            "--",
            "/bin/sh",
            "-c",
            setup,
            "sandbox",
            *argv,
        ]

    def _execute(
        self, cmd: List[str], cwd: str, limits: Limits, env: Optional[Dict[str, str]], uid: Optional[int]
    ) -> RunResult:
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": cwd, "TMPDIR": cwd}
        start = time.monotonic()
        timed_out = False
        # Output goes to files, not pipes, so RLIMIT_FSIZE bounds what a chatty program can make us hold.
        with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
            proc = subprocess.Popen(
                limit_prefix(limits, uid) + cmd,
                cwd=cwd,
                env={**base_env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out_f,
                stderr=err_f,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc.pid)  # the timeout, or leftovers of a finished command (background jobs)
                proc.wait()
            out_f.seek(0)
            err_f.seek(0)
            out, err = out_f.read(limits.output_bytes), err_f.read(limits.output_bytes)
        return RunResult(
            returncode=None if timed_out else proc.returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=timed_out,
            seconds=time.monotonic() - start,
            isolation=self.isolation,
        )


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
