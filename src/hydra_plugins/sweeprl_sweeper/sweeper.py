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
    ) -> None:
        self.sampler_cfg = sampler
        self.pruner_cfg = pruner
        self.directions = [str(d) for d in direction] if isinstance(direction, Sequence) and not isinstance(direction, str) else [str(direction)]
        self.storage = storage
        self.study_name = study_name
        self.n_trials = int(n_trials)
        self.n_jobs = max(1, int(n_jobs))
        self.max_failure_rate = float(max_failure_rate)
        self.params = dict(params) if params else {}
        self.custom_search_space = custom_search_space
        self.seeds = [int(x) for x in seeds] if seeds else []
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
            raise SearchSpaceError(f"hydra.sweeper.direction={bad} is invalid; allowed: maximize, minimize (or a list of them)")
        if self.n_trials < 1:
            raise SearchSpaceError(f"hydra.sweeper.n_trials={self.n_trials} is invalid; allowed: an int >= 1")
        if not 0 <= self.max_failure_rate <= 1:
            raise SearchSpaceError(f"hydra.sweeper.max_failure_rate={self.max_failure_rate} is invalid; allowed: a float in [0, 1]")
        if not self.study_name:
            raise SearchSpaceError("hydra.sweeper.study_name is not set; allowed: any name (sweep presets set ${name}-<sweep>)")

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
            raise SearchSpaceError(f"hydra.sweeper.custom_search_space={self.custom_search_space!r} cannot be imported: {exc}") from exc

    # ------------------------------------------------------------------------------------ study
    def _make_sampler(self, space: SearchSpace) -> optuna.samplers.BaseSampler:
        if self.sampler_cfg is None:
            return optuna.samplers.TPESampler()
        extra = {}
        if str(self.sampler_cfg.get("_target_", "")).endswith("GridSampler") and self.sampler_cfg.get("search_space") is None:
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
            storage = make_storage(url)
        except Exception as exc:  # noqa: BLE001 - report any driver/URL problem as one clear message
            raise HydraException(f"hydra.sweeper.storage={url!r} cannot be opened: {type(exc).__name__}: {exc}") from exc
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
            raise SearchSpaceError(f"sweep_from={source!r}: not a diagnosis.json with next_sweep.params ({exc})") from exc
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

        already = finished_count(study)
        log.info(
            "study '%s' (%s): %d/%d trials finished; search space: %s",
            self.study_name, self.storage_url, already, self.n_trials,
            ", ".join(f"{k}={v}" for k, v in space.distributions.items()),
        )  # fmt: skip
        attempts = failures = 0
        started = time.monotonic()
        max_failures = math.floor(self.max_failure_rate * self.n_trials)
        while True:
            remaining = self.n_trials - finished_count(study)
            if remaining <= 0:
                break
            trials = [study.ask(fixed_distributions=space.distributions) for _ in range(min(self.n_jobs, remaining))]
            seeds: List[Optional[int]] = list(self.seeds) or [None]
            batch = [self._overrides(t, space, passthrough, parent_run, custom) + self._seed_overrides(seed)
                     for t in trials for seed in seeds]  # fmt: skip
            returns = list(self.launcher.launch(batch, initial_job_idx=trials[0].number))
            for i, trial in enumerate(trials):
                attempts += 1
                ok = self._tell(study, trial, returns[i * len(seeds) : (i + 1) * len(seeds)])
                failures += 0 if ok else 1
            if failures > max_failures:
                self._finish(study, tracker, parent_run, tracking_uri, started, status="FAILED")
                raise SweepAborted(
                    f"sweep aborted: {failures} of {attempts} trials failed this run, more than max_failure_rate="
                    f"{self.max_failure_rate} x n_trials={self.n_trials} allows; see the fail reasons above"
                )
        return self._finish(study, tracker, parent_run, tracking_uri, started, status="FINISHED")

    def _seed_overrides(self, seed: Optional[int]) -> List[str]:
        """Multi-seed runs: the seed, a trial-dir suffix, and no pruner reports (seeds would collide)."""
        if seed is None:
            return []
        return [f"algo.seed={seed}", f"sweeprl.run_suffix=_seed{seed}", "sweeprl.report_to_pruner=false"]

    def _overrides(self, trial: optuna.Trial, space: SearchSpace, passthrough: List[str], parent_run: Optional[str], custom) -> List[str]:
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
        from sweeprl.stability import across_runs
        from sweeprl.study import is_finite_values

        params = " ".join(f"{k}={format_value(v)}" for k, v in trial.params.items())
        dirs = [d for d in (_output_dir(r) for r in rets) if d]
        if dirs:
            trial.set_user_attr("trial_dir", dirs[0] if len(dirs) == 1 else dirs)
        self._record_files(trial, dirs)
        pruned = [r for r in rets if r.status != JobStatus.COMPLETED and isinstance(r._return_value, optuna.TrialPruned)]
        failed = [r for r in rets if r.status != JobStatus.COMPLETED and r not in pruned]
        if failed:
            exc = failed[0]._return_value
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "job failed"
            return self._fail(study, trial, reason, params)
        if pruned:
            reason = str(pruned[0]._return_value) or "pruned"
            trial.set_user_attr("prune_reason", reason[:2000])
            study.tell(trial, state=TrialState.PRUNED)
            log.info("[trial %d] PRUNED %s (%s)", trial.number, reason, params)
            return True
        per_run = []
        for r in rets:
            value = r._return_value
            values = list(value) if isinstance(value, (list, tuple)) else [value]
            if len(values) != len(self.directions):
                return self._fail(study, trial, f"task returned {len(values)} value(s) for {len(self.directions)} direction(s)", params)
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
        return True

    def _record_files(self, trial: optuna.Trial, dirs: Sequence[str]) -> None:
        """Objective terms, MLflow run ids, findings and step counts from the trial dirs, as user attrs."""
        terms: Dict[str, List[float]] = {}
        run_ids, findings, steps = [], [], 0
        for d in dirs:
            base = Path(d)
            try:
                if (base / "objective.json").is_file():
                    data = json.loads((base / "objective.json").read_text())
                    for k, v in (data.get("terms") or {}).items():
                        terms.setdefault(k, []).append(float(v))
                    if data.get("run_id"):
                        run_ids.append(data["run_id"])
                if (base / "diagnosis.json").is_file():
                    for f in json.loads((base / "diagnosis.json").read_text()).get("findings", []):
                        if f["id"] not in findings:
                            findings.append(f["id"])
                if (base / "metrics.jsonl").is_file():
                    steps += sum(1 for line in (base / "metrics.jsonl").open() if line.strip())
            except (OSError, ValueError, KeyError, TypeError):
                continue
        if terms:
            trial.set_user_attr("objective_terms", {k: sum(v) / len(v) for k, v in terms.items()})
        if run_ids:
            trial.set_user_attr("mlflow_run_id", run_ids[0] if len(run_ids) == 1 else run_ids)
        trial.set_user_attr("findings", findings)
        trial.set_user_attr("steps", steps)

    def _fail(self, study: optuna.Study, trial: optuna.Trial, reason: str, params: str) -> bool:
        trial.set_user_attr("fail_reason", reason[:2000])
        study.tell(trial, state=TrialState.FAIL)
        log.warning("[trial %d] FAIL %s (%s)", trial.number, reason.splitlines()[0][:300] if reason else "", params)
        return False

    def _finish(self, study: optuna.Study, tracker, parent_run, tracking_uri, started: float, status: str) -> Dict[str, Any]:
        from sweeprl.console import console, trials_table
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
            f"best: {results.get('best_value')} with {results.get('best_params')}" if len(self.directions) == 1 else
            f"pareto front: {len(results.get('solutions', []))} trials",
            f"optuna storage: {self.storage_url}",
        ]  # fmt: skip
        if tracking_uri:
            lines.append(f"compare trials in MLflow: {ui_command(tracking_uri)}")
        for line in lines:
            console.print(line, soft_wrap=True)
        return results


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
            raise SearchSpaceError(f"sampler=grid needs a finite space; '{key}' is a continuous interval (use choice() or range())")
    return grid
