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
  as usual, the lost ones FAIL with the launcher's error as reason.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweeprl_sweeper.outcomes import LostJob, Outcome, from_result_file, read_result

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


def check_launcher(
    config: DictConfig, slots: int, trial_timeout: Optional[float], process: Optional[bool]
) -> Optional[str]:
    """A problem message when process slots are combined with a launcher other than the basic one, else None."""
    if is_basic_launcher(config):
        return None
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
        lost = LostJob(reason)
        lost.__cause__ = error  # the launcher's traceback goes to the trial's failure record
        outcomes.append(from_result_file(Path(d), n_objectives, lost))
    return outcomes


def _last_change(d: Path, floor: float) -> float:
    try:
        return max([floor, d.stat().st_mtime, *(f.stat().st_mtime for f in d.iterdir() if f.is_file())])
    except OSError:
        return floor
