"""The one MLflow writer: ingest records, never twice; a real tracking server finds them."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from repro import records
from repro.pipeline import mlflow_app, tracking


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


def _rec(experiment, status="ok", started="2026-11-30T00:00:00+00:00", scale="smoke", paper="p", reason=None):
    return dict(experiment=experiment, paper=paper, scale=scale, status=status, params={"a": 1},
                metrics={} if status == "skipped" else {"m": 1.0}, reason=reason, started=started,
                provenance={"config_hash": "x", "hostname": "h", "commit": "c"})


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def test_runs_are_named_and_skipped_runs_finish_with_their_reason(tmp_path):
    """A run is named for its experiment and scale; a skipped record (no GPU here) is a FINISHED run
    tagged `skipped` with the reason, not a KILLED one."""
    results = tmp_path / "results"
    records.write(results / "p" / "fast", _rec("fast"))
    records.write(results / "p" / "gpu_only", _rec("gpu_only", status="skipped", reason="needs a CUDA GPU"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ingest(results, uri, tmp_path / "artifacts")
    client = _client(uri)
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("repro/p").experiment_id])}
    assert sorted(runs) == ["fast (smoke)", "gpu_only (smoke)"]
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert runs["gpu_only (smoke)"].data.tags["skipped"] == "needs a CUDA GPU"
    assert "skipped" not in runs["fast (smoke)"].data.tags


def test_experiment_is_described_from_its_paper_page(tmp_path):
    """Each repro/<paper> experiment carries MLflow's description tag (mlflow.note.content): the
    page's title and first paragraph, the claim ids and a link to the page; and is marked a
    model-training experiment (the type the UI shows for it)."""
    from repro import layout

    results = tmp_path / "results"
    records.write(results / "tsm2x" / "tsm2_r", _rec("tsm2_r", paper="tsm2x"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ingest(results, uri, tmp_path / "artifacts")
    exp = _client(uri).get_experiment_by_name("repro/tsm2x")
    text = exp.tags[tracking.DESCRIPTION]
    title = (layout.REPO_ROOT / "docs" / "papers" / "tsm2x.md").read_text().splitlines()[0][2:]
    assert title in text and "Rivera et al." in text
    ids = [c["id"] for c in layout.load_yaml((layout.config_dir() / "claims" / "tsm2x.yaml").read_text())["claims"]]
    assert ids and all(f"`{i}`" in text for i in ids)
    assert text.rstrip().endswith("[docs/papers/tsm2x.md](/repro/papers/tsm2x.md)")  # served by repro.pipeline.mlflow_app
    assert "](../" not in text  # the page's relative links are plain text here
    assert exp.tags[tracking.KIND] == "custom_model_development"


def test_paper_description_links_to_a_web_view_and_stands_in_without_a_page(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DOCS_URL", "https://git.example.org/repro/blob/main/")
    text = tracking.paper_description("tsm2x")
    assert "(https://git.example.org/repro/blob/main/docs/papers/tsm2x.md)" in text
    (tmp_path / "config" / "claims").mkdir(parents=True)
    (tmp_path / "config" / "claims" / "new.yaml").write_text("# New: a paper without a page.\nclaims:\n  - id: n.one\n")
    text = tracking.paper_description("new", repo=tmp_path, config=tmp_path / "config")
    assert text.startswith("New: a paper without a page.\n") and "`n.one`" in text and "missing" in text


def test_rerun_supersedes_the_older_run_of_its_folder_only(tmp_path):
    """A rerun's record replaces its folder's: its older run is tagged repro.superseded and moved to
    the deleted stage (hidden by default, restorable); another results folder's run of the same
    experiment stays; re-ingesting changes nothing."""
    from mlflow.entities import ViewType

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mine, theirs = tmp_path / "mine" / "results", tmp_path / "theirs" / "results"
    records.write(mine / "p" / "e", _rec("e"))
    records.write(theirs / "p" / "e", _rec("e", started="2026-11-29T00:00:00+00:00"))
    first = tracking.ingest(mine, uri, tmp_path / "artifacts")
    other = tracking.ingest(theirs, uri, tmp_path / "artifacts")
    old_run = first["runs"][records.read(mine / "p" / "e")["record_id"]]["run_id"]
    other_run = other["runs"][records.read(theirs / "p" / "e")["record_id"]]["run_id"]
    records.write(mine / "p" / "e", _rec("e", started="2026-12-01T00:00:00+00:00", scale="paper"))  # the rerun
    second = tracking.ingest(mine, uri, tmp_path / "artifacts")
    new_run = second["runs"][records.read(mine / "p" / "e")["record_id"]]["run_id"]
    assert second["superseded"] == [old_run] and second["logged"] == [records.read(mine / "p" / "e")["record_id"]]
    client = _client(uri)
    exp_id = client.get_experiment_by_name("repro/p").experiment_id
    shown = {r.info.run_id: r.info.run_name for r in client.search_runs([exp_id])}  # the UI's default: active
    assert shown == {new_run: "e (paper)", other_run: "e (smoke)"}
    old = client.get_run(old_run)
    assert old.info.lifecycle_stage == "deleted"
    assert old.data.tags[tracking.SUPERSEDED] == "true" and old.data.tags[tracking.SUPERSEDED_BY] == new_run
    assert old_run in {r.info.run_id for r in client.search_runs([exp_id], run_view_type=ViewType.DELETED_ONLY)}
    again = tracking.ingest(mine, uri, tmp_path / "artifacts")
    assert not again["logged"] and not again["superseded"]
    client.restore_run(old_run)  # recoverable: restored, it is a whole run again
    assert client.get_run(old_run).info.lifecycle_stage == "active" and client.get_run(old_run).data.metrics["m"] == 1.0


def test_runs_of_an_earlier_version_are_conformed(tmp_path):
    """A store ingested before runs were named and skipped runs finished: re-ingesting names them,
    finishes the skipped ones with their reason, and logs nothing twice."""
    results = tmp_path / "results"
    records.write(results / "p" / "gpu_only", _rec("gpu_only", status="skipped", reason="needs a CUDA GPU"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = tracking.ingest(results, uri, tmp_path / "artifacts")
    client = _client(uri)
    (run,) = [r["run_id"] for r in first["runs"].values()]
    client.update_run(run, status="KILLED", name="gpu_only")  # as the earlier version left it
    for tag in ("skipped", tracking.ORIGIN):
        client.delete_tag(run, tag)
    again = tracking.ingest(results, uri, tmp_path / "artifacts")
    assert not again["logged"] and again["runs"] == first["runs"]
    got = client.get_run(run)
    assert (got.info.status, got.info.run_name, got.data.tags["skipped"]) == ("FINISHED", "gpu_only (smoke)",
                                                                             "needs a CUDA GPU")
    assert got.data.tags[tracking.ORIGIN] == tracking.origin(results)


def test_credentials_file(tmp_path):
    path = tmp_path / "credentials"
    path.write_text("# a login\nexport MLFLOW_TRACKING_USERNAME=admin\nMLFLOW_TRACKING_PASSWORD='s3 cret'\nOTHER=x\n")
    assert tracking.read_credentials(path) == {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "s3 cret"}
    path.write_text("MLFLOW_TRACKING_USERNAME=admin\n")
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_PASSWORD"):
        tracking.read_credentials(path)
    assert tracking.main(["--results", str(tmp_path), "--uri", "http://127.0.0.1:9", "--credentials", str(path)]) == 2


def test_ingestion_turns_mlflow_telemetry_off(monkeypatch):
    for key in tracking.TELEMETRY_OFF:
        monkeypatch.setenv(key, "")  # so that the test's end restores what was there
        monkeypatch.delenv(key)
    tracking.telemetry_off()
    from mlflow.telemetry.utils import is_telemetry_disabled

    import os

    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true" and os.environ["DO_NOT_TRACK"] == "true"
    assert is_telemetry_disabled()


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
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **mlflow_app.JOBS_OFF})
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
