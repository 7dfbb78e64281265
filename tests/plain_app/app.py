"""A plain Hydra app (no sweeprl anywhere) that the sweeper tests sweep with ``hydra/sweeper: sweeprl``.

The objective is a shifted sphere, ``(x - 1)^2 + (y + 2)^2 + z``; with ``two_objectives`` it returns the pair
``(sphere, -(x + y))`` as a tuple (or a numpy array with ``as_array``). A job raises when its number is in
``fail_jobs`` (multirun jobs) or when ``x > fail_above``.
``record_modules`` writes the sweeprl modules loaded in the process to ``modules.json`` in the job's dir.
"""

import json
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig):
    job = OmegaConf.select(HydraConfig.get(), "job.num", default=None, throw_on_missing=False)
    if cfg.record_modules:
        loaded = sorted(m for m in sys.modules if m == "sweeprl" or m.startswith("sweeprl."))
        (Path(HydraConfig.get().runtime.output_dir) / "modules.json").write_text(json.dumps(loaded))
    if job in cfg.fail_jobs or (cfg.fail_above is not None and cfg.x > cfg.fail_above):
        raise RuntimeError(f"planned failure of job {job} (x={cfg.x})")
    sphere = (cfg.x - 1) ** 2 + (cfg.y + 2) ** 2 + cfg.z
    if not cfg.two_objectives:
        return sphere
    if cfg.as_array:
        import numpy as np

        return np.array([sphere, -(cfg.x + cfg.y)])
    return sphere, -(cfg.x + cfg.y)


def configure(cfg: DictConfig, trial) -> None:
    """custom_search_space: z depends on x, and a new key +w is added."""
    x = trial.params["x"]
    trial.suggest_float("z", 0.0, cfg.max_z * abs(x) + 1e-9)
    trial.suggest_int("+w", 0, 3)


if __name__ == "__main__":
    main()
