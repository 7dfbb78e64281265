"""The sweeper with Hydra launchers other than the basic one (submitit SLURM/local, Ray, joblib).

With ``slots=1`` and no ``trial_timeout`` the sweeper hands each round of ``n_jobs`` trials to the configured
launcher and tells the study what the launcher returns. Two things differ from the in-process basic launcher:

- process slots (``slots>1``, ``trial_timeout``, ``process=true``) are local processes of the driver and bypass
  the launcher, so together with another launcher they are refused (:func:`check_launcher`);
- a job that dies without returning (SLURM timeout or preemption, a SIGKILLed worker, a lost Ray node) makes
  the launcher raise for the whole round (submitit's ``UncompletedJobError``, Ray's ``WorkerCrashedError``), so
  the results of the round's other jobs would be lost. Jobs of such launchers run through
  :class:`~hydra_plugins.sweeprl_sweeper.outcomes.ResultWritingTask`, which leaves a result file in each job's
  output dir, and :func:`recover_round` turns those files into outcomes: finished trials are COMPLETE or PRUNED
  as usual, the lost ones FAIL with the launcher's error as reason. The launcher raises for the first lost job
  only, so each job also records where it runs (``outcomes.record_place``) and a lost SLURM job's reason
  is its own end as ``sacct`` reports it (TIMEOUT, CANCELLED, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED).
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.sweeprl_sweeper.outcomes import LostJob, Outcome, from_result_file, read_place, read_result

log = logging.getLogger(__name__)

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def launcher_name(config: DictConfig) -> str:
    """The ``hydra/launcher`` choice (``basic``, ``submitit_slurm``, ``ray``, …), or the launcher's class."""
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None)
    name = choices.get("hydra/launcher") if choices is not None else None
    return str(name or OmegaConf.select(config, "hydra.launcher._target_", default="basic"))


def is_basic_launcher(config: DictConfig) -> bool:
    target = OmegaConf.select(config, "hydra.launcher._target_", default=None)
    return target in (None, BASIC_LAUNCHER)


def prepare_launcher(launcher: Any) -> None:
    """Settings a launcher needs to work at all. hydra-ray-launcher 1.2 always passes ``object_store_memory`` to
    ``ray.init`` (for small CI machines), which Ray refuses when it joins a running cluster
    (``init.address``): the sweeper passes it as null there, unless it was set."""
    ray_cfg = getattr(launcher, "ray_cfg", None)
    init = ray_cfg.get("init") if ray_cfg is not None else None
    if init is not None and init.get("address") and "object_store_memory" not in init:
        with open_dict(init):
            init.object_store_memory = None


def check_launcher(
    config: DictConfig, slots: int, trial_timeout: Optional[float], process: Optional[bool]
) -> Optional[str]:
    """A problem message when process slots are combined with a launcher other than the basic one, or when a
    submitit launcher's time limit leaves no time before its time-out signal, else None."""
    if is_basic_launcher(config):
        return None
    timeout_min = OmegaConf.select(config, "hydra.launcher.timeout_min", default=None)
    delay = OmegaConf.select(config, "hydra.launcher.signal_delay_s", default=None)
    if timeout_min is not None and delay is not None and timeout_min * 60 - delay < 60:
        # submitit asks SLURM for its time-out signal signal_delay_s before the limit, and SLURM may send it up to
        # 60 s earlier than asked (sbatch --signal): a job signalled at its start is ended by submitit
        text = (
            f"hydra.launcher.timeout_min={timeout_min} ({timeout_min * 60} s) leaves less than 60 s before "
            f"hydra.launcher.signal_delay_s={delay}: SLURM sends the time-out signal up to 60 s early, and submitit "
            "ends a signalled job ('timed-out too many times'); raise timeout_min or lower signal_delay_s"
        )
        if timeout_min * 60 <= delay:
            return text  # every job would be signalled as it starts
        log.warning(text)
    used = [
        s
        for s, on in (
            ("slots=%d" % slots, slots > 1),
            ("trial_timeout=%g" % (trial_timeout or 0), trial_timeout),
            ("process=true", process),
        )
        if on
    ]
    if not used:
        return None
    name = launcher_name(config)
    return (
        f"hydra.sweeper.{', hydra.sweeper.'.join(used)} runs trials as local processes of the sweep driver, which "
        f"would bypass hydra/launcher={name}; with a launcher use hydra.sweeper.n_jobs (trials per round) and the "
        f"launcher's own limits (e.g. hydra.launcher.timeout_min for submitit), or drop hydra/launcher for local slots"
    )


def slurm_end(job_dir: Path, attempts: int = 5) -> Optional[str]:
    """How the SLURM job that ran in ``job_dir`` ended, from ``sacct`` ("TIMEOUT", "CANCELLED by 0",
    "OUT_OF_MEMORY", …, with its exit code and node), or None (not a SLURM job, or no accounting)."""
    info = read_place(job_dir)
    if not info.get("slurm_job"):
        return None
    cmd = ["sacct", "-X", "-n", "-P", "-j", str(info["slurm_job"]), "-o", "State,ExitCode"]
    for _ in range(attempts):  # the controller may take a moment to account a job it just ended
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            return None
        state, _, code = (out[0] if out else "").partition("|")
        if state and state not in ("RUNNING", "PENDING", "COMPLETING"):
            where = f" on {info['node']}" if info.get("node") else ""
            return f"SLURM job {info['slurm_job']}{where} ended {state} (exit code {code}) without a result"
        time.sleep(1.0)
    return None


def recover_round(
    dirs: Sequence[Path], error: BaseException, settle_seconds: float, n_objectives: int, poll: float = 1.0
) -> List[Outcome]:
    """One :class:`Outcome` per job of a round whose ``launcher.launch`` raised, from the jobs' result files.

    ``dirs`` are the jobs' output dirs in launch order. Jobs of the round may still be running (submitit collects
    results in order and raises at the first lost job), so this waits until every job has written its result file
    or its dir has been quiet (no file changed) for ``settle_seconds``.
    """
    first = str(error).strip().splitlines()
    reason = f"the launcher lost this job: {type(error).__name__}: {' | '.join(first[:3])[:1500] if first else ''}"
    since = time.time()
    while True:
        pending = [
            d for d in dirs if read_result(d) is None and _last_change(Path(d), since) > time.time() - settle_seconds
        ]
        if not pending:
            break
        time.sleep(poll)
    log.warning("launcher error in a round of %d job(s): %s; results recovered from the job dirs", len(dirs), reason)
    outcomes = []
    for d in dirs:
        own = slurm_end(Path(d)) if read_result(d) is None else None  # this job's own end, not the first lost job's
        lost = LostJob(own or reason)
        lost.__cause__ = error  # the launcher's traceback goes to the trial's failure record
        outcomes.append(from_result_file(Path(d), n_objectives, lost))
    return outcomes


def _last_change(d: Path, floor: float) -> float:
    try:
        return max([floor, d.stat().st_mtime, *(f.stat().st_mtime for f in d.iterdir() if f.is_file())])
    except OSError:
        return floor
