"""Every command in README.md runs: a doc-test that extracts the fenced ``bash`` and ``console`` blocks and
executes each command in order in one scratch dir (so the sweep's outputs feed the commands after it).

How a command is run here:
- ``python -m sweeprl`` training commands get tiny-model overrides appended (``model=tiny lora=none``, a few
  updates, short completions, 1 trial per sweep — 2 for the quickstart study the later commands look at, 3 when
  a command continues it to a larger ``n_trials``), so the real code path runs in seconds on CPU;
- placeholders (``P.jsonl``, ``<mlflow run id>``, ``db-host``, ``mlflow-host`` …) are replaced by real files and
  servers made by this test (a PostgreSQL and an ``mlflow server`` on 127.0.0.1);
- servers (``mlflow ui``, ``optuna-dashboard``) are started on a free loopback port, must answer with the
  sweep's data, and are stopped;
- ``bash scripts/setup.sh …`` is what ``.ci/run`` executes before this suite: the test checks ``.ci/run`` runs
  exactly the README's test command and runs the part after ``&&`` (the suite itself is not run recursively);
- ``console`` blocks show ``$ command`` followed by its output: every shown output line must be printed;
- ``bench/run_all`` runs with ``--quick`` (every benchmark script at its smallest size, BENCHMARKS.md untouched);
- commands that share no file with the others (``INDEPENDENT``) start with the first command, in the background,
  and are checked in their place.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, TextIO

import pytest

from conftest import PYTHON, REPO, free_port

pytestmark = pytest.mark.e2e
VENV_BIN = Path(PYTHON).parent
STUDY = "quickstart-lr_kl"


@dataclass
class Command:
    line: int  # README line number
    text: str
    expected: List[str] = field(default_factory=list)  # console blocks: output lines that must appear


def readme_commands(path: Path = REPO / "README.md") -> List[Command]:
    commands: List[Command] = []
    lang: Optional[str] = None
    pending = ""
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        if raw.startswith("```"):
            lang = raw[3:].strip() if lang is None else None
            continue
        if lang == "bash":
            text = raw.split("  #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
            if text.endswith("\\"):
                pending += text[:-1] + " "
            elif text or pending:
                commands.append(Command(number, " ".join((pending + text).split())))
                pending = ""
        elif lang == "console":
            if raw.startswith("$ "):
                commands.append(Command(number, raw[2:].strip()))
            elif raw.strip() and commands:
                commands[-1].expected.append(raw.strip())
    return commands


def test_readme_has_the_two_quickstart_commands_and_ci_runs_the_second():
    text = (REPO / "README.md").read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quickstart, re.S)
    first, second = blocks[0].strip(), blocks[1].strip()
    assert first == "bash scripts/setup.sh && .venv/bin/python -m sweeprl -m experiment=quickstart sweep=lr_kl"
    assert second == "bash scripts/setup.sh --test && .venv/bin/python -m pytest"
    ci = [
        ln
        for ln in (REPO / ".ci/run").read_text().splitlines()
        if ln.strip() and not ln.startswith(("#", "set ", "cd "))
    ]
    assert ci == [second]


# ----------------------------------------------------------------------------------------- rewriting
def sweep_size(args: List[str], continued: bool = False, shown: bool = False) -> List[str]:
    """1 trial per sweep, 2 for the study the README's later commands look at (``shown``: its trials table,
    report, MLflow runs), and one more for a larger n_trials of a study an earlier command ran (a "continue to N"
    example)."""
    base = 2 if shown else 1
    out = []
    for a in args:
        m = re.fullmatch(r"hydra\.sweeper\.n_trials=(\d+)", a)
        out.append(f"hydra.sweeper.n_trials={base + (continued and int(m.group(1)) > 16)}" if m else a)
    if not any(a.startswith("hydra.sweeper.n_trials=") for a in out):
        out.append(f"hydra.sweeper.n_trials={base}")
    return out


def tiny(args: List[str], model_cache: Path, studies: Optional[set] = None) -> List[str]:
    """Tiny-model overrides for a ``python -m sweeprl`` training command (not subcommands or --cfg); ``studies``
    collects the (experiment, sweep) pairs swept so far, so that a command continuing one gets its extra trial."""
    subcommands = ("score", "diagnose", "report", "trials", "export", "plan", "build-model", "import-recipe")
    if not args or args[0] in subcommands or any(a.startswith("--cfg") for a in args):
        return args
    extra = [f"model.cache_dir={model_cache}", "algo.max_steps=3", "hydra.sweeper.report=false"]
    if args[0] == "autopilot":  # one round of 3 trials and its re-run on 1 seed (the e2e test has a final re-run)
        return [*args, f"model.cache_dir={model_cache}", "algo.max_steps=3"] + [
            "--round-trials=3",
            "--max-rounds=1",
            "--confirm-seeds=1",
            "--final-seeds=0",
        ]
    if "experiment=quickstart" not in args:
        extra += ["model=tiny", "lora=none", "generation.max_completion_length=16"]
    if "-m" in args:
        study = tuple(sorted(a for a in args if a.startswith(("experiment=", "sweep="))))
        shown = study == ("experiment=quickstart", "sweep=lr_kl")
        args = sweep_size(args, continued=studies is not None and study in studies, shown=shown)
        if studies is not None:
            studies.add(study)
    else:
        extra.remove("hydra.sweeper.report=false")
    return args + extra


class Scratch:
    """The scratch dir the README's commands share, with the files and servers their placeholders name."""

    def __init__(self, root: Path, model_cache: Path):
        self.root, self.model_cache = root, model_cache
        (root / ".venv").symlink_to(REPO / ".venv")
        for shared in ("bench", "examples", "tests"):  # README commands read files of the checkout
            (root / shared).symlink_to(REPO / shared)
        self.env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
        self.cleanup: List = []
        self.logs: Dict[int, Optional[TextIO]] = {}  # pid -> output file of a background command
        self.studies: set = set()  # (experiment, sweep) of the sweeps run so far
        self.served: Dict[tuple, str] = {}  # a server command (argv after the executable) -> the URL checked

    # placeholders ------------------------------------------------------------------------------
    def problems_and_completions(self) -> None:
        from sweeprl.data.ocaml_problems import shipped_problems

        problems = shipped_problems()[:2]
        (self.root / "P.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
        rows = [
            {"problem_id": p["id"], "completion": p["reference_solution"] + "\n(* END *)", "truncated": False}
            for p in problems
        ]
        rows.append({"problem_id": problems[0]["id"], "completion": "let x = \n", "truncated": True})
        (self.root / "C.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def trainer_state_and_csv(self) -> None:
        records = [
            json.loads(line)
            for line in (self.root / "multirun" / STUDY / "trial_0" / "metrics.jsonl").read_text().splitlines()
        ]
        (self.root / "output").mkdir(exist_ok=True)
        (self.root / "output" / "trainer_state.json").write_text(json.dumps({"log_history": records}))
        keys = sorted({k for r in records for k in r})
        lines = [",".join(keys)] + [",".join(str(r.get(k, "")) for k in keys) for r in records]
        (self.root / "metrics.csv").write_text("\n".join(lines) + "\n")

    def mlflow_run_id(self) -> str:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{self.root}/mlflow.db")
        runs = client.search_runs([client.get_experiment_by_name(STUDY).experiment_id], "tags.`sweeprl.role` = 'trial'")
        return runs[0].info.run_id

    def postgres(self) -> str:
        from pg import createdb, postgres_server

        server = postgres_server()
        base = server.__enter__()
        self.cleanup.append(lambda: server.__exit__(None, None, None))
        return createdb(base, "optuna")

    def mlflow_server(self) -> str:
        port = free_port()
        self.start(
            [
                str(VENV_BIN / "mlflow"),
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.root}/server.db",
                "--artifacts-destination",
                str(self.root / "server-artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            f"http://127.0.0.1:{port}/health",
        )
        return f"http://127.0.0.1:{port}"

    def substitute(self, text: str) -> str:
        text = text.replace("$PWD", str(self.root))
        if "P.jsonl" in text:
            self.problems_and_completions()
        if "trainer_state.json" in text or "metrics.csv" in text:
            self.trainer_state_and_csv()
        if "<mlflow run id>" in text:
            text = text.replace("<mlflow run id>", self.mlflow_run_id())
        if "@db-host/optuna" in text:
            text = re.sub(r"postgresql\+psycopg2://\S+@db-host/optuna", self.postgres(), text)
        if "http://mlflow-host:5000" in text:
            text = text.replace("http://mlflow-host:5000", self.mlflow_server())
        return text

    # processes -----------------------------------------------------------------------------------
    def start(self, argv: List[str], url: str, timeout: float = 120) -> str:
        log = open(self.root / f"server-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 - closed with the server
        proc = subprocess.Popen(
            argv, cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.cleanup.append(
            lambda: (os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None, proc.wait(), log.close())
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{argv[0]} exited: {(self.root / log.name).read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    return resp.read().decode("utf-8", errors="replace")
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"{' '.join(argv)} did not answer {url} within {timeout:g} s")

    def serve(self, text: str) -> None:
        """``mlflow ui …`` / ``optuna-dashboard …``: start on a free port; it must serve the sweep's data. The same
        server shown twice (``mlflow ui`` and ``.venv/bin/mlflow ui``) is started once and asked again."""
        argv = shlex.split(text.replace("$PWD", str(self.root)))
        argv[0] = str(VENV_BIN / Path(argv[0]).name)
        key = (Path(argv[0]).name, *argv[1:])
        if key in self.served:
            with urllib.request.urlopen(self.served[key], timeout=30) as resp:
                body = resp.read().decode("utf-8", errors="replace")
        else:
            port = free_port()
            api = "ajax-api/2.0/mlflow/experiments/search?max_results=50" if key[0] == "mlflow" else "api/studies"
            self.served[key] = f"http://127.0.0.1:{port}/{api}"
            body = self.start([*argv, "--host", "127.0.0.1", "--port", str(port)], self.served[key])
        assert STUDY in body, body[:2000]

    def launch(self, text: str, background: bool = False) -> subprocess.Popen:
        """Start a README command; ``background``: beside the commands that follow it, with its output in a file
        (a pipe nobody reads yet would stall it)."""
        argv = shlex.split(text)
        if argv[0].endswith("python") and argv[1:3] == ["-m", "sweeprl"]:
            argv = [argv[0], "-m", "sweeprl", *tiny(argv[3:], self.model_cache, self.studies)]
        if any(a.endswith("bench/run_all") for a in argv[:2]):
            argv.append("--quick")  # never --write: BENCHMARKS.md is only rewritten by hand on an idle machine
        log = open(self.root / f"command-{time.monotonic_ns()}.log", "w+") if background else None  # noqa: SIM115
        proc = subprocess.Popen(
            ["bash", "-c", shlex.join(argv)],
            cwd=self.root,
            env=self.env,
            stdout=log or subprocess.PIPE,
            stderr=subprocess.STDOUT if log else subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.logs[proc.pid] = log
        return proc

    def wait(self, proc: subprocess.Popen) -> subprocess.CompletedProcess:
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        log = self.logs.pop(proc.pid, None)
        if log is not None:
            log.seek(0)
            out, err = log.read(), ""
            log.close()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


#: commands that read nothing the commands before them write, and write nothing they read (the benchmarks; the
#: sweep on its own PostgreSQL study and MLflow server): started at the beginning in the background, checked in
#: their place
INDEPENDENT = ("bench/run_all", "@db-host/optuna")


SERVERS = ("mlflow ui", ".venv/bin/mlflow ui", "optuna-dashboard")


def test_every_readme_command_runs(tmp_path, model_cache):
    commands = readme_commands()
    assert len(commands) >= 20
    scratch = Scratch(tmp_path, model_cache)
    done: Dict[int, str] = {}
    early: Dict[int, subprocess.Popen] = {}
    try:
        for cmd in commands:
            if any(word in cmd.text for word in INDEPENDENT) and not cmd.expected:
                early[cmd.line] = scratch.launch(
                    scratch.substitute(cmd.text.partition(" && ")[2] or cmd.text), background=True
                )
                scratch.cleanup.append(lambda p=early[cmd.line]: p.kill() if p.poll() is None else None)
        for cmd in commands:
            t0 = time.monotonic()
            text = cmd.text
            if text.startswith("bash scripts/setup.sh"):
                setup, _, rest = text.partition(" && ")
                assert setup in ("bash scripts/setup.sh", "bash scripts/setup.sh --test"), text
                if rest.endswith("-m pytest"):
                    done[cmd.line] = "the test suite itself (.ci/run)"
                    continue
                text = rest
            if text.startswith(SERVERS):
                scratch.serve(text)
                done[cmd.line] = f"served in {time.monotonic() - t0:.0f} s"
                continue
            proc = scratch.wait(early.pop(cmd.line) if cmd.line in early else scratch.launch(scratch.substitute(text)))
            out = proc.stdout + proc.stderr
            if cmd.expected:  # a console example: shown output, usually an error exit
                for line in cmd.expected:
                    assert line in out, f"README line {cmd.line}: {cmd.text}\nexpected: {line}\ngot:\n{out[-3000:]}"
            else:
                assert proc.returncode == 0, f"README line {cmd.line}: {cmd.text}\n{out[-4000:]}"
            done[cmd.line] = f"exit {proc.returncode} in {time.monotonic() - t0:.0f} s"
    finally:
        for stop in reversed(scratch.cleanup):
            try:
                stop()
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass
    for cmd in commands:  # shown with -rA / on failure; the slowest lines say where the doc-test's time goes
        print(f"README:{cmd.line}: {done.get(cmd.line, 'not run')}: {cmd.text[:100]}")
    assert len(done) == len(commands)
    # the sweeps really ran: the quickstart study was continued to 3 trials by the "continue" example
    import optuna

    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{tmp_path}/multirun/{STUDY}/optuna.db")
    assert len([t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]) == 3
    assert (tmp_path / "multirun" / STUDY / "report.html").is_file()  # written by `python -m sweeprl report`
