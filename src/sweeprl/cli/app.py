"""The Hydra application: ``python -m sweeprl [overrides]`` runs one trial, ``-m`` runs a sweep."""

from __future__ import annotations

import logging
import os
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from sweeprl.config import CONFIG_DIR

log = logging.getLogger("sweeprl")


def trial_task(cfg: DictConfig) -> Any:
    """Hydra task function: train one configuration, return its objective value to the sweeper."""
    from sweeprl.trial import run_trial

    hc = HydraConfig.get()
    sweep_params = {}
    if hc.sweeper.get("params") and cfg.sweeprl.trial_number is not None:
        sweep_params = {str(k): str(v) for k, v in hc.sweeper.params.items()}
    single = hc.mode == RunMode.RUN and cfg.sweeprl.trial_number is None  # not a trial process of a sweep
    result = run_trial(cfg, hc.runtime.output_dir, progress_bars=single, sweep_params=sweep_params)
    if single:
        _print_single_run_summary(cfg, result)
    return result.objective.values if result.objective.name == "pareto" else result.value


def _print_single_run_summary(cfg: DictConfig, result) -> None:
    from rich.table import Table

    from sweeprl.cli.console import console
    from sweeprl.tracking import resolve_uri, ui_command

    table = Table(title=f"{cfg.name}: objective ({result.objective.name})")
    table.add_column("term")
    table.add_column("value", justify="right")
    zero = []
    for k, v in result.objective.terms.items():
        if k in ("late_reward", "final_reward"):
            table.add_row(k, f"{v:.4g}")
        elif v:
            table.add_row(f"- {k}", f"{v:.4g}")
        else:
            zero.append(k)
    table.add_row("objective", f"{result.value:.4g}")
    if zero:
        table.caption = f"{len(zero)} penalty terms are 0: {', '.join(zero)}"
    console.print(table)
    console.print(
        f"{result.steps} logged steps in {result.seconds:.1f} s; files in {result.output_dir}", soft_wrap=True
    )
    findings = result.diagnosis.findings if result.diagnosis else []
    if findings:
        console.print(f"diagnosis ({len(findings)} finding(s), full report in diagnosis.md):")
        for f in findings[:3]:
            overrides = " ".join(c["override"] for c in f.recommendation["changes"] if c.get("override"))
            console.print(f"  {f.severity.upper()} {f.id} (confidence {f.confidence:.2f}): {f.evidence}")
            if overrides:
                console.print(f"    try: {overrides}")
    else:
        console.print("diagnosis: no problems found")
    if cfg.tracking.enabled:
        console.print(f"MLflow: {ui_command(resolve_uri(cfg.tracking.uri))}", soft_wrap=True)


def run_hydra() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(trial_task)
    main()
