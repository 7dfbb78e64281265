#!/usr/bin/env python
"""Screenshots of optuna-dashboard and the MLflow UI on a real quickstart sweep (the images in docs/img/).

Usage (from the repository root):

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--workdir DIR] [--chromium /usr/bin/chromium]
                                            [--only optuna|mlflow|report] [--no-optimize]

What it does, all on this machine (servers bind 127.0.0.1 only; the browser may load nothing but 127.0.0.1):

1. Runs the README quickstart sweep `python -m sweeprl -m experiment=quickstart sweep=lr_kl` (16 trials on the
   embedded tiny model, CPU) in a new temporary directory, which is removed at the end. With `--workdir DIR`
   it reuses DIR when DIR already has multirun/quickstart-lr_kl/optuna.db and mlflow.db (else it runs the
   sweep there); DIR is kept.
2. Starts `optuna-dashboard sqlite:///DIR/multirun/quickstart-lr_kl/optuna.db --host 127.0.0.1 --port P1` and
   `mlflow ui --backend-store-uri sqlite:///DIR/mlflow.db --host 127.0.0.1 --port P2` (free ports, each in
   its own process group) and waits until each answers HTTP.
3. Drives headless Chromium (Debian's /usr/bin/chromium through Playwright, which downloads no browser here)
   and writes into --out:
     optuna-dashboard.png     optuna-dashboard's study page: optimization history (a point per trial and the
                              best-so-far line), hyperparameter importance, timeline of the trials
     optuna-intermediate.png  the same page further down: the best trial and the intermediate values (the
                              running objective each trial reported to the pruner, per training step)
     mlflow-ui.png            MLflow's runs table: the parent run "sweep-quickstart-lr_kl" expanded to its nested
                              "trial-<n>" runs, with entropy, kl, objective, reward, algo.beta,
                              algo.learning_rate and sweeprl.state columns
     report.png               the sweep report (report.html) at a 1280 px window: summary and trials table
     mlflow-charts.png        MLflow's chart view: reward, kl and entropy per training step (a line per trial
                              run) and parallel coordinates learning rate / beta / objective
   The MLflow views are set up the way the UI itself persists them (its localStorage state, URL parameters),
   so nothing in the tracking store is changed. Each page is waited on until its data is drawn (plot points,
   table rows, chart traces), then given 1-3 s to settle; on a timeout the page as it was is saved to
   $TMPDIR/screenshots-<name>-not-ready.png.
4. Stops both servers (SIGTERM to each process group, SIGKILL after 15 s) and removes the temporary
   directory, also on errors and Ctrl-C.

Needs: `pip install -c constraints.txt -e ".[dashboard,docs]"` (optuna-dashboard, playwright) and Debian's
`chromium` (`apt-get install chromium`). The MLflow view set-up (URL parameter workflowType, the localStorage
keys of the runs page) is that of mlflow 3.17.2, the version in constraints.txt; another MLflow version may
need other keys. Images are PNG, 1440 px wide (the intermediate-values crop is narrower), reduced with Pillow
to a 256-colour palette (each well under 200 KB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parent.parent
STUDY = "quickstart-lr_kl"
SWEEP_CMD = ["-m", "sweeprl", "-m", "experiment=quickstart", "sweep=lr_kl"]
WIDTH = 1440
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--mute-audio",
]
# Keep MLflow (server and its UI) from phoning home, and its server from starting job consumers (huey
# processes and a temp dir in /dev/shm that a UI for browsing runs does not need).
QUIET_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}


def log(msg: str) -> None:
    print(f"[screenshots] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_tool(name: str) -> str:
    """The console script next to this interpreter (the project's venv), else the one on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        sys.exit(f"screenshots: '{name}' not found (pip install -c constraints.txt -e '.[dashboard,docs]')")
    return found


class Servers:
    """Processes started here, each the leader of its own process group; stop() ends every group."""

    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, cmd: list[str], cwd: Path) -> subprocess.Popen:
        log(f"start {name}: {' '.join(cmd)}")
        out = open(self.logdir / f"{name}.log", "wb")
        env = {**os.environ, **QUIET_ENV}
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        out.close()
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str, n: int = 30) -> str:
        path = self.logdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            pgid = proc.pid  # start_new_session: the group id is the leader's pid
            for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    proc.poll()
                    try:
                        os.killpg(pgid, 0)  # any member of the group left?
                    except ProcessLookupError:
                        break
                    time.sleep(0.2)
                else:
                    continue
                break
            proc.poll()
            log(f"stopped {name} (pid {proc.pid})")
        self.procs.clear()


def wait_http(url: str, proc: subprocess.Popen, servers: Servers, name: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{servers.log_tail(name)}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{name} did not answer {url} within {timeout:.0f} s:\n{servers.log_tail(name)}")


def http_json(url: str, payload: dict | None = None) -> dict:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def have_sweep(workdir: Path) -> bool:
    return (workdir / "multirun" / STUDY / "optuna.db").exists() and (workdir / "mlflow.db").exists()


def run_sweep(workdir: Path, servers: Servers) -> None:
    cmd = [sys.executable, *SWEEP_CMD]
    log(f"running the quickstart sweep in {workdir} (16 trials, a few minutes on 2 cores)")
    t0 = time.monotonic()
    proc = servers.start("sweep", cmd, workdir)
    rc = proc.wait()
    servers.procs = [(n, p) for n, p in servers.procs if p is not proc]
    if rc != 0 or not have_sweep(workdir):
        raise RuntimeError(f"the sweep failed (exit {rc}):\n{servers.log_tail('sweep', 40)}")
    log(f"sweep done in {time.monotonic() - t0:.0f} s")


def study_summary(storage: str) -> dict:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STUDY, storage=storage)
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    for t in trials:  # what the screenshots will show, for writing captions
        reason = t.user_attrs.get("prune_reason") or t.user_attrs.get("fail_reason") or ""
        steps = max(t.intermediate_values) if t.intermediate_values else None
        log(
            f"  trial {t.number}: {t.state.name} value={t.value} params={t.params} last_report_step={steps} "
            f"{reason[:120]}"
        )
    best = study.best_trial
    return {
        "trials": len(trials),
        # history draws a point per trial with a value (one the guard stopped before any report has none)
        "plotted": sum(t.value is not None for t in trials),
        "states": states,
        "best_number": best.number,
        "best_value": best.value,
        "best_params": best.params,
    }


# ------------------------------------------------------------------------------------------ pages
def loopback_only(context) -> None:
    def handle(route):
        host = urlparse(route.request.url).hostname
        if host in ("127.0.0.1", "localhost", None) or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            route.abort()

    context.route("**/*", handle)


def wait_ready(page, name: str, js: str, arg=None, timeout: float = 120_000) -> None:
    """Wait until the JS predicate holds (the data is drawn); on timeout keep what the page showed."""
    try:
        page.wait_for_function(js, arg=arg, timeout=timeout)
    except Exception:
        dump = Path(tempfile.gettempdir()) / f"screenshots-{name}-not-ready.png"
        page.screenshot(path=str(dump))
        log(f"{name}: the page never got ready ({js[:80]}...); what it showed: {dump}")
        raise


def settle(page, ms: int = 1500) -> None:
    """Let transitions and Plotly's relayout finish once the data is there."""
    page.wait_for_timeout(ms)


def shoot_optuna(browser, base: str, n_trials: int, out: Path) -> list[Path]:
    ctx = browser.new_context(
        viewport={"width": WIDTH, "height": 1240},
        device_scale_factor=1,
        locale="en-US",
        timezone_id="UTC",
        color_scheme="light",
    )
    loopback_only(ctx)
    page = ctx.new_page()
    studies = http_json(f"{base}/api/studies")["study_summaries"]
    study_id = next(s["study_id"] for s in studies if s["study_name"] == STUDY)
    shots = []

    # 1. Study page: history (a point per trial), hyperparameter importance (computed server-side, arrives
    #    later), timeline.
    page.goto(f"{base}/dashboard/studies/{study_id}")
    wait_ready(
        page,
        "optuna-dashboard",
        "n => { const p = document.querySelector('.js-plotly-plot');"
        " return p && p.querySelectorAll('.scatterlayer .point').length >= n; }",
        arg=n_trials,
    )
    wait_ready(
        page,
        "optuna-dashboard",
        "() => [...document.querySelectorAll('.js-plotly-plot')].some(p => p.querySelector('.barlayer .point'))",
    )
    settle(page)
    shots.append(out / "optuna-dashboard.png")
    page.screenshot(path=str(shots[-1]))

    # 2. Further down the same page: the best trial and the intermediate values (the running objective each
    #    trial reported to the pruner, per training step), clipped to those two cards.
    wait_ready(
        page,
        "optuna-intermediate",
        "n => [...document.querySelectorAll('.MuiCard-root')].some(c => c.textContent.includes("
        "'Intermediate values') && c.querySelectorAll('.scatterlayer .trace').length >= n)",
        arg=n_trials,
    )
    box = page.evaluate(
        """() => {
             const cards = [...document.querySelectorAll('.MuiCard-root')]
               .filter(c => /^(Best Trial|Intermediate values)/.test(c.textContent.trim()));
             const r = cards.map(c => c.getBoundingClientRect());
             const x = Math.min(...r.map(b => b.left)), y = Math.min(...r.map(b => b.top)) + window.scrollY;
             const w = Math.max(...r.map(b => b.right)) - x, h = Math.max(...r.map(b => b.bottom)) + window.scrollY - y;
             return {n: cards.length, x, y, w, h};
           }"""
    )
    if box["n"] != 2:
        raise RuntimeError(f"optuna-dashboard: expected the 'Best Trial' and 'Intermediate values' cards, found {box}")
    pad = 8
    clip = {
        "x": max(box["x"] - pad, 0),
        "y": max(box["y"] - pad, 0),
        "width": box["w"] + 2 * pad,
        "height": box["h"] + 2 * pad,
    }
    settle(page, 500)
    shots.append(out / "optuna-intermediate.png")
    page.screenshot(path=str(shots[-1]), full_page=True, clip=clip)
    ctx.close()
    return shots


def mlflow_ids(base: str) -> tuple[str, str, list[str]]:
    exp = http_json(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name={STUDY}")["experiment"]
    exp_id = exp["experiment_id"]
    runs = http_json(f"{base}/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id], "max_results": 1000})["runs"]
    parent = next(r for r in runs if r["info"]["run_name"].startswith("sweep-"))
    children = [
        r["info"]["run_id"]
        for r in runs
        if any(
            t["key"] == "mlflow.parentRunId" and t["value"] == parent["info"]["run_id"]
            for t in r["data"].get("tags", [])
        )
    ]
    return exp_id, parent["info"]["run_id"], children


def mlflow_ui_state(parent_id: str, **extra) -> dict:
    """The runs page's persisted UI state (mlflow 3.17.2), as the page itself stores it in localStorage."""
    state = {
        "searchFilter": "",
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": [
            "metrics.`objective`",
            "metrics.`reward`",
            "metrics.`kl`",
            "metrics.`entropy`",
            "params.`algo.learning_rate`",
            "params.`algo.beta`",
            "tags.`sweeprl.state`",
        ],
        "columnOrder": [],
        "columnWidths": {},
        "runsExpanded": {parent_id: True},
        "runsPinned": [],
        "runsHidden": [],
        "runsVisibilityMap": {},
        "runsHiddenMode": "SHOW_ALL",
        "viewMaximized": False,
        "runListHidden": False,
        "isAccordionReordered": False,
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "groupBy": None,
        "groupsExpanded": {},
        "autoRefreshEnabled": False,
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
    }
    state.update(extra)
    return state


def mlflow_context(browser, height: int, exp_id: str, state: dict):
    ctx = browser.new_context(
        viewport={"width": WIDTH, "height": height},
        device_scale_factor=1,
        locale="en-US",
        timezone_id="UTC",
        color_scheme="light",
    )
    loopback_only(ctx)
    storage = {
        f'MLflowLocalStorage-1.1-ExperimentPage-["{exp_id}"]-ReactComponentState': json.dumps(state),
        "mlflow.assistant.panelOpen_v1": "false",  # the "MLflow Assistant" side panel would cover the table
        "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
        "_mlflow_dark_mode_toggle_enabled": "false",
        "databricks-dark-mode-pref": "light",
    }
    ctx.add_init_script(
        "(() => { const s = %s; for (const [k, v] of Object.entries(s)) localStorage.setItem(k, v); })()"
        % json.dumps(storage)
    )
    return ctx


def collapse_sidebar(page) -> None:
    """Collapse MLflow's navigation sidebar (its own toggle button) to give the table and charts the width."""
    toggle = page.get_by_role("button", name="Toggle sidebar")
    if toggle.count():
        toggle.first.click()


def shoot_mlflow(browser, base: str, out: Path) -> list[Path]:
    exp_id, parent_id, children = mlflow_ids(base)
    runs_url = f"{base}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
    shots = []

    # 3. Runs table: the parent expanded to its nested trial runs, with metric, param and tag columns. (Sorted
    #    by creation time: sorting by a metric would list the runs flat, without the nesting.)
    #    The learning-rate column is widened so that values such as 3.2e-05 show their exponent, and the
    #    navigation sidebar is collapsed to make room for it.
    #    (MLflow applies columnWidths only together with a columnOrder.)
    order = [
        "attributes.`Run Name`",
        "runDateAndNestInfo",
        "duration",
        "metrics.`objective`",
        "metrics.`reward`",
        "metrics.`kl`",
        "metrics.`entropy`",
        "params.`algo.learning_rate`",
        "params.`algo.beta`",
        "tags.`sweeprl.state`",
    ]
    widths = {"params.`algo.learning_rate`": 185, "params.`algo.beta`": 125}
    ctx = mlflow_context(browser, 900, exp_id, mlflow_ui_state(parent_id, columnOrder=order, columnWidths=widths))
    page = ctx.new_page()
    page.goto(runs_url)
    wait_ready(
        page,
        "mlflow-ui",
        "n => document.querySelectorAll('.ag-center-cols-container [role=row]').length >= n",
        arg=1 + len(children),
    )
    collapse_sidebar(page)
    settle(page)
    shots.append(out / "mlflow-ui.png")
    page.screenshot(path=str(shots[-1]))
    ctx.close()

    # 4. Chart view: reward, KL and entropy per training step (one line per trial run, colours as in the run
    #    list on the left) and parallel coordinates learning rate / beta / objective, in a section of 2 x 2
    #    cards. The parent run (no per-step metrics) is hidden from the charts (eye icon in the run list).
    section = "sweeprl-curves"

    def card(n: int, kind: str, key: str) -> dict:
        c = {
            "uuid": f"sweeprl-{n}",
            "type": kind,
            "runsCountToCompare": 100,
            "metricSectionId": section,
            "deleted": False,
            "isGenerated": False,
            "displayName": key,
            "metricKey": key,
        }
        if kind == "LINE":
            c.update(
                {
                    "lineSmoothness": 0,
                    "xAxisScaleType": "linear",
                    "scaleType": "linear",
                    "range": {},
                    "xAxisKey": "step",
                    "selectedXAxisMetricKey": "",
                    "yAxisKey": "metric",
                    "yAxisExpressions": [],
                    "ignoreOutliers": False,
                    "selectedMetricKeys": [key],
                    "useGlobalXaxisKey": True,
                    "useGlobalLineSmoothing": True,
                }
            )
        return c

    parallel = {
        "uuid": "sweeprl-3",
        "type": "PARALLEL",
        "runsCountToCompare": 100,
        "metricSectionId": section,
        "deleted": False,
        "isGenerated": False,
        "selectedParams": ["algo.learning_rate", "algo.beta"],
        "selectedMetrics": ["objective"],
        "showAllRuns": True,
    }
    charts = [card(0, "LINE", "reward"), card(1, "LINE", "kl"), card(2, "LINE", "entropy"), parallel]
    sections = [
        {
            "uuid": section,
            "name": "Training curves per trial",
            "display": True,
            "isReordered": False,
            "deleted": False,
            "isGenerated": False,
            "columns": 2,
            "cardHeight": 330,
        }
    ]
    # isAccordionReordered keeps this section first: MLflow adds a generated chart for every other metric in
    # sections it would otherwise sort by name; with it they are appended below (out of the picture).
    ctx = mlflow_context(
        browser,
        1060,
        exp_id,
        mlflow_ui_state(
            parent_id,
            runsHidden=[parent_id],
            runsVisibilityMap={parent_id: False},
            compareRunCharts=charts,
            compareRunSections=sections,
            isAccordionReordered=True,
        ),
    )
    page = ctx.new_page()
    page.goto(f"{base}/#/experiments/{exp_id}/runs?workflowType=machine_learning&compareRunsMode=CHART")
    wait_ready(
        page,
        "mlflow-charts",
        "n => [...document.querySelectorAll('.js-plotly-plot')].filter("
        "p => p.querySelectorAll('.scatterlayer .trace').length >= n).length >= 3",
        arg=len(children) - 1,
    )
    collapse_sidebar(page)
    settle(page, 2500)
    shots.append(out / "mlflow-charts.png")
    page.screenshot(path=str(shots[-1]))
    ctx.close()
    return shots


def shoot_report(browser, workdir: Path, out: Path) -> list[Path]:
    """The sweep report at a 1280 px window: the top of the page with the trials table (report.png)."""
    report = workdir / "multirun" / STUDY / "report.html"
    subprocess.run(
        [sys.executable, "-m", "sweeprl", "report", str(report.parent), "--no-mlflow"],
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    loopback_only(context)
    try:
        page = context.new_page()
        page.goto(report.as_uri())
        wait_ready(page, "report", "() => document.querySelectorAll('#trials tbody tr').length > 0")
        path = out / "report.png"
        page.screenshot(path=str(path))
        return [path]
    finally:
        context.close()


def optimize_png(path: Path) -> None:
    """Shrink a screenshot: UI pages have few colours, so a 256-colour palette keeps them sharp."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        pal = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    pal.save(path, optimize=True)


# ------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "img"), help="where the PNGs go (default: docs/img)")
    ap.add_argument("--workdir", help="reuse (or run the sweep in) this directory instead of a temporary one")
    ap.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium binary (default: Debian's)")
    ap.add_argument("--only", choices=["optuna", "mlflow", "report"], help="take only one kind of screenshot")
    ap.add_argument("--no-optimize", action="store_true", help="keep Chromium's PNGs as they are")
    args = ap.parse_args(argv)

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit("screenshots: playwright is missing: pip install -c constraints.txt -e '.[docs]'")
    if not Path(args.chromium).exists():
        sys.exit(f"screenshots: no Chromium at {args.chromium} (apt-get install chromium)")

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="sweeprl-screenshots-"))
    workdir = Path(args.workdir).resolve() if args.workdir else tmp / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    servers = Servers(tmp)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        if have_sweep(workdir):
            log(f"reusing the sweep in {workdir}")
        else:
            run_sweep(workdir, servers)
        optuna_db = workdir / "multirun" / STUDY / "optuna.db"
        summary = study_summary(f"sqlite:///{optuna_db}")
        log(
            f"study {STUDY}: {summary['trials']} trials {summary['states']}, best #{summary['best_number']} "
            f"objective {summary['best_value']:.4g} {summary['best_params']}"
        )

        od_port, ml_port = free_port(), free_port()
        od = servers.start(
            "optuna-dashboard",
            [venv_tool("optuna-dashboard"), f"sqlite:///{optuna_db}", "--host", "127.0.0.1", "--port", str(od_port)],
            workdir,
        )
        ml = servers.start(
            "mlflow-ui",
            [
                venv_tool("mlflow"),
                "ui",
                "--backend-store-uri",
                f"sqlite:///{workdir / 'mlflow.db'}",
                "--host",
                "127.0.0.1",
                "--port",
                str(ml_port),
            ],
            workdir,
        )
        od_base, ml_base = f"http://127.0.0.1:{od_port}", f"http://127.0.0.1:{ml_port}"
        wait_http(f"{od_base}/api/studies", od, servers, "optuna-dashboard")
        log(f"optuna-dashboard answers at {od_base}")
        wait_http(f"{ml_base}/health", ml, servers, "mlflow-ui")
        log(f"mlflow ui answers at {ml_base}")

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS)
            try:
                shots = []
                if args.only in (None, "optuna"):
                    shots += shoot_optuna(browser, od_base, summary["plotted"], out)
                if args.only in (None, "mlflow"):
                    shots += shoot_mlflow(browser, ml_base, out)
                if args.only in (None, "report"):
                    shots += shoot_report(browser, workdir, out)
            finally:
                browser.close()
        for shot in shots:
            if not args.no_optimize:
                optimize_png(shot)
            log(f"wrote {shot} ({shot.stat().st_size / 1024:.0f} KB)")
        return 0
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        servers.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
