"""SpTRSV over k GPUs (Xie et al., ICPP 2021): the unified-memory design against zero-copy remote
atomics with the task pool, both running the kernel of sptrsv_multi.cu (twin:
schedule.multigpu_solve) on the same row partition (schedule.partition).

Each GPU's task pool hands out its rows in ascending order or, with ``level_order``, by level
(the kernel's ``order``): the same for both designs.

- Unified memory (the paper's baseline): one process drives the k GPUs. The rows' left sums and
  counters are one ``cudaMallocManaged`` array each; GPU g's parts are slices of them, so pages
  migrate between GPUs on demand. Each GPU zeroes its own slice before a solve.
- Zero-copy: one process per GPU (repro.multigpu). Each GPU's left sums and counters are torch
  symmetric-memory tensors (its CUDA backend: cuMem allocations mapped into every peer); the
  kernel gets the k peer pointers of the rendezvous (``buffer_ptrs_dev``) and pushes remote
  contributions with system-scope atomics straight into the owner's memory over NVLink.
  Why torch's symmetric memory and not NVSHMEM (nvshmem4py): NVSHMEM's device API would have to
  be linked into our cubins (relocatable device code against libnvshmem_device), and nvshmem4py
  exposes device calls only to Numba-CUDA and CuTe kernels; NVSHMEM has no floating-point atomic
  add either, which the left sums need. Peer pointers over NVLink give the same one-sided remote
  atomics to plain CUDA C, and torch (already on the GPU machine) provides them.
  A solve is: zero own parts, device barrier (no peer pushes into parts not yet zeroed), kernel,
  device barrier; its time (CUDA events around kernel and final barrier) is the slowest rank's.

Both check x against the host: backward error max|Lx - b| / max(|L||x| + |b|).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from repro import kernels
from repro.papers.sptrsv import schedule
from repro.data.matrices import MatrixSpec

STEM = "sptrsv_multi"
THREADS = 256
MAX_GPUS = 8  # the kernel keeps the partition bounds in shared memory for up to 8 GPUs
SPIN_LIMIT_CYCLES = 2 * 10**10  # a row waiting longer (about 10 s; page faults are slow) is a stall


@dataclass(frozen=True)
class Part:
    """GPU g's share of L: its rows lo..hi-1 as CSC columns (colptr rebased to 0), need and b."""

    lo: int
    hi: int
    colptr: np.ndarray  # int64
    rowidx: np.ndarray  # int32, global rows
    val: np.ndarray
    need: np.ndarray  # int32
    b: np.ndarray
    order: np.ndarray | None  # local rows (0-based) in the pool's order; None: ascending


def check_gpus(k: int, visible: int | None = None, minimum: int = 2) -> None:
    """A clear error for a GPU count the multi-GPU kernel or the machine cannot serve (``minimum``
    1 for the points of a scaling curve)."""
    if not isinstance(k, int) or k < minimum:
        raise ValueError(f"multi-GPU SpTRSV needs at least {minimum} GPU(s), got {k!r}"
                         + (" (one GPU: experiment sptrsv/single_gpu)" if minimum == 2 else ""))
    if k > MAX_GPUS:
        raise ValueError(f"multi-GPU SpTRSV supports at most {MAX_GPUS} GPUs, got {k}")
    if visible is not None and k > visible:
        raise ValueError(f"multi-GPU SpTRSV on {k} GPUs, but {visible} are visible")


def split(L: sp.csr_matrix, b: np.ndarray, k: int, level_order: bool = False) -> tuple[np.ndarray, list[Part]]:
    """The row partition and each GPU's part (with its rows by level if ``level_order``)."""
    bounds = schedule.partition(L, k)
    orders = schedule.pool_orders(L, bounds, "levels") if level_order else [None] * k
    csc = L.tocsc()
    csc.sort_indices()
    need = (np.diff(L.indptr) - 1).astype(np.int32)
    parts = []
    for g in range(k):
        lo, hi = int(bounds[g]), int(bounds[g + 1])
        s, e = csc.indptr[lo], csc.indptr[hi]
        parts.append(Part(lo, hi, (csc.indptr[lo:hi + 1] - s).astype(np.int64), csc.indices[s:e].astype(np.int32),
                          csc.data[s:e].copy(), need[lo:hi].copy(), b[lo:hi].copy(),
                          None if orders[g] is None else (orders[g] - lo).astype(np.int32)))
    return bounds, parts


def remote_fraction(L: sp.csr_matrix, bounds: np.ndarray) -> float:
    """Share of the pushes (below-diagonal entries) whose row another GPU owns than their column."""
    strict = sp.tril(L, k=-1).tocoo()
    if strict.nnz == 0:
        return 0.0
    owner = lambda i: np.searchsorted(bounds, i, side="right") - 1  # noqa: E731
    return float((owner(strict.row) != owner(strict.col)).mean())


def backward_error(L: sp.csr_matrix, x: np.ndarray, b: np.ndarray) -> float:
    scale = abs(L) @ np.abs(x) + np.abs(b)
    return float(np.abs(L @ x - b).max() / max(scale.max(), 1e-300))


def _grid(device: int, blocks_per_sm: int) -> tuple[int, int, int]:
    return (kernels.sm_count(device) * blocks_per_sm, 1, 1)


def _launch(fn, grid, part_dev: dict, sums_ptrs, counts_ptrs, bounds_dev, k: int, me: int, grain: int,
            stream=None) -> None:
    """One solve's kernel on ``stream`` (None: CuPy's current stream)."""
    fn(grid, (THREADS, 1, 1), (part_dev["colptr"], part_dev["rowidx"], part_dev["val"], part_dev["b"], part_dev["x"],
                               sums_ptrs, counts_ptrs, bounds_dev, np.int32(k), np.int32(me), part_dev["need"],
                               part_dev["pool"], np.int64(part_dev["n"]), np.int32(grain), part_dev["order"],
                               np.int64(SPIN_LIMIT_CYCLES), part_dev["stalled"]),
       stream=stream)


def _to_device(part: Part) -> dict:
    import cupy

    return {"colptr": cupy.asarray(part.colptr), "rowidx": cupy.asarray(part.rowidx), "val": cupy.asarray(part.val),
            "need": cupy.asarray(part.need), "b": cupy.asarray(part.b), "x": cupy.zeros(part.hi - part.lo),
            "pool": cupy.zeros(1, dtype=np.int32), "n": part.hi - part.lo,
            "order": np.uint64(0) if part.order is None else cupy.asarray(part.order),
            "stalled": cupy.full(1, -1, dtype=np.int32)}


def _check_stall(dev: dict, design: str) -> None:
    row = int(dev["stalled"].get()[0])
    if row >= 0:
        raise RuntimeError(f"{design}: row {row} waited more than {SPIN_LIMIT_CYCLES:.0e} cycles for its "
                           "dependencies: the solve stalled")


def unified_memory(L: sp.csr_matrix, b: np.ndarray, k: int, *, kernels_dir: Path | None, warmup: int, repeats: int,
                   grain: int, blocks_per_sm: int, level_order: bool) -> dict:
    """Time the unified-memory design on GPUs 0..k-1 of this process; returns times and the check."""
    import cupy

    check_gpus(k, cupy.cuda.runtime.getDeviceCount(), minimum=1)
    for g in range(k):
        if not cupy.cuda.runtime.getDeviceProperties(g).get("concurrentManagedAccess", 1):
            raise RuntimeError(f"GPU {g} lacks concurrent managed access: the unified-memory design cannot run here")
    n = L.shape[0]
    bounds, parts = split(L, b, k, level_order)
    with cupy.cuda.Device(0):
        sums_mem = cupy.cuda.malloc_managed(n * 8)
        counts_mem = cupy.cuda.malloc_managed(n * 4)
    per_gpu = []
    for g, part in enumerate(parts):
        with cupy.cuda.Device(g):
            dev = _to_device(part)
            dev["sums_ptrs"] = cupy.asarray([sums_mem.ptr + 8 * int(o) for o in bounds[:-1]], dtype=np.uint64)
            dev["counts_ptrs"] = cupy.asarray([counts_mem.ptr + 4 * int(o) for o in bounds[:-1]], dtype=np.uint64)
            dev["bounds"] = cupy.asarray(bounds.astype(np.int64))
            dev["stream"] = cupy.cuda.Stream(non_blocking=True)
            dev["fn"] = kernels.function(STEM, "syncfree_pool", g, kernels_dir)
            dev["grid"] = _grid(g, blocks_per_sm)
            per_gpu.append(dev)

    def solve() -> float:
        for g, dev in enumerate(per_gpu):
            lo, rows = parts[g].lo, parts[g].hi - parts[g].lo
            with cupy.cuda.Device(g), dev["stream"]:  # GPU g touches its own slices first
                cupy.cuda.runtime.memsetAsync(sums_mem.ptr + 8 * lo, 0, 8 * rows, dev["stream"].ptr)
                cupy.cuda.runtime.memsetAsync(counts_mem.ptr + 4 * lo, 0, 4 * rows, dev["stream"].ptr)
                dev["pool"].fill(0)
        for dev in per_gpu:
            dev["stream"].synchronize()
        with cupy.cuda.Device(0):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(per_gpu[0]["stream"])
        done = []
        for g, dev in enumerate(per_gpu):
            with cupy.cuda.Device(g):
                dev["stream"].wait_event(start)
                _launch(dev["fn"], dev["grid"], dev, dev["sums_ptrs"], dev["counts_ptrs"], dev["bounds"], k, g, grain,
                        stream=dev["stream"])
                ev = cupy.cuda.Event()
                ev.record(dev["stream"])
                done.append(ev)
        with cupy.cuda.Device(0):
            for ev in done:
                per_gpu[0]["stream"].wait_event(ev)
            end.record(per_gpu[0]["stream"])
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) / 1e3

    for _ in range(warmup):
        solve()
    times = [solve() for _ in range(repeats)]
    for dev in per_gpu:
        _check_stall(dev, "unified memory")
    x = np.concatenate([cupy.asnumpy(dev["x"]) for dev in per_gpu])
    return {"solve_s": float(np.median(times)), "min_s": float(min(times)), "backward": backward_error(L, x, b)}


def zero_copy_worker(rank: int, world: int, specs: list[MatrixSpec], seeds: list[int], kernels_dir: str | None,
                     warmup: int, repeats: int, grain: int, blocks_per_sm: int, level_order: bool) -> list[dict]:
    """One rank of the zero-copy design, matrix by matrix (run by repro.multigpu.launch, nccl)."""
    import torch.distributed._symmetric_memory as symm

    check_gpus(world, minimum=1)
    if hasattr(symm, "set_backend"):
        symm.set_backend("CUDA")  # cuMem allocations mapped into every peer (not NVSHMEM's heap)
    return [_zero_copy_rank(rank, world, spec, seed, Path(kernels_dir) if kernels_dir else None, warmup, repeats,
                            grain, blocks_per_sm, level_order) for spec, seed in zip(specs, seeds, strict=True)]


def _zero_copy_rank(rank: int, world: int, spec: MatrixSpec, seed: int, kernels_dir: Path | None, warmup: int,
                    repeats: int, grain: int, blocks_per_sm: int, level_order: bool) -> dict:
    import cupy
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm

    cupy.cuda.Device(rank).use()
    L = spec.build()
    b = np.random.default_rng(seed).standard_normal(L.shape[0])
    bounds, parts = split(L, b, world, level_order)
    part = parts[rank]
    n_max = int(np.diff(bounds).max())
    sums = symm.empty(n_max, dtype=torch.float64, device=f"cuda:{rank}")
    counts = symm.empty(n_max, dtype=torch.int32, device=f"cuda:{rank}")
    group = dist.group.WORLD.group_name
    hs, hc = symm.rendezvous(sums, group), symm.rendezvous(counts, group)
    fn = kernels.function(STEM, "syncfree_pool", rank, kernels_dir)
    with kernels.launch_stream(True, rank):
        dev = _to_device(part)
        bounds_dev = cupy.asarray(bounds.astype(np.int64))
    grid = _grid(rank, blocks_per_sm)

    def solve() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with kernels.launch_stream(True, rank):
            sums.zero_()
            counts.zero_()
            dev["pool"].fill(0)
            hs.barrier(channel=0)
            start.record()
            _launch(fn, grid, dev, np.uint64(hs.buffer_ptrs_dev), np.uint64(hc.buffer_ptrs_dev), bounds_dev, world,
                    rank, grain)
            hs.barrier(channel=1)
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    for _ in range(warmup):
        solve()
    times = [solve() for _ in range(repeats)]
    _check_stall(dev, f"zero-copy rank {rank}")
    dist.barrier()
    return {"rank": rank, "lo": part.lo, "hi": part.hi, "times": times, "x": cupy.asnumpy(dev["x"])}


def zero_copy(specs: list[MatrixSpec], seeds: list[int], k: int, *, kernels_dir: Path | None, warmup: int,
              repeats: int, grain: int, blocks_per_sm: int, level_order: bool) -> list[dict]:
    """Time the zero-copy design on each matrix with one process per GPU (one launch for all);
    per matrix the solve times of the slowest rank and its x."""
    from repro import multigpu

    check_gpus(k, minimum=1)
    ranks = multigpu.launch(zero_copy_worker, k, backend="nccl",
                            args=(specs, seeds, str(kernels_dir) if kernels_dir else None, warmup, repeats, grain,
                                  blocks_per_sm, level_order))
    out = []
    for m in range(len(specs)):
        per_rank = sorted((r[m] for r in ranks), key=lambda r: r["lo"])
        times = np.max([r["times"] for r in per_rank], axis=0)
        out.append({"solve_s": float(np.median(times)), "min_s": float(times.min()),
                    "x": np.concatenate([r["x"] for r in per_rank])})
    return out
