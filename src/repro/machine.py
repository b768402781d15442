"""The machine a number was measured on: host, GPU, driver and package versions, read (never
set) from /proc, torch and nvidia-smi; and who else computed on the GPU while a run lasted. Every
record's provenance carries these (:func:`repro.pipeline.provenance.collect`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path


def package_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# Device nodes and driver folders of which at least one exists wherever a GPU torch can use does
# (NVIDIA's driver; ROCm's kernel driver for torch's HIP build).
GPU_DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd")


def torch_cuda_version() -> str | None:
    """``torch.version.cuda`` read from torch's ``version.py`` without importing torch (an import
    costs a CPU job seconds); None where torch or the line is not there, as for a CPU build."""
    import ast

    spec = importlib.util.find_spec("torch")
    for folder in (spec and spec.submodule_search_locations) or ():
        try:
            tree = ast.parse((Path(folder) / "version.py").read_text())
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                getattr(node, "target", None) if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(node.value, ast.Constant):
                return node.value.value
    return None


@lru_cache(maxsize=1)
def gpu_info(driver_paths: tuple[str, ...] = GPU_DRIVER_PATHS) -> dict:
    """GPU name/count, driver and CUDA versions, or an empty description without a GPU. On a machine
    with no GPU driver at all (none of ``driver_paths``), and torch not yet imported, the same
    description comes without importing torch (torch_cuda_version)."""
    if "torch" not in sys.modules and not any(os.path.exists(p) for p in driver_paths):
        if importlib.util.find_spec("torch") is None:
            return {"gpu_count": 0}
        return {"gpu_count": 0, "gpu_name": None, "cuda": torch_cuda_version(), "driver": None}
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
    the same 64-block step in 60 and 89 ms (docs/gpu-notes.md): these fields, with host_info's, let a reader
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
