"""sweeprl: hyperparameter sweeps, a stability-adjusted objective and diagnosis for RL fine-tuning of code LLMs."""

__version__ = "0.1.0"

from sweeprl import config as _config  # noqa: E402,F401  (registers the structured configs with Hydra)
