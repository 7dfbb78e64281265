#!/usr/bin/env python3
"""Verdicts on other people's runs: ``python -m sweeprl diagnose`` scored against labels written before it ran.

The corpus (``tests/data/real_runs/``, sources and licenses in its README) holds public training logs of TRL,
Unsloth, verl, OpenRLHF, LLaMA-Factory, Tinker, mlx and hand-written loops: GRPO, PPO, DPO, ORPO, KTO. Each run's
label (``labels.jsonl``: healthy or not, the problems, the learning-rate direction an engineer would give) was
written from the numbers by the rules in the corpus README, before sweeprl read the file.

The corpus grew in batches (``batch`` in ``labels.jsonl``): ``seed`` is what the rules were first written on; each
``blind<k>`` batch was gathered and labelled by others, scored once as it came (its blind figures, reproducible
at the commit in :data:`BLIND`), and only then used to revise the rules. The blind figures are the evidence of
how the verdicts hold on runs they were not shaped on; the current rules' figures on every batch say what the
revisions kept.

Per batch, and for all runs:
- recall: unhealthy runs where a warning/critical finding names a labelled problem (:data:`MATCHES`);
- quiet healthy: healthy runs without any warning/critical finding;
- false alarms per run: warning/critical findings that match no labelled problem;
- LR against the label: learning-rate advice opposite to the label's direction (or any, where it says ``none``);
- read: files that loaded with at least one metric the rules use.

    .venv/bin/python bench/real_runs.py            # per-run table, figures per batch and for all runs
    .venv/bin/python bench/real_runs.py --write    # also the BENCHMARKS.md row real_runs_all
    .venv/bin/python bench/real_runs.py --batch blind13 --rows blind13   # one batch only (a new one, scored once)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "real_runs"
#: labelled problem -> finding ids that report it
MATCHES = {
    "reward_collapse": {"reward_collapse", "reward_dip", "reward_frozen"},
    "divergence": {
        "non_finite",
        "loss_spike",
        "grad_norm_spike",
        "kl_above_target",
        "value_loss_spike",
        "reward_collapse",
        "entropy_rising",
    },
    "entropy_blowup": {"entropy_rising", "entropy_unstable"},
    "entropy_collapse": {"entropy_collapse", "mode_collapse"},
    "kl_runaway": {"kl_above_target"},
    "no_learning": {"reward_flat", "updates_too_small", "reward_below_target", "task_reward_flat", "loss_flat"},
    "no_signal": {
        "reward_no_signal",
        "reward_variance_died",
        "mode_collapse",
        "reward_flat",
        "task_reward_flat",
        "reward_frozen",
    },
    "length_hacking": {"length_hacking", "truncation_high"},
    "preference_overfit": {"preference_overfit"},
    "preference_no_learning": {"preference_no_learning", "loss_flat"},
}
ALARM = ("critical", "warning")
#: batch -> (commit at which it was first scored, blind, with ``bench/real_runs.py``; its figures then)
BLIND = {
    "blind1": ("f091d3e", "recall 83% of 6, quiet on 60% of 5, 0.36 false alarms/run, LR against 1"),
    "blind2": ("d4b0e29", "recall 55% of 11, quiet on 82% of 11, 0.50 false alarms/run, LR against 5"),
    "blind3": ("a8deaee", "recall 50% of 10, quiet on 86% of 7, 0.41 false alarms/run, LR against 0"),
    "blind4": ("69562fa", "recall 100% of 3, quiet on 62% of 8, 0.36 false alarms/run, LR against 2"),
    "blind5": ("9399ac9", "recall 57% of 14, quiet on 92% of 13, 0.15 false alarms/run, LR against 1, 97% read"),
    "blind6": ("ee3deee", "recall 75% of 8, quiet on 50% of 2, 0.40 false alarms/run, LR against 1, 100% read"),
    "blind7": ("1166796", "recall 33% of 3, quiet on 100% of 3, 0.17 false alarms/run, LR against 0, 100% read"),
    "blind8": ("3c1730e", "recall 100% of 2, quiet on 100% of 3, 0.00 false alarms/run, LR against 0, 80% read"),
    "blind9": ("c13453b", "recall 50% of 4, quiet on 100% of 3, 0.29 false alarms/run, LR against 0, 100% read"),
    "blind10": ("5821508", "recall 20% of 5, quiet on 80% of 5, 0.10 false alarms/run, LR against 1, 85% read"),
    "blind11": ("efbd720", "recall 14% of 7, quiet on 75% of 4, 0.18 false alarms/run, LR against 0, 83% read"),
    "blind12": ("e0f011e", "recall 0% of 3, quiet on 50% of 2, 0.20 false alarms/run, LR against 0, 100% read"),
    "blind13": ("f559a5c", "recall 100% of 1, quiet on 50% of 2, 0.33 false alarms/run, LR against 0, 100% read"),
    "blind14": ("91c348e", "no unhealthy run, quiet on 100% of 2, 0.00 false alarms/run, LR against 0, 100% read"),
    "blind15": ("f839d33", "recall 38% of 8, quiet on 75% of 4, 0.50 false alarms/run, LR against 3, 100% read"),
    "blind16": ("062e096", "recall 0% of 3, quiet on 100% of 2, 0.00 false alarms/run, LR against 0, 60% read"),
    "blind17": ("afe1555", "recall 67% of 3, quiet on 0% of 1, 0.75 false alarms/run, LR against 2, 100% read"),
    "blind18": ("d8e9d48", "recall 50% of 4, quiet on 50% of 4, 0.50 false alarms/run, LR against 2, 100% read"),
}
BATCHES = ("seed", *BLIND)


def batches(names: List[str]) -> List[str]:
    """The batches in their order: seed, the scored blind ones, then a new batch not yet in :data:`BLIND`."""
    return [*BATCHES, *sorted(set(names) - set(BATCHES))]


@dataclass
class Verdict:
    id: str
    batch: str
    label: Dict
    read: bool = False
    error: Optional[str] = None
    alarms: List[str] = field(default_factory=list)  # warning/critical finding ids
    infos: List[str] = field(default_factory=list)
    lr: Optional[str] = None  # decrease | increase | None (the diagnosis' learning-rate change)
    lr_runs: List[str] = field(default_factory=list)  # every run's, for a file of several
    records: int = 0  # logged points of the file's longest run

    @property
    def unhealthy(self) -> bool:
        return self.label["health"] == "unhealthy"

    @property
    def matched(self) -> bool:
        wanted = set().union(*(MATCHES[p] for p in self.label["problems"])) if self.label["problems"] else set()
        return bool(wanted & set(self.alarms))

    @property
    def false_alarms(self) -> List[str]:
        wanted = set().union(*(MATCHES[p] for p in self.label["problems"])) if self.label["problems"] else set()
        return [a for a in self.alarms if a not in wanted]

    @property
    def lr_against(self) -> bool:
        want = self.label.get("lr_direction")
        if not self.lr_runs or want in (None, "unknown"):
            return False
        return want == "none" or any({"lower": "decrease", "raise": "increase"}[want] != lr for lr in self.lr_runs)


def labels() -> List[Dict]:
    return [json.loads(line) for line in (CORPUS / "labels.jsonl").read_text().splitlines() if line.strip()]


def judge(label: Dict) -> Verdict:
    from sweeprl.analysis.diagnosis import diagnose
    from sweeprl.analysis.history import load_runs

    v = Verdict(label["id"], label["batch"], label)
    try:
        runs = load_runs(str(CORPUS / label["file"]))
    except (ValueError, FileNotFoundError) as exc:
        v.error = str(exc)
        return v
    v.read = any(bool(getattr(run, "used", True)) and bool(run.records) for run in runs)
    v.records = max((len(run.records) for run in runs), default=0)
    # a file of several runs: what any of its runs was told (a label describes the file)
    for d in (diagnose(run) for run in runs if run.records):
        v.alarms += [f.id for f in d.findings if f.severity in ALARM and f.id not in v.alarms]
        v.infos += [f.id for f in d.findings if f.severity not in ALARM and f.id not in v.infos]
        v.lr_runs += [c["direction"] for c in d.changes() if c["param"] == "learning_rate"][:1]
    v.lr = v.lr_runs[0] if v.lr_runs else None
    return v


def figures(verdicts: List[Verdict]) -> Dict[str, float]:
    sick = [v for v in verdicts if v.unhealthy]
    healthy = [v for v in verdicts if v.label["health"] == "healthy"]
    return {
        "runs": len(verdicts),
        "recall": sum(v.matched for v in sick) / max(1, len(sick)),
        "unhealthy": len(sick),
        "quiet_healthy": sum(not v.alarms for v in healthy) / max(1, len(healthy)),
        "healthy": len(healthy),
        # inconclusive labels (too short or noisy for the analyst) take no part in false alarms either
        "false_alarms_per_run": sum(len(v.false_alarms) for v in sick + healthy) / max(1, len(sick + healthy)),
        "lr_against": sum(v.lr_against for v in verdicts),
        "read": sum(v.read for v in verdicts) / max(1, len(verdicts)),
    }


def summary_line(f: Dict[str, float]) -> str:
    return (
        f"recall {f['recall']:.0%} of {f['unhealthy']} unhealthy, quiet on {f['quiet_healthy']:.0%} of {f['healthy']} "
        f"healthy, {f['false_alarms_per_run']:.2f} false alarms/run, LR advice against the label on "
        f"{f['lr_against']} runs, {f['read']:.0%} read"
    )


README_HEAD = """# Real training logs, labelled before sweeprl read them

Public per-step logs of other people's RL and preference fine-tuning runs, kept as published (trimmed only where a
file exceeded 300 KB: the `trimmed` column says how). Each run was labelled from its numbers by the written rules
below before `python -m sweeprl diagnose` ever read it; `labels.jsonl` holds the labels with the analyst's reasoning.
`bench/real_runs.py` scores the diagnosis against them (`--readme` rewrites this file from `labels.jsonl`).

Labelling rules, in short: `healthy` = trains as intended, possibly noisy or slow; `unhealthy` = one of
reward_collapse, divergence, entropy_blowup, entropy_collapse, kl_runaway, no_learning, no_signal (sparse or
saturated reward), length_hacking, preference_overfit, preference_no_learning is clearly visible in the numbers;
`inconclusive` = too short or noisy to tell. The learning-rate direction is `lower` only with evidence of updates
too large (KL, grad norm, entropy, clip fraction), `raise` only when the policy visibly barely moves and the reward
is neither sparse nor saturated, `none` when the learning rate is fine or not the cause, `unknown` otherwise.

Batches: `seed` runs were read while the rules were first written; each `blindN` batch was gathered and labelled
afterwards by someone who did not run the tool, scored once as it came, and then used to revise the rules
(`bench/real_runs.py` keeps each batch's blind figures and the commit that reproduces them). The files remain their
authors' (licenses as stated by each repository; "none stated" means the repository has no license file; logs
quoted in issues are quoted as such).

`labels_second.jsonl` holds a second, independent labelling of every blind-batch run and 12 seed runs, by the same
rules, written from anonymised copies of the files without the first labels or the tool's output:
`bench/label_agreement.py` measures how far two analysts agree and scores the diagnosis against their consensus.

"""


def readme() -> str:
    rows = [
        "| run | source | license | tool / format | algo | points | label | LR | trimmed | batch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = batches([r["batch"] for r in labels()])
    for lab in sorted(labels(), key=lambda r: (order.index(r["batch"]), r["id"])):
        label = lab["health"] + (f": {', '.join(lab['problems'])}" if lab["problems"] else "")
        cells = [
            f"`{lab['file']}`",
            f"[{lab['repo']}]({lab['url']})",
            lab.get("license") or "none stated",
            f"{lab.get('framework')} / {lab.get('format')}",
            lab.get("algo", ""),
            str(lab.get("points", "")),
            label,
            lab.get("lr_direction", ""),
            (lab.get("trimmed") or "nothing").replace("|", "/")[:90],
            lab["batch"],
        ]
        rows.append("| " + " | ".join(c.replace("\n", " ") for c in cells) + " |")
    return README_HEAD + "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    ap.add_argument("--readme", action="store_true", help=f"rewrite {CORPUS.name}/README.md from labels.jsonl")
    ap.add_argument("--rows", default="all", help="per-run rows to print: a batch's name, all or none")
    ap.add_argument("--batch", help="score only this batch, scored or new (no --write: its row covers all runs)")
    args = ap.parse_args()
    if args.batch and args.write:
        ap.error("--write scores every batch: drop --batch")
    if args.batch and args.batch not in {label["batch"] for label in labels()}:
        ap.error(f"--batch {args.batch}: no run of labels.jsonl is in it")
    if args.readme:
        (CORPUS / "README.md").write_text(readme())
        print(f"{CORPUS / 'README.md'} rewritten")
        return 0
    verdicts = [judge(label) for label in labels() if args.batch in (None, label["batch"])]
    print(f"{'run':<44} {'batch':<8} {'label':<34} {'alarms (info)':<60} lr")
    order = batches([v.batch for v in verdicts])
    for v in sorted(verdicts, key=lambda v: (order.index(v.batch), v.id)):
        if args.rows not in ("all", v.batch):
            continue
        lab = v.label["health"] if not v.label["problems"] else ",".join(v.label["problems"])
        lab += f" [{v.label.get('lr_direction', '?')}]"
        got = v.error or (",".join(v.alarms) or "-") + (f" ({','.join(v.infos)})" if v.infos else "")
        mark = "" if (v.matched if v.unhealthy else not v.alarms) and not v.lr_against else "  <-"
        print(f"{v.id[:44]:<44} {v.batch:<8} {lab[:34]:<34} {got[:60]:<60} {v.lr or '-'}{mark}")
    print()
    for batch in order:
        if args.batch not in (None, batch):
            continue
        f = figures([v for v in verdicts if v.batch == batch])
        blind = f"   (blind, at {BLIND[batch][0]}: {BLIND[batch][1]})" if batch in BLIND else ""
        print(f"{batch:<7} {f['runs']:>3} runs: {summary_line(f)}{blind}")
    f = figures(verdicts)
    print(f"{'all':<7} {f['runs']:>3} runs: {summary_line(f)}")
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchmarks_md import update_row

        update_row(
            "real_runs_all",
            f"diagnose verdicts on {f['runs']} labelled public runs (all batches, current rules)",
            "labels written before the tool ran (tests/data/real_runs)",
            summary_line(f),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
