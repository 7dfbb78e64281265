"""Per-step metric recording: ``metrics.jsonl`` in the trial dir and MLflow metrics of the trial's run (queued)."""

from __future__ import annotations

import logging
import math
import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from sweeprl import trial_record

if TYPE_CHECKING:
    from sweeprl.tracking_worker import TrialRun

# Keys of the end-of-training summary that the HF Trainer logs once; not a training step.
log = logging.getLogger("sweeprl.progress")

SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss")
CLIP_RATIO = "clip_ratio/"


def unclipped_by_construction(args: Any) -> bool:
    """True when TRL's GRPO computes no old log-probs, so the policy ratio is exactly 1 and its five
    ``clip_ratio/*`` metrics are 0 at every step: generation aligned with the optimizer steps
    (``gradient_accumulation_steps`` a multiple of ``steps_per_generation * num_iterations``) and no vLLM
    importance sampling — the same condition ``GRPOTrainer._generate_and_score_completions`` tests. RLOO computes
    old log-probs with a second forward pass, so its ratios are not zero by construction."""
    from trl import GRPOConfig

    if not isinstance(args, GRPOConfig) or getattr(args, "use_vllm", False):
        return False
    every = int(args.steps_per_generation or 1) * int(args.num_iterations)
    return int(args.gradient_accumulation_steps) % every == 0


def numeric_items(logs: Dict[str, Any]) -> Dict[str, float]:
    return {k: float(v) for k, v in logs.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)}


class MetricsRecorder(TrainerCallback):
    """Appends one record per logging step (TRL's metric names plus ``step``) to the trial's ``metrics.jsonl``
    (:mod:`sweeprl.trial_record`, written synchronously: it is the record) and hands each value to the trial's
    MLflow run (:class:`sweeprl.tracking_worker.TrialRun`: queued, logged off the training thread); keeps the
    history in memory for the objective.

    Metrics that are zero by construction (``clip_ratio/*`` of on-policy GRPO, :func:`unclipped_by_construction`)
    stay in ``metrics.jsonl`` but are not sent to MLflow, where they were the first five (flat) charts of a run.

    In a distributed trial (``accelerate launch``) TRL and sweeprl's PPO log metrics already gathered over all
    processes, and only the main process (``state.is_world_process_zero``) records them: one record per step."""

    def __init__(self, trial_dir: Path, run: Optional["TrialRun"] = None, write: bool = True):
        # write=False: a process other than the main one of a distributed trial, which must not truncate the file
        # the main one appends to (its on_log records nothing either: ``state.is_world_process_zero``)
        self.file = trial_record.MetricsFile(trial_dir) if write else None
        self.run = run
        self.history: List[Dict[str, float]] = []
        self.summary: Dict[str, float] = {}
        self.withheld: tuple = ()

    def on_train_begin(self, args, state, control, **kwargs):
        self.withheld = (CLIP_RATIO,) if unclipped_by_construction(args) else ()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or self.file is None:
            return
        values = numeric_items(logs)
        if any(k in values for k in SUMMARY_KEYS):
            self.summary.update(values)
            return
        record = {"step": int(state.global_step), **values}
        self.history.append(record)
        self.file.append(record)
        if self.run is not None:
            # MLflow rejects nothing numeric, but NaN/inf make its UI charts useless; they stay in metrics.jsonl.
            shown = {k: v for k, v in values.items() if math.isfinite(v) and not k.startswith(self.withheld)}
            self.run.log_metrics([(k, v, record["step"]) for k, v in shown.items()])


SHOWN = ("reward", "kl", "objective/kl", "entropy", "loss")


def _brief(values: Dict[str, float]) -> Dict[str, str]:
    return {k: f"{values[k]:.4g}" for k in SHOWN if k in values}


class QuietProgress(ProgressCallback):
    """transformers' progress bar, with the current reward/KL/entropy as its postfix instead of one printed
    dict per logging step (with logging_steps=1 that floods the terminal)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            self.training_bar.set_postfix(_brief(numeric_items(logs)), refresh=False)


class ProgressLines(TrainerCallback):
    """One log line every ``every`` updates (sweeps, CI and SLURM logs: no progress bars)."""

    def __init__(self, label: str, every: int):
        self.label = label
        self.every = max(1, every)

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = int(state.global_step)
        if not logs or any(k in logs for k in SUMMARY_KEYS):
            return
        if state.is_world_process_zero and (step % self.every == 0 or step == state.max_steps):
            brief = " ".join(f"{k}={v}" for k, v in _brief(numeric_items(logs)).items())
            log.info("%s step %d/%d %s", self.label, step, state.max_steps, brief)


def use_progress_display(trainer: Any, *, bars: bool, label: str, lines: bool = True) -> None:
    """Replace the trainer's progress/printer callbacks by :class:`QuietProgress` (``bars``), by
    :class:`ProgressLines` (``lines``), or by nothing (a sweep's trial: the driver shows its progress)."""
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if bars:
        trainer.add_callback(QuietProgress())
    elif lines:
        trainer.add_callback(ProgressLines(label, every=max(1, trainer.args.max_steps // 5)))
