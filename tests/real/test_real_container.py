"""The built step environment (`make container` = tools/container.sh): the OCI archive, the SIF, and
a slice of the tests and one smoke experiment run inside the image with podman."""

import json
import os
import shutil
import subprocess
import tarfile

import pytest

import real_services
from conftest import REPO

OUT = REPO / "results" / "container"
OCI = OUT / "repro-cpu.oci.tar"
SIF = REPO / "containers" / "repro-cpu.sif"
IMAGE = "localhost/repro-cpu:latest"
# fast tests that import the pipeline's packages (records, layout, claims, tracking on SQLite)
INSIDE_TESTS = ["tests/test_records.py", "tests/test_layout.py", "tests/test_tracking.py"]


def _env():
    return {**os.environ, "CONTAINERS_CONF": str(OUT / "containers.conf")}


def _await_build(timeout_s: float = 1800.0) -> None:
    """Where CI builds the image beside the tests (.ci/run sets REPRO_CONTAINER_BUILD_RC to the file the
    build's exit code and seconds go to): wait for it; a failed build fails here, naming its log."""
    import time

    rc_file = os.environ.get("REPRO_CONTAINER_BUILD_RC")
    if not rc_file:
        return
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(rc_file):
        if time.monotonic() > deadline:
            pytest.fail(f"the image build beside the tests did not finish in {timeout_s:.0f} s ({rc_file})")
        time.sleep(5)
    rc = open(rc_file).read().split()[0]
    if rc != "0":
        pytest.fail(f"make container failed (exit {rc}): results/ci-container-build.log")


@pytest.fixture(scope="module")
def image():
    _await_build()
    if shutil.which("podman") is None:
        real_services.absent("container", "no podman (make container installs it)")
    if not (OUT / "containers.conf").is_file() or not OCI.is_file() or not SIF.is_file():
        real_services.absent("container", f"no image built ({OCI}, {SIF}: make container)")
    if subprocess.run(["podman", "image", "exists", IMAGE], env=_env()).returncode != 0:
        real_services.absent("container", f"podman has no {IMAGE} (make container)")
    return IMAGE


def _podman_run(image, *cmd, timeout=900):
    return subprocess.run(["podman", "run", "--rm", "--network", "none", "-e", "PYTHONDONTWRITEBYTECODE=1",
                           "-v", f"{REPO}:/work:ro", "-v", f"{REPO / 'results' / 'container'}:/out", "-w", "/work",
                           image, *cmd], capture_output=True, text=True, timeout=timeout, env=_env())


def test_oci_archive_is_an_oci_image_layout(image):
    with tarfile.open(OCI) as tar:
        names = set(tar.getnames())
        assert {"oci-layout", "index.json"} <= names
        index = json.load(tar.extractfile("index.json"))
    assert index["manifests"] and index["manifests"][0]["mediaType"].startswith("application/vnd.oci.image")


def test_sif_holds_the_environment(image, tmp_path):
    listing = subprocess.run(["siftool", "list", str(SIF)], capture_output=True, text=True, check=True).stdout
    assert "Squashfs/*System/amd64" in listing, listing  # *: the primary system partition
    part = next(line.split("|")[0].strip() for line in listing.splitlines() if "Squashfs" in line)
    squash = tmp_path / "rootfs.squashfs"
    with squash.open("wb") as out:
        subprocess.run(["siftool", "dump", part, str(SIF)], stdout=out, check=True)
    files = subprocess.run(["unsquashfs", "-l", "-d", "", str(squash)], capture_output=True, text=True,
                           check=True).stdout
    for needed in ("/opt/venv/bin/python", "/site-packages/torch/__init__.py", "/site-packages/snakemake/",
                   "/site-packages/mlflow/", "/site-packages/repro/pipeline/run.py", "/.singularity.d/env/90-environment.sh"):
        assert needed in files, f"the SIF lacks {needed}"


def test_environment_inside_the_image(image):
    proc = _podman_run(image, "python", "-c", "import torch, snakemake, hydra, mlflow, repro; "
                       "print(torch.__version__, torch.cuda.is_available(), repro.__file__)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    version, cuda, where = proc.stdout.split()
    assert version.startswith("2.13.0") and cuda == "False"
    assert where == "/work/src/repro/__init__.py"  # the mounted checkout's code, as the rules run it


def test_tests_pass_inside_the_image(image):
    # the one test that reads this checkout's git HEAD: a worktree's git folder is not in the mount
    proc = _podman_run(image, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *INSIDE_TESTS, "--deselect",
                       "tests/test_records.py::test_commit_from_the_environment_wins_over_a_stale_git")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def test_a_smoke_experiment_runs_inside_the_image(image):
    out = REPO / "results" / "container" / "ceilings"
    shutil.rmtree(out, ignore_errors=True)
    proc = _podman_run(image, "python", "-m", "repro.pipeline.run", "experiment=ceilings/ceilings", "scale=smoke",
                       "out=/out/ceilings", "hydra.run.dir=/tmp/hydra")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "record.json").read_text())
    assert record["status"] == "ok" and record["metrics"]
