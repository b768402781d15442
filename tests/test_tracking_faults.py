"""Ingestion under faults (issue 19, items 1 and 2): N ingestions at once log every record exactly
once, on a new SQLite store, on one with tables but no runs and (with REPRO_TEST_MLFLOW_URI) on a
tracking server; an ingestion killed with SIGKILL mid-run is repaired by the next one."""

import os
import subprocess
import sys
import uuid

import pytest

from repro import records
from repro.pipeline import tracking

from conftest import REPO, mlflow_server_login, service_unavailable

N = 3  # ingestions at once: they race for the store's creation; each costs an MLflow start-up


def _records(root, paper, n=6):
    for i in range(n):
        rec = dict(experiment=f"e{i}", paper=paper, scale="smoke", status="ok", params={"a": i},
                   metrics={"m": float(i)}, provenance={"config_hash": "x", "hostname": "h", "commit": "c"},
                   started=f"2026-11-30T00:00:0{i}+00:00")
        out = root / paper / f"e{i}"
        records.write(out, rec)
        (out / "epochs.csv").write_text("epoch,top1\n1,50.0\n2,60.0\n")


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("REPRO_KILL_AT", None)
    return {**env, **extra}


def _ingest_cmd(results, uri, artifacts, out=None):
    cmd = [sys.executable, "-m", "repro.pipeline.tracking", "--results", str(results), "--uri", uri,
           "--artifacts", str(artifacts)]
    return cmd + (["--out", str(out)] if out else [])


def _runs(uri, paper):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(f"repro/{paper}")
    return [] if exp is None else list(client.search_runs([exp.experiment_id], max_results=1000))


def _assert_exactly_once(results, uri, paper):
    runs = _runs(uri, paper)
    want = sorted(records.read(p)["record_id"] for p in records.find(results))
    assert sorted(r.data.tags[tracking.TAG] for r in runs) == want  # each record once, none twice
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    for r in runs:  # and each complete: metrics, curves, artifacts, finished
        assert r.info.status == "FINISHED" and r.data.tags.get(tracking.DONE)
        assert set(r.data.metrics) >= {"m", "epoch.top1"}
        assert [a.path for a in client.list_artifacts(r.info.run_id)] == ["run"]


def _stores(tmp_path):
    yield "sqlite-new", f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    yield "sqlite-tables", f"sqlite:///{tmp_path / 'tables' / 'mlflow.db'}"
    yield "server", os.environ.get("REPRO_TEST_MLFLOW_URI")


@pytest.mark.parametrize("store", ["sqlite-new", "sqlite-tables", "server"])
def test_parallel_ingestions_log_each_record_once(tmp_path, store, monkeypatch):
    uri = dict(_stores(tmp_path))[store]
    if uri is None:
        service_unavailable("REPRO_TEST_MLFLOW_URI is not set (an MLflow tracking server to test against)")
    if store == "server":  # its login (tools/mlflow_server.sh's basic-auth server), here and in the ingestions
        for key, value in mlflow_server_login().items():
            monkeypatch.setenv(key, value)
    paper = f"p{uuid.uuid4().hex[:8]}"  # a server is shared: this test's own experiment
    results = tmp_path / "results"
    _records(results, paper)
    if store == "sqlite-tables":  # tables made, no runs: the search-then-create race
        from mlflow.tracking import MlflowClient

        (tmp_path / "tables").mkdir()
        MlflowClient(uri).search_experiments()
    procs = [subprocess.Popen(_ingest_cmd(results, uri, tmp_path / "artifacts"), env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(N)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * N, "\n".join(outs)
    _assert_exactly_once(results, uri, paper)
    # and the store still opens and re-ingests to nothing new
    again = tracking.ingest(results, uri, tmp_path / "artifacts")
    assert not again["logged"] and len(again["already"]) == 6


@pytest.mark.parametrize("point", ["tracking.run_created", "tracking.logged"])
def test_killed_ingestion_is_repaired_on_rerun(tmp_path, point):
    results = tmp_path / "results"
    _records(results, "p", n=3)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    killed = subprocess.run(_ingest_cmd(results, uri, tmp_path / "artifacts"), env=_env(REPRO_KILL_AT=point),
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    left = _runs(uri, "p")
    assert len(left) == 1 and left[0].info.status == "RUNNING"  # what kill -9 leaves: a broken run
    rerun = subprocess.run(_ingest_cmd(results, uri, tmp_path / "artifacts"), env=_env(),
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert "3 runs logged, 0 already there, 1 incomplete leftover(s) redone" in rerun.stdout
    _assert_exactly_once(results, uri, "p")


def test_sqlite_path():
    assert tracking.sqlite_path("sqlite:///results/mlflow.db").as_posix() == "results/mlflow.db"
    assert tracking.sqlite_path("sqlite:////abs/m.db").as_posix() == "/abs/m.db"
    assert tracking.sqlite_path("http://127.0.0.1:5000") is None
