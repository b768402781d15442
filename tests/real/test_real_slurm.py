"""A real slice of the smoke DAG through SLURM (`snakemake --executor slurm --profile profiles/slurm`),
on the single-node cluster of tools/slurm_local.sh, against the local smoke run.

The slice is one job of every rule kind: the data (cifar10), a kernel build, a training arm
(clicktrain/admm, a `gpu=1` rule: it schedules on the node's /dev/null GRES), a figure, the
MLflow ingestion and the claims report. The rest of the DAG stays as the local run left it: the
slice runs in a copy of that run with the slice's outputs removed, in two calls (the data first, so
that the second call's `--allowed-rules` and mtime-free rerun triggers keep every other step as it
was). Then what SLURM made must equal what the local run made: the records (params, metrics apart
from timings, status), the data manifest, the kernel's status and the report's verdicts.
"""

import csv
import json
import shutil
import subprocess

import pytest

import real_services
from conftest import snakemake

DATA = "results/data/cifar10/manifest.json"
KERNEL = "gpuic_copy"
ARM = "clicktrain/admm"
FIGURE = "ceilings/ceilings"
SLICE_RULES = ("cifar10", "build_kernel", "clicktrain_arm", "figure", "mlflow", "claims")
# outputs removed from the copy, so that SLURM makes them again
REMOVED = ["results/data/cifar10", f"results/build/kernels/{KERNEL}.json", f"results/{ARM}/record.json",
           f"results/figures/{FIGURE}.png", f"results/figures/{FIGURE}.pdf", "results/mlflow/ingested.json",
           "results/claims/report.html", "results/claims/claims.csv"]
# metrics that measure time on this machine, not the experiment
TIMING = ("_s", "_s_mean", "per_s", "seconds", "_time", "wall")


def _cluster():
    import importlib.util

    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        real_services.absent("slurm", "the SLURM executor plugin is not installed (`make slurm-plugin`, or `pip install -e .[slurm]`)")
    if shutil.which("sbatch") is None:
        real_services.absent("slurm", "no sbatch (tools/slurm_local.sh start)")
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        real_services.absent("slurm", "sinfo timed out (is slurmctld up?)")
    states = proc.stdout.split()
    if proc.returncode != 0 or not any(s.startswith(("idle", "mix", "alloc")) for s in states):
        real_services.absent("slurm", f"no node takes jobs (sinfo: {proc.stdout.strip() or proc.stderr.strip()})")


def _is_timing(name: str) -> bool:
    # "_s_": per-phase seconds such as clicktrain's epoch_s_dense / epoch_s_admm
    return name.endswith(TIMING) or any(t in name for t in ("per_s", "seconds", "time", "_s_"))


def comparable(record: dict) -> dict:
    """What must not change between machines and schedulers: params, status and the metrics apart
    from timings."""
    return {"params": record["params"], "status": record["status"],
            "metrics": {k: v for k, v in record["metrics"].items() if not _is_timing(k)}}


def test_comparable_drops_timings_only():
    rec = {"params": {"lr": 0.1}, "status": "ok",
           "metrics": {"best_top1": 41.0, "epoch_s_mean": 3.2, "images_per_s": 900.0, "first_epoch_s": 4.0,
                       "epoch_s_admm": 1.9}}
    assert comparable(rec) == {"params": {"lr": 0.1}, "status": "ok", "metrics": {"best_top1": 41.0}}
    assert comparable(rec) != comparable({**rec, "metrics": {**rec["metrics"], "best_top1": 41.5}})


def restore_mtimes(local, work):
    """Give the remade data files the local run's mtimes. Snakemake reruns a job whose inputs are
    newer than its outputs ("Updated input files") even without the mtime rerun trigger, so without
    this the second call redoes every training arm on the new splits, not only the slice's one; the
    splits are the same arrays (test_slurm_records_equal_local compares their checksums)."""
    import os

    for path in work.iterdir():
        twin = local / path.name
        if twin.is_file():
            stat = twin.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.fixture(scope="module")
def cluster():
    _cluster()


@pytest.fixture(scope="module")
def slurm_slice(cluster, tmp_path_factory, smoke_run):
    local, proc, shards = smoke_run
    assert proc.returncode == 0, "the local smoke run failed: " + proc.stderr[-2000:]
    work = tmp_path_factory.mktemp("slurm") / "work"
    shutil.copytree(local, work, symlinks=True)
    for path in REMOVED:
        target = work / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    # a one-node cluster answers at once: poll it every few seconds, not the plugin's 40 s and more
    # (which suits a shared cluster's scheduler and is the profile's default)
    common = ("--executor", "slurm", "--profile", "profiles/slurm", "--slurm-status-command", "squeue",
              "--slurm-init-seconds-before-status-checks", "2", "--latency-wait", "5",
              "--config", "scale=smoke", f"cifar10_source=shards:{shards}")
    data = snakemake(*common, "--", DATA, cwd=work, check=False, timeout=1200)  # "--": --config takes the rest
    restore_mtimes(local / "results/data/cifar10", work / "results/data/cifar10")
    rest = snakemake(*common, "--allowed-rules", *SLICE_RULES, "--rerun-triggers", "code", "params", "input",
                     "software-env", "--", f"results/build/kernels/{KERNEL}.json", f"results/{ARM}/record.json",
                     f"results/figures/{FIGURE}.png", "results/claims/report.html", cwd=work, check=False,
                     timeout=1800)
    return local, work, data, rest


def test_slice_runs_through_slurm(slurm_slice):
    local, work, data, rest = slurm_slice
    for proc in (data, rest):
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    # every job of the slice went to SLURM, one per rule kind
    log = data.stdout + data.stderr + rest.stdout + rest.stderr
    for rule in SLICE_RULES:
        assert f"rule {rule}:" in log or f"localrule {rule}:" in log, f"{rule} did not run"
    assert "localrule " not in log.replace("localrule all:", ""), "a slice job ran locally, not on SLURM"
    assert log.count("Job ") and ("SLURM" in log), log[-3000:]
    for path in REMOVED:
        assert (work / path).exists(), f"{path} was not made again"


def test_slurm_records_equal_local(slurm_slice):
    local, work, data, rest = slurm_slice
    assert data.returncode == 0 and rest.returncode == 0
    manifest = [json.loads((root / DATA).read_text()) for root in (local, work)]
    assert manifest[0]["splits"] == manifest[1]["splits"]  # the same arrays, by checksum
    kernel = [json.loads((root / f"results/build/kernels/{KERNEL}.json").read_text()) for root in (local, work)]
    for status in kernel:
        status.pop("from_cache", None)
    assert kernel[0] == kernel[1]
    arm = [json.loads((root / f"results/{ARM}/record.json").read_text()) for root in (local, work)]
    assert arm[0]["record_id"] != arm[1]["record_id"]  # a new run, not the local record copied
    assert comparable(arm[0]) == comparable(arm[1])
    assert (work / f"results/figures/{FIGURE}.png").stat().st_size > 0
    verdicts = [list(csv.DictReader((root / "results/claims/claims.csv").open())) for root in (local, work)]
    keep = ("id", "verdict", "status")
    assert [{k: row.get(k) for k in keep} for row in verdicts[0]] == [{k: row.get(k) for k in keep}
                                                                      for row in verdicts[1]]
    ingested = json.loads((work / "results/mlflow/ingested.json").read_text())
    assert arm[1]["record_id"] in ingested["runs"]
