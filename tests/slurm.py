"""A throwaway SLURM cluster on this machine for tests: munged, MariaDB, slurmdbd, slurmctld and one slurmd, all
from Debian's packages (``scripts/setup.sh --test`` installs them), started in a temporary directory on free
loopback ports and stopped afterwards. It needs root (slurmd runs jobs as their user); with accounting, so that
``sacct`` answers as on a real cluster (submitit reads job states through it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List

from conftest import free_port

DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


def slurm_missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "a SLURM test cluster needs root (slurmd starts jobs as their user)"
    paths = ["/usr/sbin/" + d for d in DAEMONS] + ["/usr/bin/sbatch", "/usr/bin/sacct", "/usr/bin/mariadb-install-db"]
    missing = [p for p in paths if not os.path.exists(p)]
    return (
        f"SLURM not installed (scripts/setup.sh --test installs it): missing {', '.join(missing)}" if missing else None
    )


def _wait(check, what: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    logs = [log, log.with_suffix(".out")]
    tail = "\n".join(p.read_text(errors="replace")[-3000:] for p in logs if p.exists()) or "(no log)"
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s; its log:\n{tail}")


def _unix_socket_open(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
        return True
    except OSError:
        return False


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _daemon(cmd: List[str], env: Dict[str, str], out: Path) -> subprocess.Popen:
    """A daemon in the foreground, its own output in ``out`` (what it says before its log file is open)."""
    with open(out, "wb") as f:
        return subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)


class Cluster:
    """A running cluster; ``env`` has SLURM_CONF set for the client commands (sbatch, squeue, sacct, scancel)."""

    def __init__(self, root: Path, env: Dict[str, str]):
        self.root, self.env = root, env

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def sacct(self, job: str) -> List[Dict[str, str]]:
        """Every step of a job (array tasks included) as sacct reports it: JobID, State, ExitCode, Elapsed."""
        out = self.run("sacct", "-X", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode,Elapsed").stdout
        return [dict(zip(("JobID", "State", "ExitCode", "Elapsed"), line.split("|"))) for line in out.splitlines()]


@contextmanager
def slurm_cluster(cpus: int = 2) -> Iterator[Cluster]:
    why = slurm_missing()
    if why:
        raise RuntimeError(why)
    root = Path(tempfile.mkdtemp(prefix="sweeprl-slurm-"))
    procs: List[subprocess.Popen] = []
    host = socket.gethostname()
    ports = {k: free_port() for k in ("db", "dbd", "ctld", "slurmd")}
    for d in ("munge", "db", "state", "spool", "log"):
        (root / d).mkdir()
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    try:
        # munge on its default socket (slurmctld's connection to slurmdbd ignores AuthInfo=socket=): a running
        # munged is used as it is, else one is started with a key of its own
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (root / "munge").chmod(0o700)
        sock = Path("/run/munge/munge.socket.2")
        sock.parent.mkdir(parents=True, exist_ok=True)
        if not _unix_socket_open(sock):
            procs.append(
                subprocess.Popen(
                    [
                        "munged",
                        "--foreground",
                        "--force",
                        f"--key-file={key}",
                        f"--socket={sock}",
                        f"--pid-file={root / 'munge' / 'munged.pid'}",
                        f"--log-file={root / 'log' / 'munged.log'}",
                        f"--seed-file={root / 'munge' / 'munged.seed'}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )
            )
            _wait(lambda: _unix_socket_open(sock), "munged", root / "log" / "munged.log")
        # MariaDB for slurmdbd's accounting
        subprocess.run(
            [
                "mariadb-install-db",
                f"--datadir={root / 'db'}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        procs.append(
            subprocess.Popen(
                [
                    "mariadbd",
                    "--no-defaults",
                    f"--datadir={root / 'db'}",
                    "--user=root",
                    f"--port={ports['db']}",
                    "--bind-address=127.0.0.1",
                    f"--socket={root / 'db' / 'mysqld.sock'}",
                    f"--log-error={root / 'log' / 'mariadb.log'}",
                    "--skip-name-resolve",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )
        _wait(lambda: _port_open(ports["db"]), "mariadbd", root / "log" / "mariadb.log")
        conf = root / "slurm.conf"  # slurmdbd reads slurmdbd.conf beside SLURM_CONF
        dbd = root / "slurmdbd.conf"
        dbd.write_text(
            f"AuthType=auth/munge\nAuthInfo=socket={sock}\nDbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={ports['dbd']}\n"
            f"SlurmUser=root\nLogFile={root / 'log' / 'slurmdbd.log'}\nPidFile={root / 'slurmdbd.pid'}\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={ports['db']}\n"
            "StorageUser=root\nStorageLoc=slurm_acct_db\n"
        )
        dbd.chmod(0o600)
        procs.append(_daemon(["slurmdbd", "-D"], env, root / "log" / "slurmdbd.out"))
        _wait(lambda: _port_open(ports["dbd"]), "slurmdbd", root / "log" / "slurmdbd.log")
        conf.write_text(
            f"ClusterName=sweeprl\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ports['ctld']}\n"
            f"SlurmdPort={ports['slurmd']}\nAuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n"
            "SlurmUser=root\nSlurmdUser=root\nMailProg=/bin/true\n"
            f"StateSaveLocation={root / 'state'}\nSlurmdSpoolDir={root / 'spool'}\n"
            f"SlurmctldPidFile={root / 'slurmctld.pid'}\nSlurmdPidFile={root / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}\nSlurmdLogFile={root / 'log' / 'slurmd.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\nSwitchType=switch/none\n"
            "SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
            "ReturnToService=2\nSlurmdParameters=config_overrides\nJobAcctGatherType=jobacct_gather/none\nKillWait=5\nMinJobAge=300\n"
            "SchedulerParameters=sched_interval=1\nMessageTimeout=30\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
            f"AccountingStoragePort={ports['dbd']}\nJobCompType=jobcomp/none\n"
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=16000 State=UNKNOWN\n"
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n"
        )
        procs.append(_daemon(["slurmctld", "-D", "-i"], env, root / "log" / "slurmctld.out"))
        _wait(lambda: _port_open(ports["ctld"]), "slurmctld", root / "log" / "slurmctld.log")
        procs.append(_daemon(["slurmd", "-D"], env, root / "log" / "slurmd.out"))
        cluster = Cluster(root, env)
        _wait(
            lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%t", check=False).stdout,
            "slurmd",
            root / "log" / "slurmd.log",
        )
        yield cluster
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)
