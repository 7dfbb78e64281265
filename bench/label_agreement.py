"""How far two labellers of the real-run corpus agree, and how the diagnosis scores against each and their consensus.

``tests/data/real_runs/labels.jsonl`` holds the first labels, written by whoever gathered each run.
``labels_second.jsonl`` beside it holds a second labelling of every blind-batch run (and of 12 seed runs), written
independently from the numbers alone, by the same written rules, from anonymised copies of the files, without the
first labels or any output of the tool. Two careful readers do not always agree (one calls a 24-step run
inconclusive, the other "no learning"), so a score against one labeller has a ceiling: what the other labeller
reaches against it.

Printed:
- each labeller scored as if it were the tool against the other: recall (an unhealthy run called unhealthy with a
  problem the same findings would report), quiet healthy, unmatched problems per run, learning-rate direction
  against the label; the health agreement and Cohen's kappa;
- the diagnosis against the first labels, the second labels and their consensus. The consensus holds the runs
  both call healthy, and the runs both call unhealthy with at least one problem in common (its problems: both
  labellers' together; its learning-rate direction where both give the same one, else unknown). Runs the labellers
  disagree on are left out of it.
- ``--blind``: the same with the verdicts each blind batch got at the commit where it was first scored (one git
  worktree per commit in a temporary directory; about a minute): the held-out figures, against each labelling.

    .venv/bin/python bench/label_agreement.py            # current rules
    .venv/bin/python bench/label_agreement.py --blind    # also the verdicts at first scoring
    .venv/bin/python bench/label_agreement.py --blind --write    # also the BENCHMARKS.md rows
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_runs import BLIND, CORPUS, MATCHES, Verdict, figures, judge, labels, summary_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPPOSITE = {"lower": "raise", "raise": "lower"}


def second_labels() -> Dict[str, Dict]:
    return {
        d["id"]: d
        for d in (
            json.loads(line) for line in (CORPUS / "labels_second.jsonl").read_text().splitlines() if line.strip()
        )
    }


def findings_for(problems: List[str]) -> set:
    """The finding ids that would report any of these problems."""
    return set().union(*(MATCHES[p] for p in problems)) if problems else set()


def labeller_figures(ref: Dict[str, Dict], other: Dict[str, Dict], ids: List[str]) -> Dict[str, float]:
    """``other`` scored like the tool against ``ref``: its problems stand for the findings that report them."""
    sick = [i for i in ids if ref[i]["health"] == "unhealthy"]
    healthy = [i for i in ids if ref[i]["health"] == "healthy"]

    def said(i: str) -> List[str]:
        return other[i]["problems"] if other[i]["health"] == "unhealthy" else []

    unmatched = sum(
        len([p for p in said(i) if not MATCHES[p] & findings_for(ref[i]["problems"])]) for i in sick + healthy
    )
    against = sum(
        ref[i]["lr_direction"] not in ("unknown", None)
        and other[i]["lr_direction"] in OPPOSITE
        and (ref[i]["lr_direction"] == "none" or OPPOSITE[ref[i]["lr_direction"]] == other[i]["lr_direction"])
        for i in ids
    )
    return {
        "runs": len(ids),
        "recall": sum(bool(findings_for(said(i)) & findings_for(ref[i]["problems"])) for i in sick) / max(1, len(sick)),
        "unhealthy": len(sick),
        "quiet_healthy": sum(not said(i) for i in healthy) / max(1, len(healthy)),
        "healthy": len(healthy),
        "false_alarms_per_run": unmatched / max(1, len(sick + healthy)),
        "lr_against": against,
        "read": 1.0,
    }


def kappa(a: List[str], b: List[str]) -> float:
    """Cohen's kappa of two labellings of the same runs (health: healthy / unhealthy / inconclusive)."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    expected = sum(a.count(c) * b.count(c) for c in set(a) | set(b)) / n**2
    return (observed - expected) / (1 - expected) if expected < 1 else 1.0


def consensus(first: Dict[str, Dict], second: Dict[str, Dict], ids: List[str]) -> Dict[str, Dict]:
    out = {}
    for i in ids:
        a, b = first[i], second[i]
        if a["health"] != b["health"] or a["health"] == "inconclusive":
            continue
        if a["health"] == "unhealthy" and not set(a["problems"]) & set(b["problems"]):
            continue
        lr = a["lr_direction"] if a["lr_direction"] == b["lr_direction"] else "unknown"
        problems = sorted(set(a["problems"]) | set(b["problems"]))
        out[i] = {**a, "problems": problems, "lr_direction": lr}
    return out


JUDGE_AT_COMMIT = r"""
import json, sys
sys.path.insert(0, "bench"); sys.path.insert(0, "src")
import real_runs as rr
out = {}
for label in json.load(sys.stdin):
    label.setdefault("half", "held_out")  # the first blind batches were scored by a 'half' field
    v = rr.judge(label)
    lr = getattr(v, "lr_runs", None) or ([v.lr] if getattr(v, "lr", None) else [])
    out[label["id"]] = {"alarms": list(v.alarms), "lr_runs": lr, "read": bool(v.read)}
print(json.dumps(out))
"""


def blind_verdicts(first: Dict[str, Dict]) -> Dict[str, Verdict]:
    """Each blind batch's verdicts as the code at its first-scoring commit gave them."""
    out: Dict[str, Verdict] = {}
    with tempfile.TemporaryDirectory(prefix="sweeprl-blind-") as tmp:
        for batch, (commit, _) in BLIND.items():
            todo = [lab for lab in first.values() if lab["batch"] == batch]
            tree = Path(tmp) / batch
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
                check=True,
                capture_output=True,
            )
            try:
                r = subprocess.run(
                    [sys.executable, "-c", JUDGE_AT_COMMIT],
                    cwd=tree,
                    input=json.dumps(todo),
                    capture_output=True,
                    text=True,
                    check=True,
                )
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
            for i, got in json.loads(r.stdout.strip().splitlines()[-1]).items():
                lr = got["lr_runs"]
                out[i] = Verdict(i, batch, first[i], got["read"], None, got["alarms"], [], lr[0] if lr else None, lr)
            print(f"  {batch}: {len(todo)} runs judged at {commit}", file=sys.stderr)
    return out


def rescored(verdicts: Dict[str, Verdict], ref: Dict[str, Dict]) -> List[Verdict]:
    """The same verdicts, scored against other labels."""
    return [
        Verdict(i, v.batch, ref[i], v.read, v.error, v.alarms, v.infos, v.lr, v.lr_runs, v.records)
        for i, v in verdicts.items()
        if i in ref
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blind", action="store_true", help="also score the verdicts each batch got at first scoring")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md (with --blind)")
    args = ap.parse_args()
    if args.write and not args.blind:
        ap.error("--write records the held-out figures: add --blind")
    first = {lab["id"]: lab for lab in labels()}
    second = second_labels()
    ids = [i for i in first if i in second]
    both = consensus(first, second, ids)
    health_a, health_b = [first[i]["health"] for i in ids], [second[i]["health"] for i in ids]
    agree = sum(x == y for x, y in zip(health_a, health_b)) / len(ids)
    print(
        f"{len(ids)} runs labelled twice; health agreement {agree:.0%}, Cohen's kappa {kappa(health_a, health_b):.2f}"
    )
    print(
        f"consensus on {len(both)}: {sum(v['health'] == 'unhealthy' for v in both.values())} unhealthy, "
        f"{sum(v['health'] == 'healthy' for v in both.values())} healthy"
    )
    rows = {
        "second labeller vs first": labeller_figures(first, second, ids),
        "first labeller vs second": labeller_figures(second, first, ids),
    }
    current = {i: judge(first[i]) for i in ids}
    runs = {"now": current}
    if args.blind:
        runs["first scoring"] = blind_verdicts({i: first[i] for i in ids})
    for name, verdicts in runs.items():
        for ref_name, ref in (("first", first), ("second", second), ("consensus", both)):
            rows[f"diagnosis {name} vs {ref_name}"] = figures(rescored(verdicts, ref))
    # a table that fits 80 columns: recall and quiet share of the unhealthy / healthy runs, false alarms per run,
    # runs with learning-rate advice against the label
    print(f"\n{'':<38}{'recall':<13}{'quiet':<12}{'alarms':>6}{'LR':>7}")
    for name, f in rows.items():
        recall = f"{f['recall']:.0%} of {f['unhealthy']}"
        quiet = f"{f['quiet_healthy']:.0%} of {f['healthy']}"
        print(f"{name:<38}{recall:<13}{quiet:<12}{f['false_alarms_per_run']:>6.2f}{f['lr_against']:>7}")
    print("alarms: false alarms per run; LR: runs told to move the LR against the label")
    if args.write:
        from benchmarks_md import update_row

        blind = sum(first[i]["batch"] in BLIND for i in ids)
        held = [i for i in runs["first scoring"] if i in both]
        update_row(
            "labellers_agree",
            f"second labeller scored against the first on {len(ids)} runs ({blind} of the blind batches; the ceiling "
            "of a score against one labeller)",
            "independent relabelling from anonymised files (tests/data/real_runs/labels_second.jsonl)",
            summary_line(rows["second labeller vs first"]) + f"; kappa {kappa(health_a, health_b):.2f}",
        )
        update_row(
            "real_runs_blind_consensus",
            f"diagnose at each blind batch's first scoring, on the {len(held)} blind runs both labellers agree on",
            "held-out: verdicts before the rules saw the batch (bench/label_agreement.py --blind)",
            summary_line(rows["diagnosis first scoring vs consensus"]),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
