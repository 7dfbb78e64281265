"""Schema of the ``objective`` group: how a trial's metrics become its value (:mod:`sweeprl.analysis.objective`).

Moved verbatim out of :mod:`sweeprl.config.schema` (which re-exports both classes); its value rules stay in
:mod:`sweeprl.config.validate` (``objective.*`` in ``COMMON_RULES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sweeprl.config.fields import f


@dataclass
class ObjectiveWeights:
    dispersion: float = f(1.0, "Weight of the late-window dispersion (IQR of step-to-step reward changes).")
    drawdown: float = f(1.0, "Weight of the worst drawdowns of the smoothed reward from its running best.")
    short_term_risk: float = f(0.5, "Weight of the worst single-step reward drops (CVaR 5 %).")
    kl_excess: float = f(1.0, "Weight of the mean KL in excess of target_kl.")
    entropy_collapse: float = f(0.5, "Weight of the entropy drop beyond entropy_drop_free.")
    mode_collapse: float = f(0.5, "Weight of the mean frac_reward_zero_std beyond zero_std_free.")
    non_finite: float = f(10.0, "Penalty per unit fraction of logged steps with a non-finite metric.")
    across_seeds: float = f(1.0, "Multi-seed runs: weight of the standard deviation of the seeds' values.")


@dataclass
class ObjectiveConfig:
    name: str = f(
        "stability_adjusted",
        "stability_adjusted (reward minus instability penalties), pareto (reward vs. instability, two values) or "
        "reward (plain final reward).",
    )
    reward_key: str = f("reward", "Metric holding the per-step mean reward.")
    window: float = f(0.25, "Late window as a fraction of logged steps.")
    final_steps: int = f(5, "Logged steps averaged for the final reward (objective=reward).")
    target_kl: float = f(0.1, "KL above this target is penalised.")
    entropy_drop_free: float = f(0.5, "Relative entropy drop from the start that costs nothing.")
    zero_std_free: float = f(0.5, "Mean frac_reward_zero_std that costs nothing.")
    weights: ObjectiveWeights = field(default_factory=ObjectiveWeights, metadata={"help": "Penalty weights."})
