"""sweeprl: hyperparameter sweeps, a stability-adjusted objective and diagnosis for RL fine-tuning of code LLMs.

Importing the package is cheap; the Hydra structured configs are registered when :mod:`sweeprl.config` is
imported (the CLI, the sweeper and the trial runner all do).
"""

__version__ = "0.1.0"
