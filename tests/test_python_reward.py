"""The Python unit-test reward (``reward=python_tests``) in the real sandbox: its components, and hostile completions
— loops, fork bombs, memory and disk hogs, output floods, writes outside, network, forged verdicts — that must
score nothing and leave nothing behind."""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import pytest

from sweeprl.rewards import build_reward
from sweeprl.rewards.python import PythonScorer, as_tests, extract_code
from sweeprl.sandbox import Limits, bwrap_available

GOOD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]
FENCE = "```python\n{}```\n"


@pytest.fixture(scope="module")
def scorer():
    limits = Limits(
        wall_seconds=30,
        cpu_seconds=5,
        memory_bytes=512 << 20,
        max_processes=32,
        file_size_bytes=4 << 20,
        tmpfs_bytes=32 << 20,
    )
    return PythonScorer(test_timeout=1.0, workers=1, limits=limits)


def test_a_correct_fenced_answer_scores_one(scorer):
    s = scorer.score("Here is the function:\n" + FENCE.format(GOOD) + "It adds.", TESTS)
    assert (s.format, s.compile, s.load, s.tests) == pytest.approx((0.1, 0.1, 0.1, 0.7))
    assert s.reward == pytest.approx(1)
    assert s.test_results == ["PASS", "PASS", "PASS"]


@pytest.mark.parametrize(
    "completion, expected, results",
    [
        (GOOD, 0.9, ["PASS"] * 3),  # no fence: everything but format
        (FENCE.format(GOOD.replace("a + b", "a * b")), 0.3 + 0.7 / 3, ["FAIL", "FAIL", "PASS"]),
        (FENCE.format(GOOD.replace("return a + b", "return a + c")), 0.3, ["ERROR"] * 3),  # NameError: errors
        (FENCE.format("def add(a, b)\n    return a + b\n"), 0.1, []),  # syntax error: format only
        (FENCE.format("import no_such_module\n" + GOOD), 0.2, ["LOAD_ERROR"] * 3),  # does not load
        (FENCE.format(GOOD + "print(add(2, 3))\n"), 1.0, ["PASS"] * 3),  # its own output is harmless
        (
            FENCE.format("def add(a, b):\n    if a < 0:\n        while True: pass\n    return a + b\n"),
            0.3 + 1.4 / 3,
            ["PASS", "TIMEOUT_OR_CRASH", "PASS"],
        ),  # a loop on one branch fails only the test that reaches it
    ],
)
def test_partial_credit_per_component_and_test(scorer, completion, expected, results):
    s = scorer.score(completion, TESTS)
    assert s.reward == pytest.approx(expected) and s.test_results == results


def test_code_extraction_and_test_formats():
    assert extract_code("a\n```py\nx = 1\n```\nb\n```python\ny = 2\n```") == ("y = 2\n", True)  # the last block
    assert extract_code("```python\nz = 3\n")[0] == "z = 3\n"  # cut off at the length limit: what is there
    assert extract_code("w = 4") == ("w = 4", False)
    assert as_tests("def check(f):\n    assert f(1) == 2\ncheck(inc)") == [
        "def check(f):\n    assert f(1) == 2\ncheck(inc)"
    ]
    assert as_tests(["a", "b"]) == ["a", "b"] and as_tests(None) == [] and as_tests(" ") == []


def test_a_check_function_test_as_humaneval_writes_them(scorer):
    test = "def check(candidate):\n    assert candidate(2) == 3\n    assert candidate(-1) == 0\n\ncheck(inc)\n"
    assert scorer.score(FENCE.format("def inc(x):\n    return x + 1\n"), test).tests == pytest.approx(0.7)
    assert scorer.score(FENCE.format("def inc(x):\n    return x\n"), test).tests == 0.0


def test_the_trl_reward_logs_components_and_names_a_missing_tests_column(tmp_path):
    fn = build_reward("python_tests", {"workers": 1}, {"output_dir": str(tmp_path), "slots": 1})
    logged = {}
    rewards = fn([FENCE.format(GOOD), "nonsense ("], tests=[TESTS, TESTS], id=["a", "b"], log_metric=logged.__setitem__)
    assert rewards == pytest.approx([1.0, 0.0])
    assert logged == pytest.approx(
        {
            "rewards/python/format": 0.05,
            "rewards/python/compile": 0.05,
            "rewards/python/load": 0.05,
            "rewards/python/tests": 0.35,
        }
    )
    assert len((tmp_path / "completions.jsonl").read_text().splitlines()) == 2
    with pytest.raises(KeyError, match="needs a 'tests' column.*columns here: answer"):
        fn(["x"], answer=["1"])
    other = build_reward("python_tests", {"workers": 1, "tests_column": "asserts"})
    assert other([FENCE.format(GOOD)], asserts=[TESTS]) == pytest.approx([1.0])
    with pytest.raises(ValueError, match="unknown component"):
        build_reward("python_tests", {"weights": {"style": 1.0}})


# ------------------------------------------------------------------------------------------ hostile code
HOSTILE = {
    "infinite_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
    "memory_hog": "hog = bytearray(1 << 34)\n",
    "disk_filler": "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 10**6)\n    i += 1\n",
    "output_flood": "import os\nwhile True:\n    os.write(1, b'PASS\\n' * 10000)\n",
    "forged_verdict": "import os\nos.write(1, b'PASS\\n')\nos._exit(0)\n",
    "verdict_on_every_fd": "import os\nfor fd in range(3, 12):\n    try:\n        os.write(fd, b'PASS\\n')\n"
    "    except OSError:\n        pass\nos._exit(0)\n",
    "exit_at_import": "import sys\nsys.exit(0)\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_scores_no_tests_and_leaves_nothing(scorer, name, private_tempdir):
    before = set(Path(tempfile.gettempdir()).glob("sweeprl-sandbox-*"))
    t0 = time.monotonic()
    s = scorer.score(FENCE.format(GOOD + HOSTILE[name]), TESTS)  # valid add(), then the attack at import
    assert time.monotonic() - t0 < 25
    assert s.compiled and s.tests == 0.0 and s.tests_passed == 0, s.test_results
    assert set(Path(tempfile.gettempdir()).glob("sweeprl-sandbox-*")) == before


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap not usable here (CI installs it)")
def test_processes_started_by_the_code_fail_every_test(scorer):
    """In its own PID namespace a test run that started processes is seen and fails, at import or when called."""
    called = GOOD.replace("return a + b", "__import__('os').system('true')\n    return a + b")
    for code in (called, GOOD + "import subprocess\nsubprocess.run(['true'])\n"):
        s = scorer.score(FENCE.format(code), TESTS)
        assert s.tests == 0.0 and "SPAWNED_PROCESSES" in s.test_results, s.test_results


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap not usable here (CI installs it)")
def test_writes_outside_and_network_are_blocked(scorer):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    outside = Path(tempfile.gettempdir()) / "sweeprl-python-was-here"
    attack = (
        f"try:\n    open({str(outside)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
        "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=1).send(b'leak')\n"
        "except OSError:\n    pass\n"
    )
    s = scorer.score(FENCE.format(GOOD + attack), TESTS)
    assert s.tests == pytest.approx(0.7)  # the attempts fail quietly; the function still works
    assert not outside.exists()
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()
