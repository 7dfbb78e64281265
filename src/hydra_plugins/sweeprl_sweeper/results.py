"""Counting finished trials and the ``optimization_results.yaml`` file (hydra-optuna-sweeper 1.3's layout)."""

import math
from typing import Any, Dict, Optional, Sequence

from hydra_plugins.sweeprl_sweeper.storage import public_url

# Hydra's plugin scan executes this module on every command: Optuna and yaml are imported where they are used.
RESULTS_FILE = "optimization_results.yaml"


def finished_states() -> tuple:
    """The states that count toward ``n_trials``: COMPLETE and PRUNED."""
    from optuna.trial import TrialState

    return (TrialState.COMPLETE, TrialState.PRUNED)


def finished_count(study: Any) -> int:
    """Trials that count toward ``n_trials``: COMPLETE and PRUNED, of every driver and every earlier run."""
    return len(study.get_trials(deepcopy=False, states=finished_states()))


def is_finite_values(values: Any) -> bool:
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


def best_trials(study: Any) -> Sequence[Any]:
    from optuna.trial import TrialState

    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return study.best_trials


def results_dict(study: Any, storage: Optional[str] = None) -> Dict[str, Any]:
    """Content of ``optimization_results.yaml``: hydra-optuna-sweeper 1.3's keys (``name: optuna``, ``best_params``
    and ``best_value``, or ``solutions`` for several objectives) plus ``study_name``, ``storage`` (where the study
    lives, without a password: the sweep dir alone is enough to open it again) and the trial numbers.
    Without a COMPLETE trial, ``best_value`` is null (hydra-optuna-sweeper raises instead)."""
    best = best_trials(study)
    head = {"name": "optuna", "study_name": study.study_name, "storage": public_url(storage)}
    if len(study.directions) == 1:
        if not best:
            return {**head, "best_params": {}, "best_value": None}
        t = best[0]
        return {**head, "best_trial": t.number, "best_params": dict(t.params), "best_value": float(t.value)}
    return {
        **head,
        "solutions": [{"trial": t.number, "params": dict(t.params), "values": list(t.values)} for t in best],
    }


def write_results(study: Any, path: str, storage: Optional[str] = None) -> Dict[str, Any]:
    import yaml

    data = results_dict(study, storage)
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return data
