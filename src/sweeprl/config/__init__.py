"""Config schema, registration, composition helpers and validation."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from sweeprl.config.schema import register_configs
from sweeprl.config.validate import ConfigValidationError, validate

__all__ = ["CONFIG_DIR", "ConfigValidationError", "config_dir", "register", "validate"]


def config_dir() -> Path:
    """The Hydra config root: ``sweeprl/conf`` inside an installed wheel, else ``conf/`` of the checkout."""
    packaged = Path(__file__).resolve().parent.parent / "conf"
    if (packaged / "config.yaml").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "conf"
    if (checkout / "config.yaml").is_file():
        return checkout
    raise FileNotFoundError(f"sweeprl config root not found (looked in {packaged} and {checkout})")


CONFIG_DIR = config_dir()


def _csv(value) -> str:
    """``${sweeprl_csv:[4, 6, 8]}`` -> ``4,6,8`` (lets sweep presets write ``choice(...)`` from a list)."""
    return ",".join(str(v) for v in value)


def _trial_dir(number, suffix="") -> str:
    """``${sweeprl_trial_dir:<trial number>,<suffix>}``: the trial dir name of :mod:`sweeprl.trial_record`."""
    from sweeprl.trial_record import dir_name

    return dir_name(number, suffix or "")


def register() -> None:
    """Register schemas and resolvers (idempotent); called on import of sweeprl and of the sweeper plugin."""
    register_configs()
    if not OmegaConf.has_resolver("sweeprl_csv"):
        OmegaConf.register_new_resolver("sweeprl_csv", _csv)
    if not OmegaConf.has_resolver("sweeprl_trial_dir"):
        OmegaConf.register_new_resolver("sweeprl_trial_dir", _trial_dir)


register()
