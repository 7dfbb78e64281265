"""Load a run's per-step metric history (and its config values when known) from any source.

SOURCE may be: a trial directory (``metrics.jsonl`` + ``resolved_config.yaml``), a log file of another tool in any
format :mod:`sweeprl.analysis.readers` reads (TRL ``trainer_state.json``, JSON/JSONL, CSV, console logs of TRL,
verl, LLaMA-Factory, Unsloth ...), or an MLflow run (``runs:/<id>`` or the bare 32-hex id; the tracking URI from
``--tracking-uri``, ``MLFLOW_TRACKING_URI`` or the embedded ``./mlflow.db``). Names become sweeprl's (TRL's) through
the vocabulary of :mod:`sweeprl.analysis.keys`; evaluation records are kept apart from training.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from sweeprl import trial_record
from sweeprl.analysis import keys, readers
from sweeprl.analysis.advice import PATHS, config_path, select

RUN_ID = re.compile(r"^(runs:/)?([0-9a-f]{32})/?$")


@dataclass
class RunHistory:
    source: str
    records: List[Dict[str, float]]  # training records
    config: Dict[str, Any] = field(default_factory=dict)  # param name (sweeprl.analysis.advice.PATHS) -> value
    algo: Optional[str] = None
    sweep_params: Dict[str, str] = field(default_factory=dict)  # the search space the run came from
    trial_dir: Optional[str] = None
    target_kl: Optional[float] = None  # the run's objective.target_kl, when known
    resolved: Optional[Dict[str, Any]] = None  # the run's whole resolved sweeprl config, when known
    eval_records: List[Dict[str, float]] = field(default_factory=list)  # evaluation, analysed on its own
    format: Optional[str] = None  # how the file was read (readers.parse), for a file source
    framework: Optional[str] = None  # whose metric names it has, when one tool's matched
    used: List[str] = field(default_factory=list)  # the columns the diagnosis read
    ignored: List[str] = field(default_factory=list)  # numeric columns it did not
    named_algo: Optional[str] = None  # the algorithm the log's own text names (:func:`named_algo`)
    eval_only: bool = False  # the log holds evaluation records only, read as the run's curve


def infer_algo(records: List[Dict[str, float]], weak: bool = True) -> Optional[str]:
    """The algorithm family of a history without config, from evidence in its metrics (not one column name):
    preference optimisation (``dpo``) when it logs chosen/rejected rewards, ``ppo`` when it has a learned value
    function (a critic's loss or explained variance) or TRL's per-sequence ``objective/kl``, ``grpo`` (critic-free
    RL: GRPO, RLOO, REINFORCE++, DAPO) when it logs group statistics or, as ``weak`` evidence that PPO logs too, a
    bare KL, a clip ratio or completion lengths without a critic; else None (a reward and a loss alone do not
    tell)."""
    names = {k for r in records[:200] for k in r}
    if names & set(keys.PREFERENCE):
        return "dpo"
    if names & (set(keys.VALUE_FUNCTION) | {"objective/kl", "objective/scores"}):
        return "ppo"
    if names & {*keys.ZERO_STD, *keys.REWARD_STD}:
        return "grpo"
    if weak and names & {"kl", *keys.CLIP_FRACTION, *keys.COMPLETION_LENGTH}:
        return "grpo"
    return None


_ALGO_NAMES = re.compile(r"\b(GRPO|RLOO|PPO|DPO|KTO|ORPO)(?=Trainer\(|Config\(|\b)")


def named_algo(text: str) -> Optional[str]:
    """The algorithm a log's own text names (``KTOTrainer(`` in a notebook, ``GRPO iter 3`` in a console log),
    lower-cased, when one name is at least twice as frequent as any other; None when none or several are."""
    counts: Dict[str, int] = {}
    for name in _ALGO_NAMES.findall(text):
        counts[name.lower()] = counts.get(name.lower(), 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] < 2 * ranked[1][1]):
        return None
    return ranked[0][0]


#: an algorithm a log names -> the family the rules judge it as
FAMILY = {"grpo": "grpo", "rloo": "grpo", "ppo": "ppo", "dpo": "dpo", "kto": "dpo", "orpo": "dpo"}


def run_algo(run: RunHistory) -> Optional[str]:
    """The run's algorithm family: its config's, else the evidence of its metrics (:func:`infer_algo`), else the
    algorithm its own text names (a loss-only table of a ``KTOTrainer`` notebook; a CSV whose ``method`` column
    says PPO on every row outweighs a bare ``kl`` column, which PPO logs too)."""
    records = run.records + run.eval_records
    return run.algo or infer_algo(records, weak=False) or FAMILY.get(run.named_algo or "") or infer_algo(records)


def records_of(rows: List[Dict[str, Any]]) -> List[Dict[str, float]]:
    """sweeprl's own per-step rows (metrics.jsonl, MLflow) as training records."""
    return readers.normalise(rows).train


def _from_log(source: str, log: "readers.Log") -> RunHistory:
    return RunHistory(
        source=f"{source} ({log.run})" if log.run else source,
        records=log.train,
        eval_records=log.eval,
        format=log.format,
        framework=log.framework,
        used=log.used,
        ignored=log.ignored,
        eval_only=log.eval_only,
    )


def config_values(resolved: Dict[str, Any]) -> tuple[Dict[str, Any], Optional[str]]:
    """The diagnosis-relevant values of a resolved sweeprl config (by param name) and its algorithm."""
    algo = (resolved.get("algo") or {}).get("name")
    out: Dict[str, Any] = {}
    for name in PATHS:
        path = config_path(name, algo, resolved)
        value = select(resolved, path) if path else None
        if value is not None:
            out[name] = value
    return out, algo


def _trial_dir(path: Path) -> RunHistory:
    import yaml

    if not trial_record.metrics_path(path).is_file():
        raise FileNotFoundError(
            f"{path} is a directory without {trial_record.METRICS} (not a sweeprl trial or run dir)"
        )
    run = RunHistory(source=str(path), records=records_of(trial_record.read_metrics(path)), trial_dir=str(path))
    resolved = trial_record.read_resolved_config(path)
    if resolved is not None:
        run.config, run.algo = config_values(resolved)
        run.resolved = resolved
        run.target_kl = (resolved.get("objective") or {}).get("target_kl")
    hydra_file = path / ".hydra" / "hydra.yaml"
    if hydra_file.is_file():
        hydra = (yaml.safe_load(hydra_file.read_text()) or {}).get("hydra", {})
        params = ((hydra.get("sweeper") or {}).get("params")) or {}
        run.sweep_params = {str(k): resolve_text(str(v), resolved) for k, v in params.items()}
    return run


def resolve_text(text: str, resolved: Optional[Dict[str, Any]]) -> str:
    """A search-space string from ``.hydra/hydra.yaml`` with its ``${...}`` interpolations (the sweep presets'
    ``${search_space.learning_rate.0}``) filled in from the trial's resolved config; unchanged when that fails."""
    if "${" not in text or not resolved:
        return text
    from omegaconf import OmegaConf

    try:
        return str(OmegaConf.create({**resolved, "__text": text}).__text)
    except Exception:  # noqa: BLE001 - an interpolation the resolved config cannot fill
        return text


def _mlflow_run(run_id: str, tracking_uri: Optional[str]) -> RunHistory:
    from mlflow.tracking import MlflowClient

    from sweeprl.tracking import resolve_uri

    client = MlflowClient(resolve_uri(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")))
    run = client.get_run(run_id)
    by_step: Dict[int, Dict[str, float]] = {}
    for key in run.data.metrics:
        if key.startswith(("objective_terms/", "stability/")) or key == "objective":
            continue
        for m in client.get_metric_history(run_id, key):
            by_step.setdefault(int(m.step), {"step": float(m.step)})[key] = float(m.value)
    rows = [by_step[s] for s in sorted(by_step)]
    params = run.data.params
    resolved: Dict[str, Any] = {}
    for dotted, value in params.items():
        node = resolved
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = _parse_scalar(value)
    whole = _resolved_artifact(client, run_id)  # the trial's resolved_config.yaml, when it was logged
    config, algo = config_values(whole or resolved)
    target_kl = ((whole or resolved).get("objective") or {}).get("target_kl")
    return RunHistory(
        source=f"runs:/{run_id}",
        records=records_of(rows),
        config=config,
        algo=algo,
        target_kl=float(target_kl) if target_kl is not None else None,
        resolved=whole,
    )


def _resolved_artifact(client: Any, run_id: str) -> Optional[Dict[str, Any]]:
    """The run's ``resolved_config.yaml`` artifact (params flatten lists into strings, so they cannot stand in
    for the config when an override is validated), or None."""
    import tempfile

    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = client.download_artifacts(run_id, trial_record.RESOLVED_CONFIG, tmp)
            return trial_record.read_resolved_config(Path(local).parent)
    except Exception:  # noqa: BLE001 - no such artifact (tracking.log_config_artifact=false) or store unreachable
        return None


def _parse_scalar(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def load_runs(source: str, tracking_uri: Optional[str] = None) -> List[RunHistory]:
    """Every run SOURCE holds (see module docstring): one, or several for a log file that holds several
    (:func:`sweeprl.analysis.readers.split_runs`); raises FileNotFoundError/ValueError with a clear message."""
    path = Path(source)
    if path.is_dir():
        return [_trial_dir(path)]
    if path.is_file():
        if path.name == trial_record.METRICS and trial_record.read_resolved_config(path.parent) is not None:
            return [_trial_dir(path.parent)]
        named = named_algo(path.read_text(errors="replace"))
        runs = [_from_log(source, log) for log in readers.read_runs(path)]
        for run in runs:
            run.named_algo = named
        return runs
    m = RUN_ID.match(source)
    if m:
        return [_mlflow_run(m.group(2), tracking_uri)]
    raise FileNotFoundError(f"{source}: not a trial directory, log file or MLflow run id")


def load(source: str, tracking_uri: Optional[str] = None) -> RunHistory:
    """The one run SOURCE holds (:func:`load_runs`); a ValueError naming the runs of a file that holds several."""
    runs = load_runs(source, tracking_uri)
    if len(runs) > 1:
        raise readers.LogFormatError(f"{source} holds {len(runs)} runs: {', '.join(r.source for r in runs)}")
    return runs[0]
