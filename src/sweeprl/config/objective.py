"""Schema of the ``objective`` group: how a trial's metrics become its value (:mod:`sweeprl.analysis.objective`).

Split out of :mod:`sweeprl.config.schema` (which re-exports both classes); its value rules stay in
:mod:`sweeprl.config.validate` (``objective.*`` in ``COMMON_RULES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sweeprl.config.fields import f


@dataclass
class ObjectiveWeights:
    """Weights of the stability-adjusted objective's penalties (sweeprl.analysis.objective). The first three are
    in reward units; the others multiply a severity (0 = none) by the run's reward scale."""

    dispersion: float = f(1.0, "Per-step reward noise, taxed by its share of noise + learning.")
    short_term_risk: float = f(1.0, "Worst 5 % single-step drops, taxed by their share of drops + learning.")
    drawdown: float = f(0.7, "Largest fall of the reward's block means below their running best (beyond noise).")
    kl_excess: float = f(0.5, "log(1 + huber(KL/target_kl − 1)) averaged over steps (0 at or below the target).")
    kl_negative: float = f(0.5, "Mean negative KL estimate, in target multiples (PPO's k1 estimator).")
    entropy_collapse: float = f(0.25, "Entropy drop beyond entropy_drop_free (1 = entropy went to zero).")
    entropy_blowup: float = f(0.5, "Entropy rise beyond entropy_rise_free (relative to the first window).")
    value_loss_spikes: float = f(1.0, "PPO value-loss spikes (> 10x the median before them; 1 = three or 5 %).")
    grad_norm_spikes: float = f(0.5, "Gradient-norm spikes (> 10x the median before them; 1 = three or 5 %).")
    mode_collapse: float = f(0.5, "Mean frac_reward_zero_std beyond zero_std_free.")
    non_finite: float = f(10.0, "Fraction of logged steps with a NaN/inf metric.")
    across_seeds: float = f(1.0, "Multi-seed runs: weight of the standard deviation of the seeds' values.")


@dataclass
class ObjectiveConfig:
    name: str = f(
        "stability_adjusted",
        "stability_adjusted (reward minus instability penalties), pareto (reward vs. instability, two values) or "
        "reward (plain final reward).",
    )
    reward_key: str = f("reward", "Metric holding the per-step mean reward.")
    window: float = f(0.25, "Late (and early) window as a fraction of the trained steps.")
    final_steps: int = f(5, "Logged steps averaged for the final reward (objective=reward).")
    target_kl: Optional[float] = f(
        None,
        "KL above this target is penalised, in the units the algorithm logs (GRPO/RLOO kl: per token; PPO "
        "objective/kl: summed per completion); None = algo.target_kl for PPO, else 0.1 per token.",
    )
    entropy_drop_free: float = f(0.5, "Relative entropy drop from the first window that costs nothing.")
    entropy_rise_free: float = f(0.5, "Relative entropy rise from the first window that costs nothing.")
    zero_std_free: float = f(0.5, "Mean frac_reward_zero_std that costs nothing.")
    min_scale: float = f(0.1, "Smallest reward scale that divergence penalties are multiplied by.")
    weights: ObjectiveWeights = field(default_factory=ObjectiveWeights, metadata={"help": "Penalty weights."})
