"""The post-mortem a senior engineer would write, computed from a run's per-step history.

:func:`diagnose` returns a :class:`Diagnosis`:

- ``summary``: a table per stretch of steps (or per epoch) and the reference reliability metrics;
- ``findings`` from a fixed vocabulary (:data:`FINDING_IDS`, rules in :mod:`sweeprl.analysis.rules`), each with
  severity, confidence, onset step, numeric evidence, cause and recommended changes — concrete Hydra overrides
  when the run's config is known (:mod:`sweeprl.analysis.advice`: valid and effective, or not given);
- one direction per parameter: when findings disagree (one says raise the learning rate, another lower it),
  the direction with the larger summed confidence wins and the other changes are dropped, with a note;
- ``objective``: the default stability-adjusted objective of the run (value and terms), the number a sweep
  would rank it by;
- ``next_sweep``: the search space to run next (:mod:`sweeprl.analysis.next_sweep`).

A finding that fires on most trials of a sweep says nothing about any one of them: :func:`sweep_level` picks
those out so the sweep's table and report show them once, for the whole sweep.
``python -m sweeprl diagnose SOURCE`` is the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set

import numpy as np

from sweeprl.analysis import keys, next_sweep, stability
from sweeprl.analysis.advice import Advice
from sweeprl.analysis.curves import curve
from sweeprl.analysis.history import RunHistory, run_algo
from sweeprl.analysis.objective import DEFAULT_TARGET_KL, ObjectiveError, compute_objective, kl_units
from sweeprl.analysis.rules import FINDING_IDS, RULES, Finding, Thresholds, View
from sweeprl.formatting import num

SEVERITIES = ("critical", "warning", "info")
#: what to fix first: a numerical blow-up, then instability (the run diverges or collapses), then a run that does
#: not learn, then sampling (groups, noise), then the setup (lengths); within a class, severity then confidence
PRIORITY = (
    ("non_finite",),
    (
        "reward_collapse",
        "reward_dip",
        "entropy_collapse",
        "entropy_rising",
        "kl_above_target",
        "grad_norm_spike",
        "value_loss_spike",
        "loss_spike",
        "loss_oscillation",
        "entropy_unstable",
        "clip_fraction_high",
        "kl_negative",
        "explained_variance_negative",
    ),
    ("preference_overfit",),
    (
        "reward_flat",
        "task_reward_flat",
        "updates_too_small",
        "reward_below_target",
        "preference_no_learning",
        "loss_flat",
    ),
    (
        "mode_collapse",
        "reward_frozen",
        "reward_cv_high",
        "reward_variance_rising",
        "reward_variance_died",
        "best_of_n_gap",
    ),
    ("truncation_high", "length_hacking"),
    ("short_history",),
)
RANK = {fid: i for i, ids in enumerate(PRIORITY) for fid in ids}
#: findings that make another one redundant when both fire (the more specific one stays)
SUPERSEDES = {
    "reward_collapse": ("reward_flat",),
    "updates_too_small": ("reward_flat",),
    "preference_no_learning": ("loss_flat",),
}
SWEEP_SHARE = 0.5  # a finding on more than this share of a sweep's trials is reported at sweep level
SWEEP_MIN_TRIALS = 3
_SIGNAL = {*keys.REWARD, *keys.PREF_MARGIN, *keys.PREF_ACCURACY}  # what an objective is made of

__all__ = ["FINDING_IDS", "Diagnosis", "Finding", "Thresholds", "diagnose", "sweep_level", "to_markdown"]


@dataclass
class Diagnosis:
    source: str
    summary: Dict[str, Any]
    findings: List[Finding] = field(default_factory=list)
    next_sweep: Dict[str, Any] = field(default_factory=lambda: {"params": {}})
    objective: Optional[Dict[str, Any]] = None  # {"value", "terms"} of the default objective
    resolved_conflicts: List[str] = field(default_factory=list)
    not_enough_evidence: List[str] = field(default_factory=list)  # candidates within the run's noise

    def as_dict(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "summary": self.summary,
            "objective": self.objective,
            "findings": [f.as_dict() for f in self.findings],
            "resolved_conflicts": self.resolved_conflicts,
            "not_enough_evidence": self.not_enough_evidence,
            "next_sweep": self.next_sweep,
        }

    def ids(self) -> List[str]:
        return [f.id for f in self.findings]

    def changes(self) -> List[Dict[str, Any]]:
        """Every recommended change, first by finding order, one per parameter."""
        out: Dict[str, Dict[str, Any]] = {}
        for f in self.findings:
            for c in f.recommendation["changes"]:
                out.setdefault(c["param"], c)
        return list(out.values())


def _direction(change: Mapping[str, Any], advice: Advice) -> str:
    """increase/decrease of a change; a ``set`` compares the new value with the current one."""
    if change["direction"] != "set":
        return change["direction"]
    current = advice.current(change["param"])
    try:
        return "increase" if float(change["value"]) > float(current) else "decrease"
    except (TypeError, ValueError):
        return "set"


def resolve_conflicts(findings: List[Finding], advice: Advice) -> List[str]:
    """Keep one direction per parameter: the one backed by the most confident finding (not the most findings:
    a flat reward and a reward below its target are one piece of evidence, not two); a tie goes to the
    cautious side (decrease). Drops the losing changes (in place) and returns a note per conflict."""
    votes: Dict[str, Dict[str, List[Finding]]] = {}
    for f in findings:
        for c in f.recommendation["changes"]:
            votes.setdefault(c["param"], {}).setdefault(_direction(c, advice), []).append(f)
    notes = []
    for param, sides in votes.items():
        if len(sides) < 2:
            continue
        score = {d: max(f.confidence for f in fs) for d, fs in sides.items()}
        winner = max(score, key=lambda d: (score[d], d == "decrease"))  # a tie goes to the cautious side
        for d, fs in sides.items():
            if d == winner:
                continue
            for f in fs:
                f.recommendation["changes"] = [
                    c for c in f.recommendation["changes"] if not (c["param"] == param and _direction(c, advice) == d)
                ]
            notes.append(
                f"{param}: {winner} ({', '.join(f.id for f in sides[winner])}, confidence {score[winner]:.2f}) over "
                f"{d} ({', '.join(f.id for f in fs)}, confidence {score[d]:.2f})"
            )
    return notes


def target_kl_for(run: RunHistory, th: Thresholds, algo: Optional[str], given: bool = False) -> float:
    """The KL target: ``--target-kl`` when given, else the run's ``objective.target_kl``, else the thresholds',
    else the default for the KL the algorithm logs."""
    for value in ((th.target_kl if given else None), run.target_kl, th.target_kl):
        if value is not None:
            return float(value)
    return DEFAULT_TARGET_KL[kl_units(run.records, algo)]


def run_objective(records: Sequence[Mapping[str, Any]], target_kl: float) -> Optional[Dict[str, Any]]:
    """The default stability-adjusted objective of a history (value and weighted terms), or None."""
    from omegaconf import OmegaConf

    from sweeprl.config.schema import ObjectiveConfig

    cfg = OmegaConf.merge(OmegaConf.structured(ObjectiveConfig), {"target_kl": float(target_kl)})
    try:
        res = compute_objective(records, cfg)
    except ObjectiveError:
        return None
    return {"value": res.value, "terms": res.terms, "target_kl": float(target_kl)}


def preference_objective(records: Sequence[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """What a preference-optimisation log is ranked by: its late-window pair accuracy (how often the policy
    prefers the chosen answer by more than the reference does), else its late reward margin; None without
    either (then the log has no reward signal)."""
    for name, names in (("late_accuracy", keys.PREF_ACCURACY), ("late_margin", keys.PREF_MARGIN)):
        c = curve(records, *names)
        if c.n >= 2:
            late = c.late(0.25).mean()
            return {"value": late, "terms": {name: late}, "basis": "preference"}
    return None


def diagnose(run: RunHistory, thresholds: Optional[Thresholds] = None, target_kl_given: bool = False) -> Diagnosis:
    """All findings of one run. The run's own ``objective.target_kl`` is used unless ``target_kl_given``."""
    th = thresholds or Thresholds()
    algo = run_algo(run)
    advice = Advice(algo=algo, values=dict(run.config), resolved=run.resolved, framework=run.framework)
    target_kl = target_kl_for(run, th, algo, target_kl_given)
    known = target_kl_given or run.target_kl is not None or th.target_kl is not None
    view = View(
        records=run.records,
        algo=algo,
        advice=advice,
        th=th,
        target_kl=target_kl,
        target_kl_known=known,
        eval_records=run.eval_records,
        named_algo=run.named_algo,
    )
    findings = [f for rule in RULES if (f := rule(view)) is not None]
    ids = {f.id for f in findings}
    dropped = {d for k, ds in SUPERSEDES.items() if k in ids for d in ds}
    findings = [f for f in findings if f.id not in dropped]
    notes = resolve_conflicts(findings, advice)
    findings.sort(key=lambda f: (RANK[f.id], SEVERITIES.index(f.severity), -f.confidence))
    d = Diagnosis(
        source=run.source,
        summary=summary(run, algo),
        findings=findings,
        objective=preference_objective(run.records) if algo == "dpo" else run_objective(run.records, target_kl),
        resolved_conflicts=notes,
        not_enough_evidence=list(dict.fromkeys(view.weak)),
    )
    d.next_sweep = next_sweep.from_run(run.sweep_params, d.changes(), advice.values, algo, run.resolved)
    return d


def sweep_level(findings_by_trial: Mapping[Any, Iterable[str]]) -> Set[str]:
    """Finding ids that fire on more than half of a sweep's trials (and on at least 3): they describe the sweep,
    not a trial."""
    counts: Dict[str, int] = {}
    for ids in findings_by_trial.values():
        for fid in set(ids):
            counts[fid] = counts.get(fid, 0) + 1
    total = len(findings_by_trial)
    return {f for f, n in counts.items() if n >= SWEEP_MIN_TRIALS and n > SWEEP_SHARE * total}


# ------------------------------------------------------------------------------------------ summary
def summary(run: RunHistory, algo: Optional[str] = None, n_windows: int = 8) -> Dict[str, Any]:
    recs = run.records
    # per-epoch records (every record at an integer epoch, as in epoch-level logs): one row per epoch;
    # otherwise (TRL logs fractional epochs per step) stretches of steps
    per_epoch = all("epoch" in r and float(r["epoch"]).is_integer() for r in recs)
    epochs = sorted({int(r["epoch"]) for r in recs}) if per_epoch else []
    groups: List[tuple[str, List[Dict[str, float]]]] = []
    if 1 < len(epochs) <= 50:
        groups = [(f"epoch {e}", [r for r in recs if int(r["epoch"]) == e]) for e in epochs]
    else:
        k = max(1, min(n_windows, len(recs)))
        bounds = np.linspace(0, len(recs), k + 1).astype(int)
        groups = [
            (f"steps {int(recs[a]['step'])}-{int(recs[b - 1]['step'])}", recs[a:b])
            for a, b in zip(bounds[:-1], bounds[1:])
            if b > a
        ]
    rows = []
    for label, part in groups:
        rw = curve(part, *keys.REWARD)
        row: Dict[str, Any] = {"window": label, "reward": rw.mean() if rw else None}
        row["reward_var"] = float(rw.values.var()) if rw else None
        for name, names in (
            ("loss", keys.LOSS),
            ("reward_std", keys.REWARD_STD),
            ("kl", keys.KL),
            ("entropy", keys.ENTROPY),
            ("margin", keys.PREF_MARGIN),
            ("accuracy", keys.PREF_ACCURACY),
        ):
            c = curve(part, *names)
            if c:
                row[name] = c.mean()
        rows.append(row)
    return {
        "steps": len(recs),
        "algo": algo,
        "config": run.config,
        "windows": rows,
        "stability": stability.run_metrics(recs) or None,
        "columns": {
            "format": run.format,
            "framework": run.framework,
            "used": run.used,
            "ignored": run.ignored,
            "eval_points": len(run.eval_records),
            "eval_only": run.eval_only,
            # the reward-like columns only the evaluation records have
            "eval_signal": sorted(
                {k for r in run.eval_records for k in r if k in _SIGNAL} - {k for r in recs for k in r}
            ),
        },
    }


# ------------------------------------------------------------------------------------------ rendering
def _names_steps(f: Finding) -> bool:
    """The evidence already says at which steps ("around step 28"): no list of them after it."""
    return all(f"step {s}" in f.evidence for s in f.steps[:10])


def to_markdown(d: Diagnosis) -> str:
    s = d.summary
    lines = [f"# Diagnosis of {d.source}", ""]
    cfg = ", ".join(f"{k}={num(v)}" for k, v in s.get("config", {}).items())
    lines.append(
        f"{s['steps']} logged steps" + (f"; algo {s['algo']}" if s.get("algo") else "") + (f"; {cfg}" if cfg else "")
    )
    lines += ["", "## Summary", ""]
    cols = ["window", "reward", "reward_var", "loss", "reward_std", "kl", "entropy", "margin", "accuracy"]
    cols = [c for c in cols if any(r.get(c) is not None for r in s["windows"])]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in s["windows"]:
        lines.append("| " + " | ".join(r[c] if c == "window" else num(r.get(c), 4) for c in cols) + " |")
    st = s.get("stability")
    if st:
        lines += [
            "",
            f"Reliability (Chan et al. 2020, per step): median late reward {num(st['median_performance'], 4)}; "
            f"dispersion {num(st['dispersion_time'], 3)}, short-term risk {num(st['short_term_risk'], 3)}, "
            f"long-term risk {num(st['long_term_risk'], 3)}.",
        ]
    columns = s.get("columns") or {}
    if columns.get("format"):
        shown = ", ".join(columns["used"][:14]) + (" ..." if len(columns["used"]) > 14 else "")
        lines += [
            "",
            f"Read as {columns['format']}"
            + (f" ({columns['framework']} names)" if columns.get("framework") else "")
            + f": {len(columns['used'])} columns used ({shown})"
            + (f"; {columns['eval_points']} eval points, read on their own" if columns.get("eval_points") else "")
            + ("; the log holds evaluations only, read as the run's curve" if columns.get("eval_only") else "")
            + ".",
        ]
        if columns["ignored"]:
            more = f" and {len(columns['ignored']) - 14} more" if len(columns["ignored"]) > 14 else ""
            lines += ["", f"Ignored (no rule reads them): {', '.join(columns['ignored'][:14])}{more}."]
    if d.objective and d.objective.get("basis") == "preference":
        ((term, value),) = d.objective["terms"].items()
        lines += ["", f"Objective (preference): {term.replace('_', ' ')} {num(value, 4)}."]
    elif d.objective:
        pens = ", ".join(f"{k} {num(v, 3)}" for k, v in d.objective["terms"].items() if k != "late_reward" and v)
        lines += [
            "",
            f"Objective (stability_adjusted): {num(d.objective['value'], 4)} = late reward "
            f"{num(d.objective['terms']['late_reward'], 4)}" + (f" − ({pens})" if pens else "") + ".",
        ]
    elif columns.get("format") and columns.get("eval_signal"):
        lines += [
            "",
            "No reward signal in the training records: only the evaluation records have "
            f"{', '.join(columns['eval_signal'])} (read on their own), so the run gets no objective.",
        ]
    elif columns.get("format"):
        lines += [
            "",
            "No reward signal in this log: it has no reward, pair accuracy or reward margin column, so it gets no "
            "objective and no reward findings.",
        ]
    lines += ["", "## Findings", ""]
    if not d.findings:
        lines.append("No problems found.")
    for i, f in enumerate(d.findings, 1):
        when = f", from step {f.onset}" if f.onset is not None else ""
        lines.append(
            f"{i}. **{f.id}** ({f.severity}, confidence {f.confidence:.2f}{when}) — {f.evidence}"
            + (f" (steps {', '.join(map(str, f.steps[:10]))})" if f.steps and not _names_steps(f) else "")
        )
        lines.append(f"   - cause: {f.cause}")
        lines.append(f"   - try: {f.recommendation['text']}")
        overrides = [c["override"] for c in f.recommendation["changes"] if c.get("override")]
        if overrides:
            lines.append(f"   - overrides: `{' '.join(overrides)}`")
        elif f.recommendation["changes"]:
            lines.append(
                f"   - in {columns.get('framework') or 'your config'}: "
                + ", ".join(_direction_text(c) for c in f.recommendation["changes"])
            )
    if d.not_enough_evidence:
        lines += ["", "Not enough evidence (within the run's own noise, so no finding):"]
        lines += [f"- {n}" for n in d.not_enough_evidence]
    if d.resolved_conflicts:
        lines += ["", "Conflicting advice, resolved by confidence:"]
        lines += [f"- {n}" for n in d.resolved_conflicts]
    if d.next_sweep.get("params"):
        lines += [
            "",
            "## Next sweep",
            "",
            "```bash",
            "python -m sweeprl -m ... +sweep_from=diagnosis.json   # runs these ranges:",
        ]
        for k, v in d.next_sweep["params"].items():
            why = d.next_sweep.get("reasons", {}).get(k)
            lines.append(f"#   {k}: {v}")
            if why:
                lines.append(f"#       {why}")
        lines.append("```")
    return "\n".join(lines) + "\n"


def _direction_text(c: Mapping[str, Any]) -> str:
    name = c.get("setting") or c["param"]
    if c["direction"] == "set":
        return f"`{name}` = {num(c['value'])}"
    return f"`{name}` {'up' if c['direction'] == 'increase' else 'down'}" + (
        f" (x{num(c['factor'])})" if c.get("factor") else ""
    )


def thresholds_from(pairs: Mapping[str, Any]) -> Thresholds:
    names = Thresholds.names()
    unknown = set(pairs) - set(names)
    if unknown:
        raise ValueError(f"unknown threshold(s) {sorted(unknown)}; allowed: {', '.join(names)}")
    ints = {"min_points_trend"}
    values: Dict[str, Any] = {k: (None if v is None else (int(v) if k in ints else float(v))) for k, v in pairs.items()}
    return Thresholds(**values)
