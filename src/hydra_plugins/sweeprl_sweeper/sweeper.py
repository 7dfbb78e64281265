"""The ``sweeprl`` Hydra sweeper: an Optuna study in persistent storage driving Hydra jobs.

Written for sweeprl rather than reusing hydra-optuna-sweeper, whose newest release pins optuna<3, breaks with
current SQLAlchemy, has no pruning and re-numbers jobs on resume (see shared/DESIGN.md). The loop is Optuna's
ask-and-tell interface: ask up to ``n_jobs`` trials, turn each into Hydra overrides, launch them through the
configured launcher, tell the results. ``n_trials`` is the study's total of finished (COMPLETE or PRUNED)
trials, so re-running the same command continues the study where it stopped.

Each trial receives ``sweeprl.study_name``, ``sweeprl.storage``, ``sweeprl.trial_number`` and
``sweeprl.parent_run_id`` as overrides: its output dir is ``<sweep dir>/trial_<number>`` and its MLflow run is
a child of the sweep's parent run.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from hydra_plugins.sweeprl_sweeper.search_space import SearchSpace, SearchSpaceError, format_value, parse_search_space
from sweeprl import trial_record

log = logging.getLogger(__name__)


class SweepAborted(HydraException):
    """Too many trials failed (``max_failure_rate``); the study and the results file are left consistent."""


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class SweeprlSweeper(Sweeper):
    def __init__(
        self,
        sampler: Any,
        direction: Any,
        pruner: Any,
        storage: Optional[str],
        study_name: Optional[str],
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: Optional[Dict[str, str]],
        custom_search_space: Optional[str],
        seeds: Optional[List[int]] = None,
        slots: int = 1,
        devices: Optional[List[List[int]]] = None,
        threads_per_slot: Optional[int] = None,
        trial_timeout: Optional[float] = None,
        process: Optional[bool] = None,
        retries: int = 0,
        heartbeat_interval: int = 10,
        grace_period: Optional[int] = None,
        slot_refill: str = "async",
        report: bool = True,
        progress: str = "auto",
    ) -> None:
        self.sampler_cfg = sampler
        self.pruner_cfg = pruner
        self.directions = (
            [str(d) for d in direction]
            if isinstance(direction, Sequence) and not isinstance(direction, str)
            else [str(direction)]
        )
        self.storage = storage
        self.study_name = study_name
        self.n_trials = int(n_trials)
        self.n_jobs = max(1, int(n_jobs))
        self.max_failure_rate = float(max_failure_rate)
        self.params = dict(params) if params else {}
        self.custom_search_space = custom_search_space
        self.seeds = [int(x) for x in seeds] if seeds else []
        self.slots = max(1, int(slots))
        self.devices = [list(d) for d in devices] if devices else None
        self.threads_per_slot = threads_per_slot
        self.trial_timeout = float(trial_timeout) if trial_timeout else None
        self.process = process
        self.retries = max(0, int(retries))
        self.heartbeat_interval = max(1, int(heartbeat_interval))
        self.grace_period = int(grace_period) if grace_period else 6 * self.heartbeat_interval
        if slot_refill not in ("async", "batch"):
            raise SearchSpaceError(f"hydra.sweeper.slot_refill={slot_refill!r}; allowed: async, batch")
        self.slot_refill = slot_refill
        self.report = bool(report)
        from sweeprl.progress import MODES

        if progress not in MODES:
            raise SearchSpaceError(f"hydra.sweeper.progress={progress!r}; allowed: {', '.join(MODES)}")
        self.progress_mode = progress
        self.progress = None
        self._tracebacks: Dict[int, str] = {}
        self._mine: List[optuna.Trial] = []  # trials this driver asked
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        self.sweep_dir = str(config.hydra.sweep.dir)

    # ------------------------------------------------------------------------------------ checks
    def _check_settings(self) -> None:
        bad = [d for d in self.directions if d not in ("maximize", "minimize")]
        if bad:
            raise SearchSpaceError(
                f"hydra.sweeper.direction={bad} is invalid; allowed: maximize, minimize (or a list of them)"
            )
        if self.n_trials < 1:
            raise SearchSpaceError(f"hydra.sweeper.n_trials={self.n_trials} is invalid; allowed: an int >= 1")
        if not 0 <= self.max_failure_rate <= 1:
            raise SearchSpaceError(
                f"hydra.sweeper.max_failure_rate={self.max_failure_rate} is invalid; allowed: a float in [0, 1]"
            )
        if not self.study_name:
            raise SearchSpaceError(
                "hydra.sweeper.study_name is not set; allowed: any name (sweep presets set ${name}-<sweep>)"
            )
        from hydra_plugins.sweeprl_sweeper.launchers import check_launcher

        problem = (
            check_launcher(self.config, self.slots, self.trial_timeout, self.process)
            if self.config is not None
            else None
        )
        if problem:  # process slots bypass hydra/launcher: refuse rather than silently run locally
            raise SearchSpaceError(problem)

    def _check_space(self, space: SearchSpace) -> None:
        assert self.config is not None
        check_search_space(task_config(self.config), space)
        if self.custom_search_space:
            self._custom_fn()  # import errors surface now, not at trial 1

    def _custom_fn(self):
        module_name, _, fn_name = str(self.custom_search_space).rpartition(".")
        try:
            return getattr(importlib.import_module(module_name), fn_name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise SearchSpaceError(
                f"hydra.sweeper.custom_search_space={self.custom_search_space!r} cannot be imported: {exc}"
            ) from exc

    # ------------------------------------------------------------------------------------ study
    def _make_sampler(self, space: SearchSpace) -> optuna.samplers.BaseSampler:
        if self.sampler_cfg is None:
            return optuna.samplers.TPESampler()
        extra = {}
        if (
            str(self.sampler_cfg.get("_target_", "")).endswith("GridSampler")
            and self.sampler_cfg.get("search_space") is None
        ):
            extra["search_space"] = _grid_of(space)
        return _instantiate_optuna("sampler", self.sampler_cfg, extra)

    def _make_pruner(self) -> optuna.pruners.BasePruner:
        if self.pruner_cfg is None:
            return optuna.pruners.NopPruner()
        return _instantiate_optuna("pruner", self.pruner_cfg, {})

    def _open_study(self, space: SearchSpace) -> optuna.Study:
        from sweeprl.study import default_storage, make_storage

        url = str(self.storage) if self.storage else default_storage(self.sweep_dir)
        self.storage_url = url
        try:
            storage = make_storage(
                url, heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period, max_retry=self.retries
            )
        except Exception as exc:  # noqa: BLE001 - report any driver/URL problem as one clear message
            raise HydraException(
                f"hydra.sweeper.storage={url!r} cannot be opened: {type(exc).__name__}: {exc}"
            ) from exc
        study = optuna.create_study(
            study_name=self.study_name,
            storage=storage,
            sampler=self._make_sampler(space),
            pruner=self._make_pruner(),
            directions=self.directions,
            load_if_exists=True,
        )
        if [d.name.lower() for d in study.directions] != self.directions:
            raise HydraException(
                f"study '{self.study_name}' in {url} has directions {[d.name.lower() for d in study.directions]}, "
                f"not {self.directions}; use another hydra.sweeper.study_name"
            )
        return study

    # ------------------------------------------------------------------------------------ tracking
    def _tracking(self):
        from sweeprl.tracking import SafeTracker, resolve_uri

        assert self.config is not None
        tracking = self.config.get("tracking")
        if not tracking or not tracking.enabled:
            return None, None, None
        tracker = SafeTracker(resolve_uri(tracking.uri))
        exp_id = tracker.experiment_id(tracking.experiment_name or self.study_name)
        return tracker, exp_id, tracker.uri

    def _parent_run(self, tracker, exp_id) -> Optional[str]:
        from sweeprl.tracking import TAG_ROLE, TAG_STUDY

        if tracker is None or exp_id is None:
            return None
        tags = {TAG_ROLE: "sweep", TAG_STUDY: str(self.study_name)}
        run_id = tracker.find_run(exp_id, tags)
        if run_id:
            tracker.call("reopen parent run", tracker.client.update_run, run_id, status="RUNNING")
            return run_id
        run_id = tracker.start_run(exp_id, f"sweep-{self.study_name}", {**tags, "sweeprl.storage": self.storage_url})
        tracker.log_params(run_id, {f"search_space.{k}": v for k, v in self.params.items()})
        return run_id

    # ------------------------------------------------------------------------------------ sweep
    def _task_objective(self) -> str:
        assert self.config is not None
        return str(OmegaConf.select(self.config, "objective.name", default="stability_adjusted"))

    def _apply_objective_directions(self) -> None:
        """objective=pareto makes the study two-objective: (late reward, instability)."""
        if self._task_objective() == "pareto" and self.directions != ["maximize", "minimize"]:
            log.info("objective=pareto: study directions set to [maximize (reward), minimize (instability)]")
            self.directions = ["maximize", "minimize"]

    def _apply_sweep_from(self) -> None:
        """``+sweep_from=<diagnosis.json>``: replace the search space by the diagnosis's next_sweep."""
        assert self.config is not None
        source = OmegaConf.select(self.config, "sweep_from", default=None)
        if not source:
            return
        try:
            data = json.loads(Path(str(source)).read_text())
            params = data["next_sweep"]["params"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SearchSpaceError(
                f"sweep_from={source!r}: not a diagnosis.json with next_sweep.params ({exc})"
            ) from exc
        for key, value in params.items():
            if self.params.get(key) != value:
                log.info("sweep_from: %s: %s -> %s", key, self.params.get(key, "(not swept)"), value)
        self.params.update({str(k): str(v) for k, v in params.items()})

    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None
        self._apply_objective_directions()
        self._apply_sweep_from()
        self._check_settings()
        space, passthrough = parse_search_space(self.params, arguments)
        if not space.distributions and not self.custom_search_space:
            raise SearchSpaceError("nothing to sweep: hydra.sweeper.params is empty (pick a preset, e.g. sweep=lr_kl)")
        self._check_space(space)

        study = self._open_study(space)
        tracker, exp_id, tracking_uri = self._tracking()
        parent_run = self._parent_run(tracker, exp_id)
        custom = self._custom_fn() if self.custom_search_space else None

        from sweeprl.study import finished_count

        self._fail_stale(study, tracker)  # trials of a driver that died: FAIL, configs re-queued
        log.info(
            "study '%s' (%s): %d/%d trials finished; search space: %s",
            self.study_name,
            self.storage_url,
            finished_count(study),
            self.n_trials,
            ", ".join(f"{k}={v}" for k, v in space.distributions.items()),
        )
        self._stats = {"attempts": 0, "failures": 0}
        started = time.monotonic()
        ctx = (space, passthrough, parent_run, custom)
        status = "FINISHED"
        self.progress = self._make_progress(study)
        try:
            with self.progress:
                if self._use_processes():
                    self._sweep_processes(study, ctx, tracker)
                else:
                    self._sweep_in_process(study, ctx, tracker)
        except SweepAborted:
            self._finish(study, tracker, parent_run, tracking_uri, started, status="FAILED")
            raise
        except KeyboardInterrupt:
            status = "KILLED"
            self._fail_unfinished(study, "interrupted (Ctrl-C)")
            log.warning(
                "interrupted: running trials were stopped and marked FAIL; the study is consistent. "
                "Re-run the same command to continue."
            )
            self._finish(study, tracker, parent_run, tracking_uri, started, status=status)
            raise
        return self._finish(study, tracker, parent_run, tracking_uri, started, status=status)

    def _make_progress(self, study: optuna.Study):
        from sweeprl.cli.console import console
        from sweeprl.progress import SweepProgress, best_of
        from sweeprl.study import finished_count

        assert self.config is not None
        progress = SweepProgress(
            str(self.study_name),
            self.n_trials,
            max_steps=OmegaConf.select(self.config, "algo.max_steps", default=None),
            parallel=self.slots if self._use_processes() else self.n_jobs,
            mode=self.progress_mode,
            console=console,
            maximize=self.directions[0] == "maximize",
        )
        best = best_of(study, self.directions[0] == "maximize", _param_text) if len(self.directions) == 1 else None
        progress.resume_from(finished_count(study), best)
        return progress

    def _progress_event(self, trial: optuna.Trial, state: str, value: Optional[float] = None) -> None:
        if self.progress is not None and self.progress.mode != "off":
            self.progress.trial_finished(trial.number, state, value, _param_text(trial.params))

    # ------------------------------------------------------------------------------------ scheduling
    def _use_processes(self) -> bool:
        return self.process if self.process is not None else (self.slots > 1 or self.trial_timeout is not None)

    def _capacity(self, study: optuna.Study) -> int:
        """Trials that may still be started: n_trials minus finished and running (this and other drivers)."""
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))
        return self.n_trials - len(trials)

    def _ask(self, study: optuna.Study, space: SearchSpace) -> Optional[optuna.Trial]:
        """Ask a trial, unless other drivers sharing the study already fill n_trials (then the surplus trial
        is closed as FAIL with reason "surplus" and never run)."""
        if self._capacity(study) <= 0:
            return None
        trial = study.ask(fixed_distributions=space.distributions)
        self._mine.append(trial)
        active = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))
        within = sorted(t.number for t in active)[: self.n_trials]
        if trial.number not in within:
            trial.set_user_attr("surplus", True)
            study.tell(trial, state=TrialState.FAIL)
            log.info(
                "[trial %d] not run: n_trials=%d is already covered by other drivers' trials",
                trial.number,
                self.n_trials,
            )
            return None
        return trial

    def _fail_stale(self, study: optuna.Study, tracker) -> None:
        """RUNNING trials whose heartbeat is older than grace_period (their driver died) become FAIL and their
        configs are re-queued (the storage's retry callback); their MLflow runs are ended FAILED with the reason,
        so MLflow never shows COMPLETE for a trial the study does not count (the driver may have died after the
        trial logged its result but before it told the study)."""
        running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        if not running:
            return
        optuna.storages.fail_stale_trials(study)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if trial.number in running:
                reason = f"its driver died (no heartbeat for {self.grace_period} s); the config was re-queued"
                log.warning("[trial %d] FAIL %s", trial.number, reason)
                self._record_failure_details(trial, tracker, reason=reason)

    def _fail_unfinished(self, study: optuna.Study, reason: str) -> None:
        """Mark every trial this driver asked and did not finish as FAIL, so the storage stays consistent.
        Uses a fresh storage connection: the interrupt may have hit the old one mid-transaction."""
        from sweeprl.study import make_storage

        storage = make_storage(self.storage_url)
        for trial in self._mine:
            try:
                if storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
                    storage.set_trial_user_attr(trial._trial_id, "fail_reason", reason)
                    storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
                    log.warning("[trial %d] FAIL %s", trial.number, reason)
            except Exception:  # noqa: BLE001 - finished concurrently, or storage gone
                pass

    def _check_failures(self, ok: bool) -> None:
        self._stats["attempts"] += 1
        self._stats["failures"] += 0 if ok else 1
        if self._stats["failures"] > math.floor(self.max_failure_rate * self.n_trials):
            raise SweepAborted(
                f"sweep aborted: {self._stats['failures']} of {self._stats['attempts']} trials failed this run, more "
                "than "
                f"max_failure_rate={self.max_failure_rate} x n_trials={self.n_trials} allows; see the fail reasons "
                "above"
            )

    def _retry(self, study: optuna.Study, trial: optuna.Trial) -> None:
        """Re-queue a failed config (same params, new trial) up to ``retries`` times."""
        frozen = study._storage.get_trial(trial._trial_id)
        count = int(frozen.user_attrs.get("retry_count", 0))
        if count >= self.retries or frozen.user_attrs.get("surplus"):
            return
        study.enqueue_trial(dict(frozen.params), user_attrs={"retry_of": frozen.number, "retry_count": count + 1})
        log.info("[trial %d] re-queued (retry %d of %d)", frozen.number, count + 1, self.retries)

    def _sweep_in_process(self, study: optuna.Study, ctx, tracker) -> None:
        """Rounds of up to n_jobs trials through the configured Hydra launcher (in-process by default)."""
        from sweeprl.study import finished_count

        space, passthrough, parent_run, custom = ctx
        while finished_count(study) < self.n_trials:
            self._fail_stale(study, tracker)
            trials = []
            for _ in range(self.n_jobs):
                t = self._ask(study, space)
                if t is None:
                    break
                trials.append(t)
            if not trials:
                if self._capacity(study) <= 0 and finished_count(study) < self.n_trials:
                    time.sleep(2.0)  # other drivers' trials are running; wait for them (or for them to go stale)
                    continue
                break
            seeds: List[Optional[int]] = list(self.seeds) or [None]
            batch = [
                self._overrides(t, space, passthrough, parent_run, custom) + self._seed_overrides(seed)
                for t in trials
                for seed in seeds
            ]
            for t in trials:
                where = trial_record.trial_dir(self.sweep_dir, t.number)
                self.progress.trial_started(t.number, _param_text(t.params), where)
            with _Heartbeat(study, trials, self.heartbeat_interval):
                try:
                    returns = list(self.launcher.launch(batch, initial_job_idx=trials[0].number))
                except Exception as exc:  # noqa: BLE001 - a job died without a result (SLURM timeout, killed worker)
                    from hydra_plugins.sweeprl_sweeper.launchers import is_basic_launcher, recover_round

                    if is_basic_launcher(self.config):
                        raise
                    returns = recover_round(
                        self.sweep_dir, [(t.number, s) for t in trials for s in seeds], exc, self.grace_period
                    )
            oks = []  # tell every trial of the round before an abort, so none is left RUNNING
            for i, trial in enumerate(trials):
                ok = self._tell(study, trial, returns[i * len(seeds) : (i + 1) * len(seeds)])
                if not ok:
                    self._record_failure_details(trial, tracker)
                    self._retry(study, trial)
                oks.append(ok)
            for ok in oks:
                self._check_failures(ok)

    def _sweep_processes(self, study: optuna.Study, ctx, tracker) -> None:
        """Asynchronous slots: one process per trial, a finished slot refilled at once."""
        from hydra_plugins.sweeprl_sweeper.slots import SlotPool
        from sweeprl.study import finished_count

        space, passthrough, parent_run, custom = ctx
        if self.seeds:
            raise SearchSpaceError(
                "hydra.sweeper.seeds is not supported with process slots yet; use slots=1 without trial_timeout"
            )
        # the driver's hydra settings (sampler/pruner choices, …) minus what makes it a driver
        hydra_overrides = [
            o
            for o in OmegaConf.to_container(self.config.hydra.overrides.hydra)
            if not o.startswith(("hydra.mode=", "hydra.sweeper.n_trials"))
        ]
        pool = SlotPool(
            self.slots,
            [*passthrough, *hydra_overrides],
            devices=self.devices,
            threads_per_slot=self.threads_per_slot,
            trial_timeout=self.trial_timeout,
        )
        log.info(
            "%d slot(s), %d CPU thread(s) each%s%s",
            pool.slots,
            pool.threads,
            f", devices {pool.devices}" if pool.devices else "",
            f", trial_timeout {self.trial_timeout:g}s" if self.trial_timeout else "",
        )
        last_beat = 0.0
        import signal as _signal

        interrupted: List[bool] = []
        previous = _signal.signal(_signal.SIGINT, lambda *_: interrupted.append(True))  # stop at a safe point
        try:
            while True:
                if interrupted:
                    raise KeyboardInterrupt
                for outcome in pool.poll():
                    ok = self._tell_process(study, outcome, tracker)
                    if not ok:
                        self._retry(study, outcome.running.trial)
                    self._check_failures(ok)
                now = time.monotonic()
                if now - last_beat >= self.heartbeat_interval:
                    for run in pool.running.values():
                        study._storage.record_heartbeat(run.trial._trial_id) if hasattr(
                            study._storage, "record_heartbeat"
                        ) else None
                    self._fail_stale(study, tracker)
                    last_beat = now
                free = pool.free_slots()
                if self.slot_refill == "batch" and pool.running:
                    free = []  # the stock approach, for comparison: a new round only when the whole batch is done
                for slot in free:
                    trial = self._ask(study, space)
                    if trial is None:
                        break
                    overrides = self._overrides(trial, space, [], parent_run, custom)
                    pool.start(trial, overrides, trial_record.trial_dir(self.sweep_dir, trial.number), slot)
                    self.progress.trial_started(
                        trial.number, _param_text(trial.params), trial_record.trial_dir(self.sweep_dir, trial.number)
                    )
                    log.info("[trial %d] started in slot %d", trial.number, slot)
                if not pool.running:
                    if finished_count(study) >= self.n_trials:
                        break
                    if self._capacity(study) <= 0:
                        time.sleep(1.0)  # other drivers' trials are still running
                        continue
                time.sleep(0.2)
        except KeyboardInterrupt:
            pool.terminate_all()
            raise
        finally:
            _signal.signal(_signal.SIGINT, previous)

    def _tell_process(self, study: optuna.Study, outcome, tracker) -> bool:
        """Turn a finished trial process into COMPLETE / PRUNED / FAIL."""
        from hydra_plugins.sweeprl_sweeper.slots import describe_exit, tail

        run = outcome.running
        trial = run.trial
        params = _param_text(trial.params)
        trial.set_user_attr("trial_dir", str(run.trial_dir))
        trial.set_user_attr("seconds", round(outcome.seconds, 2))
        trial.set_user_attr("ended_at", time.time())
        trial.set_user_attr("started_at", time.time() - outcome.seconds)
        self._record_files(trial, [str(run.trial_dir)])
        record = trial_record.read_outcome(run.trial_dir) or trial_record.Outcome()
        if record.pruned and not outcome.timed_out and (outcome.returncode or 0) >= 0:
            reason = str(record.prune_reason or "pruned")
            trial.set_user_attr("prune_reason", reason[:2000])
            study.tell(trial, state=TrialState.PRUNED)
            log.info("[trial %d] PRUNED %s (%s)", trial.number, reason, params)
            self._progress_event(trial, "PRUNED")
            return True
        if outcome.returncode == 0 and record.values:
            from sweeprl.study import is_finite_values

            values = [float(v) for v in record.values]
            if len(values) == len(self.directions) and is_finite_values(values):
                study.tell(trial, values if len(values) > 1 else values[0])
                log.info(
                    "[trial %d] COMPLETE objective=%s %s (%.0f s)",
                    trial.number,
                    ", ".join(f"{v:.4g}" for v in values),
                    params,
                    outcome.seconds,
                )
                self._progress_event(trial, "COMPLETE", values[0])
                return True
            reason = f"objective is not a finite number: {record.values!r}"
        else:
            log_tail = tail(run.trial_dir / trial_record.PROCESS_LOG)
            reason = describe_exit(outcome.returncode, outcome.timed_out, self.trial_timeout, log_tail)
        self._fail(study, trial, reason, params)
        self._record_failure_details(trial, tracker, log_file=run.trial_dir / trial_record.PROCESS_LOG, reason=reason)
        return False

    def _record_failure_details(
        self, trial: optuna.Trial, tracker, log_file: Optional[Path] = None, reason: Optional[str] = None
    ) -> None:
        """Last 50 log lines as a trial attribute and as an artifact of the trial's MLflow run (ended FAILED)."""
        from hydra_plugins.sweeprl_sweeper.slots import tail
        from sweeprl.tracking import TAG_STATE, TAG_STUDY, TAG_TRIAL

        frozen_dir = trial.user_attrs.get("trial_dir") if hasattr(trial, "user_attrs") else None
        default_dir = trial_record.trial_dir(self.sweep_dir, trial.number)
        trial_dir = Path(frozen_dir) if isinstance(frozen_dir, str) else default_dir
        log_file = log_file or trial_dir / trial_record.TRIAL_LOG
        text = "\n".join(t for t in (tail(log_file), self._tracebacks.pop(trial.number, "")) if t)
        text = "\n".join(text.splitlines()[-50:])
        if text:
            trial_dir.mkdir(parents=True, exist_ok=True)
            (trial_dir / trial_record.FAILURE_TAIL).write_text(text + "\n")
        if tracker is None:
            return
        exp = tracker.experiment_id(self._experiment_name())
        run_id = tracker.find_run(exp, {TAG_STUDY: str(self.study_name), TAG_TRIAL: str(trial.number)}) if exp else None
        if run_id:
            if text:
                tracker.log_artifact(run_id, str(trial_dir / trial_record.FAILURE_TAIL))
            tags = {TAG_STATE: "FAIL"}
            if reason:
                tags["sweeprl.fail_reason"] = reason[:5000]
            tracker.set_tags(run_id, tags)
            tracker.end_run(run_id, "FAILED")

    def _experiment_name(self) -> str:
        tracking = self.config.get("tracking") if self.config is not None else None
        return (tracking.experiment_name if tracking is not None and tracking.experiment_name else None) or str(
            self.study_name
        )

    def _seed_overrides(self, seed: Optional[int]) -> List[str]:
        """Multi-seed runs: the seed, a trial-dir suffix, and no pruner reports (seeds would collide)."""
        if seed is None:
            return []
        return [f"algo.seed={seed}", f"sweeprl.run_suffix=_seed{seed}", "sweeprl.report_to_pruner=false"]

    def _overrides(
        self, trial: optuna.Trial, space: SearchSpace, passthrough: List[str], parent_run: Optional[str], custom
    ) -> List[str]:
        if custom is not None:
            custom(self.config, trial)
        overrides = list(passthrough)
        overrides += [f"{k}={v}" for k, v in space.fixed.items()]
        overrides += [f"{k}={format_value(v)}" for k, v in trial.params.items()]
        overrides += [
            f"sweeprl.study_name={_quote(str(self.study_name))}",
            f"sweeprl.storage={_quote(self.storage_url)}",
            f"sweeprl.trial_number={trial.number}",
        ]
        if parent_run:
            overrides.append(f"sweeprl.parent_run_id={parent_run}")
        return overrides

    def _tell(self, study: optuna.Study, trial: optuna.Trial, rets: Sequence[JobReturn]) -> bool:
        """Record one trial (one job, or one job per seed) in the study; returns False when it failed."""
        from sweeprl.analysis.stability import across_runs
        from sweeprl.study import is_finite_values

        params = _param_text(trial.params)
        dirs = [d for d in (_output_dir(r) for r in rets) if d]
        if dirs:
            trial.set_user_attr("trial_dir", dirs[0] if len(dirs) == 1 else dirs)
        self._record_files(trial, dirs)
        pruned = [
            r for r in rets if r.status != JobStatus.COMPLETED and isinstance(r._return_value, optuna.TrialPruned)
        ]
        failed = [r for r in rets if r.status != JobStatus.COMPLETED and r not in pruned]
        if failed:
            exc = failed[0]._return_value
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "job failed"
            if isinstance(exc, BaseException):
                import traceback

                self._tracebacks[trial.number] = "".join(traceback.format_exception(exc))
            return self._fail(study, trial, reason, params)
        if pruned:
            reason = str(pruned[0]._return_value) or "pruned"
            trial.set_user_attr("prune_reason", reason[:2000])
            study.tell(trial, state=TrialState.PRUNED)
            log.info("[trial %d] PRUNED %s (%s)", trial.number, reason, params)
            self._progress_event(trial, "PRUNED")
            return True
        per_run = []
        for r in rets:
            value = r._return_value
            values = list(value) if isinstance(value, (list, tuple)) else [value]
            if len(values) != len(self.directions):
                return self._fail(
                    study,
                    trial,
                    f"task returned {len(values)} value(s) for {len(self.directions)} direction(s)",
                    params,
                )
            if not is_finite_values(values):
                return self._fail(study, trial, f"objective is not a finite number: {value!r}", params)
            per_run.append([float(v) for v in values])
        values = per_run[0]
        if len(per_run) > 1:  # several seeds: mean, minus a dispersion penalty on the first objective
            first = [v[0] for v in per_run]
            weight = float(OmegaConf.select(self.config, "objective.weights.across_seeds", default=1.0))
            sign = 1.0 if self.directions[0] == "maximize" else -1.0
            stats = across_runs(first)
            values = [sum(v[i] for v in per_run) / len(per_run) for i in range(len(self.directions))]
            values[0] -= sign * weight * stats["std_runs"]
            trial.set_user_attr("seed_values", dict(zip(map(str, self.seeds), first)))
            trial.set_user_attr("across_seeds", stats)
        study.tell(trial, values if len(values) > 1 else values[0])
        log.info("[trial %d] COMPLETE objective=%s %s", trial.number, ", ".join(f"{v:.4g}" for v in values), params)
        self._progress_event(trial, "COMPLETE", values[0])
        return True

    def _record_files(self, trial: optuna.Trial, dirs: Sequence[str]) -> None:
        """Objective terms, MLflow run ids, findings and step counts from the trial dirs, as user attrs."""
        summary = trial_record.summarize(dirs)
        if summary.terms:
            trial.set_user_attr("objective_terms", summary.terms)
        if summary.run_ids:
            trial.set_user_attr("mlflow_run_id", summary.run_ids[0] if len(summary.run_ids) == 1 else summary.run_ids)
        trial.set_user_attr("findings", summary.findings)
        trial.set_user_attr("steps", summary.steps)

    def _fail(self, study: optuna.Study, trial: optuna.Trial, reason: str, params: str) -> bool:
        trial.set_user_attr("fail_reason", reason[:2000])
        study.tell(trial, state=TrialState.FAIL)
        log.warning("[trial %d] FAIL %s (%s)", trial.number, reason.splitlines()[0][:300] if reason else "", params)
        self._progress_event(trial, "FAIL")
        return False

    def _finish(
        self, study: optuna.Study, tracker, parent_run, tracking_uri, started: float, status: str
    ) -> Dict[str, Any]:
        from sweeprl.cli.console import console, trials_table
        from sweeprl.study import ranked_rows, write_results
        from sweeprl.tracking import ui_command

        os.makedirs(self.sweep_dir, exist_ok=True)
        results_path = os.path.join(self.sweep_dir, "optimization_results.yaml")
        results = write_results(study, results_path)
        rows = ranked_rows(study)
        console.print(trials_table(rows, title=f"study {self.study_name}: {len(rows)} trials (best first)"))
        if tracker and parent_run:
            if results.get("best_value") is not None:
                tracker.log_metrics(parent_run, [("best_value", results["best_value"], len(rows))])
                tracker.log_params(parent_run, {f"best.{k}": v for k, v in results["best_params"].items()})
                tracker.set_tags(parent_run, {"sweeprl.best_trial": results["best_trial"]})
            tracker.log_artifact(parent_run, results_path)
            tracker.end_run(parent_run, status)
        elapsed = time.monotonic() - started
        lines = [
            f"sweep {status.lower()} in {elapsed:.0f} s; results: {results_path}",
            f"best: {results.get('best_value')} with {results.get('best_params')}"
            if len(self.directions) == 1
            else f"pareto front: {len(results.get('solutions', []))} trials",
            f"optuna storage: {self.storage_url}",
        ]
        if self.report and rows:
            try:
                from sweeprl.report.build import build_report
                from sweeprl.report.mlflow_upload import log_report_to_mlflow

                files = build_report(str(self.study_name), self.storage_url, self.sweep_dir)
                lines.append(f"report: {files.html}")
                if tracking_uri:
                    log_report_to_mlflow(files, tracking_uri, str(self.study_name))
            except Exception as exc:  # noqa: BLE001 - a report problem must not fail a finished sweep
                log.warning("sweep report not written: %s: %s", type(exc).__name__, exc)
        if tracking_uri:
            lines.append(f"compare trials in MLflow: {ui_command(tracking_uri)}")
        for line in lines:
            console.print(line, soft_wrap=True)
        return results


def _param_text(params: Dict[str, Any]) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in params.items())


def _instantiate_optuna(what: str, node: Any, extra: Dict[str, Any]) -> Any:
    """Instantiate a sampler/pruner config; None-valued arguments mean "Optuna's default" and are not passed."""
    given = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    kwargs = {k: v for k, v in given.items() if v is not None}
    kwargs.update(extra)
    try:
        return instantiate(kwargs)
    except Exception as exc:  # noqa: BLE001 - unknown class or argument
        raise HydraException(f"hydra.sweeper.{what} cannot be created from {given}: {exc}") from exc


def _output_dir(ret: JobReturn) -> Optional[str]:
    """The job's output dir (``working_dir`` is the process cwd, which Hydra no longer changes)."""
    try:
        return str(ret.hydra_cfg.hydra.runtime.output_dir)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - launchers that return no hydra config
        return None


class _Heartbeat:
    """Records heartbeats of in-process trials from a background thread (RDB storages), so a driver that dies
    leaves trials whose heartbeat goes stale: the next driver fails and re-queues them."""

    def __init__(self, study: optuna.Study, trials: Sequence[optuna.Trial], interval: int):
        import threading

        self.study, self.trials, self.interval = study, list(trials), interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        storage = self.study._storage
        while not self._stop.is_set():
            if hasattr(storage, "record_heartbeat"):
                for t in self.trials:
                    try:
                        storage.record_heartbeat(t._trial_id)
                    except Exception:  # noqa: BLE001 - a heartbeat must never break the sweep
                        pass
            self._stop.wait(self.interval)

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class _Absent:
    """Sentinel for OmegaConf.select defaults."""


def task_config(config: DictConfig) -> DictConfig:
    """The job part of a full Hydra config (everything but the ``hydra`` node)."""
    return OmegaConf.masked_copy(config, [k for k in config.keys() if k != "hydra"])


def check_search_space(task_cfg: DictConfig, space: SearchSpace) -> None:
    """Every swept or fixed key must exist in the config, and every range endpoint (every choice) must pass
    :func:`sweeprl.config.validate` — so a bad space fails before the study is touched."""
    import difflib

    from sweeprl.config import ConfigValidationError, validate

    for key in list(space.distributions) + list(space.fixed):
        if key.startswith("+"):
            continue  # explicitly adds a new key
        path = key.lstrip("~")
        if OmegaConf.select(task_cfg, path, default=_Absent) is _Absent:
            parent, _, leaf = path.rpartition(".")
            node = OmegaConf.select(task_cfg, parent) if parent else task_cfg
            options = sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []
            close = difflib.get_close_matches(leaf, options, n=3)
            hint = f"; did you mean {', '.join((parent + '.' if parent else '') + c for c in close)}?" if close else ""
            raise SearchSpaceError(f"search space param '{path}' does not exist in the config{hint}")
    for key, dist in space.distributions.items():
        for value in _probe_values(dist):
            probe = OmegaConf.merge(task_cfg, OmegaConf.from_dotlist([f"{key.lstrip('+')}={format_value(value)}"]))
            try:
                validate(probe)
            except ConfigValidationError as exc:
                raise SearchSpaceError(
                    f"search space '{key}' includes {value!r}, which the config rejects: {'; '.join(exc.problems)}"
                ) from exc


def _probe_values(dist) -> List[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, (FloatDistribution, IntDistribution)):
        return [dist.low, dist.high]
    return []


def _grid_of(space: SearchSpace) -> Dict[str, List[Any]]:
    grid: Dict[str, List[Any]] = {}
    for key, dist in space.distributions.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution):
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution) and dist.step is not None:
            n = int(round((dist.high - dist.low) / dist.step))
            grid[key] = [dist.low + i * dist.step for i in range(n + 1)]
        else:
            raise SearchSpaceError(
                f"sampler=grid needs a finite space; '{key}' is a continuous interval (use choice() or range())"
            )
    return grid
