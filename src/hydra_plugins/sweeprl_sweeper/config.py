"""Structured config of the ``sweeprl`` Hydra sweeper, registered as ``hydra/sweeper=sweeprl``.

The keys, groups and defaults are those of hydra-optuna-sweeper 1.3 (``sampler`` via
``hydra/sweeper/sampler=<name>``, ``direction``, ``storage``, ``study_name``, ``n_trials``, ``n_jobs``,
``max_failure_rate``, ``search_space`` (deprecated), ``params``, ``custom_search_space``), so an existing config
switches with one ``override hydra/sweeper: sweeprl`` line. The keys after ``custom_search_space`` are this
sweeper's own. docs/sweeper.md lists what still differs from hydra-optuna-sweeper.

This module holds dataclasses only: Hydra's plugin scan imports it on every command, so it imports no Optuna.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# Every sampler/pruner argument defaults to None = "Optuna's own default" (None values are not passed), so a key
# that Optuna deprecates stays accepted in configs without a warning on every sweep.


@dataclass
class TPESamplerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.TPESampler.html"""

    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    consider_prior: Optional[bool] = None
    prior_weight: Optional[float] = None
    consider_magic_clip: Optional[bool] = None
    consider_endpoints: Optional[bool] = None
    n_startup_trials: Optional[int] = None
    n_ei_candidates: Optional[int] = None
    multivariate: Optional[bool] = None
    warn_independent_sampling: Optional[bool] = None
    group: Optional[bool] = None
    # None = true when the sweep runs several trials at once (slots > 1, or n_jobs through a parallel launcher),
    # else Optuna's default (true since Optuna 5)
    constant_liar: Optional[bool] = None


@dataclass
class MOTPESamplerConfig:
    """hydra-optuna-sweeper 1.3's ``motpe``. Optuna 4 removed MOTPESampler (TPESampler handles several objectives),
    so this runs TPESampler with the shared keys; ``n_ehvi_candidates`` has no TPE equivalent and is ignored, with a
    log line. https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.TPESampler.html"""

    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    consider_prior: Optional[bool] = None
    prior_weight: Optional[float] = None
    consider_magic_clip: Optional[bool] = None
    consider_endpoints: Optional[bool] = None
    n_startup_trials: Optional[int] = None
    n_ehvi_candidates: Optional[int] = None


@dataclass
class RandomSamplerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.RandomSampler.html"""

    _target_: str = "optuna.samplers.RandomSampler"
    seed: Optional[int] = None


@dataclass
class GridSamplerConfig:
    """Grid over the search space; every distribution must be a choice() or a range() (finite). n_trials is capped
    at the grid's size. https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.GridSampler.html"""

    _target_: str = "optuna.samplers.GridSampler"
    search_space: Optional[Dict[str, Any]] = None  # filled from `params` by the sweeper when None
    seed: Optional[int] = None


@dataclass
class CmaEsSamplerConfig:
    """Needs the ``cmaes`` package (a dependency of sweeprl); every swept param must be numeric.
    https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.CmaEsSampler.html"""

    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: Optional[int] = None
    x0: Optional[Dict[str, Any]] = None
    sigma0: Optional[float] = None
    n_startup_trials: Optional[int] = None
    independent_sampler: Optional[Any] = None
    warn_independent_sampling: Optional[bool] = None
    consider_pruned_trials: Optional[bool] = None
    restart_strategy: Optional[str] = None
    popsize: Optional[int] = None
    inc_popsize: Optional[int] = None
    use_separable_cma: Optional[bool] = None
    with_margin: Optional[bool] = None
    lr_adapt: Optional[bool] = None
    source_trials: Optional[Any] = None


@dataclass
class GPSamplerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.GPSampler.html"""

    _target_: str = "optuna.samplers.GPSampler"
    seed: Optional[int] = None
    independent_sampler: Optional[Any] = None
    n_startup_trials: Optional[int] = None
    deterministic_objective: Optional[bool] = None
    warn_independent_sampling: Optional[bool] = None


@dataclass
class NSGAIISamplerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.NSGAIISampler.html"""

    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: Optional[int] = None
    population_size: Optional[int] = None
    mutation_prob: Optional[float] = None
    crossover_prob: Optional[float] = None
    swapping_prob: Optional[float] = None
    constraints_func: Optional[Any] = None


@dataclass
class QMCSamplerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.QMCSampler.html"""

    _target_: str = "optuna.samplers.QMCSampler"
    seed: Optional[int] = None
    qmc_type: Optional[str] = None
    scramble: Optional[bool] = None
    independent_sampler: Optional[Any] = None
    warn_asynchronous_seeding: Optional[bool] = None
    warn_independent_sampling: Optional[bool] = None


@dataclass
class NopPrunerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.NopPruner.html"""

    _target_: str = "optuna.pruners.NopPruner"


@dataclass
class MedianPrunerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.MedianPruner.html"""

    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: Optional[int] = None
    n_warmup_steps: Optional[int] = None
    interval_steps: Optional[int] = None
    n_min_trials: Optional[int] = None


@dataclass
class PercentilePrunerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.PercentilePruner.html"""

    _target_: str = "optuna.pruners.PercentilePruner"
    percentile: float = 25.0
    n_startup_trials: Optional[int] = None
    n_warmup_steps: Optional[int] = None
    interval_steps: Optional[int] = None
    n_min_trials: Optional[int] = None


@dataclass
class SuccessiveHalvingPrunerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.SuccessiveHalvingPruner.html"""

    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Optional[Any] = None
    reduction_factor: Optional[int] = None
    min_early_stopping_rate: Optional[int] = None
    bootstrap_count: Optional[int] = None


@dataclass
class HyperbandPrunerConfig:
    """https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.HyperbandPruner.html"""

    _target_: str = "optuna.pruners.HyperbandPruner"
    min_resource: Optional[int] = None
    max_resource: Optional[Any] = None
    reduction_factor: Optional[int] = None
    bootstrap_count: Optional[int] = None


@dataclass
class WilcoxonPrunerConfig:
    """Compares per-step values of a trial with the best trial's (paired test).
    https://optuna.readthedocs.io/en/stable/reference/generated/optuna.pruners.WilcoxonPruner.html"""

    _target_: str = "optuna.pruners.WilcoxonPruner"
    p_threshold: Optional[float] = None
    n_startup_steps: Optional[int] = None


@dataclass
class RungPrunerConfig:
    """Judges a trial at a few rungs (fractions of its length) on its latest value, keeps the top 1/eta
    (hydra_plugins.sweeprl_sweeper.rung_pruner)."""

    _target_: str = "hydra_plugins.sweeprl_sweeper.rung_pruner.RungPruner"
    rungs: List[float] = field(default_factory=lambda: [0.125, 0.25, 0.5])
    # keep the top 1/eta at each rung: one number, or a list with one per rung
    eta: Any = field(default_factory=lambda: [2.0, 2.0, 3.0])
    margin: float = 0.0
    window: int = 4
    min_trials: int = 3
    max_resource: Any = "auto"


PRUNERS = {
    "none": NopPrunerConfig,
    "median": MedianPrunerConfig,
    "percentile": PercentilePrunerConfig,
    "successive_halving": SuccessiveHalvingPrunerConfig,
    "hyperband": HyperbandPrunerConfig,
    "wilcoxon": WilcoxonPrunerConfig,
    "rungs": RungPrunerConfig,
}

SAMPLERS = {
    "tpe": TPESamplerConfig,
    "random": RandomSamplerConfig,
    "grid": GridSamplerConfig,
    "cmaes": CmaEsSamplerConfig,
    "gp": GPSamplerConfig,
    "nsgaii": NSGAIISamplerConfig,
    "motpe": MOTPESamplerConfig,
    "qmc": QMCSamplerConfig,
}


@dataclass
class SweeprlSweeperConf:
    _target_: str = "hydra_plugins.sweeprl_sweeper.sweeper.SweeprlSweeper"
    # the sampler is instantiated by the sweeper (GridSampler needs the search space first)
    _recursive_: bool = False
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}, {"pruner": "median"}])

    # ---- hydra-optuna-sweeper 1.3's keys, with its defaults
    sampler: Any = MISSING
    # "minimize"/"maximize", or a list of them for a multi-objective study
    direction: Any = "minimize"
    # Optuna storage URL (RDB, or a *.log journal file); None = in memory, unless the hooks give a default
    storage: Optional[Any] = None
    # None = a name Optuna makes up (then a re-run cannot continue the study)
    study_name: Optional[str] = None
    # The study's total of finished (COMPLETE or PRUNED) trials; re-running with a persistent storage continues
    n_trials: int = 20
    # Trials launched per round (parallel with a parallel launcher, e.g. hydra/launcher=joblib)
    n_jobs: int = 2
    # Tolerated fraction of FAILED trials among those attempted, in [0, 1] (1.0: never abort); see failure_scope
    max_failure_rate: float = 0.0
    # Deprecated 1.1-style search space {name: {type: int|float|categorical, low, high, step, log, choices}}
    search_space: Optional[Dict[str, Any]] = None
    # Search space in Hydra override grammar, e.g. {lr: "tag(log, interval(1e-6, 2e-5))"}
    params: Optional[Dict[str, str]] = None
    # "module.function" called as function(cfg, trial) to suggest extra/conditional params
    custom_search_space: Optional[str] = None

    # ---- this sweeper's own keys
    # select with hydra/sweeper/pruner=none|median|percentile|successive_halving|hyperband|wilcoxon|rungs; a no-op for
    # apps that never report intermediate values
    pruner: Any = MISSING
    # batch: after each batch of n_jobs trials (of `slots` trials with process slots), abort when the batch's failed
    # fraction exceeds max_failure_rate, re-raising the first failed job's exception (hydra-optuna-sweeper 1.3);
    # run: abort with a summary as soon as this run's failures exceed max_failure_rate of the trials it attempted
    # (counted as at least n_trials). Failed trials never count toward n_trials: with either scope the run's rate is
    # judged, and a run whose last n_trials (at least 3) trials all failed stops (cleanly at max_failure_rate 1.0)
    failure_scope: str = "batch"
    # dotted path of a hydra_plugins.sweeprl_sweeper.hooks.SweepHooks subclass that adds an app's own checks,
    # overrides, records and reports (sweeprl's conf sets sweeprl.sweep_hooks.SweeprlHooks); None = none
    hooks: Optional[str] = None
    # run every sampled config once per seed (needs hooks that say how a seed reaches the app)
    seeds: Optional[List[int]] = None
    # trials running at once, each in its own process; a finished slot is refilled at once (no batch barrier)
    slots: int = 1
    # devices per slot, e.g. [[0],[1],[2,3]]: each trial process sees only its own (CUDA_VISIBLE_DEVICES)
    devices: Optional[List[List[int]]] = None
    # CPU threads per slot (OMP_NUM_THREADS, torch threads); None = cores // slots (slots.cpu_budget)
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
    # async: refill a slot as soon as it is free; batch: wait for the whole round (Hydra's stock behaviour)
    slot_refill: str = "async"
    # let the hooks write their report at the end (sweeprl: report.html/report.md + plots)
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
