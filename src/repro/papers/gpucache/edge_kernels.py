"""The three task kernels (see kernels/gpucache_edges.cu for their definitions): NumPy twins in
float64 (the reference), the CPU run in torch (what the smoke scale times: the same loop over the
schedule as gathers and index_add_ scatters, single-threaded) and the CUDA launches.

Per-vertex data: spmv reads x (n,) and adds into y (n,); flux reads q (n, 4) and adds into r;
pair reads positions p (n, 4; xyz, 0) and adds forces;
spmm reads X (n, F) and adds into Y (n, F) (F = the input's ``width``, a multiple of 4). Nothing here imports CuPy at load.
"""

from __future__ import annotations

import numpy as np

from repro.papers.gpucache.schedule import Schedule, relabel
from repro.papers.gpucache.taskgraph import TaskGraph

PAIR_EPS = 1e-4  # as PAIR_EPS in the .cu
THREADS = 256     # threads per block of the CUDA launches
CUBIN = "gpucache_edges"


def vertex_data(kernel: str, g: TaskGraph, seed: int, width: int = 0) -> np.ndarray:
    """The kernel's input data per original vertex (float32; spmm: ``width`` floats)."""
    rng = np.random.default_rng(seed)
    if kernel == "spmv":
        return rng.standard_normal(g.n).astype(np.float32)
    if kernel == "spmm":
        if width <= 0 or width % 4:
            raise ValueError(f"spmm: width must be a positive multiple of 4, got {width}")
        return rng.standard_normal((g.n, width)).astype(np.float32)
    data = rng.standard_normal((g.n, 4)).astype(np.float32)
    if kernel == "pair":
        if g.coords is not None and g.coords.shape[1] == 3:
            data[:, :3] = g.coords
        data[:, 3] = 0.0
    return data


def reference(kernel: str, a: np.ndarray, b: np.ndarray, w_ab: np.ndarray, w_ba: np.ndarray,
              data: np.ndarray) -> np.ndarray:
    """The kernel's output in float64 (the NumPy twin of the CUDA kernel)."""
    x = data.astype(np.float64)
    out = np.zeros_like(x)
    if kernel in ("spmv", "spmm"):
        # out[a] += w_ab x[b], out[b] += w_ba x[a] as one sparse product in float64 (duplicate
        # (row, col) entries summed): the same sums as np.add.at, ~10x faster on (n, F) data
        import scipy.sparse as sp

        n = len(x)
        rows, cols = np.concatenate([a, b]), np.concatenate([b, a])
        vals = np.concatenate([w_ab, w_ba]).astype(np.float64)
        return sp.csr_matrix((vals, (rows, cols)), shape=(n, n)) @ x
    d = x[b] - x[a]
    if kernel == "flux":
        f = (w_ab / (1.0 + (d * d).sum(1)))[:, None] * d
        np.add.at(out, a, f)
        np.add.at(out, b, -f)
        return out
    d[:, 3] = 0.0
    i = 1.0 / ((d * d).sum(1) + PAIR_EPS)
    f = (w_ab * (i ** 3 - 0.5 * i ** 2))[:, None] * d
    np.add.at(out, a, -f)
    np.add.at(out, b, f)
    return out


def schedule_reference(kernel: str, s: Schedule, data: np.ndarray) -> np.ndarray:
    """The twin's output for a schedule, in the schedule's vertex layout."""
    return reference(kernel, s.a, s.b, s.w_ab, s.w_ba, relabel(data, s))


class TorchRun:
    """The kernel on the CPU in torch, tasks in schedule order (one thread: set by the caller)."""

    def __init__(self, kernel: str, s: Schedule, data: np.ndarray):
        import torch

        self.kernel = kernel
        self.a = torch.from_numpy(s.a)
        self.b = torch.from_numpy(s.b)
        self.w_ab = torch.from_numpy(s.w_ab)
        self.w_ba = torch.from_numpy(s.w_ba)
        self.x = torch.from_numpy(relabel(data, s))
        self.out = torch.zeros_like(self.x)

    def __call__(self):
        out, x, a, b = self.out, self.x, self.a, self.b
        out.zero_()
        if self.kernel == "spmv":
            out.index_add_(0, a, self.w_ab * x[b])
            out.index_add_(0, b, self.w_ba * x[a])
            return out
        if self.kernel == "spmm":
            out.index_add_(0, a, self.w_ab.unsqueeze(1) * x[b])
            out.index_add_(0, b, self.w_ba.unsqueeze(1) * x[a])
            return out
        d = x[b] - x[a]
        if self.kernel == "flux":
            f = (self.w_ab / (1.0 + (d * d).sum(1))).unsqueeze(1) * d
            out.index_add_(0, a, f)
            out.index_add_(0, b, -f)
            return out
        d[:, 3] = 0.0
        i = 1.0 / ((d * d).sum(1) + PAIR_EPS)
        f = (self.w_ab * (i ** 3 - 0.5 * i ** 2)).unsqueeze(1) * d
        out.index_add_(0, a, -f)
        out.index_add_(0, b, f)
        return out


class CudaRun:
    """The CUDA kernel for one schedule: device arrays made once, ``launch()`` queues one run on
    torch's current stream (the output zeroed first), ``time()`` is the CUDA-event median."""

    def __init__(self, kernel: str, s: Schedule, data: np.ndarray, kernels_dir, device: int = 0):
        import torch

        from repro import kernels

        dev = torch.device("cuda", device)
        self.device = device
        self.k = s.k
        self.part_start = torch.from_numpy(s.part_start).to(dev)
        self.ab = torch.from_numpy(np.stack([s.a, s.b], 1).astype(np.int32)).to(dev)
        self.w = torch.from_numpy(np.stack([s.w_ab, s.w_ba], 1).astype(np.float32)).to(dev)
        self.x = torch.from_numpy(relabel(data, s)).to(dev)
        self.out = torch.zeros_like(self.x)
        self.fn = kernels.function(CUBIN, f"gpucache_{kernel}", device, kernels_dir)
        # spmm's last argument: float4s per row (F / 4); the (n, F) arrays are row-major
        self.extra = (np.int32(self.x.shape[1] // 4),) if kernel == "spmm" else ()
        self.stream = kernels.launch_stream(True, device)

    def launch(self) -> None:
        self.out.zero_()
        self._launch_only()

    def time(self, warmup: int, repeats: int) -> tuple[float, float]:
        """(median, min) seconds of the kernel alone (zeroing outside the events)."""
        import torch

        for _ in range(warmup):
            self.launch()
        samples = []
        for _ in range(repeats):
            self.out.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self._launch_only()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return float(np.median(samples)), float(np.min(samples))

    def _launch_only(self) -> None:
        import cupy

        args = tuple(cupy.uint64(t.data_ptr()) for t in (self.part_start, self.ab, self.w, self.x, self.out))
        args += self.extra
        with cupy.cuda.Device(self.device), self.stream:
            self.fn((self.k,), (THREADS,), args)

    def result(self) -> np.ndarray:
        self.launch()
        return self.out.cpu().numpy()
