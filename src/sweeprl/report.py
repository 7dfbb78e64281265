"""The sweep report: one page that says which trials won, why, where the space was unstable and what to run next.

:func:`build_report` reads an Optuna study (a sweep dir ``multirun/<study>/`` with its ``optuna.db``, or a study
name + storage URL) and the trial dirs the sweeper recorded (``metrics.jsonl``, ``diagnosis.json``), and writes
into the sweep dir (or ``out_dir``):

- ``report.md``: the report, with the figures as PNG files next to it;
- ``report.html``: the same, self-contained (figures embedded as base64 data URIs, inline CSS, no external
  resources), so it opens offline and can be mailed or attached to an MLflow run;
- PNG figures: ``history.png`` (or ``pareto_front.png`` for a two-objective study), ``importances.png``,
  ``parallel_coordinate.png``, ``slice_<param>.png`` (one per swept param), ``curves.png`` (reward, KL and
  entropy of the top-k trials, plus the most unstable completed trial dashed), ``objective_terms.png``;
- ``next_sweep.json``: the suggested next search space in ``diagnosis.json``'s ``next_sweep`` layout, so that
  ``python -m sweeprl -m ... +sweep_from=<dir>/next_sweep.json`` runs it.

:func:`log_report_to_mlflow` attaches those files to the sweep's parent run (artifact path ``report/``).
Figures come from :mod:`optuna.visualization.matplotlib` and matplotlib (Agg backend). A figure that cannot be
drawn (too few trials, no variance, a missing optional package) is replaced by a note, never an exception.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from sweeprl.study import TrialRow, make_storage, ranked_rows, results_dict

log = logging.getLogger(__name__)

#: objective terms that are rewards, not penalties
REWARD_TERMS = ("late_reward", "final_reward")
CURVE_KEYS = {
    "reward": ("reward", "objective/scores"),
    "kl": ("kl", "objective/kl"),
    "entropy": ("entropy", "objective/entropy"),
}
PARETO_NAMES = ["late reward", "instability"]
PENALTY_COLORS = ["tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray"]
LOG_WIDEN = 2.0  # next sweep: log-scale params span [min / 2, max * 2] of the top-k trials
LIN_PAD = 0.1  # next sweep: linear params are padded by 10 % of the searched width


class ReportError(ValueError):
    """The study cannot be found or read (unknown name, missing or unreadable storage)."""


@dataclass
class ReportFiles:
    """What :func:`build_report` wrote."""

    study_name: str
    out_dir: str
    markdown: str
    html: str
    images: List[str] = field(default_factory=list)
    next_sweep: Optional[str] = None
    sweep_dir: Optional[str] = None  # where the trial dirs are (may differ from out_dir)
    notes: List[str] = field(default_factory=list)  # figures or sections that were skipped, and why

    @property
    def paths(self) -> List[str]:
        out = [self.markdown, self.html, *self.images]
        if self.next_sweep:
            out.append(self.next_sweep)
        return out


# ============================================================================================ study
@dataclass
class StudyRef:
    study: optuna.Study
    storage_url: str
    sweep_dir: Optional[str]  # where the trial dirs live (and the report goes), when known


def _sqlite_path(url: str) -> Optional[str]:
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :]
    return None if path in ("", ":memory:") else path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _open_storage(url: str) -> optuna.storages.BaseStorage:
    path = _sqlite_path(url)
    if path is not None and not os.path.isfile(path):
        # RDBStorage would silently create an empty database here
        raise ReportError(f"storage {url!r}: no such file {path}")
    if "://" not in url and not os.path.isfile(url):
        raise ReportError(f"storage {url!r}: no such journal file")
    try:
        return make_storage(url)
    except Exception as exc:  # noqa: BLE001 - any driver/URL/schema problem is one clear message
        raise ReportError(f"storage {url!r} cannot be opened: {type(exc).__name__}: {_first_line(exc)}") from exc


def _study_names(storage: optuna.storages.BaseStorage, url: str) -> List[str]:
    try:
        return [s.study_name for s in storage.get_all_studies()]
    except Exception as exc:  # noqa: BLE001
        raise ReportError(f"storage {url!r} cannot be read: {type(exc).__name__}: {_first_line(exc)}") from exc


def open_study(
    study_name: Optional[str] = None, storage: Optional[str] = None, sweep_dir: Optional[str] = None
) -> StudyRef:
    """Resolve STUDY: a sweep dir (its ``optuna.db``, or ``storage``; the study is the only one in the storage
    or the one named like the dir) or a study name + storage URL. Raises :class:`ReportError`."""
    if sweep_dir is not None:
        d = Path(sweep_dir)
        if not d.is_dir():
            raise ReportError(
                f"{sweep_dir}: not a directory (expected a sweep dir such as multirun/<study>/ or a study name with "
                "--storage)"
            )
        db = d / "optuna.db"
        if storage is None:
            if not db.is_file():
                raise ReportError(
                    f"{sweep_dir}: no optuna.db in this directory (not a sweeprl sweep dir); pass --storage URL if "
                    "the study lives elsewhere"
                )
            storage = f"sqlite:///{db.resolve()}"
    if storage is None:
        raise ReportError(
            f"study {study_name!r}: a storage URL is required (--storage sqlite:///path/optuna.db) unless STUDY is a "
            "sweep dir"
        )
    backend = _open_storage(storage)
    names = _study_names(backend, storage)
    if not names:
        raise ReportError(f"storage {storage!r} holds no study")
    if study_name is None:
        dir_name = Path(sweep_dir).resolve().name if sweep_dir else None
        if len(names) == 1:
            study_name = names[0]
        elif dir_name in names:
            study_name = dir_name
        else:
            raise ReportError(
                f"storage {storage!r} holds {len(names)} studies ({', '.join(sorted(names))}); none is named "
                f"{dir_name!r}: pass the study name"
            )
    elif study_name not in names:
        import difflib

        close = difflib.get_close_matches(study_name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; studies there: {', '.join(sorted(names))}"
        raise ReportError(f"no study named {study_name!r} in {storage}{hint}")
    try:
        study = optuna.load_study(study_name=study_name, storage=backend)
    except Exception as exc:  # noqa: BLE001
        raise ReportError(
            f"study {study_name!r} in {storage!r} cannot be loaded: {type(exc).__name__}: {_first_line(exc)}"
        ) from exc
    if sweep_dir is None:
        sweep_dir = _sweep_dir_from_trials(study) or (os.path.dirname(_sqlite_path(storage) or "") or None)
        if sweep_dir and not os.path.isdir(sweep_dir):
            sweep_dir = None
    return StudyRef(study=study, storage_url=storage, sweep_dir=str(sweep_dir) if sweep_dir else None)


def _sweep_dir_from_trials(study: optuna.Study) -> Optional[str]:
    for t in study.get_trials(deepcopy=False):
        dirs = _attr_dirs(t)
        if dirs:
            return os.path.dirname(os.path.abspath(dirs[0]))
    return None


# ============================================================================================ trials
def _attr_dirs(t: FrozenTrial) -> List[str]:
    value = t.user_attrs.get("trial_dir")
    if not value:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def trial_dirs(t: FrozenTrial, sweep_dir: Optional[str]) -> List[str]:
    """The trial's existing dirs: the recorded ``trial_dir`` (one, or one per seed), else the same names under
    ``sweep_dir`` (a moved or copied sweep dir), else ``<sweep_dir>/trial_<number>``."""
    out = []
    for d in _attr_dirs(t):
        if os.path.isdir(d):
            out.append(d)
        elif sweep_dir and os.path.isdir(os.path.join(sweep_dir, os.path.basename(d.rstrip("/")))):
            out.append(os.path.join(sweep_dir, os.path.basename(d.rstrip("/"))))
    if not out and sweep_dir and os.path.isdir(os.path.join(sweep_dir, f"trial_{t.number}")):
        out.append(os.path.join(sweep_dir, f"trial_{t.number}"))
    return out


@dataclass
class TrialInfo:
    row: TrialRow
    trial: FrozenTrial
    dirs: List[str]

    @property
    def number(self) -> int:
        return self.row.number

    @property
    def complete(self) -> bool:
        return self.row.state == "COMPLETE" and bool(self.row.values)


def penalty_sum(terms: Mapping[str, float]) -> float:
    """Sum of the objective's penalty terms (every term but the reward ones); 0 without terms."""
    return float(sum(float(v) for k, v in terms.items() if k not in REWARD_TERMS))


def reward_term(terms: Mapping[str, float]) -> Optional[float]:
    for k in REWARD_TERMS:
        if k in terms:
            return float(terms[k])
    return None


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _diagnosis(info: TrialInfo) -> Optional[Dict[str, Any]]:
    for d in info.dirs:
        data = _read_json(os.path.join(d, "diagnosis.json"))
        if data is not None:
            return data
    return None


def _resolved_config(info: TrialInfo) -> Dict[str, Any]:
    import yaml

    for d in info.dirs:
        p = os.path.join(d, "resolved_config.yaml")
        if os.path.isfile(p):
            try:
                return yaml.safe_load(Path(p).read_text()) or {}
            except (OSError, yaml.YAMLError):
                continue
    return {}


def distributions_of(study: optuna.Study) -> Dict[str, BaseDistribution]:
    """Every param's distribution (the first trial that has it wins)."""
    out: Dict[str, BaseDistribution] = {}
    for t in study.get_trials(deepcopy=False):
        for k, dist in t.distributions.items():
            out.setdefault(k, dist)
    return out


def is_log_param(study: optuna.Study, param: str) -> bool:
    """Whether ``param`` was sampled on a log scale (``trial.distributions[param].log``): slice plots use a log
    x-axis for it and the next sweep keeps the log tag."""
    dist = distributions_of(study).get(param)
    return bool(isinstance(dist, (FloatDistribution, IntDistribution)) and dist.log)


def top_trials(infos: Sequence[TrialInfo], study: optuna.Study, k: int) -> List[TrialInfo]:
    """The k best completed trials: by the (first) objective; for two objectives, the Pareto front first."""
    done = [i for i in infos if i.complete]
    if len(study.directions) > 1:
        front = {t.number for t in study.best_trials}
        done = [i for i in done if i.number in front] + [i for i in done if i.number not in front]
    return done[: max(0, k)]


def worst_unstable(infos: Sequence[TrialInfo], exclude: Iterable[int]) -> Optional[TrialInfo]:
    """The completed trial with the highest sum of penalty terms (> 0), outside ``exclude``."""
    skip = set(exclude)
    cands = [i for i in infos if i.complete and i.number not in skip and penalty_sum(i.row.terms) > 0]
    if not cands:
        return None
    return max(cands, key=lambda i: (penalty_sum(i.row.terms), -i.number))


# ============================================================================================ numbers
def _g(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, int):
        return str(v)
    return f"{v:.{digits}g}"


def _float_text(v: float) -> str:
    """A float as override text that Hydra parses as a float (never ``1`` for 1.0)."""
    s = f"{v:.3g}"
    if not any(c in s for c in ".eEn"):
        s += ".0"
    return s


# ============================================================================================ regions
@dataclass
class Region:
    """Where in the searched space one finding occurred."""

    finding: str
    trials: List[int]
    n_considered: int
    conditions: List[str]  # e.g. "algo.learning_rate >= 0.0037" (separates the trials with the finding)
    ranges: List[str]  # e.g. "algo.learning_rate in [0.0037, 0.05]" (the trials with the finding)
    text: str


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _param_condition(
    param: str, with_v: List[Any], without_v: List[Any]
) -> Tuple[Optional[str], Optional[Tuple[str, int, int]], str]:
    """For one param and one finding: (separating condition or None, best one-sided condition that is not
    separating as (text, trials there with the finding, trials there), range of the trials with the finding)."""
    if all(_is_num(v) for v in with_v + without_v):
        lo, hi = min(with_v), max(with_v)
        rng = f"{param} = {_g(lo)}" if lo == hi else f"{param} in [{_g(lo)}, {_g(hi)}]"
        if not without_v:
            return None, None, rng
        if lo > max(without_v):
            return f"{param} >= {_g(lo)}", None, rng
        if hi < min(without_v):
            return f"{param} <= {_g(hi)}", None, rng
        best = None
        for text, inside in (
            (f"{param} >= {_g(lo)}", [v for v in without_v if v >= lo]),
            (f"{param} <= {_g(hi)}", [v for v in without_v if v <= hi]),
        ):
            if len(inside) == len(without_v):
                continue  # the condition holds everywhere: says nothing
            there = len(with_v) + len(inside)
            if best is None or len(with_v) / there > best[1] / best[2]:
                best = (text, len(with_v), there)
        return None, best, rng
    with_set = sorted({str(v) for v in with_v})
    rng = f"{param} in {{{', '.join(with_set)}}}"
    without_set = {str(v) for v in without_v}
    if without_v and not set(with_set) & without_set:
        return rng, None, rng
    return None, None, rng


def unstable_regions(rows: Sequence[TrialRow], causes: Optional[Mapping[str, str]] = None) -> List[Region]:
    """For each finding id, the trials (COMPLETE or PRUNED) that had it and where they sit in the space.

    A param *separates* a finding when a threshold on it splits the trials with the finding from those
    without (``learning_rate >= 0.0037``: every trial at or above had it, none below did). Without a separating
    param, the purest one-sided threshold is given with its share (``all with learning_rate >= 0.0037, 3 of 4
    trials there``), else the ranges of the trials with the finding. Regions are ordered by trial count.
    """
    considered = [r for r in rows if r.state in ("COMPLETE", "PRUNED")]
    params = sorted({k for r in considered for k in r.params})
    ids: List[str] = []
    for r in considered:
        for f in r.findings:
            if f not in ids:
                ids.append(f)
    out: List[Region] = []
    for fid in ids:
        with_rows = [r for r in considered if fid in r.findings]
        without_rows = [r for r in considered if fid not in r.findings]
        conditions, ranges, partial = [], [], []
        for p in params:
            wv = [r.params[p] for r in with_rows if p in r.params]
            ov = [r.params[p] for r in without_rows if p in r.params]
            if not wv:
                continue
            cond, part, rng = _param_condition(p, wv, ov)
            ranges.append(rng)
            if cond:
                conditions.append(cond)
            elif part:
                partial.append(part)
        n, total = len(with_rows), len(considered)
        head = f"{fid} in {n} of {total} trials" if n < total else f"{fid} in all {total} trials"
        if conditions:
            text = f"{head}, all with {' and '.join(conditions)}" + (" (and none outside)" if n < total else "")
        elif partial and n < total:
            best = max(x[1] / x[2] for x in partial)
            tied = [x for x in partial if x[1] / x[2] == best][:2]
            text = f"{head}, all with " + " and ".join(f"{t} ({k} of the {m} trials there have it)" for t, k, m in tied)
            text += "; no single param separates them"
        elif ranges:
            text = f"{head}, with {', '.join(ranges)}" + ("" if n == total else " (no single param separates them)")
        else:
            text = head
        text += f" — trial{'s' if n > 1 else ''} {', '.join(str(r.number) for r in with_rows)}"
        if causes and causes.get(fid):
            text += f". Why: {causes[fid]}"
        out.append(Region(fid, [r.number for r in with_rows], total, conditions, ranges, text))
    out.sort(key=lambda g: (-len(g.trials), g.finding))
    return out


# ============================================================================================ next sweep
def _grammar(dist: BaseDistribution, lo: float, hi: float) -> str:
    if isinstance(dist, IntDistribution):
        lo_i, hi_i = int(math.floor(lo)), int(math.ceil(hi))
        if hi_i <= lo_i:
            hi_i = lo_i + max(1, dist.step)
        if dist.step and dist.step > 1:
            return f"range({lo_i}, {hi_i + dist.step}, {dist.step})"
        body = f"int(interval({lo_i}, {hi_i}))"
        return f"tag(log, {body})" if dist.log else body
    assert isinstance(dist, FloatDistribution)
    if dist.step is not None:
        return f"range({_float_text(lo)}, {_float_text(hi + dist.step)}, {_float_text(dist.step)})"
    body = f"interval({_float_text(lo)}, {_float_text(hi)})"
    return f"tag(log, {body})" if dist.log else body


def _unit(dist: BaseDistribution, v: float) -> Optional[float]:
    """Position of ``v`` in the searched range, 0 (low) … 1 (high), in log space for log params."""
    low, high = float(dist.low), float(dist.high)  # type: ignore[attr-defined]
    if high <= low:
        return None
    if getattr(dist, "log", False):
        return (math.log(v) - math.log(low)) / (math.log(high) - math.log(low)) if v > 0 and low > 0 else None
    return (v - low) / (high - low)


def _narrow(dist: BaseDistribution, values: List[Any], shift: Optional[Tuple[str, float, str]]) -> Tuple[str, str]:
    """(search-space text, reason) of one param around the top-k values (best first); ``shift`` =
    (direction, factor, who) that the top trials' diagnoses agree on, which extends the range that way
    (beyond the searched range if need be)."""
    if isinstance(dist, CategoricalDistribution):
        keep = [c for c in dist.choices if c in values] or list(dist.choices)
        return "choice(" + ", ".join(
            str(c) for c in keep
        ) + ")", f"the values of the top trials ({', '.join(map(str, keep))})"
    assert isinstance(dist, (FloatDistribution, IntDistribution))
    vmin, vmax = float(min(values)), float(max(values))
    low, high = float(dist.low), float(dist.high)
    if dist.log:
        lo, hi = vmin / LOG_WIDEN, vmax * LOG_WIDEN
        how = f"x{LOG_WIDEN:g} around"
    else:
        pad = LIN_PAD * (high - low)
        lo, hi = vmin - pad, vmax + pad
        how = f"±{LIN_PAD:.0%} of the searched width around"
    lo, hi = max(lo, low), min(hi, high)
    reason = f"{how} the top trials' {_g(vmin)}…{_g(vmax)} (searched {_g(low)}…{_g(high)})"
    if shift:
        direction, factor, who = shift
        if direction == "decrease":
            new_lo = vmin * factor / LOG_WIDEN if dist.log else vmin * factor - LIN_PAD * (high - low)
            if new_lo < lo:
                lo = new_lo
                reason += f"; extended downward (x{factor:.2g} of the lowest): {who} say lower it, none says raise it"
        else:
            new_hi = vmax * factor * LOG_WIDEN if dist.log else vmax * factor + LIN_PAD * (high - low)
            if new_hi > hi:
                hi = new_hi
                reason += f"; extended upward (x{factor:.2g} of the highest): {who} say raise it, none says lower it"
    else:
        u = _unit(dist, float(values[0]))
        if u is not None and u >= 0.95:
            reason += "; the best trial sits at the top of the searched range: consider widening it upward"
        elif u is not None and u <= 0.05:
            reason += "; the best trial sits at the bottom of the searched range: consider widening it downward"
    if hi <= lo:
        hi = lo * 1.5 if dist.log else lo + max(1e-12, 0.1 * (high - low))
    return _grammar(dist, lo, hi), reason


def _diagnosis_changes(info: TrialInfo) -> List[Tuple[str, str, float]]:
    """(config path, direction, factor) of every recommended change in the trial's diagnosis.json."""
    from sweeprl.history import CONFIG_KEYS, PPO_OVERRIDES

    data = _diagnosis(info)
    if not data:
        return []
    algo = (data.get("summary") or {}).get("algo")
    out = []
    for f in data.get("findings", []):
        for c in (f.get("recommendation") or {}).get("changes", []):
            param, direction = c.get("param"), c.get("direction")
            if param not in CONFIG_KEYS or direction not in ("increase", "decrease"):
                continue
            path = PPO_OVERRIDES[param] if algo == "ppo" and param in PPO_OVERRIDES else CONFIG_KEYS[param]
            out.append((path, direction, float(c.get("factor") or 1.0)))
    return out


def suggest_next_sweep(study: optuna.Study, infos: Sequence[TrialInfo], top_k: int) -> Dict[str, Any]:
    """The next search space: every swept param narrowed around the top-k trials (log-interval x2 around them
    for log params), extended outward where the top trials' diagnoses agree on a direction (at least half of
    them, none against) that the sweep has not explored yet (no finished trial beyond the top trials on that
    side); plus the diagnoses' recommendations counted over all diagnosed trials.
    Returns ``{"params", "reasons", "votes", "top"}``."""
    top = top_trials(infos, study, top_k)
    dists = distributions_of(study)
    votes: Dict[str, Counter] = {}
    per_trial: Dict[int, Dict[str, Tuple[str, float]]] = {}
    for info in infos:
        changes = _diagnosis_changes(info)
        mine: Dict[str, Tuple[str, float]] = {}
        for path, direction, factor in changes:
            mine.setdefault(path, (direction, factor))
        for path, (direction, _) in mine.items():
            votes.setdefault(path, Counter())[direction] += 1
        per_trial[info.number] = mine
    params: Dict[str, str] = {}
    reasons: Dict[str, str] = {}
    if top:
        for p, dist in dists.items():
            values = [i.row.params[p] for i in top if p in i.row.params]
            if not values:
                continue
            shift = None
            recs = [per_trial.get(i.number, {}).get(p) for i in top]
            given = [r for r in recs if r]
            if (
                given
                and len(given) * 2 >= len(top)
                and len({d for d, _ in given}) == 1
                and not isinstance(dist, CategoricalDistribution)
            ):
                direction = given[0][0]
                factors = [f for _, f in given]
                factor = float(math.exp(sum(math.log(max(f, 1e-12)) for f in factors) / len(factors)))
                # only toward a side the sweep has not explored: below (above) the top trials, no finished trial
                others = [i.row.params[p] for i in infos if i.row.state in ("COMPLETE", "PRUNED") and p in i.row.params]
                unexplored = (
                    all(v >= min(values) for v in others)
                    if direction == "decrease"
                    else all(v <= max(values) for v in others)
                )
                if unexplored and (
                    (direction == "decrease" and factor < 1) or (direction == "increase" and factor > 1)
                ):
                    shift = (direction, factor, f"the diagnoses of {len(given)} of the {len(top)} top trials")
            params[p], reasons[p] = _narrow(dist, values, shift)
    return {
        "params": params,
        "reasons": reasons,
        "votes": {p: dict(c) for p, c in sorted(votes.items())},
        "top": [i.number for i in top],
    }


def _launch_overrides(infos: Sequence[TrialInfo], swept: Iterable[str]) -> List[str]:
    """The task overrides the sweep was launched with (``experiment=…``, ``sweep=…``), without the sampled
    params and the per-trial ``sweeprl.*`` plumbing."""
    import yaml

    swept = {k.lstrip("+~") for k in swept}
    for info in infos:
        for d in info.dirs:
            p = os.path.join(d, ".hydra", "overrides.yaml")
            if not os.path.isfile(p):
                continue
            try:
                items = yaml.safe_load(Path(p).read_text()) or []
            except (OSError, yaml.YAMLError):
                continue
            out = []
            for item in items:
                key = str(item).split("=", 1)[0].lstrip("+~")
                if key in swept or key.startswith("sweeprl."):
                    continue
                out.append(str(item))
            return out
    return []


# ============================================================================================ figures
def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _fig_of(ax: Any):
    import numpy as np

    if isinstance(ax, np.ndarray):
        ax = ax.flat[0]
    return ax.figure


def _save(fig: Any, path: str) -> str:
    plt = _pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _quiet(fn: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def _target(study: optuna.Study) -> Dict[str, Any]:
    """Keyword args that make Optuna's plots show the first objective of a multi-objective study."""
    if len(study.directions) == 1:
        return {}
    return {"target": lambda t: t.values[0], "target_name": PARETO_NAMES[0]}


def history_figure(study: optuna.Study):
    fig = _fig_of(_quiet(lambda: optuna.visualization.matplotlib.plot_optimization_history(study)))
    fig.set_size_inches(9, 5)
    return fig


def pareto_figure(study: optuna.Study):
    return _fig_of(_quiet(lambda: optuna.visualization.matplotlib.plot_pareto_front(study, target_names=PARETO_NAMES)))


def importance_status(study: optuna.Study) -> Optional[str]:
    """None when parameter importances can be computed, else why not."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 2:
        return f"parameter importances need at least 2 complete trials ({len(done)} so far)"
    varied = [p for p in distributions_of(study) if len({repr(t.params.get(p)) for t in done if p in t.params}) > 1]
    if not varied:
        return "parameter importances need a swept param whose value varies across complete trials (none does)"
    return None


def importance_figure(study: optuna.Study):
    return _fig_of(_quiet(lambda: optuna.visualization.matplotlib.plot_param_importances(study, **_target(study))))


def parallel_figure(study: optuna.Study):
    fig = _fig_of(_quiet(lambda: optuna.visualization.matplotlib.plot_parallel_coordinate(study, **_target(study))))
    fig.set_size_inches(10, 5.5)
    return fig


def slice_figure(study: optuna.Study, param: str):
    """Objective vs ``param`` over the complete trials (Optuna's slice plot); log x-axis for log params."""
    ax = _quiet(lambda: optuna.visualization.matplotlib.plot_slice(study, params=[param], **_target(study)))
    fig = _fig_of(ax)
    axis = fig.axes[0]
    log_x = is_log_param(study, param)
    if log_x:
        axis.set_xscale("log")
    dist = distributions_of(study).get(param)
    if isinstance(dist, (FloatDistribution, IntDistribution)) and dist.high > dist.low:
        # the whole searched range, so the plot shows where in it the trials landed
        if log_x:
            pad = (dist.high / dist.low) ** 0.03
            axis.set_xlim(dist.low / pad, dist.high * pad)
            if dist.high / dist.low >= 10:
                from matplotlib.ticker import NullFormatter

                axis.xaxis.set_minor_formatter(NullFormatter())
        else:
            pad = 0.03 * (dist.high - dist.low)
            axis.set_xlim(dist.low - pad, dist.high + pad)
    axis.set_xlabel(param + (" (log scale)" if log_x else ""))
    axis.set_title(f"{_target(study).get('target_name', 'Objective')} vs {param}")
    fig.set_size_inches(7, 4.5)
    return fig


def load_curves(dirs: Sequence[str]) -> Dict[str, Tuple[List[float], List[float]]]:
    """``{"reward"|"kl"|"entropy": (steps, values)}`` from a trial dir's ``metrics.jsonl`` (first readable dir)."""
    from sweeprl.history import load
    from sweeprl.stability import series, steps_of

    for d in dirs:
        if not os.path.isfile(os.path.join(d, "metrics.jsonl")):
            continue
        try:
            records = load(d).records
        except (OSError, ValueError):
            continue
        out = {}
        for name, keys in CURVE_KEYS.items():
            vals = series(records, *keys)
            steps = steps_of(records, *keys)
            if vals.size and vals.size == steps.size:
                out[name] = ([float(s) for s in steps], [float(v) for v in vals])
        return out
    return {}


def curves_figure(top: Sequence[TrialInfo], worst: Optional[TrialInfo], target_kl: Optional[float] = None):
    """Reward, KL and entropy per step of the top trials (solid) and the most unstable one (dashed)."""
    plt = _pyplot()
    with plt.style.context("ggplot"):
        fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    entries = [(i, info, False) for i, info in enumerate(top)] + ([(len(top), worst, True)] if worst else [])
    for idx, info, dashed in entries:
        curves = load_curves(info.dirs)
        if not curves:
            continue
        value = info.row.value
        label = f"#{info.number} " + ("most unstable" if dashed else f"rank {idx + 1}") + f" (objective {_g(value)})"
        style = {
            "color": "0.35" if dashed else colors[idx % len(colors)],
            "linestyle": "--" if dashed else "-",
            "linewidth": 1.4 if dashed else 1.8,
        }
        for ax, name in zip(axes, CURVE_KEYS):
            if name in curves:
                ax.plot(*curves[name], label=label, **style)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    for ax, name in zip(axes, CURVE_KEYS):
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    axes[0].set_title("Top trials (solid) vs the most unstable completed trial (dashed)", fontsize=11)
    axes[0].legend(fontsize=8, loc="best")
    if target_kl is not None:
        line = axes[1].axhline(
            target_kl, color="tab:red", linewidth=0.8, linestyle=":", label=f"objective.target_kl {_g(target_kl)}"
        )
        axes[1].legend(handles=[line], fontsize=8, loc="best")
    axes[-1].set_xlabel("step")
    return fig


def terms_figure(top: Sequence[TrialInfo]):
    """Per top trial: a late_reward bar and, next to it, the penalty terms stacked; a dot marks the objective."""
    plt = _pyplot()
    rows = [i for i in top if i.row.terms]
    if not rows:
        return None
    names = sorted({k for i in rows for k in i.row.terms if k not in REWARD_TERMS})
    names = [n for n in names if any(abs(i.row.terms.get(n, 0.0)) > 0 for i in rows)] or names
    with plt.style.context("ggplot"):
        fig, ax = plt.subplots(figsize=(max(7, 2.2 * len(rows) + 3), 4.8))
    width = 0.36
    for x, info in enumerate(rows):
        reward = reward_term(info.row.terms)
        ax.bar(x - width / 2, reward or 0.0, width, color="tab:green", label="late_reward" if x == 0 else None)
        bottom = 0.0
        for j, n in enumerate(names):
            v = float(info.row.terms.get(n, 0.0))
            ax.bar(
                x + width / 2,
                v,
                width,
                bottom=bottom,
                color=PENALTY_COLORS[j % len(PENALTY_COLORS)],
                label=n if x == 0 else None,
            )
            bottom += v
        if info.row.value is not None:
            ax.plot(
                [x],
                [info.row.value],
                marker="D",
                color="black",
                linestyle="none",
                label="objective" if x == 0 else None,
            )
    ax.set_xticks(range(len(rows)), [f"#{i.number} (rank {k + 1})" for k, i in enumerate(rows)])
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel("reward units")
    ax.set_title("late_reward (left) vs stacked penalties (right) of the top trials", fontsize=11)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# ============================================================================================ document
@dataclass
class Block:
    kind: str  # h1 | h2 | p | ul | table | img | code | note
    text: str = ""
    items: List[str] = field(default_factory=list)
    header: List[str] = field(default_factory=list)
    rows: List[List[str]] = field(default_factory=list)
    path: str = ""  # img: file path
    attrs: Dict[str, str] = field(default_factory=dict)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: Sequence[Block], out_dir: str) -> str:
    lines: List[str] = []
    for b in blocks:
        if b.kind == "h1":
            lines += [f"# {b.text}", ""]
        elif b.kind == "h2":
            lines += [f"## {b.text}", ""]
        elif b.kind == "h3":
            lines += [f"### {b.text}", ""]
        elif b.kind == "p":
            lines += [b.text, ""]
        elif b.kind == "note":
            lines += [f"> {b.text}", ""]
        elif b.kind == "ul":
            lines += [f"- {it}" for it in b.items] + [""]
        elif b.kind == "code":
            lines += ["```bash", b.text, "```", ""]
        elif b.kind == "table":
            lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            lines.append("|" + "---|" * len(b.header))
            lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows]
            lines.append("")
        elif b.kind == "img":
            rel = os.path.relpath(b.path, out_dir)
            lines += [f"![{b.text}]({rel})", ""]
    return "\n".join(lines).rstrip() + "\n"


CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; margin: 2em auto;
       max-width: 1100px; padding: 0 1.5em; line-height: 1.45; }
h1 { font-size: 1.6em; border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
h3 { font-size: 1.05em; }
table { border-collapse: collapse; font-size: .85em; margin: .8em 0; display: block; overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: .3em .55em; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; }
td.text, th.text { text-align: left; white-space: normal; min-width: 8em; }
tr.state-FAIL td { color: #a33; } tr.state-PRUNED td { color: #777; } tr.best td { background: #eef8ee; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .85em; color: #555; }
.note { background: #fff8e5; border-left: 4px solid #e6b800; padding: .5em .8em; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .85em; }
code { font-family: SFMono-Regular, Consolas, Menlo, monospace; }
"""


def to_html(blocks: Sequence[Block], title: str) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
    ]
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            anchor = re.sub(r"[^a-z0-9]+", "-", b.text.lower()).strip("-")
            parts.append(f'<{b.kind} id="{anchor}">{e(b.text)}</{b.kind}>')
        elif b.kind == "p":
            parts.append(f"<p>{e(b.text)}</p>")
        elif b.kind == "note":
            parts.append(f'<p class="note">{e(b.text)}</p>')
        elif b.kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{e(it)}</li>" for it in b.items) + "</ul>")
        elif b.kind == "code":
            parts.append(f"<pre><code>{e(b.text)}</code></pre>")
        elif b.kind == "table":
            text_cols = {
                i
                for i, h in enumerate(b.header)
                if h in ("state", "params", "findings", "reason", "param", "range", "why")
            }
            tid = f' id="{e(b.attrs["id"])}"' if "id" in b.attrs else ""
            parts.append(
                f"<table{tid}><thead><tr>"
                + "".join(
                    f'<th class="text">{e(h)}</th>' if i in text_cols else f"<th>{e(h)}</th>"
                    for i, h in enumerate(b.header)
                )
                + "</tr></thead><tbody>"
            )
            for r_i, r in enumerate(b.rows):
                cls = b.attrs.get(f"row{r_i}", "")
                parts.append(f'<tr class="{e(cls)}">' if cls else "<tr>")
                parts.append(
                    "".join(
                        f'<td class="text">{e(c)}</td>' if i in text_cols else f"<td>{e(c)}</td>"
                        for i, c in enumerate(r)
                    )
                    + "</tr>"
                )
            parts.append("</tbody></table>")
        elif b.kind == "img":
            data = base64.b64encode(Path(b.path).read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" '
                f'alt="{e(b.text)}"><figcaption>{e(b.text)}</figcaption></figure>'
            )
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


# ============================================================================================ report
def _safe_name(param: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", param).strip("_") or "param"


def _fmt_param(v: Any) -> str:
    return _g(v) if isinstance(v, float) else str(v)


def _trial_table(infos: Sequence[TrialInfo], study: optuna.Study, top_findings: int = 3) -> Block:
    multi = len(study.directions) > 1
    term_names = sorted({k for i in infos for k in i.row.terms if k not in REWARD_TERMS})
    # penalty columns that are zero everywhere add width, not information
    term_names = [k for k in term_names if any(abs(float(i.row.terms.get(k, 0.0))) > 0 for i in infos)]
    has_reward = any(reward_term(i.row.terms) is not None for i in infos)
    params = sorted({k for i in infos for k in i.row.params})
    front = {t.number for t in study.best_trials} if multi and any(i.complete for i in infos) else set()
    header = ["rank", "trial", "state"]
    header += PARETO_NAMES if multi else ["objective"]
    if multi:
        header.append("pareto")
    if has_reward:
        header.append("late_reward")
    header += term_names + (["penalties"] if term_names else []) + params + ["steps", "reason", "findings"]
    rows, attrs = [], {"id": "trials"}
    rank = 0
    for n, info in enumerate(infos):
        r = info.row
        rank_txt = ""
        if info.complete:
            rank += 1
            rank_txt = str(rank)
        cells = [rank_txt, str(r.number), r.state]
        if multi:
            vals = r.values or []
            cells += [
                _g(vals[0]) if len(vals) > 0 else "-",
                _g(vals[1]) if len(vals) > 1 else "-",
                "yes" if r.number in front else "",
            ]
        else:
            cells.append(_g(r.value))
        if has_reward:
            cells.append(_g(reward_term(r.terms)))
        cells += [_g(r.terms.get(k)) for k in term_names]
        if term_names:
            cells.append(_g(penalty_sum(r.terms)) if r.terms else "-")
        cells += [_fmt_param(r.params[p]) if p in r.params else "-" for p in params]
        steps = info.trial.user_attrs.get("steps")
        cells += [
            str(steps) if steps is not None else "-",
            r.reason.splitlines()[0][:200] if r.reason else "",
            ", ".join(r.findings[:top_findings])
            + (f" (+{len(r.findings) - top_findings})" if len(r.findings) > top_findings else ""),
        ]
        rows.append(cells)
        cls = [f"state-{r.state}"] + (["best"] if rank_txt == "1" else [])
        attrs[f"row{n}"] = " ".join(cls)
    return Block("table", header=header, rows=rows, attrs=attrs)


def _reason_key(reason: str, width: int = 160) -> str:
    """A prune/fail reason with its numbers blanked, so "objective 0.03 at step 10" and "objective -0.01 at
    step 10" count as one reason."""
    if not reason:
        return "no reason recorded"
    line = re.sub(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?", "…", reason.splitlines()[0])
    return line if len(line) <= width else line[: width - 1] + "…"


def _causes(infos: Sequence[TrialInfo]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for info in infos:
        data = _diagnosis(info)
        for f in (data or {}).get("findings", []):
            if f.get("id") and f.get("cause") and f["id"] not in out:
                out[f["id"]] = str(f["cause"])
    return out


def _target_kl(infos: Sequence[TrialInfo]) -> Optional[float]:
    for info in infos:
        cfg = _resolved_config(info)
        value = (cfg.get("objective") or {}).get("target_kl")
        if value is not None:
            try:
                return float(value)
            except (TypeError, ValueError):
                return None
    return None


def build_report(
    study_name: Optional[str],
    storage: Optional[str],
    sweep_dir: Optional[str],
    out_dir: Optional[str] = None,
    top_k: int = 3,
) -> ReportFiles:
    """Write the sweep report (``report.md``, ``report.html``, PNG figures, ``next_sweep.json``); see the module
    docstring. STUDY is ``sweep_dir`` (a ``multirun/<study>/`` dir) or ``study_name`` + ``storage``.
    Raises :class:`ReportError` when the study cannot be resolved."""
    ref = open_study(study_name, storage, sweep_dir)
    study = ref.study
    target = out_dir or ref.sweep_dir
    if not target:
        raise ReportError(
            f"study {study.study_name!r}: no sweep dir is known for it (its trials record no trial_dir); pass --out DIR"
        )
    os.makedirs(target, exist_ok=True)
    out = os.path.abspath(target)
    files = ReportFiles(
        study_name=study.study_name,
        out_dir=out,
        markdown=os.path.join(out, "report.md"),
        html=os.path.join(out, "report.html"),
        sweep_dir=ref.sweep_dir,
    )
    frozen = {t.number: t for t in study.get_trials(deepcopy=False)}
    infos = [
        TrialInfo(row=r, trial=frozen[r.number], dirs=trial_dirs(frozen[r.number], ref.sweep_dir))
        for r in ranked_rows(study)
    ]
    multi = len(study.directions) > 1
    states = Counter(i.row.state for i in infos)
    complete = [i for i in infos if i.complete]
    top = top_trials(infos, study, top_k)
    worst = worst_unstable(infos, exclude=[i.number for i in top])
    dists = distributions_of(study)

    blocks: List[Block] = [Block("h1", f"Sweep report: {study.study_name}")]
    directions = ", ".join(d.name.lower() for d in study.directions)
    blocks.append(
        Block(
            "p",
            f"{len(infos)} trials ("
            + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
            + f"); direction: {directions}; "
            f"storage: {ref.storage_url}" + (f"; sweep dir: {ref.sweep_dir}" if ref.sweep_dir else "") + ".",
        )
    )
    if not infos:
        blocks.append(Block("note", "The study has no trials yet: nothing to rank or plot. Run the sweep first."))
    elif not complete:
        blocks.append(
            Block(
                "note",
                f"No trial completed ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))}): there is no "
                "objective "
                "to rank or plot. The failure and prune reasons are in the table below.",
            )
        )
    else:
        res = results_dict(study)
        if multi:
            blocks.append(
                Block(
                    "p",
                    f"Pareto front: trials {', '.join(str(s['trial']) for s in res['solutions'])} "
                    f"(objectives: {PARETO_NAMES[0]} ↑, {PARETO_NAMES[1]} ↓).",
                )
            )
        else:
            best_params = ", ".join(f"{k}={_fmt_param(v)}" for k, v in res["best_params"].items())
            blocks.append(
                Block(
                    "p", f"Best: trial {res['best_trial']} with objective {_g(res['best_value'], 4)} ({best_params})."
                )
            )

    blocks += [Block("h2", "Trials (best first)"), _trial_table(infos, study)]
    if any(i.row.terms for i in infos):
        blocks.append(
            Block(
                "p",
                "objective = late_reward − penalties (weighted terms of the stability-adjusted objective, reward "
                "units); "
                "penalty columns that are zero in every trial are left out.",
            )
        )

    def figure(name: str, caption: str, make: Callable[[], Any], empty: str = "nothing to draw") -> None:
        path = os.path.join(out, name)
        plt = _pyplot()
        try:
            # Optuna's plots switch the global style to ggplot: keep that inside this figure
            with plt.rc_context(), plt.style.context("ggplot"):
                fig = make()
                if fig is not None:
                    _save(fig, path)
        except Exception as exc:  # noqa: BLE001 - a figure that cannot be drawn becomes a note
            plt.close("all")
            log.warning("report: %s not drawn: %s: %s", name, type(exc).__name__, exc)
            files.notes.append(f"{name}: not drawn ({type(exc).__name__}: {exc})")
            blocks.append(Block("note", f"{caption}: not drawn ({type(exc).__name__}: {exc})."))
            return
        if fig is None:
            files.notes.append(f"{name}: {empty}")
            blocks.append(Block("note", f"{caption}: {empty}."))
            return
        files.images.append(path)
        blocks.append(Block("img", caption, path=path))

    def skip(caption: str, why: str) -> None:
        files.notes.append(f"{caption}: {why}")
        blocks.append(Block("note", f"{caption}: {why}."))

    blocks.append(Block("h2", "Optimization"))
    if not complete:
        skip("Figures", "skipped, no complete trial")
    else:
        if multi:
            figure(
                "pareto_front.png",
                f"Pareto front ({PARETO_NAMES[0]} ↑ vs {PARETO_NAMES[1]} ↓); optimization history and "
                "importances are not shown for a two-objective study",
                lambda: pareto_figure(study),
            )
        else:
            figure(
                "history.png",
                "Optimization history: objective per trial and best so far",
                lambda: history_figure(study),
            )
            why = importance_status(study)
            if why:
                skip("Parameter importances", why)
            else:
                rough = f" — rough with only {len(complete)} complete trials" if len(complete) < 8 else ""
                figure(
                    "importances.png",
                    f"Parameter importances (Optuna's fANOVA on the {len(complete)} complete trials{rough})",
                    lambda: importance_figure(study),
                )
        figure(
            "parallel_coordinate.png",
            "Parallel coordinates: every complete trial's params, coloured by objective",
            lambda: parallel_figure(study),
        )
        blocks.append(Block("h3", "Objective vs each swept param"))
        for p in dists:
            scale = "log x-axis" if is_log_param(study, p) else "linear x-axis"
            figure(
                f"slice_{_safe_name(p)}.png",
                f"Slice: {'late reward' if multi else 'objective'} vs {p} ({scale})",
                lambda p=p: slice_figure(study, p),
            )

    blocks.append(Block("h2", "Training curves"))
    if top:
        desc = ", ".join(f"#{i.number}" for i in top)
        if worst:
            worst_sum = _g(penalty_sum(worst.row.terms))
            desc += f"; dashed: #{worst.number}, the completed trial with the highest penalty sum ({worst_sum})"
        else:
            desc += "; no other completed trial has a positive penalty sum to contrast with"
        blocks.append(Block("p", f"Top {len(top)} trials: {desc}."))
        figure(
            "curves.png",
            "Reward, KL and entropy per step",
            lambda: curves_figure(top, worst, _target_kl(top)),
            empty="no metrics.jsonl with reward/KL/entropy found in these trials' dirs",
        )
        blocks.append(Block("h2", "Objective components of the top trials"))
        figure(
            "objective_terms.png",
            "late_reward vs stacked penalty terms (the diamond is the objective)",
            lambda: terms_figure(top),
            empty="these trials carry no objective_terms",
        )
    else:
        skip("Training curves", "no complete trial")

    # ---------------------------------------------------------------- sweep-level diagnosis
    blocks.append(Block("h2", "Sweep diagnosis"))
    diag_items = []
    regions = unstable_regions([i.row for i in infos], _causes(infos))
    considered = [i for i in infos if i.row.state in ("COMPLETE", "PRUNED")]
    if regions:
        blocks.append(Block("p", "Where the findings of the per-trial diagnoses occurred in the searched space:"))
        blocks.append(Block("ul", items=[g.text for g in regions]))
    elif considered:
        diag_items.append(f"No diagnosis finding in any of the {len(considered)} finished trials.")
    clean = [i for i in complete if not i.row.findings]
    if clean:
        diag_items.append("Trials without any finding: " + ", ".join(f"#{i.number}" for i in clean) + ".")
    if complete and any(i.row.terms for i in complete):
        dominant = Counter()
        for i in complete:
            pens = {k: float(v) for k, v in i.row.terms.items() if k not in REWARD_TERMS and float(v) > 0}
            if pens:
                dominant[max(pens, key=pens.get)] += 1
        if dominant:
            diag_items.append(
                "Largest penalty per completed trial: "
                + ", ".join(f"{k} in {n} trial{'s' if n > 1 else ''}" for k, n in dominant.most_common())
                + "."
            )
    for state in ("PRUNED", "FAIL"):
        groups: Dict[str, List[int]] = {}
        for i in infos:
            if i.row.state == state:
                groups.setdefault(_reason_key(i.row.reason), []).append(i.number)
        if groups:
            ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
            diag_items.append(
                f"{state} ({sum(len(v) for v in groups.values())}): "
                + "; ".join(
                    f"{r} (trial{'s' if len(ns) > 1 else ''} {', '.join(map(str, sorted(ns)))})"
                    for r, ns in ordered[:5]
                )
                + "."
            )
    if diag_items:
        blocks.append(Block("ul", items=diag_items))

    # ---------------------------------------------------------------- next sweep
    blocks.append(Block("h2", "Suggested next sweep"))
    nxt = suggest_next_sweep(study, infos, top_k)
    if nxt["params"]:
        blocks.append(
            Block(
                "p",
                f"Ranges narrowed around the top {len(nxt['top'])} trials ({', '.join(f'#{n}' for n in nxt['top'])}):",
            )
        )
        blocks.append(
            Block(
                "table",
                header=["param", "next range", "why"],
                rows=[[p, v, nxt["reasons"].get(p, "")] for p, v in nxt["params"].items()],
            )
        )
        path = os.path.join(out, "next_sweep.json")
        with open(path, "w") as fh:
            json.dump(
                {
                    "source": f"sweep report of study {study.study_name}",
                    "next_sweep": {"params": nxt["params"], "reasons": nxt["reasons"]},
                    "diagnosis_votes": nxt["votes"],
                },
                fh,
                indent=2,
            )
        files.next_sweep = path
        launch = _launch_overrides(infos, dists)
        cmd = " ".join(
            [
                "python -m sweeprl -m",
                *launch,
                f"+sweep_from={path}",
                f"hydra.sweeper.study_name={study.study_name}-next",
            ]
        )
        blocks.append(Block("code", cmd))
    else:
        skip("Next sweep", "no complete trial to narrow the ranges around")
    if nxt["votes"]:
        blocks.append(Block("p", "What the per-trial diagnoses recommend, counted over all diagnosed trials:"))
        blocks.append(
            Block(
                "ul",
                items=[
                    f"{p}{'' if p in dists else ' (not swept)'}: "
                    + ", ".join(f"{'raise' if d == 'increase' else 'lower'} in {n}" for d, n in sorted(c.items()))
                    for p, c in nxt["votes"].items()
                ],
            )
        )

    Path(files.markdown).write_text(to_markdown(blocks, out))
    Path(files.html).write_text(to_html(blocks, f"Sweep report: {study.study_name}"))
    log.info("report of study %s written to %s (%d figures)", study.study_name, out, len(files.images))
    return files


# ============================================================================================ MLflow
def find_parent_run(tracker: Any, study_name: str) -> Optional[str]:
    """The sweep's parent run: tags ``sweeprl.role=sweep`` and ``sweeprl.study_name=<name>``, in the experiment
    named after the study, else in any experiment (a custom ``tracking.experiment_name``)."""
    from sweeprl.tracking import TAG_ROLE, TAG_STUDY

    tags = {TAG_ROLE: "sweep", TAG_STUDY: study_name}
    exp = tracker.call("get experiment", tracker.client.get_experiment_by_name, study_name)
    if exp is not None:
        run_id = tracker.find_run(exp.experiment_id, tags)
        if run_id:
            return run_id
    filt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())

    def search_all() -> Optional[str]:
        from mlflow.entities import ViewType

        ids = [e.experiment_id for e in tracker.client.search_experiments(view_type=ViewType.ACTIVE_ONLY)]
        if not ids:
            return None
        runs = tracker.client.search_runs(
            ids, filter_string=filt, max_results=1, order_by=["attributes.start_time DESC"]
        )
        return runs[0].info.run_id if runs else None

    return tracker.call("search runs", search_all)


def log_report_to_mlflow(files: ReportFiles, tracking_uri: str, study_name: Optional[str] = None) -> Optional[str]:
    """Log the report files as artifacts (``report/``) of the study's parent run; returns its run id, or None
    (with a warning logged) when there is no such run or MLflow cannot be reached. Never raises."""
    from sweeprl.tracking import SafeTracker

    name = study_name or files.study_name
    path = _sqlite_path(tracking_uri)
    if path is not None and not os.path.isfile(path):
        log.warning("MLflow store %s does not exist; report not logged", tracking_uri)
        return None
    tracker = SafeTracker(tracking_uri)
    run_id = find_parent_run(tracker, name)
    if not run_id:
        log.warning(
            "no MLflow parent run for study %r in %s (tags sweeprl.role=sweep, sweeprl.study_name); report not logged",
            name,
            tracking_uri,
        )
        return None

    def upload() -> bool:
        for p in files.paths:
            tracker.client.log_artifact(run_id, p, "report")
        return True

    ok = tracker.call("log report artifacts", upload, default=False)
    return run_id if ok else None


def default_tracking_uri(files_or_dir: Any) -> Optional[str]:
    """Where the sweep's MLflow store probably is: the trials' ``tracking.uri`` when set, else the embedded
    ``sqlite:///<launch dir>/mlflow.db`` (launch dir from the trials' ``.hydra/hydra.yaml``), else None."""
    import yaml

    if isinstance(files_or_dir, ReportFiles):
        sweep_dir = files_or_dir.sweep_dir or files_or_dir.out_dir
    else:
        sweep_dir = str(files_or_dir) if files_or_dir else ""
    if not sweep_dir or not os.path.isdir(sweep_dir):
        return None
    for entry in sorted(os.listdir(sweep_dir)):
        d = os.path.join(sweep_dir, entry)
        cfg_path, hydra_path = os.path.join(d, "resolved_config.yaml"), os.path.join(d, ".hydra", "hydra.yaml")
        if not os.path.isfile(cfg_path):
            continue
        try:
            cfg = yaml.safe_load(Path(cfg_path).read_text()) or {}
            tracking = cfg.get("tracking") or {}
            if tracking.get("enabled") is False:
                return None
            if tracking.get("uri"):
                return str(tracking["uri"])
            if os.path.isfile(hydra_path):
                cwd = ((yaml.safe_load(Path(hydra_path).read_text()) or {}).get("hydra", {}).get("runtime") or {}).get(
                    "cwd"
                )
                if cwd:
                    return f"sqlite:///{os.path.join(cwd, 'mlflow.db')}"
        except (OSError, yaml.YAMLError, AttributeError):
            continue
    return None
