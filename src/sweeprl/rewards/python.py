"""``reward=python_tests``: a Python completion run against its problem's unit tests, in the sandbox.

Scoring of one completion (weights configurable):

1. **Code** = the last fenced block (```python, ```py or a bare ```) of the completion; without one, the whole
   completion.
2. **format** (0.1): the completion has such a fenced block.
3. **compile** (0.1): the code parses (``compile``); if it does not, load and tests are 0.
4. **load** (0.1): the code runs as a module (definitions, imports, top-level statements) without raising, within
   the timeout.
5. **tests** (0.7 x passed / total): each test — Python source (``assert add(1, 2) == 3``, or a whole
   ``check(candidate)`` function and its call) run after the code, in the code's namespace — runs in its own
   process with its own timeout (:mod:`sweeprl.rewards.test_loop`). A test passes when it completes; an
   ``AssertionError`` fails it, any other exception errors it. A test run whose code starts processes fails, and
   then the whole tests component is 0, as in the OCaml reward.

Everything for one completion runs in one :class:`sweeprl.sandbox.Sandbox` call (bubblewrap: no network, a private
``/tmp``, read-only root; rlimits on CPU, memory, processes and file size); completions of a batch in parallel
threads, ``workers`` as in the OCaml reward. The code's own output is discarded; the harness reports its verdict
with a per-completion secret the code never sees on disk, so printing ``PASS`` and exiting scores nothing. The
interpreter is the system's ``python3`` (``/usr/local/bin``, ``/usr/bin``; ``python: <path>`` for another one that
the sandbox's unprivileged user can run), started with ``-I``: no user site, no environment variables; a virtualenv
under ``/root`` or a home directory is not readable by that user. Per step the components are logged as
``rewards/python/<component>`` and every scored completion is appended to ``completions.jsonl`` in the trial dir.
"""

from __future__ import annotations

import re
import secrets
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from sweeprl.rewards import register
from sweeprl.rewards.scoring import ScoreLog, parallel_map, resolve_workers
from sweeprl.rewards.test_loop import TEST_LOOP
from sweeprl.sandbox import Limits, Sandbox

DEFAULT_WEIGHTS = {"format": 0.1, "compile": 0.1, "load": 0.1, "tests": 0.7}
COMPONENTS = tuple(DEFAULT_WEIGHTS)
FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)

# The harness: runs the code as module "solution" with its output discarded, then test <j> in its namespace, and
# writes "<nonce> <verdict>" to the stdout it kept. The nonce comes on stdin and is read before the code runs.
HARNESS = r"""
import os, sys
nonce = sys.stdin.readline().strip()
sys.stdin = open(os.devnull)
verdict_fd = os.dup(1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1); os.dup2(null, 2)
which = sys.argv[1]
def report(verdict):
    os.write(verdict_fd, (nonce + " " + verdict + "\n").encode())
    os._exit(0)
ns = {"__name__": "solution", "__builtins__": __builtins__}
try:
    exec(compile(open("solution.py").read(), "solution.py", "exec"), ns)
except BaseException:
    report("LOAD_ERROR")
if which == "load":
    report("LOADED")
try:
    exec(compile(open("test_" + which + ".py").read(), "test_" + which + ".py", "exec"), ns)
except AssertionError:
    report("FAIL")
except BaseException:
    report("ERROR")
report("PASS")
"""

# One completion: parse, load, then every test (TEST_LOOP). $1 = tests, $2 = seconds per test, $3 = python.
SCRIPT = (
    r"""
ntests=$1; ttimeout=$2; PY=$3
read -r nonce < nonce.txt; rm -f nonce.txt
if timeout -s KILL $ttimeout "$PY" -I -c 'import sys; compile(open("solution.py").read(), "solution.py", "exec")' \
    >/dev/null 2>&1; then
  echo "COMPILE ok"
else
  echo "COMPILE none"; exit 0
fi
"""
    + TEST_LOOP
    + r"""
r=$(timeout -s KILL $ttimeout "$PY" -I harness.py load 2>/dev/null <<<"$nonce") || true
r=${r##*$'\n'}
case "$r" in "$nonce LOADED") echo "LOAD ok" ;; *) echo "LOAD none" ;; esac
[ -n "$SANDBOX_PIDNS" ] && kill -9 -1 2>/dev/null  # whatever loading the code left running
run_tests 0 $ntests "$PY" -I harness.py
"""
)


@dataclass
class PythonScore:
    reward: float
    format: float = 0.0
    compile: float = 0.0
    load: float = 0.0
    tests: float = 0.0
    fenced: bool = False
    compiled: bool = False
    loaded: bool = False
    tests_passed: int = 0
    tests_total: int = 0
    test_results: List[str] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def system_python() -> str:
    """The system's python3, which the sandbox's unprivileged user can run (unlike a venv under a home dir)."""
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if not found:
        raise RuntimeError(
            "reward python_tests: no python3 in /usr/local/bin, /usr/bin or /bin (apt-get install python3), or set "
            "reward.funcs[].kwargs.python to an interpreter the sandbox user may run"
        )
    return found


def extract_code(completion: str) -> tuple[str, bool]:
    """(code, fenced): the last fenced block, or the whole completion when there is none."""
    blocks = FENCED.findall(completion)
    if blocks:
        return blocks[-1], True
    return completion, False


def as_tests(tests: Any) -> List[str]:
    """A row's tests: a list of Python snippets, or one snippet (e.g. a ``check`` function and its call)."""
    if tests is None:
        return []
    if isinstance(tests, str):
        return [tests] if tests.strip() else []
    return [str(t) for t in tests]


class PythonScorer:
    """Scores Python completions against their tests; thread-safe; reusable outside training (``sweeprl score``)."""

    def __init__(
        self,
        weights: Optional[Mapping[str, float]] = None,
        test_timeout: float = 2.0,
        isolation: str = "auto",
        workers: int = 0,
        limits: Optional[Limits] = None,
        slots: int = 1,
        python: Optional[str] = None,
    ):
        self.weights = {**DEFAULT_WEIGHTS, **(weights or {})}
        unknown = set(self.weights) - set(COMPONENTS)
        if unknown:
            raise ValueError(
                f"python_tests weights: unknown component(s) {sorted(unknown)}; allowed: {', '.join(COMPONENTS)}"
            )
        if test_timeout <= 0:
            raise ValueError(f"python_tests test_timeout={test_timeout}; allowed: seconds > 0")
        self.test_timeout = float(test_timeout)
        self.python = python or system_python()
        self.base_limits = limits or Limits()
        self.sandbox = Sandbox(self.base_limits, isolation=isolation)
        self.workers = resolve_workers(workers, slots)

    def score(self, completion: str, tests: Any, weights: Optional[Mapping[str, float]] = None) -> PythonScore:
        w = {**self.weights, **(weights or {})}
        code, fenced = extract_code(completion)
        tests = as_tests(tests)
        s = PythonScore(reward=0.0, fenced=fenced, tests_total=len(tests))
        s.format = w["format"] if fenced else 0.0
        files = {"solution.py": code, "harness.py": HARNESS, "nonce.txt": secrets.token_hex(16) + "\n"}
        files.update({f"test_{k}.py": t for k, t in enumerate(tests)})
        wall = (len(tests) + 3) * (self.test_timeout + 1.0) + 5
        result = self.sandbox.run(
            ["/bin/bash", "-c", SCRIPT, "score", str(len(tests)), str(self.test_timeout), self.python],
            files=files,
            limits=Limits(**{**asdict(self.base_limits), "wall_seconds": wall}),
        )
        for line in result.stdout.splitlines():
            parts = line.split()
            if parts[:2] == ["COMPILE", "ok"]:
                s.compiled = True
            elif parts[:2] == ["LOAD", "ok"]:
                s.loaded = True
            elif len(parts) >= 3 and parts[0] == "TEST":
                s.test_results.append(parts[2])
        if result.timed_out:
            s.note = f"sandbox wall time {wall:.0f}s exceeded"
        s.tests_passed = sum(r == "PASS" for r in s.test_results)
        if not s.compiled:
            s.note = s.note or "the code does not parse"
        s.compile = w["compile"] if s.compiled else 0.0
        s.load = w["load"] if s.loaded else 0.0
        if "SPAWNED_PROCESSES" in s.test_results:
            s.note = "the code started processes while tested: tests scored 0"
        elif tests and s.compiled:
            s.tests = w["tests"] * s.tests_passed / len(tests)
        s.reward = s.format + s.compile + s.load + s.tests
        return s

    def score_many(
        self, jobs: Sequence[tuple[str, Any]], weights: Optional[Mapping[str, float]] = None
    ) -> List[PythonScore]:
        """Score ``(completion, tests)`` jobs in parallel, results in input order."""
        return parallel_map(lambda j: self.score(j[0], j[1], weights), jobs, self.workers)


@register("python_tests")
def python_tests(
    weights: Optional[Mapping[str, float]] = None,
    test_timeout: float = 2.0,
    workers: int = 0,
    isolation: str = "auto",
    tests_column: str = "tests",
    python: Optional[str] = None,
    output_dir: Optional[str] = None,
    slots: int = 1,
):
    """Factory of the TRL reward function (``output_dir`` and ``slots`` are filled in by the trial);
    ``tests_column``: the dataset column that holds each row's tests."""
    scorer = PythonScorer(
        weights=weights, test_timeout=test_timeout, isolation=isolation, workers=workers, slots=slots, python=python
    )
    record = ScoreLog("python", COMPONENTS, output_dir)

    def python_tests(completions, id=None, trainer_state=None, log_metric=None, **columns) -> List[float]:  # noqa: A002
        if columns.get(tests_column) is None:
            raise KeyError(
                f"reward python_tests needs a {tests_column!r} column in the dataset (data=prompts with "
                f"data.kwargs.columns.tests=<your column>, or reward.funcs[].kwargs.tests_column); columns here: "
                f"{', '.join(sorted(columns)) or 'none'}"
            )
        texts = record.texts(completions)
        scores = scorer.score_many(list(zip(texts, columns[tests_column])))
        record.write(scores, texts, id, trainer_state, log_metric)
        return [s.reward for s in scores]

    return python_tests
