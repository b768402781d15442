"""Ingestion against a real team server: `mlflow server` on PostgreSQL (tools/mlflow_server.sh).

The server's URI comes from REPRO_TEST_MLFLOW_URI (`.ci/run` starts the server and sets it). Each
test logs under experiments of its own (a fresh paper name), so runs from other tests or earlier
sessions on the same server do not count.
"""

import json
import os
import subprocess
import sys
import urllib.request
import uuid

import pytest

import real_services
from repro import records

URI = os.environ.get("REPRO_TEST_MLFLOW_URI", "")


@pytest.fixture
def server():
    if not URI:
        real_services.absent("mlflow", "REPRO_TEST_MLFLOW_URI is not set (tools/mlflow_server.sh start)")
    try:
        urllib.request.urlopen(f"{URI}/health", timeout=10)
    except OSError as exc:
        real_services.absent("mlflow", f"no server answers at {URI}: {exc}")
    return URI


def _results(root, paper):
    """Two records of ``paper`` with per-epoch tables, and a drawn figure for the first."""
    for i in range(2):
        rec = dict(experiment=f"e{i}", paper=paper, scale="smoke", status="ok", params={"lr": 0.1 * (i + 1)},
                   metrics={"top1": 50.0 + i}, provenance={"config_hash": "x", "hostname": "h", "commit": "c"},
                   started=f"2026-12-01T00:00:0{i}+00:00")
        out = root / paper / f"e{i}"
        records.write(out, rec)
        (out / "epochs.csv").write_text("epoch,top1\n1,40.0\n2,50.0\n")
    figures = root / "figures" / paper
    figures.mkdir(parents=True)
    (figures / "e0.png").write_bytes(b"\x89PNG\r\n\x1a\n" + uuid.uuid4().bytes)


def _ingest(results, uri, out):
    """The mlflow rule's command."""
    proc = subprocess.run([sys.executable, "-m", "repro.pipeline.tracking", "--results", str(results), "--uri", uri,
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_ingestion_logs_runs_params_metrics_and_figures_once(server, tmp_path):
    from mlflow.tracking import MlflowClient

    paper = f"t{uuid.uuid4().hex[:10]}"
    results = tmp_path / "results"
    _results(results, paper)
    first = _ingest(results, server, tmp_path / "first.json")
    assert len(first["logged"]) == 2 and not first["already"]
    again = _ingest(results, server, tmp_path / "again.json")
    assert not again["logged"] and sorted(again["already"]) == sorted(first["logged"])
    assert again["runs"] == first["runs"]

    client = MlflowClient(server)
    exp = client.get_experiment_by_name(f"repro/{paper}")
    runs = {r.data.tags["repro.experiment"]: r for r in client.search_runs([exp.experiment_id])}
    assert sorted(runs) == ["e0", "e1"]
    for i in range(2):
        run = runs[f"e{i}"]
        assert run.info.status == "FINISHED"
        assert float(run.data.params["lr"]) == pytest.approx(0.1 * (i + 1))
        assert run.data.metrics["top1"] == 50.0 + i
        assert [m.value for m in client.get_metric_history(run.info.run_id, "epoch.top1")] == [40.0, 50.0]
        logged = {a.path for a in client.list_artifacts(run.info.run_id, "run")}
        assert {"run/record.json", "run/epochs.csv"} <= logged
    # the figure went to the server's artifact store, byte for byte
    figure = {a.path for a in client.list_artifacts(runs["e0"].info.run_id, "figure")}
    assert figure == {"figure/e0.png"}
    assert not client.list_artifacts(runs["e1"].info.run_id, "figure")
    local = client.download_artifacts(runs["e0"].info.run_id, "figure/e0.png", str(tmp_path / "dl"))
    assert open(local, "rb").read() == (results / "figures" / paper / "e0.png").read_bytes()


def test_server_keeps_runs_in_postgresql(server, tmp_path):
    """The runs lie in the PostgreSQL cluster behind the server (read there with psycopg2), not in a
    file or SQLite store. Needs the server's folder (REPRO_TEST_MLFLOW_DIR, which `.ci/run` sets)."""
    from pathlib import Path

    folder = os.environ.get("REPRO_TEST_MLFLOW_DIR")
    if not folder:
        real_services.absent("mlflow", "REPRO_TEST_MLFLOW_DIR is not set: the server's PostgreSQL is unknown")
    import psycopg2

    paper = f"t{uuid.uuid4().hex[:10]}"
    _results(tmp_path / "results", paper)
    _ingest(tmp_path / "results", server, tmp_path / "summary.json")
    port = int((Path(folder) / "pg_port").read_text())
    with psycopg2.connect(host="127.0.0.1", port=port, user="repro", dbname="mlflow") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs JOIN experiments USING (experiment_id) WHERE experiments.name = %s",
                    (f"repro/{paper}",))
        assert cur.fetchone()[0] == 2
    assert not list(Path(folder).rglob("*.db"))
