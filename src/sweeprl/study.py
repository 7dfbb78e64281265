"""Optuna study helpers shared by the sweeper and the CLI: storage, counting, ranking, results file."""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

# Optuna marks its heartbeat API (storage heartbeats, fail_stale_trials, the stale-trial retry callback) as
# experimental and warns when heartbeats are used outside Study.optimize; sweeprl uses both on purpose, so these
# warnings would only be noise at the top of every sweep log.
warnings.filterwarnings(
    "ignore",
    category=optuna.exceptions.ExperimentalWarning,
    message=r".*(heartbeat|fail_stale_trials|RetryHeartbeatStaleTrialCallback).*",
)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def default_storage(sweep_dir: str) -> str:
    """The embedded, persistent default: ``sqlite:///<sweep dir>/optuna.db``."""
    os.makedirs(sweep_dir, exist_ok=True)
    return f"sqlite:///{os.path.join(os.path.abspath(sweep_dir), 'optuna.db')}"


def make_storage(
    url: str, heartbeat_interval: Optional[int] = None, grace_period: Optional[int] = None, max_retry: int = 0
) -> optuna.storages.BaseStorage:
    """RDB storage for SQL URLs (SQLite with a generous lock timeout), journal storage for ``*.log`` files.

    With ``heartbeat_interval``, RUNNING trials whose heartbeat is older than ``grace_period`` (a driver died)
    are failed by ``optuna.storages.fail_stale_trials`` and their configs re-queued (``max_retry`` times; at least
    once). Journal storages have no heartbeat: stale trials there stay RUNNING and are not counted.
    """
    if url.endswith((".log", ".journal")) and "://" not in url:
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url))
    engine_kwargs: Dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    kwargs: Dict[str, Any] = {}
    if heartbeat_interval:
        kwargs = {
            "heartbeat_interval": heartbeat_interval,
            "grace_period": grace_period,
            "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(
                max_retry=max(1, max_retry)
            ),
        }
    # Several drivers starting at once race to create the schema; the losers retry.
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
        except Exception:  # noqa: BLE001 - sqlalchemy IntegrityError/OperationalError during concurrent creation
            if attempt == 4:
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


@dataclass
class TrialRow:
    number: int
    state: str
    values: Optional[List[float]]
    params: Dict[str, Any]
    terms: Dict[str, float] = field(default_factory=dict)
    reason: str = ""
    seconds: Optional[float] = None
    findings: List[str] = field(default_factory=list)

    @property
    def value(self) -> Optional[float]:
        return self.values[0] if self.values else None


def row_of(t: FrozenTrial) -> TrialRow:
    seconds = t.duration.total_seconds() if t.duration is not None else None
    return TrialRow(
        number=t.number,
        state=t.state.name,
        values=list(t.values) if t.values is not None else None,
        params=dict(t.params),
        terms=dict(t.user_attrs.get("objective_terms", {})),
        reason=str(t.user_attrs.get("fail_reason", "") or t.user_attrs.get("prune_reason", "")),
        seconds=seconds,
        findings=list(t.user_attrs.get("findings", [])),
    )


def ranked_rows(study: optuna.Study) -> List[TrialRow]:
    """All trials, COMPLETE first ranked best-first by the first objective, then the rest by number."""
    trials = study.get_trials(deepcopy=False)
    sign = -1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else 1.0
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    rest = [t for t in trials if t not in done]
    done.sort(key=lambda t: (sign * t.values[0], t.number))
    rest.sort(key=lambda t: t.number)
    return [row_of(t) for t in done + rest]


def best_trials(study: optuna.Study) -> Sequence[FrozenTrial]:
    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return study.best_trials


def results_dict(study: optuna.Study) -> Dict[str, Any]:
    """Content of ``optimization_results.yaml`` (hydra-optuna-sweeper's layout, plus the trial number)."""
    best = best_trials(study)
    if len(study.directions) == 1:
        if not best:
            return {"name": "sweeprl", "study_name": study.study_name, "best_params": {}, "best_value": None}
        t = best[0]
        return {
            "name": "sweeprl",
            "study_name": study.study_name,
            "best_trial": t.number,
            "best_params": dict(t.params),
            "best_value": float(t.value),
        }
    return {
        "name": "sweeprl",
        "study_name": study.study_name,
        "solutions": [{"trial": t.number, "params": dict(t.params), "values": list(t.values)} for t in best],
    }


def write_results(study: optuna.Study, path: str) -> Dict[str, Any]:
    data = results_dict(study)
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return data


def is_finite_values(values: Any) -> bool:
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False
