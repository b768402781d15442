"""Headless Chromium on what a reader opens: the MLflow UI served from the smoke run's ingested runs,
and the smoke run's claims report. The rendered DOM must show every paper's MLflow experiment, every
experiment's run and every claim id; screenshots go to results/tests/screenshots/ (CI artifacts)."""

import os
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
from repro import layout
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


@pytest.fixture(scope="module")
def mlflow_ui(smoke):
    """`mlflow ui` on the smoke run's store (the DAG's SQLite database), in its own process group."""
    port = _free_port()
    uri = f"sqlite:///{smoke / 'results' / 'mlflow.db'}"
    mlflow = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(mlflow), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"mlflow ui exited: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(1)
        else:
            pytest.fail("mlflow ui did not answer within 120 s")
        yield url, uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_mlflow_ui_shows_every_experiment_and_run(mlflow_ui):
    from mlflow.tracking import MlflowClient

    url, uri = mlflow_ui
    client = MlflowClient(uri)
    papers = sorted({layout.split(e)[0] for e in layout.experiment_names()})
    listing = browser.dump_dom(f"{url}/#/experiments", settle_ms=SETTLE_MS)
    browser.screenshot(f"{url}/#/experiments", SHOTS / "mlflow_experiments.png", settle_ms=SETTLE_MS)
    missing = [p for p in papers if f"repro/{p}" not in listing]
    assert not missing, f"the MLflow UI's experiment list lacks {missing}"
    for paper in papers:
        exp = client.get_experiment_by_name(f"repro/{paper}")
        page = f"{url}/#/experiments/{exp.experiment_id}/runs"  # the runs table (the bare page: a GenAI overview)
        dom = browser.dump_dom(page, settle_ms=SETTLE_MS)
        names = [layout.split(e)[1] for e in layout.experiment_names() if layout.split(e)[0] == paper]
        missing = [n for n in names if f">{n}<" not in dom]
        if missing:
            browser.screenshot(page, SHOTS / f"mlflow_{paper}.png", settle_ms=SETTLE_MS)
        assert not missing, f"the MLflow UI's runs of repro/{paper} lack {missing}"
    browser.screenshot(page, SHOTS / f"mlflow_{paper}.png", settle_ms=SETTLE_MS)


def test_claims_report_shows_every_claim_and_experiment(smoke):
    from repro.report.claims import load_ledger

    report = smoke / "results" / "claims" / "report.html"
    dom = browser.dump_dom(report)
    browser.screenshot(report, SHOTS / "claims_report.png")
    missing = [c["id"] for c in load_ledger(REPO / "config" / "claims") if c["id"] not in dom]
    assert not missing, f"the rendered report lacks claims {missing}"
    missing = [e for e in layout.experiment_names() if e not in dom]
    assert not missing, f"the rendered report lacks experiments {missing}"
