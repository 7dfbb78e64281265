"""Asynchronous trial slots: each trial in its own process, a finished slot refilled at once.

Hydra's launchers run a list of jobs and return when all of them are done, so one slow trial idles every other
slot of the batch. :class:`SlotPool` instead runs the app's own command (``python app.py`` / ``python -m pkg``,
from the hooks; or what the hooks make of it for the slot's devices, e.g. ``accelerate launch … -m pkg`` with one
process per device) with ``<overrides> hydra.run.dir=<trial dir>`` per trial, one per slot, and the sweeper polls it:
whatever finishes is told to the study and its slot gets the next trial immediately. The trial's return value comes
back through the result file that the :class:`~hydra_plugins.sweeprl_sweeper.outcomes.ResultFile` callback writes.
Per slot: its devices (``CUDA_VISIBLE_DEVICES``) and a CPU thread budget (``OMP_NUM_THREADS``/``MKL_NUM_THREADS``
and torch's thread count; :func:`cpu_budget` shared out) so slots do not oversubscribe the cores. A process gets its
own session, so a timeout (``trial_timeout``) or Ctrl-C kills the trial with everything it started. Output goes to
``trial_process.log`` in the trial dir.
"""

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

#: the trial command: fixed, or made per trial start from the slot's devices (None when no devices are set)
Command = Union[Sequence[str], Callable[[Optional[List[int]]], List[str]]]

PROCESS_LOG = "trial_process.log"
RESULT_CALLBACK = "++hydra.callbacks.sweeper_result._target_=hydra_plugins.sweeprl_sweeper.outcomes.ResultFile"


def cpu_budget() -> int:
    """CPUs the slots of this driver share: its affinity mask (taskset, cgroup cpusets, a SLURM allocation), capped
    by ``OMP_NUM_THREADS`` when the driver's own environment sets it (a job script's way of naming its cores; torch
    would use that many threads in any process that inherits it)."""
    try:
        cpus = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        cpus = os.cpu_count() or 1
    inherited = os.environ.get("OMP_NUM_THREADS", "")
    return min(cpus, int(inherited)) if inherited.isdigit() and int(inherited) > 0 else cpus


@dataclass
class Running:
    trial: Any  # optuna.Trial
    proc: subprocess.Popen
    slot: int
    trial_dir: Path
    started: float
    deadline: Optional[float]
    log_file: Any = field(repr=False)


@dataclass
class Exit:
    running: Running
    returncode: Optional[int]
    timed_out: bool
    seconds: float


class SlotPool:
    def __init__(
        self,
        slots: int,
        command: Command,
        base_args: Sequence[str],
        devices: Optional[Sequence[Sequence[int]]] = None,
        threads_per_slot: Optional[int] = None,
        trial_timeout: Optional[float] = None,
    ):
        self.slots = max(1, slots)
        if devices is not None and len(devices) < self.slots:
            raise ValueError(
                f"hydra.sweeper.devices lists {len(devices)} slot(s) for slots={self.slots}; allowed: one device list "
                "per slot"
            )
        self.command = command if callable(command) else list(command)
        self.base_args = list(base_args)
        self.devices = [list(d) for d in devices] if devices is not None else None
        self.threads = threads_per_slot or max(1, cpu_budget() // self.slots)
        self.trial_timeout = trial_timeout
        self.running: Dict[int, Running] = {}  # slot -> running trial

    def free_slots(self) -> List[int]:
        return [s for s in range(self.slots) if s not in self.running]

    def env_for(self, slot: int) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(
            OMP_NUM_THREADS=str(self.threads),
            MKL_NUM_THREADS=str(self.threads),
            SWEEPRL_TORCH_THREADS=str(self.threads),
            SWEEPRL_PRECHECKED="1",  # the driver checked the space and the tracking URI: no pre-pass (sweeprl.cli.app)
        )
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in self.devices[slot])
        return env

    def command_for(self, slot: int) -> List[str]:
        """The command that starts a trial in ``slot`` (before its arguments)."""
        if callable(self.command):
            return list(self.command(list(self.devices[slot]) if self.devices is not None else None))
        return list(self.command)

    def start(self, trial: Any, overrides: Sequence[str], trial_dir: Path, slot: int) -> Running:
        trial_dir.mkdir(parents=True, exist_ok=True)
        from hydra_plugins.sweeprl_sweeper.search_space import format_value

        log_file = open(trial_dir / PROCESS_LOG, "w")  # noqa: SIM115 - closed when the trial ends
        run_dir = f"hydra.run.dir={format_value(str(trial_dir))}"
        command = self.command_for(slot)
        cmd = [*command, *self.base_args, *overrides, run_dir, "hydra.mode=RUN", RESULT_CALLBACK]
        log_file.write("# " + " ".join(cmd) + "\n")
        log_file.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env_for(slot),
            start_new_session=True,
        )
        now = time.monotonic()
        run = Running(
            trial, proc, slot, trial_dir, now, now + self.trial_timeout if self.trial_timeout else None, log_file
        )
        self.running[slot] = run
        return run

    def poll(self) -> List[Exit]:
        """Trials that ended since the last poll (timeouts are killed here)."""
        done = []
        now = time.monotonic()
        for slot, run in list(self.running.items()):
            rc = run.proc.poll()
            timed_out = False
            if rc is None and run.deadline is not None and now > run.deadline:
                kill_group(run.proc)
                timed_out = True
                rc = run.proc.wait()
            if rc is not None:
                kill_group(run.proc)  # anything the trial left running
                run.log_file.close()
                del self.running[slot]
                done.append(Exit(run, None if timed_out else rc, timed_out, now - run.started))
        return done

    def terminate_all(self, grace: float = 10.0) -> List[Exit]:
        """Ctrl-C: SIGTERM every trial's process group, SIGKILL after ``grace`` seconds."""
        for run in self.running.values():
            try:
                os.killpg(run.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while self.running and time.monotonic() < deadline:
            if all(r.proc.poll() is not None for r in self.running.values()):
                break
            time.sleep(0.1)
        for run in self.running.values():
            kill_group(run.proc)
            run.proc.wait()
        return self.poll()


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path: Path, n: int = 50) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def describe_exit(returncode: Optional[int], timed_out: bool, timeout: Optional[float], log_tail: str) -> str:
    """A one-line reason for a trial process that did not complete."""
    if timed_out:
        return f"timeout: trial exceeded trial_timeout={timeout:g}s and was killed"
    if returncode is not None and returncode < 0:
        name = (
            signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        )
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    errors = [ln.strip() for ln in log_tail.splitlines() if "Error" in ln or "Exception" in ln]
    # under a distributed launcher (torchrun, accelerate launch) the last one is its ChildFailedError: the cause is
    # the failed process's own exception, printed before it
    errors = [ln for ln in errors if "ChildFailedError" not in ln and "elastic_launch" not in ln] or errors
    last = errors[-1] if errors else (log_tail.strip().splitlines()[-1] if log_tail.strip() else "no output")
    return f"exit code {returncode}: {last[:500]}"
