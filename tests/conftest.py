"""Shared fixtures: compose Hydra configs forced to CPU, tiny sizes and tmp_path."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # fake experiments for runner tests

# `make test` runs one pytest-xdist worker per core, beside the session's smoke DAG (its jobs one thread
# each, as Snakemake sets them): a worker whose torch / BLAS used every core would oversubscribe them,
# and OpenMP's spin-waiting threads then slow everything down (tests/superneurons/test_layer_plan.py
# beside two busy processes on 2 cores: 72 s with torch's default 2 threads, 40 s with 1). Each
# worker computes on one thread unless the caller set a count; a test that wants k threads sets them.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
# The workflow's figure and experiment jobs go through the warm runner (repro.pipeline.warm): the servers
# that the tests' workflow runs start (one per repository copy) exit 15 s after their last job, not 120 s.
os.environ.setdefault("REPRO_WARM_IDLE", "15")


@pytest.fixture(autouse=True)
def _keep_cuda_visible_devices():
    """repro.pipeline.gpu_slots.claim_gpus sets CUDA_VISIBLE_DEVICES in os.environ, as a job must; a test that
    calls it must not hand the claim to later tests (the smoke DAG inherits os.environ)."""
    import os

    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    yield
    if before is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = before


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip)
    # the tests that read the session's smoke DAG first: under xdist their worker starts on the DAG;
    # the container image's last: CI builds it beside the tests (.ci/run), and they wait for it; the
    # rest by their file's seconds in a measured run (tests/durations.json), longest first, so that the
    # workers end together (a 50 s file handed out last kept one worker busy while the other waited);
    # a file without a measured time (a new one) after them, in collection order. Files stay whole (the
    # sort is stable and a file's tests share its time).
    seconds = measured_durations()
    items.sort(key=lambda item: ("smoke_run" not in getattr(item, "fixturenames", ()),
                                 item.nodeid.startswith("tests/real/test_real_container.py"),
                                 -seconds.get(item.nodeid.split("::", 1)[0], 0.0)))


def measured_durations() -> dict[str, float]:
    """tests/durations.json: {test file: its tests' summed seconds} from the last measured `make test`
    (benchmarks/pipeline.py --tests writes it); {} where it is absent or unreadable (the order then
    is collection order: only the time to the end depends on it)."""
    import json

    try:
        data = json.loads((REPO / "tests" / "durations.json").read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


SMOKE_USER = re.compile(r"\bsmoke_run\b")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs the suite on pytest-xdist workers. One unit of work per test file (a module
    fixture is built once), except that every file that uses the session's smoke DAG (the
    ``smoke_run`` fixture, minutes of work) joins one unit, which goes first to one worker (its
    tests are collected first) while the other workers take the rest. (xdist's own `loadgroup`
    marks cannot do this under pytest 9: they rename the node ids through an attribute pytest 9 no
    longer reads.)"""
    from functools import cache

    from xdist.scheduler import LoadScopeScheduling

    @cache
    def uses_smoke_dag(path: str) -> bool:
        try:
            return bool(SMOKE_USER.search((Path(config.rootpath) / path).read_text()))
        except OSError:
            return False

    class SmokeDagFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "smoke-dag" if uses_smoke_dag(path) else path

    return SmokeDagFirst(config, log)


def built_kernels(tmp_path_factory, srcs) -> Path:
    """A folder of cubins for the GPU tests: $REPRO_KERNELS_DIR (a `snakemake build_kernels` output)
    where set, else ``srcs`` compiled here with nvcc (the test fails, naming why, where it cannot)."""
    import os

    from repro.kernels.build import build

    if os.environ.get("REPRO_KERNELS_DIR"):
        return Path(os.environ["REPRO_KERNELS_DIR"])
    out = tmp_path_factory.mktemp("kernels")
    manifest = build(out, srcs=list(srcs))
    if manifest["status"] != "built":
        pytest.fail(f"cannot compile the kernels here ({manifest['reason']}); set REPRO_KERNELS_DIR")
    return out


def entry_params(entry: str, **over):
    """(entry spec, its params dataclass with ``over`` merged in), as the runner would build them."""
    from omegaconf import OmegaConf

    from repro.experiment import load_entry

    spec = load_entry(entry)
    return spec, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(spec.params), over))


def write_tables(out: Path, result) -> None:
    """An entry's tables as the runner writes them beside the record (the figures read them)."""
    out.mkdir(parents=True, exist_ok=True)
    for key, table in result.tables.items():
        table.to_csv(out / f"{key}.csv", index=False)


def dag_jobs(workdir: Path, config: dict, targets=()) -> list:
    """The jobs of a forced dry run (of ``targets``, rule names or files; default: the default
    target), through Snakemake's Python API."""
    from snakemake.api import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, SnakemakeApi

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(config=config),
                          snakefile=workdir / "Snakefile", workdir=workdir)
        workflow = wf.dag(DAGSettings(targets=frozenset(targets), forceall=True)).workflow_api._workflow
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        return list(workflow.dag.jobs)


def snakemake(*args, cwd=REPO, check=True, timeout=None, extra_env=None):
    """``python -m snakemake ARGS`` in ``cwd``, with this interpreter's environment first on PATH (the
    rules call `python`) and ``extra_env`` added."""
    import os
    import subprocess

    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


SMOKE_COPY = ("Snakefile", "pyproject.toml", "LICENSE", "config", "workflow", "profiles", "src")  # the report reads the licence


def copy_repository(work: Path, names=SMOKE_COPY, caches: bool = True) -> Path:
    """A copy of the repository files the workflow needs (``names``) in ``work``, bytecode left out;
    returns ``work``. With ``caches``, the checkout's code caches come along (copy_code_caches), as a
    user's checkout has them after its first run."""
    import shutil

    work.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, work / name)
    if caches:
        copy_code_caches(work)
    return work


def copy_code_caches(work: Path) -> None:
    """The checkout's caches of what the workflow computes from the sources (.cache/dag.json: the DAG's
    inputs; imports.json and syntax.json: import closures and syntax digests) into the copy ``work``.
    Each entry is keyed by the content (or size and time) of the files it was computed from, so a copy
    uses what still holds and recomputes the rest; without them each copy's first Snakemake start and
    first claims report parse the whole package again (7 s of the fault slice's 65)."""
    import shutil

    for path in (REPO / ".cache").glob("*.json"):
        (work / ".cache").mkdir(exist_ok=True)
        shutil.copy2(path, work / ".cache" / path.name)


def venv_env(work: Path) -> dict:
    """os.environ as in an activated virtual environment of this interpreter (its bin first on PATH, as
    `source .venv/bin/activate` does), with the repro of ``work``'s src/ imported first."""
    import os

    bindir = Path(sys.executable).parent
    return {**os.environ, "VIRTUAL_ENV": str(bindir.parent), "PYTHONPATH": str(work / "src"),
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The whole DAG at smoke scale in a copy of the repository (results stay out of the checkout):
    (work folder, snakemake's CompletedProcess, CIFAR-10 shards). Session-wide: the workflow tests
    and the real-service tests (tests/real: SLURM, the browser) share one run. Tests must not
    change it (copy it first) or must leave it as they found it."""
    import os
    import shutil

    shards = REPO.parent / "shared" / "data" / "cifar10-jpeg"
    if not (shards / "SHA256SUMS").exists():
        pytest.skip("CIFAR-10 shards not beside the checkout")
    work = copy_repository(tmp_path_factory.mktemp("smoke"))
    ref = REPO / "results" / "reference"
    if ref.exists():
        shutil.copytree(ref, work / "results" / "reference")
    # the checkout's kernel build cache (where tests/test_build_kernels.py builds too): nvcc runs once
    # per source in the suite, whichever comes first
    cache = os.environ.get("REPRO_BUILD_CACHE") or str(REPO / ".cache" / "kernels")
    proc = snakemake("--cores", "2", "--config", "scale=smoke", f"cifar10_source=shards:{shards}", cwd=work,
                     check=False, extra_env={"REPRO_BUILD_CACHE": cache})
    return work, proc, shards


def experiment_cfg(experiment: str):
    """An experiment file as Hydra composes it (its base merged under a variant), as an OmegaConf config."""
    from omegaconf import OmegaConf

    from repro import layout

    return OmegaConf.create(layout.experiment_file(experiment))


def prepared_splits(directory: Path, n_train: int, n_test: int) -> dict[str, Path]:
    """Synthetic CIFAR-shaped train/test split files, as the cifar10 rule would write them."""
    from repro.data.arrays import write_split
    from repro.data.synthetic import synthetic_split

    write_split(directory / "train.npz", synthetic_split(n_train, seed=0))
    write_split(directory / "test.npz", synthetic_split(n_test, seed=1))
    return {"train": directory / "train.npz", "test": directory / "test.npz"}


def write_mini_shards(folder: Path, per_class: int = 2) -> Path:
    """CIFAR-10 JPEG shards in the layout of ../shared/data/cifar10-jpeg (train-0..4 and test,
    ``per_class`` images of each class in each) with their SHA256SUMS; returns ``folder``."""
    import hashlib
    import io
    import tarfile

    from PIL import Image

    from repro.data.cifar10 import CLASSES

    folder.mkdir(parents=True)
    names = [f"train-{i}.tar.xz" for i in range(5)] + ["test.tar.xz"]
    for name in names:
        split = "test" if name.startswith("test") else "train"
        with tarfile.open(folder / name, "w:xz") as tar:
            for label, cls in enumerate(CLASSES):
                for i in range(per_class):
                    buf = io.BytesIO()
                    Image.new("RGB", (32, 32), (20 * label, 100, 200)).save(buf, format="JPEG")
                    info = tarfile.TarInfo(f"{split}/{cls}/{i:04d}.jpg")
                    info.size = len(buf.getvalue())
                    tar.addfile(info, io.BytesIO(buf.getvalue()))
    sums = "".join(f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    (folder / "SHA256SUMS").write_text(sums)
    return folder


@pytest.fixture
def mini_shards(tmp_path) -> Path:
    """train-0..4 and test shards of 2 images per class, with SHA256SUMS."""
    return write_mini_shards(tmp_path / "shards")


@pytest.fixture
def compose():
    """compose(overrides) -> DictConfig of config/run.yaml, as `python -m repro.pipeline.run` would see it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def _compose(overrides: list[str]):
        with initialize_config_dir(config_dir=str(REPO / "config"), version_base="1.3"):
            return hydra_compose(config_name="run", overrides=overrides, return_hydra_config=False)

    return _compose


@pytest.fixture
def shards_dir() -> Path:
    for candidate in (REPO.parent / "shared" / "data" / "cifar10-jpeg",):
        if (candidate / "SHA256SUMS").exists():
            return candidate
    pytest.skip("CIFAR-10 JPEG shards not found beside the checkout (../shared/data/cifar10-jpeg)")


def mlflow_server_login() -> dict[str, str]:
    """The login of the test server (REPRO_TEST_MLFLOW_DIR/credentials, which tools/mlflow_server.sh
    makes) as MLFLOW_TRACKING_USERNAME/PASSWORD, or {} where there is none (a server without login)."""
    import os

    from repro.pipeline.tracking import read_credentials

    folder = os.environ.get("REPRO_TEST_MLFLOW_DIR")
    path = Path(folder) / "credentials" if folder else None
    return read_credentials(path) if path is not None and path.is_file() else {}


def service_unavailable(reason: str):
    """Skip a test whose outside service (a PostgreSQL-backed MLflow server, ...) is not given, with
    the reason; under ``REPRO_REQUIRE_SERVICES=all`` (CI, where the services are started) the same
    absence is a failure, so a misconfigured CI cannot pass by skipping."""
    import os

    if os.environ.get("REPRO_REQUIRE_SERVICES") == "all":
        pytest.fail(f"REPRO_REQUIRE_SERVICES=all but {reason}")
    pytest.skip(reason)
