"""Structured config of the ``sweeprl`` Hydra sweeper, registered as ``hydra/sweeper=sweeprl``.

The user-facing keys are those of hydra-optuna-sweeper 1.3 (``sampler`` via ``hydra/sweeper/sampler=<name>``,
``direction``, ``storage``, ``study_name``, ``n_trials``, ``n_jobs``, ``max_failure_rate``, ``params``,
``custom_search_space``), so an existing config switches with one ``override hydra/sweeper: sweeprl`` line.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# Every sampler argument defaults to None = "Optuna's own default" (None values are not passed), so a key that
# Optuna deprecates stays accepted in configs without a warning on every sweep.


@dataclass
class TPESamplerConfig:
    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    consider_prior: Optional[bool] = None
    prior_weight: Optional[float] = None
    consider_magic_clip: Optional[bool] = None
    consider_endpoints: Optional[bool] = None
    n_startup_trials: Optional[int] = None
    n_ei_candidates: Optional[int] = None
    multivariate: Optional[bool] = None
    group: Optional[bool] = None
    constant_liar: Optional[bool] = None


@dataclass
class RandomSamplerConfig:
    _target_: str = "optuna.samplers.RandomSampler"
    seed: Optional[int] = None


@dataclass
class GridSamplerConfig:
    """Grid over the search space; every distribution must be a choice() or a range() (finite)."""

    _target_: str = "optuna.samplers.GridSampler"
    search_space: Optional[Dict[str, Any]] = None  # filled from `params` by the sweeper when None
    seed: Optional[int] = None


@dataclass
class CmaEsSamplerConfig:
    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: Optional[int] = None
    sigma0: Optional[float] = None
    n_startup_trials: Optional[int] = None
    warn_independent_sampling: Optional[bool] = None
    restart_strategy: Optional[str] = None
    consider_pruned_trials: Optional[bool] = None


@dataclass
class GPSamplerConfig:
    _target_: str = "optuna.samplers.GPSampler"
    seed: Optional[int] = None
    n_startup_trials: Optional[int] = None
    deterministic_objective: Optional[bool] = None


@dataclass
class NSGAIISamplerConfig:
    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: Optional[int] = None
    population_size: Optional[int] = None
    mutation_prob: Optional[float] = None
    crossover_prob: Optional[float] = None
    swapping_prob: Optional[float] = None


@dataclass
class NopPrunerConfig:
    _target_: str = "optuna.pruners.NopPruner"


@dataclass
class MedianPrunerConfig:
    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: Optional[int] = None
    n_warmup_steps: Optional[int] = None
    interval_steps: Optional[int] = None
    n_min_trials: Optional[int] = None


@dataclass
class PercentilePrunerConfig:
    _target_: str = "optuna.pruners.PercentilePruner"
    percentile: float = 25.0
    n_startup_trials: Optional[int] = None
    n_warmup_steps: Optional[int] = None
    interval_steps: Optional[int] = None
    n_min_trials: Optional[int] = None


@dataclass
class SuccessiveHalvingPrunerConfig:
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Optional[Any] = None
    reduction_factor: Optional[int] = None
    min_early_stopping_rate: Optional[int] = None
    bootstrap_count: Optional[int] = None


@dataclass
class HyperbandPrunerConfig:
    _target_: str = "optuna.pruners.HyperbandPruner"
    min_resource: Optional[int] = None
    max_resource: Optional[Any] = None
    reduction_factor: Optional[int] = None
    bootstrap_count: Optional[int] = None


@dataclass
class WilcoxonPrunerConfig:
    """Optuna's WilcoxonPruner compares per-step values of a trial with the best trial's (paired test)."""

    _target_: str = "optuna.pruners.WilcoxonPruner"
    p_threshold: Optional[float] = None
    n_startup_steps: Optional[int] = None


PRUNERS = {
    "none": NopPrunerConfig,
    "median": MedianPrunerConfig,
    "percentile": PercentilePrunerConfig,
    "successive_halving": SuccessiveHalvingPrunerConfig,
    "hyperband": HyperbandPrunerConfig,
    "wilcoxon": WilcoxonPrunerConfig,
}

SAMPLERS = {
    "tpe": TPESamplerConfig,
    "random": RandomSamplerConfig,
    "grid": GridSamplerConfig,
    "cmaes": CmaEsSamplerConfig,
    "gp": GPSamplerConfig,
    "nsgaii": NSGAIISamplerConfig,
}


@dataclass
class SweeprlSweeperConf:
    _target_: str = "hydra_plugins.sweeprl_sweeper.sweeper.SweeprlSweeper"
    # the sampler is instantiated by the sweeper (GridSampler needs the search space first)
    _recursive_: bool = False
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}, {"pruner": "median"}])

    sampler: Any = MISSING
    # select with hydra/sweeper/pruner=none|median|percentile|successive_halving|hyperband|wilcoxon; trials
    # report their running objective every pruning.report_every updates and stop when the pruner says so
    pruner: Any = MISSING
    # "maximize"/"minimize", or a list of them for a multi-objective study
    direction: Any = "maximize"
    # Optuna storage URL; None = sqlite:///<sweep dir>/optuna.db (persistent, embedded)
    storage: Optional[Any] = None
    study_name: Optional[str] = None
    # The study's total target of finished (COMPLETE or PRUNED) trials; re-running continues the study
    n_trials: int = 20
    # Trials launched per round (parallel with a parallel launcher, e.g. hydra/launcher=joblib)
    n_jobs: int = 1
    # Abort (with a summary) when the fraction of FAILED trials of this run exceeds this
    max_failure_rate: float = 0.25
    # Search space in Hydra override grammar, e.g. {algo.learning_rate: "tag(log, interval(1e-6, 2e-5))"}
    params: Optional[Dict[str, str]] = None
    # "module.function" called as function(cfg, trial) to suggest extra/conditional params
    custom_search_space: Optional[str] = None
    # run every sampled config once per seed (algo.seed); the trial's value is the mean over seeds minus
    # objective.weights.across_seeds x their standard deviation; per-seed values in the trial's user attrs
    seeds: Optional[List[int]] = None
    # trials running at once, each in its own process; a finished slot is refilled at once (no batch barrier)
    slots: int = 1
    # devices per slot, e.g. [[0],[1],[2,3]]: each trial process sees only its own (CUDA_VISIBLE_DEVICES)
    devices: Optional[List[List[int]]] = None
    # CPU threads per slot (OMP_NUM_THREADS, torch threads); None = cores // slots
    threads_per_slot: Optional[int] = None
    # seconds; a trial still running then is killed and marked FAIL (implies process mode)
    trial_timeout: Optional[float] = None
    # run trials as processes even with slots=1 (None = when slots > 1 or trial_timeout is set)
    process: Optional[bool] = None
    # re-queue a FAILED config (same params, new trial) up to this many times
    retries: int = 0
    # seconds between heartbeats of running trials (RDB storages); a trial silent for grace_period seconds
    # belongs to a dead driver: it is marked FAIL and its config re-queued
    heartbeat_interval: int = 10
    grace_period: Optional[int] = None
    # async: refill a slot as soon as it is free; batch: wait for the whole round (Hydra's stock behaviour,
    # kept for comparison in bench/slots.py)
    slot_refill: str = "async"
    # write report.html/report.md + plots into the sweep dir at the end (and log them to the parent run)
    report: bool = True
    # terminal display while the sweep runs: auto (live panel on a TTY, plain lines otherwise), live, plain, off
    progress: str = "auto"


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(group="hydra/sweeper", name="sweeprl", node=SweeprlSweeperConf, provider="sweeprl")
    for name, node in SAMPLERS.items():
        cs.store(group="hydra/sweeper/sampler", name=name, node=node, provider="sweeprl")
    for name, node in PRUNERS.items():
        cs.store(group="hydra/sweeper/pruner", name=name, node=node, provider="sweeprl")
