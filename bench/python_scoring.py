"""Completions scored per second by the Python unit-test reward: parallel (workers = cores) vs sequential, measured
side by side on small problems with a realistic mix of completions, like bench/ocaml_scoring.py:

- correct: the reference solution in a fenced block;
- wrong: a solution that fails some tests;
- syntax error: the reference with a broken line;
- raises at import: the reference after an import that does not exist.

    .venv/bin/python bench/python_scoring.py --write
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring_rates import main  # noqa: E402

# (reference solution, a wrong one, tests)
PROBLEMS = [
    (
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a * b\n",
        ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"],
    ),
    (
        "def rev(s):\n    return s[::-1]\n",
        "def rev(s):\n    return s\n",
        ["assert rev('abc') == 'cba'", "assert rev('') == ''", "assert rev('aa') == 'aa'"],
    ),
    (
        "def biggest(xs):\n    return max(xs)\n",
        "def biggest(xs):\n    return xs[0]\n",
        ["assert biggest([1, 5, 2]) == 5", "assert biggest([-3]) == -3", "assert biggest([4, 1]) == 4"],
    ),
    (
        "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n",
        "def count_vowels(s):\n    return len(s)\n",
        ["assert count_vowels('banana') == 3", "assert count_vowels('') == 0", "assert count_vowels('xyz') == 0"],
    ),
    (
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        "def fib(n):\n    return n\n",
        ["assert fib(0) == 0", "assert fib(1) == 1", "assert fib(10) == 55"],
    ),
    (
        "def is_palindrome(s):\n    return s == s[::-1]\n",
        "def is_palindrome(s):\n    return True\n",
        ["assert is_palindrome('aba')", "assert not is_palindrome('ab')", "assert is_palindrome('')"],
    ),
]


def completions(limit: int = 0):
    fence = "Here is my answer:\n```python\n{}```\n"
    jobs = []
    for ref, wrong, tests in PROBLEMS[: limit or None]:
        broken = ref.replace("\n", "\n    return (\n", 1)
        jobs += [
            (fence.format(ref), tests),
            (fence.format(wrong), tests),
            (fence.format(broken), tests),
            (fence.format("import no_such_module\n" + ref), tests),
        ]
    return jobs * 4


def scorer(workers: int):
    from sweeprl.rewards.python import PythonScorer

    return PythonScorer(workers=workers)


if __name__ == "__main__":
    main(__doc__, scorer, completions, "python_scoring", "Python unit-test reward (3 tests each)")
