"""Completions scored per second by the OCaml syntax-aware reward: parallel (workers = cores) vs sequential,
measured side by side on the shipped problems with a realistic mix of completions:

- correct: the reference solution + end marker;
- type error: the reference + one ill-typed top-level definition;
- syntax error: the reference with a broken line inserted;
- failing: another problem's reference solution (compiles, the tests do not type-check against it).

    .venv/bin/python bench/ocaml_scoring.py --write
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks_md import update_row  # noqa: E402
from scoring_rates import compare  # noqa: E402

MARK = "(* END *)"


def completions(limit: int = 0):
    from sweeprl.data.ocaml import shipped_problems

    problems = shipped_problems()[: limit or None]
    jobs = []
    for i, p in enumerate(problems):
        ref = p["reference_solution"].rstrip("\n") + "\n"
        other = problems[(i + 1) % len(problems)]["reference_solution"].rstrip("\n") + "\n"
        lines = ref.splitlines()
        broken = "\n".join(lines[:2] + ["let = in"] + lines[2:]) + "\n"
        jobs += [
            (ref + MARK, p["tests"], False),
            (ref + "let broken_helper (x : int) : string = x + 1\n" + MARK, p["tests"], False),
            (broken + MARK, p["tests"], False),
            (other + MARK, p["tests"], False),
        ]
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--problems", type=int, default=0, help="use only the first N shipped problems (0 = all)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    from sweeprl.rewards.ocaml import OCamlScorer

    jobs = completions(args.problems)
    cores = os.cpu_count() or 1
    seq, par = OCamlScorer(workers=1), OCamlScorer(workers=cores)
    best_seq, best_par, s_par = compare(seq, par, jobs, args.repeats, cores)
    mix = {"correct (1.0)": sum(s.reward == 1.0 for s in s_par), "other": sum(s.reward != 1.0 for s in s_par)}
    ratio = best_par / best_seq
    print(
        f"\n{len(jobs)} completions ({mix}), isolation={seq.sandbox.isolation}: sequential {best_seq:.1f}/s, "
        f"parallel {best_par:.1f}/s, speed-up {ratio:.2f}x on {cores} cores"
    )
    if args.write:
        update_row(
            "ocaml_scoring",
            f"OCaml reward: completions scored/s, {cores} workers ({len(jobs)} mixed completions, "
            f"{seq.sandbox.isolation})",
            f"same scorer, 1 worker ({best_seq:.1f}/s)",
            f"{ratio:.2f}x ({best_par:.1f}/s)",
        )


if __name__ == "__main__":
    main()
