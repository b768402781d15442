"""Loading and launching the pipeline's CUDA C kernels from CuPy: the one place every paper gets
its cubins from (the kernel-build step writes them; see :mod:`repro.kernels.build`).

    fn = kernels.function("comet_codec", "comet_pack", device=0)
    with cupy.cuda.Device(0), kernels.launch_stream(True, 0):
        fn(grid, block, args)

Modules and functions load once per (folder, cubin, device): training calls this for every saved tensor,
so a hit resolves no paths. The folder: the argument, else ``$REPRO_KERNELS_DIR``, else
``results/build/kernels`` under the working directory; the cache is keyed by the argument or, without
one, by the variable's value and the working directory, so a test that points the variable at its own
build never gets a module loaded from another folder. Nothing here imports CuPy or torch at
module load.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from repro.kernels.build import cubin_path

_MODULES: dict[tuple[Any, str, int], Any] = {}
_FUNCTIONS: dict[tuple[Any, str, str, int], Any] = {}
_STREAMS: dict[tuple[int, int], Any] = {}


def default_dir() -> Path:
    return Path(os.environ.get("REPRO_KERNELS_DIR") or Path.cwd() / "results" / "build" / "kernels")


def _dir_key(kernels_dir: Path | None):
    """What names the folder without resolving it: the argument, else ($REPRO_KERNELS_DIR, cwd)."""
    return kernels_dir if kernels_dir is not None else (os.environ.get("REPRO_KERNELS_DIR"), os.getcwd())


def module(stem: str, device: int, kernels_dir: Path | None = None):
    """The CuPy RawModule of ``<stem>.cubin`` on ``device`` (loaded on first use)."""
    key = (_dir_key(kernels_dir), stem, device)
    hit = _MODULES.get(key)
    if hit is not None:
        return hit
    path = cubin_path(Path(kernels_dir) if kernels_dir is not None else default_dir(), stem)  # says how to build it
    import cupy

    with cupy.cuda.Device(device):
        loaded = cupy.RawModule(path=str(path))
    _MODULES[key] = loaded
    return loaded


def function(stem: str, name: str, device: int, kernels_dir: Path | None = None):
    """The extern "C" kernel ``name`` of ``<stem>.cubin`` on ``device`` (looked up once)."""
    key = (_dir_key(kernels_dir), stem, name, device)
    hit = _FUNCTIONS.get(key)
    if hit is None:
        hit = _FUNCTIONS[key] = module(stem, device, kernels_dir).get_function(name)
    return hit


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


def launch_stream(torch_operands: bool, device: int):
    """The CuPy stream to launch on: torch's current stream for torch operands (so kernels order
    with torch's work without a sync), else CuPy's current stream."""
    import cupy

    if not torch_operands:
        return cupy.cuda.get_current_stream()
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without a Stream object
    handle = raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream
    if handle == 0:  # the legacy default stream, as CuPy's own default
        return cupy.cuda.Stream.null
    if (handle, device) not in _STREAMS:
        _STREAMS[(handle, device)] = cupy.cuda.ExternalStream(handle, device)
    return _STREAMS[(handle, device)]
