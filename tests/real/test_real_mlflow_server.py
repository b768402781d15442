"""Ingestion against a real team server: `mlflow server` on PostgreSQL behind MLflow's basic-auth
login (tools/mlflow_server.sh).

The server's URI comes from REPRO_TEST_MLFLOW_URI and its folder (PostgreSQL's port, the
credentials file) from REPRO_TEST_MLFLOW_DIR; `.ci/run` starts the server and sets both. Each
test logs under experiments of its own (a fresh paper name), so runs from other tests or earlier
sessions on the same server do not count. The tests' own clients log in with the credentials file
(MLFLOW_TRACKING_USERNAME/PASSWORD, set per test); the ingestion is given the file, as the workflow's
`mlflow_credentials` gives it.
"""

import base64
import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

import real_services
from repro import records
from repro.pipeline import mlflow_app, tracking

URI = os.environ.get("REPRO_TEST_MLFLOW_URI", "")
LOGIN_KEYS = tracking.CREDENTIAL_KEYS


@pytest.fixture
def server():
    if not URI:
        real_services.absent("mlflow", "REPRO_TEST_MLFLOW_URI is not set (tools/mlflow_server.sh start)")
    try:
        urllib.request.urlopen(f"{URI}/health", timeout=10)
    except OSError as exc:
        real_services.absent("mlflow", f"no server answers at {URI}: {exc}")
    return URI


@pytest.fixture
def credentials(server, monkeypatch) -> Path:
    """The server's credentials file; the test's own MLflow clients log in with it."""
    folder = os.environ.get("REPRO_TEST_MLFLOW_DIR")
    if not folder:
        real_services.absent("mlflow", "REPRO_TEST_MLFLOW_DIR is not set: the server's credentials file is unknown")
    path = Path(folder) / "credentials"
    if not path.is_file():
        pytest.fail(f"the server's folder has no credentials file ({path}): tools/mlflow_server.sh start makes it")
    for key, value in tracking.read_credentials(path).items():
        monkeypatch.setenv(key, value)
    return path


def _no_login_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in LOGIN_KEYS}


def _get(url: str, login: tuple[str, str] | None = None) -> int:
    """The HTTP status of a GET of ``url``, with a basic-auth login or none."""
    headers = {}
    if login is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


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


def _ingest_proc(results, uri, out, credentials=None):
    """The mlflow rule's command (its login from the credentials file alone: none in the environment)."""
    cmd = [sys.executable, "-m", "repro.pipeline.tracking", "--results", str(results), "--uri", uri, "--out", str(out)]
    if credentials is not None:
        cmd += ["--credentials", str(credentials)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_no_login_env())


def _ingest(results, uri, out, credentials):
    proc = _ingest_proc(results, uri, out, credentials)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_credentials_file_is_private_and_generated(credentials):
    """Made on first start, mode 600, a generated password (not MLflow's old default)."""
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    login = tracking.read_credentials(credentials)
    assert login["MLFLOW_TRACKING_USERNAME"] == "admin"
    assert len(login["MLFLOW_TRACKING_PASSWORD"]) >= 24 and login["MLFLOW_TRACKING_PASSWORD"] != "password1234"


def test_unauthenticated_client_is_refused(server, credentials, tmp_path, monkeypatch):
    """No login: the REST API, the UI's pages and MLflow's own client are refused (401); /health
    stays open (the start script polls it)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    assert _get(f"{server}/api/2.0/mlflow/experiments/search?max_results=1") == 401
    assert _get(f"{server}/ajax-api/2.0/mlflow/experiments/search?max_results=1") == 401
    assert _get(f"{server}/") == 401 and _get(f"{server}{mlflow_app.PAGE}") == 401
    assert _get(f"{server}/health") == 200
    for key in LOGIN_KEYS:
        monkeypatch.delenv(key)
    with pytest.raises(MlflowException, match="401"):
        MlflowClient(server).search_experiments(max_results=1)
    # and the ingestion without a login fails, saying how to give one
    paper = f"t{uuid.uuid4().hex[:10]}"
    _results(tmp_path / "results", paper)
    proc = _ingest_proc(tmp_path / "results", server, tmp_path / "s.json")
    assert proc.returncode == 3 and "refused the login" in proc.stderr and "--credentials" in proc.stderr, proc.stderr


def test_wrong_password_is_refused(server, credentials, tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    user = tracking.read_credentials(credentials)["MLFLOW_TRACKING_USERNAME"]
    assert _get(f"{server}/api/2.0/mlflow/experiments/search?max_results=1", (user, "not-the-password")) == 401
    assert _get(f"{server}/api/2.0/mlflow/experiments/search?max_results=1", ("nobody", "x" * 16)) == 401
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-the-password")
    with pytest.raises(MlflowException, match="401"):
        MlflowClient(server).search_experiments(max_results=1)
    wrong = tmp_path / "wrong"
    wrong.write_text(f"MLFLOW_TRACKING_USERNAME={user}\nMLFLOW_TRACKING_PASSWORD=not-the-password\n")
    paper = f"t{uuid.uuid4().hex[:10]}"
    _results(tmp_path / "results", paper)
    proc = _ingest_proc(tmp_path / "results", server, tmp_path / "s.json", wrong)
    assert proc.returncode == 3 and "refused the login" in proc.stderr, proc.stderr


def test_logged_in_browser_gets_the_repro_page(server, credentials):
    """With the login, the UI's /repro page (the model-training view of the repro experiments) and
    the paper pages the experiments' descriptions link to are served."""
    if not mlflow_app.registered():
        pytest.fail("the repro MLflow apps are not installed as mlflow.app plugins (pip install -e .): "
                    "tools/mlflow_server.sh fell back to MLflow's plain basic-auth app, without /repro")
    login = tuple(tracking.read_credentials(credentials)[k] for k in LOGIN_KEYS)
    assert _get(f"{server}/api/2.0/mlflow/experiments/search?max_results=1", login) == 200
    assert _get(f"{server}{mlflow_app.PAGE}", login) == 200
    assert _get(f"{server}{mlflow_app.PAPERS}/tsm2x.md", login) == 200


def test_ingestion_logs_runs_params_metrics_and_figures_once(server, credentials, tmp_path):
    from mlflow.tracking import MlflowClient

    paper = f"t{uuid.uuid4().hex[:10]}"
    results = tmp_path / "results"
    _results(results, paper)
    first = _ingest(results, server, tmp_path / "first.json", credentials)
    assert len(first["logged"]) == 2 and not first["already"]
    again = _ingest(results, server, tmp_path / "again.json", credentials)
    assert not again["logged"] and sorted(again["already"]) == sorted(first["logged"])
    assert again["runs"] == first["runs"]

    client = MlflowClient(server)
    exp = client.get_experiment_by_name(f"repro/{paper}")
    runs = {r.data.tags["repro.experiment"]: r for r in client.search_runs([exp.experiment_id])}
    assert sorted(runs) == ["e0", "e1"]
    for i in range(2):
        run = runs[f"e{i}"]
        assert run.info.status == "FINISHED" and run.info.run_name == f"e{i} (smoke)"
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


def test_server_keeps_runs_in_postgresql(server, credentials, tmp_path):
    """The runs lie in the PostgreSQL cluster behind the server (read there with psycopg2), not in a
    file or SQLite store, and so do the login's users (database mlflow_auth). Needs the server's
    folder (REPRO_TEST_MLFLOW_DIR, which `.ci/run` sets)."""
    folder = os.environ.get("REPRO_TEST_MLFLOW_DIR")
    if not folder:
        real_services.absent("mlflow", "REPRO_TEST_MLFLOW_DIR is not set: the server's PostgreSQL is unknown")
    import psycopg2

    paper = f"t{uuid.uuid4().hex[:10]}"
    _results(tmp_path / "results", paper)
    _ingest(tmp_path / "results", server, tmp_path / "summary.json", credentials)
    port = int((Path(folder) / "pg_port").read_text())
    with psycopg2.connect(host="127.0.0.1", port=port, user="repro", dbname="mlflow") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs JOIN experiments USING (experiment_id) WHERE experiments.name = %s",
                    (f"repro/{paper}",))
        assert cur.fetchone()[0] == 2
    with psycopg2.connect(host="127.0.0.1", port=port, user="repro", dbname="mlflow_auth") as conn, conn.cursor() as cur:
        cur.execute("SELECT is_admin FROM users WHERE username = 'admin'")  # the login's users, there too
        assert cur.fetchone() == (True,)
    assert not list(Path(folder).rglob("*.db"))
