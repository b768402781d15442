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

A call repeated in a caller's loop launches through :class:`Launch` instead: its argument block is
built once, a call rewrites the slots that change (pointers, flags) and hands the block to
``cuLaunchKernel`` on a stream handle (`stream_handle`), with none of CuPy's per-call argument
conversion and no device or stream context (on the H100 host a CuPy launch of TSM2R's 12 arguments
in those contexts cost about 27 us against torch.mm's 21: docs/gpu-notes.md, session 23).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from typing import Any, Sequence

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
    handle = stream_handle(True, device)
    if handle == 0:  # the legacy default stream, as CuPy's own default
        return cupy.cuda.Stream.null
    if (handle, device) not in _STREAMS:
        _STREAMS[(handle, device)] = cupy.cuda.ExternalStream(handle, device)
    return _STREAMS[(handle, device)]


# ctypes of the kernel argument types (NumPy scalars) a Launch takes
_CTYPES = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
           "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class Launch:
    """One kernel's launch with its argument block built once: ``slots[i].value = x`` rewrites
    argument i (a pointer, a flag) and ``launch(stream)`` calls ``cuLaunchKernel`` on that stream
    handle, an int (`stream_handle`). The driver copies the arguments at the launch, so the block
    may change right after; a lock keeps two threads from launching each other's arguments (hold
    ``launch.lock`` around the slot writes and the launch). ``launch(stream)`` needs the device's
    context current; ``start`` makes sure of it.

    fn: a CuPy RawKernel or Function (its CUfunction on the current device); args: NumPy scalars
    (int32, uint32, int64, uint64, float32, float64), in the kernel's parameter order."""

    def __init__(self, fn: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], shared_mem: int = 0):
        import numpy as np

        kinds = [np.asarray(a).dtype.name for a in args]
        unknown = [f"{i}: {k}" for i, k in enumerate(kinds) if k not in _CTYPES]
        if unknown:
            raise TypeError(f"kernel arguments of types Launch cannot pass ({', '.join(unknown)}); "
                            f"give NumPy scalars of {sorted(_CTYPES)}")
        self.slots = [_CTYPES[k](np.asarray(a).item()) for k, a in zip(kinds, args)]
        self._pointers = (ctypes.c_void_p * len(self.slots))(*(ctypes.addressof(s) for s in self.slots))
        self._params = ctypes.addressof(self._pointers)
        g, b = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
        self._fixed = (function_pointer(fn), *g, *b, int(shared_mem))
        self.lock = threading.Lock()
        # resolved here, not per launch: an import statement inside a call costs 0.1-0.3 us a launch
        from cupy.cuda import driver, runtime

        self._launch_kernel, self._current_device = driver.launchKernel, runtime.getDevice
        self._streams: dict[bool, Any] = {}

    def __call__(self, stream: int) -> None:
        f, gx, gy, gz, bx, by, bz, shared = self._fixed
        self._launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, self._params, 0)

    def start(self, torch_operands: bool, device: int) -> None:
        """Launch on the stream launch_stream names (torch's current one for torch operands, else
        CuPy's), entering ``device``'s context only where it is not the current one."""
        stream = self._streams.get(torch_operands)
        if stream is None:
            stream = self._streams[torch_operands] = stream_getter(torch_operands)
        if self._current_device() == device:
            self(stream(device))
        else:
            import cupy

            with cupy.cuda.Device(device):
                self(stream(device))

    def values(self) -> list:
        """The arguments as the next launch passes them (for tests and error messages)."""
        return [s.value for s in self.slots]


def function_pointer(fn: Any) -> int:
    """The CUfunction of a CuPy RawKernel (on the current device) or Function."""
    kernel = getattr(fn, "kernel", None)
    return int(kernel.ptr if kernel is not None else fn.ptr)


def stream_handle(torch_operands: bool, device: int) -> int:
    """The handle of the stream launch_stream names, as an int, without a Stream object: torch's
    current stream of ``device`` for torch operands, else CuPy's current stream."""
    return stream_getter(torch_operands)(device)


def stream_getter(torch_operands: bool):
    """device -> stream_handle(torch_operands, device), the library's function looked up here (each
    Launch keeps the one it got: its launches then pay the call alone)."""
    if torch_operands:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw if raw is not None else (lambda device: torch.cuda.current_stream(device).cuda_stream)
    import cupy

    current = cupy.cuda.get_current_stream
    return lambda device: current().ptr


def on_device(device: int) -> bool:
    """Whether ``device`` is the thread's current CUDA device (else enter ``cupy.cuda.Device``)."""
    import cupy

    return cupy.cuda.runtime.getDevice() == device

