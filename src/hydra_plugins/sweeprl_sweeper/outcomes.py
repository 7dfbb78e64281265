"""THE result intake of the sweeper: how a finished job becomes COMPLETE, PRUNED or FAIL in the study.

Whatever ran the trial, its end becomes one :class:`Outcome`:

- a job of a Hydra launcher (in-process, joblib, submitit, Ray): :func:`from_job_return`;
- a trial process of a slot: :func:`from_process`, from the exit status and the process's result file;
- a job of a launcher round that raised (a SLURM job lost to a time limit): :func:`from_result_file`.

One trial's outcomes (one per seed) are merged by :func:`combine` and told to the study by :func:`tell`, the only
place that calls ``study.tell`` with a result.

The result file (``sweeper_result.json`` in the job's output dir) is how a job in another process hands its return
value back, for any app: process slots add the :class:`ResultFile` Hydra callback to the trial's command line, and
jobs of a launcher other than the basic one run through :class:`ResultWritingTask`. It holds the status, the return
value (as floats), and for a job that raised the exception's type, message and traceback.
"""

import functools
import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)

RESULT_FILE = "sweeper_result.json"
COMPLETE, PRUNED, FAIL = "COMPLETE", "PRUNED", "FAIL"


@dataclass
class Outcome:
    """How one trial (or one seed's job of it) ended."""

    state: str  # COMPLETE, PRUNED or FAIL
    values: Optional[List[float]] = None  # COMPLETE: what the study is told
    reason: str = ""  # FAIL / PRUNED: why
    dirs: List[str] = field(default_factory=list)  # the jobs' output dirs
    seconds: Optional[float] = None  # wall time of a trial process
    error: Optional[BaseException] = field(default=None, repr=False)  # the job's own exception (in-process)
    traceback: str = ""  # the job's traceback text, when known
    log_file: Optional[str] = None  # a trial process's output
    job_return: Any = field(default=None, repr=False)  # Hydra's JobReturn, to re-raise a job's exception as it is


class LostJob(RuntimeError):
    """The launcher could not collect this trial's job (killed, timed out, preempted, or never started)."""


class TrialJobError(RuntimeError):
    """A trial that ran in another process failed; the message carries its exception and traceback."""


def is_pruned(exc: Any) -> bool:
    """``optuna.TrialPruned`` (by name, so a trial process need not import Optuna to write its result)."""
    return isinstance(exc, BaseException) and any(c.__name__ == "TrialPruned" for c in type(exc).__mro__)


def _as_list(value: Any) -> Optional[List[Any]]:
    if value is None or isinstance(value, (str, bytes, dict)):
        return None
    try:
        return list(value)
    except TypeError:
        return None


def values_of(value: Any, n_objectives: int) -> Tuple[Optional[List[float]], str]:
    """(values, "") for a task's return value, or (None, why it cannot be told). One objective: anything ``float()``
    accepts (or a one-element sequence); several: any non-string iterable of float-castable values (tuple, list,
    numpy array, ListConfig) with one value per direction. NaN and inf are refused."""
    import math

    seq = _as_list(value)
    try:
        if n_objectives == 1:
            values = [float(seq[0])] if seq is not None and len(seq) == 1 else [float(value)]
        elif seq is None:
            return None, f"Return value must be a list or tuple of float-castable values. Got '{value}'."
        else:
            values = [float(v) for v in seq]
    except (TypeError, ValueError):
        if n_objectives == 1:
            return None, f"Return value must be float-castable. Got '{value}'."
        return None, f"Return value must be a list or tuple of float-castable values. Got '{value}'."
    if len(values) != n_objectives:
        return None, f"task returned {len(values)} value(s) for {n_objectives} direction(s)"
    if not all(math.isfinite(v) for v in values):
        return None, f"objective is not a finite number: {value!r}"
    return values, ""


def _failure(exc: BaseException, **kw: Any) -> Outcome:
    if is_pruned(exc):
        return Outcome(PRUNED, reason=str(exc) or "pruned", **kw)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Outcome(FAIL, reason=f"{type(exc).__name__}: {exc}", error=exc, traceback=text, **kw)


def from_job_return(ret: Any, n_objectives: int) -> Outcome:
    """A Hydra ``JobReturn`` of any launcher."""
    from hydra.core.utils import JobStatus

    dirs = [d for d in [_output_dir(ret)] if d]
    if ret.status == JobStatus.COMPLETED:
        values, why = values_of(ret.return_value, n_objectives)
        return Outcome(COMPLETE, values=values, dirs=dirs) if values else Outcome(FAIL, reason=why, dirs=dirs)
    # JobReturn exposes a failed job's exception only by re-raising it (and printing to stderr) on .return_value
    exc = ret._return_value
    if isinstance(exc, BaseException):
        return _failure(exc, dirs=dirs, job_return=ret)
    return Outcome(FAIL, reason="job failed", dirs=dirs, job_return=ret)


def _output_dir(ret: Any) -> Optional[str]:
    """The job's output dir (``working_dir`` is the process cwd, which Hydra no longer changes)."""
    try:
        return str(ret.hydra_cfg.hydra.runtime.output_dir)
    except Exception:  # noqa: BLE001 - launchers that return no hydra config
        return None


def from_result_file(job_dir: Path, n_objectives: int, lost: Optional[BaseException] = None) -> Outcome:
    """A job of a launcher round that raised: its result file, or FAIL with ``lost`` as the error."""
    data = read_result(job_dir)
    dirs = [str(job_dir)] if Path(job_dir).is_dir() else []
    if data is not None:
        return _from_stored(data, n_objectives, dirs=dirs)
    error = lost or LostJob("the job left no result")
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))  # with the launcher's cause
    return Outcome(FAIL, reason=str(error), error=error, traceback=text, dirs=dirs)


def from_process(
    trial_dir: Path, returncode: Optional[int], timed_out: bool, seconds: float, n_objectives: int, timeout, log_file
) -> Outcome:
    """A trial process of a slot, from its exit status and its result file."""
    from hydra_plugins.sweeprl_sweeper.slots import describe_exit, tail

    kw: Dict[str, Any] = {"dirs": [str(trial_dir)], "seconds": seconds, "log_file": str(log_file)}
    if timed_out or (returncode is not None and returncode < 0):
        return Outcome(FAIL, reason=describe_exit(returncode, timed_out, timeout, ""), **kw)
    data = read_result(trial_dir)
    if data is not None and (data.get("pruned") or data.get("status") == "FAILED" or returncode == 0):
        return _from_stored(data, n_objectives, **kw)
    return Outcome(FAIL, reason=describe_exit(returncode, False, timeout, tail(Path(log_file))), **kw)


def _from_stored(data: Dict[str, Any], n_objectives: int, **kw: Any) -> Outcome:
    if data.get("pruned"):
        return Outcome(PRUNED, reason=str(data.get("error_message") or "pruned"), **kw)
    if data.get("status") == "COMPLETED":
        values, why = values_of(data.get("value"), n_objectives)
        return Outcome(COMPLETE, values=values, **kw) if values else Outcome(FAIL, reason=why, **kw)
    reason = f"{data.get('error_type') or 'Error'}: {data.get('error_message') or ''}"
    text = str(data.get("traceback") or "")
    return Outcome(FAIL, reason=reason, error=TrialJobError(text.strip() or reason), traceback=text, **kw)


def combine(outcomes: Sequence[Outcome], aggregate: Callable[[List[List[float]]], List[float]]) -> Outcome:
    """One trial's outcome from its jobs' (one per seed): FAIL if any failed, else PRUNED if any was pruned, else
    COMPLETE with ``aggregate`` of the jobs' values."""
    if len(outcomes) == 1:
        return outcomes[0]
    dirs = [d for o in outcomes for d in o.dirs]
    for state in (FAIL, PRUNED):
        first = next((o for o in outcomes if o.state == state), None)
        if first is not None:
            return Outcome(
                state,
                reason=first.reason,
                dirs=dirs,
                error=first.error,
                traceback=first.traceback,
                job_return=first.job_return,
            )
    return Outcome(COMPLETE, values=aggregate([list(o.values or []) for o in outcomes]), dirs=dirs)


def tell(study: Any, trial: Any, outcome: Outcome, params_text: str = "") -> None:
    """Tell the study how ``trial`` ended (the reason as user attr ``fail_reason``/``prune_reason``), and log it."""
    from optuna.trial import TrialState

    if outcome.state == COMPLETE and outcome.values:
        values = outcome.values
        _tell(study, trial, values=values if len(values) > 1 else values[0])
        took = f" ({outcome.seconds:.0f} s)" if outcome.seconds is not None else ""
        shown = ", ".join(f"{v:.4g}" for v in values)
        log.info("[trial %d] COMPLETE objective=%s %s%s", trial.number, shown, params_text, took)
    elif outcome.state == PRUNED:
        trial.set_user_attr("prune_reason", outcome.reason[:2000])
        _tell(study, trial, state=TrialState.PRUNED)
        log.info("[trial %d] PRUNED %s (%s)", trial.number, outcome.reason, params_text)
    else:
        trial.set_user_attr("fail_reason", (outcome.reason or "failed")[:2000])
        _tell(study, trial, state=TrialState.FAIL)
        first = outcome.reason.splitlines()[0][:300] if outcome.reason else ""
        log.warning("[trial %d] FAIL %s (%s)", trial.number, first, params_text)


def _tell(study: Any, trial: Any, **kwargs: Any) -> None:
    try:
        study.tell(trial, **kwargs)
    except RuntimeError as exc:
        # GridSampler calls study.stop() once the grid is exhausted, which raises outside study.optimize; the
        # trial's state is already stored by then (hydra-optuna-sweeper 1.3 swallows the same error)
        if "`Study.stop` is supposed to be invoked inside an objective function or a callback" not in str(exc):
            raise


# ----------------------------------------------------------------------------------------------- result file
def write_result(output_dir: Any, value: Any = None, error: Optional[BaseException] = None) -> Path:
    """Write a job's result file (atomically: a reader never sees half a file)."""
    data: Dict[str, Any] = {"status": "FAILED" if error is not None else "COMPLETED", "pruned": is_pruned(error)}
    if error is not None:
        data["error_type"] = type(error).__name__
        data["error_message"] = str(error)[:5000]
        data["traceback"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))[-20000:]
    else:
        try:
            data["value"] = float(value)
        except (TypeError, ValueError):
            seq = _as_list(value)
            try:
                data["value"] = [float(v) for v in seq] if seq is not None else None
            except (TypeError, ValueError):
                data["value"] = None
        if data["value"] is None:
            data["value"] = repr(value)[:2000]  # not float-castable: told as FAIL with this text
    target = Path(output_dir) / RESULT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{RESULT_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(data, allow_nan=True))
    os.replace(tmp, target)
    return target


def read_result(job_dir: Any) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads((Path(job_dir) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ResultFile(Callback):
    """Hydra callback that writes the job's result file when the job ends (process slots add it to the trial's
    command line: ``++hydra.callbacks.sweeper_result._target_=hydra_plugins.sweeprl_sweeper.outcomes.ResultFile``).

    A trial under a distributed launcher (torchrun, ``accelerate launch``) is one job in N processes: only the main
    process (``RANK`` 0, or no ``RANK``) writes the file; the others' return values are not the trial's."""

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if int(os.environ.get("RANK") or 0) != 0:
            return
        output_dir = config.hydra.runtime.output_dir
        if job_return.status == JobStatus.COMPLETED:
            write_result(output_dir, value=job_return.return_value)
        else:
            exc = job_return._return_value  # only reachable by re-raising otherwise (see from_job_return)
            write_result(output_dir, error=exc if isinstance(exc, BaseException) else RuntimeError("job failed"))


PLACE_FILE = "job_place.json"


def record_place(output_dir: str) -> None:
    """Where a launcher's job runs, in its output dir: under SLURM its job id (``<array job>_<task>`` for an array
    task) and node, under Ray its node id and address; nothing elsewhere. The sweeper copies it into the trial's
    user attrs, and asks ``sacct`` how a SLURM job that left no result ended."""
    env = os.environ
    place: Dict[str, Any] = {}
    if env.get("SLURM_JOB_ID"):
        array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
        job = f"{array}_{task}" if array and task else env["SLURM_JOB_ID"]
        place = {"slurm_job": job, "node": env.get("SLURMD_NODENAME")}
    elif "ray" in sys.modules and sys.modules["ray"].is_initialized():
        ray = sys.modules["ray"]
        place = {"ray_node": ray.get_runtime_context().get_node_id(), "node": ray.util.get_node_ip_address()}
    if place:  # written whole, then renamed: a reader polling for the file never sees it half written
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        tmp = Path(output_dir) / (PLACE_FILE + ".tmp")
        tmp.write_text(json.dumps(place))
        os.replace(tmp, Path(output_dir) / PLACE_FILE)


def read_place(job_dir: Any) -> Dict[str, Any]:
    try:
        data = json.loads((Path(job_dir) / PLACE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ResultWritingTask:
    """The app's task function, writing the result file when it ends: what jobs of a launcher other than the basic
    one run, so a round whose launcher raises (a lost SLURM job) keeps the results of its other jobs."""

    def __init__(self, task: Callable[[Any], Any]):
        self.task = task
        self.launch_dir = os.getcwd()  # the driver's: a job that starts elsewhere runs from here, as a local one
        functools.update_wrapper(self, task)

    def __call__(self, cfg: Any) -> Any:
        from hydra.core.hydra_config import HydraConfig

        output_dir = HydraConfig.get().runtime.output_dir
        record_place(output_dir)
        here = os.getcwd()
        elsewhere = os.path.realpath(here) not in (os.path.realpath(self.launch_dir), os.path.realpath(output_dir))
        move = elsewhere and os.path.isdir(self.launch_dir)  # not when Hydra moved the job into its output dir
        if move:  # a Ray worker starts in its node's dir: relative paths of the app's config mean the launch dir
            os.chdir(self.launch_dir)
        try:
            value = self.task(cfg)
        except BaseException as exc:
            write_result(output_dir, error=exc)
            raise
        finally:
            if move:
                os.chdir(here)  # Ray reuses its workers
        write_result(output_dir, value=value)
        return value
