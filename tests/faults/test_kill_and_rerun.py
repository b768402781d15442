"""The fault-injection suite (issue 19, "What must exist"): a slice of the smoke DAG with one step of
every kind (a kernel build, data prep, a training run, its figure, then ingestion and the report)
is killed with SIGKILL at one chosen point per run (``REPRO_KILL_AT``, repro.faults), rerun, killed
at the next point, and so on; after a final plain rerun its records, figures, report and MLflow
store must equal those of the same slice run once without a fault: no lost, duplicated or broken
runs, no leftover temporary files.

Snakemake runs the build, data, training and figure steps (its rules' commands, as the full DAG
does); ingestion and the report run as the mlflow and claims rules run them, on the slice's
results (their rules need every experiment's record: the whole DAG). One slice run costs about
what a few smoke experiments do; the killed one adds six restarts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_repository, write_mini_shards

from repro import faults

# CIFAR-10-shaped JPEG shards of 26 images a class (260 a split: the smoke VGG-16 reads 256 of each):
# the data step runs as on the real shards, in a fraction of their 20,000 decodes per slice run
PER_CLASS = 26
# one kernel build (where nvcc is missing the step still runs and writes its status): a quick one, as
# the slice gets a build cache of its own and so compiles it (gpucache_edges: 0.4 CPU s; tsm2l took 13)
KERNEL = "gpucache_edges"
FIGURE = "results/figures/baseline/vgg16.png"  # data prep -> cifar10 -> baseline/vgg16 (2 epochs) -> figure
TARGETS = [f"results/build/kernels/{KERNEL}.json", FIGURE]
URI = "sqlite:///results/mlflow.db"
INGEST = [sys.executable, "-m", "repro.pipeline.tracking", "--results", "results", "--uri", URI,
          "--out", "results/mlflow/ingested.json"]
REPORT = [sys.executable, "-m", "repro.report", "--ledger", "config/claims", "--results", "results",
          "--reference", "results/reference", "--figures", FIGURE, "--out", "results/claims"]

# (point, the command that reaches it, its targets): the order in which the killed slice dies, one
# kill per run; each Snakemake run asks only for what leads to its point, so no other step finishes
# beside the killed one
KILLS = [("build.compiled", "snakemake", TARGETS[:1]), ("data.train_written", "snakemake", [FIGURE]),
         ("train.checkpointed", "snakemake", [FIGURE]), ("figure.temp_written", "snakemake", [FIGURE]),
         ("tracking.logged", "ingest", None), ("report.csv_written", "report", None)]

# a metric that measures time or memory varies between runs; every other one must be equal
TIMING = re.compile(r"(_s|_s_mean|_per_s|_ms|_us|_bytes|seconds|time)$")


def _copy(work: Path) -> Path:
    copy_repository(work, ("Snakefile", "pyproject.toml", "config", "workflow", "profiles", "src"))
    shutil.copytree(REPO / "results" / "reference", work / "results" / "reference")
    return work


def _env(work: Path, kill_at: str | None) -> dict:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(work / "src"), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           faults.LOG_ENV: str(work / "kills.log"), "REPRO_BUILD_CACHE": str(work.parent / "kernel-cache")}
    env.pop("REPRO_WORKFLOW_PID", None)
    env.pop(faults.ENV, None)
    # the jobs run cold, as they would anyway: each run's REPRO_KILL_AT (and each copy's src) is part of
    # the warm runner's key, so no job here ever finds a server, and each would start one in the
    # background that idles out unused (6 in a suite run, 1.5-3 s of imports each)
    env["REPRO_WARM"] = "0"
    if kill_at:
        env[faults.ENV] = kill_at
    return env


def _step(work: Path, shards: Path, which: str, kill_at: str | None = None, targets=None) -> subprocess.CompletedProcess:
    cmd = {"snakemake": [sys.executable, "-m", "snakemake", *(targets or TARGETS), "--cores", "2", "--config", "scale=smoke",
                         f"cifar10_source=shards:{shards}"],
           "ingest": INGEST, "report": REPORT}[which]
    return subprocess.run(cmd, cwd=work, env=_env(work, kill_at), capture_output=True, text=True)


def _run_slice(work: Path, shards: Path, kills: list[tuple[str, str, list | None]]) -> list[str]:
    """Kill the slice at each point in turn, then run it to the end; returns the kill log's points."""
    log = work / "kills.log"
    for point, which, targets in kills:
        proc = _step(work, shards, which, point, targets)
        assert proc.returncode != 0, f"{point}: {which} finished although it should have been killed"
        assert log.exists() and log.read_text().splitlines()[-1].startswith(point + " "), \
            f"{point}: {which} failed without reaching the point:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for which in ("snakemake", "ingest", "report"):
        proc = _step(work, shards, which)
        assert proc.returncode == 0, f"{which}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    clean, killed = (_copy(tmp_path_factory.mktemp(name)) for name in ("clean", "killed"))
    shards = write_mini_shards(tmp_path_factory.mktemp("cifar10") / "shards", per_class=PER_CLASS)
    # one build cache for both (beside them): the killed slice, first, compiles the kernel before
    # its kill at build.compiled; the clean one takes it from the cache instead of a second nvcc
    killed_points = _run_slice(killed, shards, KILLS)
    assert _run_slice(clean, shards, []) == []
    return clean, killed, killed_points


def _results(work: Path) -> set[str]:
    """Every file the slice made (its logs, Snakemake's state and the MLflow database aside), an
    MLflow run's id in its artifacts' path as <run>."""
    root = work / "results"
    return {re.sub(r"/[0-9a-f]{32}/", "/<run>/", str(p.relative_to(root))) for p in root.rglob("*") if p.is_file()
            and not str(p.relative_to(root)).startswith(("reference/", "logs/"))} - {"mlflow.db", "mlflow.db.lock"}


def _steady(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not TIMING.search(k)}


def _record(work: Path, exp: str) -> dict:
    return json.loads((work / "results" / exp / "record.json").read_text())


def _runs(work: Path) -> list[dict]:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{work}/results/mlflow.db")
    exps = [e.experiment_id for e in client.search_experiments()]
    out = []
    for run in client.search_runs(exps, max_results=1000):
        artifacts = sorted(a.path for a in client.list_artifacts(run.info.run_id))
        out.append(dict(experiment=run.data.tags["repro.experiment"], status=run.info.status,
                        complete="repro.ingested" in run.data.tags, params=run.data.params,
                        metrics=_steady(run.data.metrics), artifacts=artifacts))
    return sorted(out, key=lambda r: r["experiment"])


@pytest.mark.slow
@pytest.mark.faults
def test_every_point_was_killed(slices):
    _, _, killed = slices
    assert killed == [point for point, *_ in KILLS]
    assert set(faults.POINTS) - set(killed) == {"tracking.run_created"}  # tests/test_tracking_faults.py kills there


@pytest.mark.slow
@pytest.mark.faults
def test_the_same_files_and_no_leftovers(slices):
    clean, killed, _ = slices
    files = _results(killed)
    assert files == _results(clean)
    assert not [f for f in files if ".tmp" in f or f.endswith(".partial")]


@pytest.mark.slow
@pytest.mark.faults
def test_records_equal_an_uninterrupted_runs(slices):
    clean, killed, _ = slices
    a, b = _record(clean, "baseline/vgg16"), _record(killed, "baseline/vgg16")
    assert b["status"] == "ok" and b["params"] == a["params"]
    assert _steady(b["metrics"]) == _steady(a["metrics"])  # the resumed run's top-1 is bit-identical
    assert int(b["tags"]["resumed_epochs"]) == 1 and int(a["tags"]["resumed_epochs"]) == 0  # it did resume
    # the killed build compiled and cached the cubin before it died, so its rerun and the clean
    # slice took it from the build cache: that provenance flag aside, the status (digests, kernels, spills) is the same
    status = [json.loads((w / "results" / "build" / "kernels" / f"{KERNEL}.json").read_text()) for w in (clean, killed)]
    for entry in status:
        entry.pop("from_cache", None)
    assert status[0] == status[1]
    manifests = [json.loads((w / "results" / "data" / "cifar10" / "manifest.json").read_text()) for w in (clean, killed)]
    assert [m["splits"] for m in manifests] == [manifests[0]["splits"]] * 2  # same arrays, checksums


@pytest.mark.slow
@pytest.mark.faults
def test_figures_are_whole(slices):
    from PIL import Image

    clean, killed, _ = slices
    for work in (clean, killed):
        png = work / FIGURE
        with Image.open(png) as im:
            im.verify()
        pdf = png.with_suffix(".pdf").read_bytes()
        assert pdf.startswith(b"%PDF") and pdf.rstrip().endswith(b"%%EOF")
    with Image.open(clean / FIGURE) as a, Image.open(killed / FIGURE) as b:
        assert a.size == b.size


@pytest.mark.slow
@pytest.mark.faults
def test_mlflow_store_equals_an_uninterrupted_runs(slices):
    clean, killed, _ = slices
    runs = _runs(killed)
    assert [r["experiment"] for r in runs] == ["vgg16"]  # exactly once
    assert runs[0]["status"] == "FINISHED" and runs[0]["complete"] and runs[0]["artifacts"]
    assert runs == _runs(clean)


@pytest.mark.slow
@pytest.mark.faults
def test_report_equals_an_uninterrupted_runs(slices):
    """claims.csv row for row, apart from the ids of the runs (each run's own) and the measured
    values of timing claims; the other report files whole."""
    import pandas as pd

    from repro.report.claims import load_ledger

    clean, killed, _ = slices
    a, b = (pd.read_csv(w / "results" / "claims" / "claims.csv") for w in (clean, killed))
    assert list(a.columns) == list(b.columns) and a.claim_id.tolist() == b.claim_id.tolist()
    timing = a.claim_id.isin([c["id"] for c in load_ledger(REPO / "config" / "claims") if c.get("timing")])
    assert (b.here_verdict[b.claim_id.str.startswith("base.vgg16")] == "smoke").all()  # the slice's run is in it
    ids = ["run_id", "here_run_id", "here_mlflow_run"]
    assert b.here_mlflow_run[b.claim_id == "base.vgg16_acc"].notna().all()  # linked to its MLflow run
    measured = ["measured", "here_measured"]
    pd.testing.assert_frame_equal(a.drop(columns=ids + measured), b.drop(columns=ids + measured))
    pd.testing.assert_frame_equal(a.loc[~timing, measured], b.loc[~timing, measured])
    for name in ("report.html", "report.md"):
        text = (killed / "results" / "claims" / name).read_text()
        assert "base.vgg16_acc" in text and text.rstrip().endswith(("</html>", "")) and len(text) > 10_000
    from PIL import Image

    with Image.open(killed / "results" / "claims" / "claims_chart.png") as im:
        im.verify()
