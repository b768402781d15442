"""The one MLflow writer: ingest records, never twice; a real tracking server finds them."""

import json
import socket
import subprocess
import sys
import time

import pytest

from repro import records
from repro.pipeline import tracking


def _records(root, n=2):
    for i in range(n):
        rec = dict(experiment=f"e{i}", paper="p", scale="smoke", status="ok", params={"a": {"b": i}},
                   metrics={"m": float(i)}, provenance={"config_hash": "x", "hostname": "h", "commit": "c",
                                                        "code": {"src/repro/x.py": "0123456789abcdef"}},
                   started=f"2026-11-30T00:00:0{i}+00:00")
        out = root / "p" / f"e{i}"
        records.write(out, rec)
        (out / "epochs.csv").write_text("epoch,top1\n1,50.0\n2,60.0\n")


def test_reingest_adds_nothing(tmp_path):
    results = tmp_path / "results"
    _records(results)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = tracking.ingest(results, uri, tmp_path / "artifacts")
    second = tracking.ingest(results, uri, tmp_path / "artifacts")
    assert len(first["logged"]) == 2 and not first["already"]
    assert not second["logged"] and len(second["already"]) == 2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("repro/p")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2
    run = [r for r in runs if r.data.params.get("a.b") == "1"][0]
    assert run.data.metrics["m"] == 1.0
    assert [m.value for m in client.get_metric_history(run.info.run_id, "epoch.top1")] == [50.0, 60.0]
    assert json.loads(run.data.tags["prov.code"]) == {"src/repro/x.py": "0123456789abcdef"}  # one tag
    assert run.data.tags["prov.commit"] == "c" and not any(k.startswith("prov.code.") for k in run.data.tags)
    # the summary maps each record id to its run, on the first ingestion and on every later one
    by_run = {r.info.run_id: r.data.tags[tracking.TAG] for r in runs}
    for summary in (first, second):
        assert {rid: run["run_id"] for rid, run in summary["runs"].items()} == {v: k for k, v in by_run.items()}
        assert {run["experiment_id"] for run in summary["runs"].values()} == {exp.experiment_id}


def test_figures_are_logged_as_artifacts(tmp_path):
    """The experiment's figure (PNG and PDF, where the figure rule drew it) is an artifact of its run,
    beside the record folder; an experiment without a figure gets none."""
    results = tmp_path / "results"
    _records(results)
    figures = results / "figures" / "p"
    figures.mkdir(parents=True)
    (figures / "e0.png").write_bytes(b"\x89PNG fake")
    (figures / "e0.pdf").write_bytes(b"%PDF fake")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    summary = tracking.ingest(results, uri, tmp_path / "artifacts")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    by_exp = {rid: run["run_id"] for rid, run in summary["runs"].items()}
    runs = {client.get_run(run_id).data.tags["repro.experiment"]: run_id for run_id in by_exp.values()}
    assert {a.path for a in client.list_artifacts(runs["e0"], "figure")} == {"figure/e0.png", "figure/e0.pdf"}
    assert not client.list_artifacts(runs["e1"], "figure")
    assert {a.path for a in client.list_artifacts(runs["e1"])} == {"run"}
    # the run is complete (its DONE tag set after the figures), so re-ingesting adds nothing
    assert not tracking.ingest(results, uri, tmp_path / "artifacts")["logged"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_real_tracking_server(tmp_path):
    results = tmp_path / "results"
    _records(results, n=1)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("mlflow server did not start")
                time.sleep(0.5)
        time.sleep(1.0)
        assert len(tracking.ingest(results, uri)["logged"]) == 1
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        runs = client.search_runs([client.get_experiment_by_name("repro/p").experiment_id])
        assert [r.data.tags[tracking.TAG] for r in runs] == [records.read(results / "p" / "e0")["record_id"]]
        assert any(a.path == "run" for a in client.list_artifacts(runs[0].info.run_id))
    finally:
        server.terminate()
        server.wait(timeout=30)
