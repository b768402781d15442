"""Headless Chromium on what a reader opens: the MLflow UI that `make mlflow-ui` serves from the smoke
run's ingested runs (with a rerun added), and the smoke run's claims report. The rendered DOM must
show every paper's MLflow experiment with its description, in the model-training view, every
experiment's run by its name, a skipped run's reason, no superseded run, and every claim id;
screenshots go to results/tests/screenshots/ (CI artifacts). One browser goes through the UI's pages, as
a reader's does (browser.Browser): the address `make mlflow-ui` prints sets the UI's workflow in its
profile, and each experiment's page is opened from the loaded app, as a click in the list opens it."""

import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import real_services
from conftest import REPO
from repro import layout, records
from repro.report.claims import load_ledger
from repro.pipeline import mlflow_app, tracking
from repro.report import browser

SHOTS = REPO / "results" / "tests" / "screenshots"
SETTLE_MS = 15000  # virtual time for the MLflow UI's scripts and fetches (without it: a spinner)


@pytest.fixture(scope="module")
def chromium():
    if browser.chromium() is None:
        real_services.absent("chromium", "no chromium on PATH (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def smoke(chromium, smoke_run):
    work, proc, _ = smoke_run
    assert proc.returncode == 0, "the local smoke run failed: " + proc.stderr[-2000:]
    return work


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RERUN = "rerun_check"  # an experiment of the first paper run twice from one results folder


def _rerun(results: Path, uri: str) -> tuple[str, str, str]:
    """Log a record of RERUN from ``results``, then its rerun (at paper scale): the older run is
    superseded. (paper, the older run's id, the rerun's id)."""
    paper = sorted({layout.split(e)[0] for e in layout.experiment_names()})[0]
    ids = []
    for scale, started in (("smoke", "2026-11-30T00:00:00+00:00"), ("paper", "2026-12-01T00:00:00+00:00")):
        rec = dict(experiment=RERUN, paper=paper, scale=scale, status="ok", params={"a": 1}, metrics={"m": 1.0},
                   started=started, provenance={"config_hash": "x", "hostname": socket.gethostname(), "commit": "c"})
        rid = records.read(records.write(results / paper / RERUN, rec))["record_id"]
        summary = tracking.ingest(results, uri, results.parent / "artifacts")
        ids.append(summary["runs"][rid]["run_id"])
    assert summary["superseded"] == ids[:1]
    return paper, *ids


@pytest.fixture(scope="module")
def mlflow_ui(smoke, tmp_path_factory):
    """`make mlflow-ui`'s command (python -m repro.pipeline.mlflow_app) on a copy of the smoke run's
    store, to which a rerun was added; the URL it prints; a browser profile that keeps what the pages
    store, as a reader's browser does."""
    tmp = tmp_path_factory.mktemp("mlflow_ui")
    shutil.copy(smoke / "results" / "mlflow.db", tmp / "mlflow.db")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    rerun = _rerun(tmp / "results", uri)
    log = tmp / "ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "repro.pipeline.mlflow_app", "--uri", uri,
                                 "--port", str(_free_port())], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        for _ in range(240):
            if (said := re.search(r"open (http://\S+)", log.read_text())):
                break
            if proc.poll() is not None:
                pytest.fail(f"the MLflow UI exited: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        else:
            pytest.fail(f"the MLflow UI printed no URL within 120 s: {log.read_text()[-2000:]}")
        yield said.group(1), uri, tmp / "profile", rerun
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: it stops the server it started
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise


def test_mlflow_ui_opens_the_repro_experiments_in_the_model_training_view(mlflow_ui):
    """What `make mlflow-ui` prints opens the repro experiments, each described from its paper page,
    in MLflow's model-training (classic) view, where an experiment opens on its runs table; runs are
    named for experiment and scale, a skipped run is FINISHED with a `skipped` tag and its reason, a
    rerun's older run is hidden; the server keeps MLflow's telemetry off."""
    from mlflow.tracking import MlflowClient

    url, uri, profile, (rerun_paper, old_run, new_run) = mlflow_ui
    assert url.endswith(mlflow_app.PAGE), url
    base = url.removesuffix(mlflow_app.PAGE)
    client = MlflowClient(uri)
    papers = sorted({layout.split(e)[0] for e in layout.experiment_names()})
    with browser.Browser(profile=profile) as reader:  # one browser, from page to page, as a reader's
        reader.open(url, settle_ms=SETTLE_MS)
        listing = reader.dom()
        reader.screenshot(SHOTS / "mlflow_experiments.png")
        # the model-training workflow's navigation (the GenAI one has Prompts and AI Gateway instead)
        assert "Model registry" in listing and "AI Gateway" not in listing, "the UI opened in its GenAI view"
        missing = [p for p in papers if f"repro/{p}" not in listing]
        assert not missing, f"the MLflow UI's experiment list lacks {missing}"
        for paper in papers:  # each described: its page's title, its claim ids, the link to its page
            title = tracking.paper_description(paper).splitlines()[0]
            ids = [c["id"] for c in load_ledger(REPO / "config" / "claims" / f"{paper}.yaml")]
            assert html.escape(title, quote=False) in listing, f"repro/{paper}'s description lacks its title {title!r}"
            assert all(f"`{i}`" in listing for i in ids), f"repro/{paper}'s description lacks claim ids {ids}"
            assert f"({mlflow_app.PAPERS}/{paper}.md)" in listing
        names = {p: [tracking.run_name({"experiment": layout.split(e)[1], "scale": "smoke"})
                     for e in layout.experiment_names() if layout.split(e)[0] == p] for p in papers}
        names[rerun_paper].append(f"{RERUN} (paper)")
        for paper in papers:
            exp = client.get_experiment_by_name(f"repro/{paper}")
            reader.open(f"{base}/#/experiments/{exp.experiment_id}", settle_ms=SETTLE_MS)  # where a click in the list leads
            dom = reader.dom()
            missing = [n for n in names[paper] if f">{html.escape(n)}<" not in dom]
            if paper == rerun_paper or missing:
                reader.screenshot(SHOTS / f"mlflow_{paper}.png")
            assert ">Run Name<" in dom and "Model registry" in dom and "Observability" not in dom, \
                f"repro/{paper} did not open on its runs table"
            assert not missing, f"the MLflow UI's runs of repro/{paper} lack {missing}"
            if paper == rerun_paper:  # the rerun's older run: hidden from the runs table, its rerun shown
                assert f"runs/{new_run}" in dom and f"runs/{old_run}" not in dom
                assert f">{RERUN} (smoke)<" not in dom
        # a skipped run (the smoke run skips what needs a GPU): FINISHED, tagged `skipped` with the reason
        skipped = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                     filter_string="tags.skipped != ''", max_results=1)
        assert skipped, "the smoke run logged no skipped run"
        run = skipped[0]
        reader.open(f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}", settle_ms=SETTLE_MS)
        dom = reader.dom()
    assert run.info.status == "FINISHED" and "Finished" in dom
    assert ">skipped<" in dom and html.escape(run.data.tags["skipped"][:60], quote=False) in dom, \
        "the skipped run's page lacks its `skipped` tag and reason"
    # telemetry: the server drops what the UI would send
    req = urllib.request.Request(f"{base}/ajax-api/3.0/mlflow/ui-telemetry", data=b'{"records": []}',
                                 headers={"Content-Type": "application/json"}, method="POST")
    assert json.load(urllib.request.urlopen(req, timeout=30)) == {"status": "disabled"}


def test_claims_report_shows_every_claim_and_experiment(smoke):
    report = smoke / "results" / "claims" / "report.html"
    dom = browser.dump_dom(report)
    browser.screenshot(report, SHOTS / "claims_report.png")
    missing = [c["id"] for c in load_ledger(REPO / "config" / "claims") if c["id"] not in dom]
    assert not missing, f"the rendered report lacks claims {missing}"
    missing = [e for e in layout.experiment_names() if e not in dom]
    assert not missing, f"the rendered report lacks experiments {missing}"
