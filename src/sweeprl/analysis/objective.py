"""The trial value Optuna optimises, computed from a trial's per-step metric history.

``objective=stability_adjusted`` (sweep default)::

    value = late_reward - w_dispersion * dispersion - w_drawdown * drawdown - w_short_term_risk * short_term_risk
                        - w_kl_excess * kl_excess - w_entropy_collapse * entropy_collapse
                        - w_mode_collapse * mode_collapse - w_non_finite * non_finite

with, on the logged reward curve r_1..r_n and a late window of the last ``ceil(window * n)`` steps
(quantities from :mod:`sweeprl.analysis.stability`, in reward units so the weights read as "reward per unit"):

- ``late_reward``: mean of r over the late window — of the *validation* reward (``eval_reward``, evaluated
  every ``data.eval_every`` updates on held-out prompts) when the run has one, so a sweep cannot win by
  overfitting its training prompts;
- ``dispersion``: IQR of the step-to-step differences of r in the late window (Chan et al.'s dispersion
  across time) — noisy, spiky late training costs;
- ``drawdown``: CVaR (worst 5 %) of the drawdowns of a 5-step moving average of r from its running maximum
  (long-term risk) — a run that peaks and then collapses costs;
- ``short_term_risk``: CVaR (worst 5 %) of the single-step drops of r;
- ``kl_excess``: mean over steps of max(0, kl - target_kl) (GRPO ``kl``, or PPO ``objective/kl``);
- ``entropy_collapse``: max(0, relative entropy drop from the first to the late window - entropy_drop_free);
- ``mode_collapse``: max(0, mean ``frac_reward_zero_std`` - zero_std_free) (groups whose samples all score
  the same carry no learning signal);
- ``non_finite``: fraction of logged steps where reward, loss, kl, entropy or grad_norm is NaN/inf.

``objective=reward`` is the baseline: the mean reward of the last ``final_steps`` logged steps.
``objective=pareto`` returns two values to a multi-objective study: (late_reward, instability) with
instability = the sum of the weighted penalties above, maximised and minimised respectively.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from sweeprl.analysis import stability
from sweeprl.analysis.stability import KL_KEYS, series

PENALTIES = (
    "dispersion",
    "drawdown",
    "short_term_risk",
    "kl_excess",
    "entropy_collapse",
    "mode_collapse",
    "non_finite",
)
EVAL_REWARD_KEYS = ("eval_reward", "eval_objective/scores")
#: objective terms that are rewards (every other term is a penalty, positive = costs)
REWARD_TERMS = ("late_reward", "final_reward")


def reward_term(terms: Mapping[str, float]) -> Optional[float]:
    """The reward term of an objective's terms (``late_reward`` or, for objective=reward, ``final_reward``)."""
    for k in REWARD_TERMS:
        if k in terms:
            return float(terms[k])
    return None


def penalty_sum(terms: Mapping[str, float]) -> float:
    """Sum of the objective's penalty terms (every term but the reward ones); 0 without terms."""
    return float(sum(float(v) for k, v in terms.items() if k not in REWARD_TERMS))


class ObjectiveError(ValueError):
    """The history cannot give an objective value (e.g. no finite reward was ever logged)."""


@dataclass
class ObjectiveResult:
    value: float
    name: str
    terms: Dict[str, float] = field(default_factory=dict)  # weighted contributions (penalties positive)
    raw: Dict[str, float] = field(default_factory=dict)  # the unweighted stability quantities

    @property
    def values(self) -> List[float]:
        """What the study is told: one value, or (reward, instability) for objective=pareto."""
        if self.name == "pareto":
            return [self.terms["late_reward"], self.instability]
        return [self.value]

    @property
    def instability(self) -> float:
        return penalty_sum(self.terms)

    def as_dict(self) -> Dict[str, Any]:
        return {"objective": self.value, "name": self.name, "values": self.values, "terms": self.terms, "raw": self.raw}


def stability_terms(history: Sequence[Mapping[str, Any]], objective_cfg: Any) -> Dict[str, float]:
    """The unweighted quantities of the stability-adjusted objective (see module docstring)."""
    keys = (objective_cfg.reward_key, *stability.REWARD_KEYS)
    try:
        rep = stability.compute(
            history, window=objective_cfg.window, target_kl=objective_cfg.target_kl, reward_keys=keys
        )
    except ValueError as exc:
        raise ObjectiveError(str(exc)) from exc
    late_reward = rep.late_reward
    eval_r = series(history, *EVAL_REWARD_KEYS)
    if eval_r.size:
        late_reward = float(eval_r[-stability.window_size(eval_r.size, objective_cfg.window) :].mean())
    kl = series(history, *KL_KEYS)
    raw = rep.as_dict()
    raw.update(
        late_reward=late_reward,
        train_late_reward=rep.late_reward,
        dispersion=rep.dispersion_raw,
        drawdown=rep.drawdown_raw,
        short_term_risk=rep.short_term_risk_raw,
        kl_excess=float(np.maximum(kl - objective_cfg.target_kl, 0.0).mean()) if kl.size else 0.0,
        entropy_collapse=max(0.0, rep.entropy_drop - objective_cfg.entropy_drop_free),
        mode_collapse=max(0.0, rep.frac_reward_zero_std - objective_cfg.zero_std_free),
        non_finite=rep.non_finite_fraction,
        uses_validation_reward=float(eval_r.size > 0),
    )
    return raw


def compute_objective(history: Sequence[Mapping[str, Any]], objective_cfg: Any) -> ObjectiveResult:
    """The trial value for ``objective_cfg.name`` (stability_adjusted, pareto or reward)."""
    if objective_cfg.name == "reward":
        rewards = series(history, objective_cfg.reward_key, *stability.REWARD_KEYS)
        if rewards.size == 0:
            raise ObjectiveError(f"no finite '{objective_cfg.reward_key}' value in {len(history)} logged steps")
        value = float(rewards[-objective_cfg.final_steps :].mean())
        return ObjectiveResult(value=value, name="reward", terms={"final_reward": value})
    if objective_cfg.name not in ("stability_adjusted", "pareto"):
        raise ObjectiveError(f"objective.name={objective_cfg.name!r}; allowed: stability_adjusted, pareto, reward")

    raw = stability_terms(history, objective_cfg)
    weights = objective_cfg.weights
    terms = {"late_reward": raw["late_reward"]}
    for name in PENALTIES:
        terms[name] = float(getattr(weights, name)) * raw[name]
    value = terms["late_reward"] - sum(terms[k] for k in PENALTIES)
    return ObjectiveResult(value=float(value), name=str(objective_cfg.name), terms=terms, raw=raw)


def objective_metrics(result: ObjectiveResult) -> Dict[str, float]:
    """Flat metric dict for MLflow: ``objective``, ``objective_terms/<term>``, ``stability/<quantity>``."""
    out: Dict[str, float] = {"objective": result.value}
    out.update({f"objective_terms/{k}": v for k, v in result.terms.items()})
    out.update({f"stability/{k}": v for k, v in result.raw.items()})
    return out


def load_history(path: str) -> List[Dict[str, Any]]:
    """Read a ``metrics.jsonl`` written by :class:`sweeprl.training.callbacks.MetricsRecorder`."""
    import json

    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


__all__ = [
    "ObjectiveError",
    "ObjectiveResult",
    "compute_objective",
    "load_history",
    "objective_metrics",
    "stability_terms",
]
