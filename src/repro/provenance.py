"""Where a number came from: code version, machine, GPU, driver, library versions, config."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict:
    """Commit and dirty flag. REPRO_GIT_COMMIT / REPRO_GIT_DIRTY, when set, win: a tree copied to
    another machine may travel without .git, or with a stale one (a lent GPU machine once reported
    the session's first commit for every run), so the caller who made the copy says what it is."""
    if os.environ.get("REPRO_GIT_COMMIT"):
        return {"commit": os.environ["REPRO_GIT_COMMIT"],
                "dirty": {"0": False, "1": True}.get(os.environ.get("REPRO_GIT_DIRTY", ""))}
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": "unknown", "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def changed_since(commit: str, paths: list[str]) -> list[str] | None:
    """Which of ``paths`` (files or folders, relative to the repository) differ between ``commit`` and
    the working tree: so that a report can say a committed result predates the code that would make
    it now. None when that cannot be told (no git, or a commit this clone does not have)."""
    if not commit or commit == "unknown" or _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None
    out = _git("diff", "--name-only", "-I", r"^\s*#", commit, "--", *paths)  # comment-only lines do not count
    return None if out is None else [line for line in out.splitlines() if line]


# ---- which code made a record -------------------------------------------------------------------
PACKAGE_ROOT = Path(__file__).resolve().parent  # src/repro


def source_digest(path: Path) -> str:
    """A digest of what a source file computes: for Python its syntax tree without docstrings (so
    comments, formatting and docstrings change nothing), for other sources (CUDA kernels, configs)
    its lines without blank and comment-only ones ("#" or "//")."""
    text = Path(path).read_text()
    if Path(path).suffix == ".py":
        tree = ast.parse(text)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        text = ast.dump(tree, annotate_fields=False)
    else:
        text = "\n".join(line.rstrip() for line in text.splitlines()
                         if line.strip() and not line.lstrip().startswith(("#", "//")))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# top-level modules that run, record and report but compute no number of a record
BOOKKEEPING = {"__init__", "atomic", "claims", "experiment", "figures", "gpu_slots", "progress", "provenance",
               "records", "reference", "run", "scale", "tracking"}


def _module_file(name: str) -> Path | None:
    """The source file of repro module ``name`` in this tree (a package's __init__.py), or None."""
    base = PACKAGE_ROOT.joinpath(*name.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def import_closure(module: str) -> list[str]:
    """``module`` and every repro module it imports, transitively, read from the sources (nothing is
    imported): what a record made by an entry in ``module`` ran, for records that predate
    ``provenance.code``. Parent packages count (importing a module runs their __init__)."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or not (name == "repro" or name.startswith("repro.")):
            continue
        path = _module_file(name)
        if path is None:  # a name imported from a module, not a module
            continue
        seen.add(name)
        todo += [name.rsplit(".", 1)[0]] if "." in name else []
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    root = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{root}.{base}" if base else root
                todo += [base] + [f"{base}.{alias.name}" for alias in node.names]  # a name may be a submodule
    return sorted(seen)


def code_files(module_names, extra: tuple[Path, ...] = ()) -> list[Path]:
    """The package's source files behind ``module_names`` (e.g. sys.modules after a run, or an
    import_closure): every repro module's file except the figure modules (drawing changes no number)
    and the bookkeeping ones (BOOKKEEPING), the kernel sources of each paper package among them
    (``<paper>/kernels/``), and the ``extra`` files that exist."""
    files, papers = set(), set()
    for name in module_names:
        if name != "repro" and not name.startswith("repro."):
            continue
        path = Path(getattr(sys.modules.get(name), "__file__", None) or _module_file(name) or "")
        if path.suffix != ".py" or not path.is_relative_to(PACKAGE_ROOT) or path.name == "figures.py":
            continue
        parts = path.relative_to(PACKAGE_ROOT).parts
        if len(parts) == 1 and path.stem in BOOKKEEPING:
            continue
        files.add(path)
        if len(parts) > 1:
            papers.add(parts[0])
    for paper in papers:
        files.update(p for p in (PACKAGE_ROOT / paper / "kernels").glob("*") if p.is_file())
    return sorted(files | {Path(p).resolve() for p in extra if Path(p).is_file()})


def repo_path(path: Path) -> str:
    path = Path(path).resolve()
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)


@lru_cache(maxsize=None)
def module_code(module: str) -> tuple[str, ...]:
    """The repository paths of the source files behind entry module ``module``: its import closure
    through code_files (what a run of it would list as provenance.code, its experiment file aside).
    The workflow makes them a step's inputs; the claims report checks old records against them."""
    return tuple(repo_path(f) for f in code_files(import_closure(module)))


def experiment_code(experiment: str) -> list[str] | None:
    """module_code of experiment '<paper>/<name>''s entry module (config/experiment/<paper>/<name>.yaml
    names it), or None where that file or its entry is gone. The workflow's code inputs of a step."""
    config = REPO_ROOT / "config" / "experiment" / f"{experiment}.yaml"
    entry = (yaml.safe_load(config.read_text()) or {}).get("entry") if config.is_file() else None
    return list(module_code(entry.split(":")[0])) if entry else None


def code_digests(files) -> dict[str, str]:
    """{path (relative to the repository where it lies inside): source_digest}: what a record's code
    was, file by file."""
    return {repo_path(f): source_digest(f) for f in files}


def changed_code(digests: dict[str, str]) -> list[str]:
    """Which of a record's code files compute something else now (or are gone), by their digests."""
    changed = []
    for rel, digest in digests.items():
        path = REPO_ROOT / rel
        try:
            now = source_digest(path)
        except (OSError, SyntaxError, ValueError):
            now = None
        if now != digest:
            changed.append(rel)
    return changed


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def gpu_info() -> dict:
    """GPU name/count, driver and CUDA versions, or an empty description without a GPU."""
    try:
        import torch
    except ImportError:
        return {"gpu_count": 0}
    if not torch.cuda.is_available():
        return {"gpu_count": 0, "gpu_name": None, "cuda": torch.version.cuda, "driver": None}
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    driver = None
    try:
        driver = _smi_query("driver_version")[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu_count": len(names),
        "gpu_name": names[0],
        "gpu_names": names,
        "gpu_sms": props.multi_processor_count,
        "gpu_memory_bytes": props.total_memory,
        "cuda": torch.version.cuda,
        "driver": driver,
        **gpu_board(device_uuid(0)),
    }


def gpu_board(uuid: str | None, query=None) -> dict:
    """What tells one lent card from another of the same name, read (never set) from nvidia-smi for
    the GPU with ``uuid``: its UUID, maximum SM clock and power limit. Two H200s of one name measured
    the same 64-block step in 60 and 89 ms (session 7): these fields, with host_info's, let a reader
    see whether the machines differed. Empty where nvidia-smi cannot say."""
    if uuid is None:
        return {}
    fields = "uuid,clocks.max.sm,power.limit"
    try:
        rows = (query or _smi_query)(fields)
    except (OSError, subprocess.SubprocessError):
        return {}
    for row in rows:
        cells = [c.strip() for c in row.split(",")]
        if len(cells) == 3 and _uuid(cells[0]) == uuid:
            return {"gpu_uuid": uuid, "gpu_clock_max_sm_mhz": _number(cells[1]),
                    "gpu_power_limit_w": _number(cells[2])}
    return {"gpu_uuid": uuid}


def _smi_query(fields: str) -> list[str]:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20, check=True)
    return out.stdout.strip().splitlines()


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]"
        return None


@lru_cache(maxsize=1)
def host_info(proc: Path = Path("/proc")) -> dict:
    """The host's CPU model, the CPUs this process may use and its memory (Linux /proc; fields it
    cannot read are left out): the host side of a launch-bound step's speed."""
    info = {"cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    try:
        model = next((line.split(":", 1)[1].strip() for line in (proc / "cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), None)
        if model:
            info["cpu_model"] = model
    except OSError:
        pass
    try:
        kib = next(int(line.split()[1]) for line in (proc / "meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
        info["host_memory_bytes"] = kib * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return info


def gpu_slug(name: str | None) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (the folder name of reference results)."""
    if not name:
        return "cpu"
    return "-".join(name.lower().replace("_", " ").split())


def config_hash(cfg: dict) -> str:
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def collect(cfg: dict | None = None) -> dict:
    """Provenance of a run: every record carries this."""
    prov = {
        **git_state(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        **host_info(),
        **gpu_info(),
        "packages": {
            name: _version(name)
            for name in ("torch", "cupy-cuda13x", "cupy", "triton", "numpy", "pandas", "snakemake", "hydra-core", "mlflow")
            if _version(name)
        },
    }
    if cfg is not None:
        prov["config_hash"] = config_hash(cfg)
    return prov


# ---- who else used the GPU during a run ---------------------------------------------------------
def _ancestors(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """pid and its ancestors (from /proc/<pid>/stat; empty where /proc is unreadable)."""
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the parenthesised name
        except (OSError, ValueError, IndexError):
            break
    return seen


def _uuid(text) -> str:
    """A GPU UUID as nvidia-smi and torch both can give it: lower case, without the "GPU-" prefix."""
    text = str(text).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def _compute_apps() -> list[tuple[int, str]] | None:
    """(PID, GPU UUID) of the compute processes on this machine's GPUs (nvidia-smi), or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        rows = [line.split(",") for line in out.splitlines() if line.strip()]
        return [(int(pid), _uuid(uuid)) for pid, uuid in rows]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def device_uuid(index: int | None = None) -> str | None:
    """The UUID of the CUDA device this process computes on (None where torch cannot say)."""
    try:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
        return _uuid(props.uuid)
    except Exception:  # no CUDA, or a torch without the attribute: count every GPU's processes
        return None


class GpuNeighbours:
    """Counts the other processes computing on this machine's GPUs while a run lasts, so that a
    record says whether its speeds were measured alone or beside other jobs (speeds measured while
    sharing compare only within one run). A daemon thread samples nvidia-smi every ``interval_s``;
    only processes on our GPU (``uuid``) count, and our own process and its children (isolated
    probes) are not neighbours. ``summary()`` is None
    when it could not tell: no samples, or our own process never showed up in them (nvidia-smi in
    another PID namespace, as in some containers, reports PIDs we cannot match)."""

    def __init__(self, interval_s: float = 10.0, sample=_compute_apps, ancestors=_ancestors, uuid: str | None = None):
        import threading

        self.interval_s, self._sample, self._ancestors = interval_s, sample, ancestors
        self.uuid = _uuid(uuid) if uuid else None  # only processes on this GPU count (None: any GPU)
        self.samples, self.max_others, self.self_seen = 0, 0, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-neighbours", daemon=True)

    def poll(self) -> None:
        apps = self._sample()
        if apps is None:
            return
        pids = [pid for pid, uuid in apps if self.uuid is None or uuid == self.uuid]
        me = os.getpid()
        ours = [p for p in pids if me in self._ancestors(p)]
        self.samples += 1
        self.self_seen |= bool(ours)
        self.max_others = max(self.max_others, len(pids) - len(ours))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def __enter__(self) -> "GpuNeighbours":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.poll()  # one last look, also for runs shorter than one interval

    def summary(self) -> dict | None:
        if not self.samples or not self.self_seen:
            return None
        return {"gpu_samples": self.samples, "gpu_neighbours_max": self.max_others}
