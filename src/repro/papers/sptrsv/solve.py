"""The single-GPU triangular solvers, each split into an analysis (once per matrix) and a solve
(once per right-hand side), on CuPy's current stream:

- ``CuSparse``: cuSPARSE's SpSM (what ``cupyx.scipy.sparse.linalg.spsolve_triangular`` calls, there
  analysis and solve in one call), through CuPy's low-level bindings so the two phases are timed
  apart. The solve zeroes its output first, as SpSM requires.
- ``LevelSet``: our level-set kernel (sptrsv.cu), one launch per level; the analysis computes the
  levels on the host (schedule.analyse), uploads them and captures the launches in a CUDA graph,
  so the solve is one graph launch.
- ``SyncFree``: our synchronisation-free kernel (Liu et al. 2016); ``variant`` "warp" (a warp per
  row), "thread" (a thread per row), both taking rows in natural order, or "levels" (a thread per
  row, rows taken in level order). The analysis computes each row's dependency count on the GPU
  ("levels": also the levels, on the host, as the level-set analysis); the solve zeroes the
  counters, sums and ticket and launches once.
- ``SyncFreeV2``: the v2 sync-free kernels (sptrsv.cu ``syncfree_push`` / ``syncfree_pull``):
  a persistent grid (``blocks_per_sm`` blocks of 256 threads per SM; blocks beyond residency find
  the ticket spent) over chunks of the level order, dependencies inside a chunk through shared
  memory. The analysis runs on the GPU (``device_levels``: the ``level_analysis`` kernel and the
  level order by CuPy; schedule.py has its NumPy twin), timed by CUDA events as cuSPARSE's.
- ``SyncFreeV3`` (method ``syncfree_v3``): the v3 kernel (sptrsv.cu ``syncfree_pull_v3``), v2 pull
  with the dependencies inside a warp resolved in rounds (``__ballot_sync`` over a done mask) instead
  of by spinning; pull only, whatever the v2 rule picks. Same grid, analysis and epochs as v2 pull;
  its NumPy twin is schedule.warp_round_solve.
- ``SyncFreeV4`` (method ``syncfree_v4``): v3 with each row's first eight in-warp dependencies
  (coefficient and place) kept in shared memory from its first pass, so that a round reads shared
  memory only (v3 re-reads column indices and level positions from global memory in every round, two
  dependent loads on the chain's path); a row with no input inside its warp computes and releases its
  flag right after its first pass, and a row computed in a round releases at once (v3 waits for the
  warp's slowest lane and releases once per warp). Same order of operations as v3 (its x equals
  v3's); 6 blocks an SM (40 registers). Its schedule releases no later than v3's, whose twin it keeps.

Each solver holds its output in ``x`` (a CuPy array). Matrices come from :func:`upload`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from repro import kernels
from repro.papers.sptrsv import schedule
from repro.data.matrices import check_lower

STEM = "sptrsv"
THREADS = 256  # also the rows per chunk of the v2 kernels (CHUNK in sptrsv.cu)
SPIN_LIMIT_CYCLES = 10**10  # a row waiting longer (about 5 s) is a stall: the kernel ends, check() raises
METHODS = ("cusparse", "levelset", "syncfree_warp", "syncfree_thread", "syncfree_levels", "syncfree_push",
           "syncfree_pull", "syncfree_v3", "syncfree_v4")
BLOCKS_PER_SM = 8  # 2048 resident threads per SM on Hopper at 256 a block (the v2 kernels use <= 32 registers)
V4_BLOCKS_PER_SM = 6  # v4 uses 40 registers (sptrsv.cu V4_BLOCKS_PER_SM, its launch bound): 1536 threads an SM
# The longest __nanosleep of a waiting row's back-off (sptrsv.cu back_off). 2048 ns: measured, not
# assumed (256 was): on an H100 it was the best of six caps (256-16384 ns) for six of the nine (solver,
# matrix) pairs of pull, v3 and v4 on banded_1e5, poisson2d_1000 and powerlaw_1e6, within 3 % for two
# and 15 % for one, 0.44-0.93x the time at 256 ns; from 4096 ns on the cross-chunk matrix slows (benchmarks/sptrsv_backoff.py; its records
# benchmarks/records/sptrsv_backoff*_h100.json; docs/gpu-notes.md, session 23).
MAX_SLEEP_NS = 2048
WARP_ROW_NNZ = 16.0  # level-set rows this long on average get a warp each, shorter ones a thread


@dataclass
class DeviceMatrix:
    """L on one GPU in both layouts: CSR (level-set, cuSPARSE) and CSC (sync-free)."""

    host: sp.csr_matrix
    n: int
    nnz: int
    csr: tuple[Any, Any, Any]  # indptr, indices, data
    csc: tuple[Any, Any, Any]
    device: int


def upload(L: sp.csr_matrix, device: int = 0) -> DeviceMatrix:
    import cupy

    L = check_lower(L)
    csc = L.tocsc()
    csc.sort_indices()
    with cupy.cuda.Device(device):
        def put(m):
            return (cupy.asarray(m.indptr.astype(np.int32)), cupy.asarray(m.indices.astype(np.int32)),
                    cupy.asarray(m.data))
        return DeviceMatrix(host=L, n=L.shape[0], nnz=int(L.nnz), csr=put(L), csc=put(csc), device=device)


def _blocks(items: int, per_block: int) -> tuple[int, int, int]:
    return (max(1, -(-items // per_block)), 1, 1)


class CuSparse:
    """cuSPARSE SpSM (lower, non-unit diagonal, one right-hand side)."""

    name = "cusparse"

    def __init__(self, m: DeviceMatrix, b):
        import cupy
        import cupyx.scipy.sparse as csp
        from cupy._core import _dtype
        from cupy_backends.cuda.libs import cusparse as lib
        from cupyx import cusparse as cxs

        self._lib = lib
        self.a = csp.csr_matrix((m.csr[2], m.csr[1], m.csr[0]), shape=(m.n, m.n))
        self.b = cupy.asfortranarray(b.reshape(-1, 1))
        self.c = cupy.zeros((m.n, 1), dtype=np.float64, order="F")
        self.x = self.c.reshape(-1)
        self._alpha = np.array(1.0, dtype=np.float64)
        self._handle = cupy.cuda.device.get_cusparse_handle()
        self._mat_a = cxs.SpMatDescriptor.create(self.a)
        self._mat_b = cxs.DnMatDescriptor.create(self.b)
        self._mat_c = cxs.DnMatDescriptor.create(self.c)
        self._mat_a.set_attribute(lib.CUSPARSE_SPMAT_FILL_MODE, lib.CUSPARSE_FILL_MODE_LOWER)
        self._mat_a.set_attribute(lib.CUSPARSE_SPMAT_DIAG_TYPE, lib.CUSPARSE_DIAG_TYPE_NON_UNIT)
        self._descr = lib.spSM_createDescr()
        self._args = (self._handle, lib.CUSPARSE_OPERATION_NON_TRANSPOSE, lib.CUSPARSE_OPERATION_NON_TRANSPOSE,
                      self._alpha.ctypes.data, self._mat_a.desc, self._mat_b.desc, self._mat_c.desc,
                      _dtype.to_cuda_dtype(self.c.dtype), lib.CUSPARSE_SPSM_ALG_DEFAULT, self._descr)
        self._buffer = cupy.empty(max(1, lib.spSM_bufferSize(*self._args)), dtype=np.int8)

    def analyse(self) -> None:
        self._lib.spSM_analysis(*self._args, self._buffer.data.ptr)

    def solve(self) -> None:
        self.c.fill(0)
        self._lib.spSM_solve(*self._args, self._buffer.data.ptr)

    def close(self) -> None:
        self._lib.spSM_destroyDescr(self._descr)


class LevelSet:
    """Our level-set kernel: a launch per level, replayed from a CUDA graph."""

    name = "levelset"

    def __init__(self, m: DeviceMatrix, b, kernels_dir: Path | None = None, analysis: schedule.Analysis | None = None):
        import cupy

        self.m, self.b = m, b
        self.x = cupy.zeros(m.n, dtype=np.float64)
        self._analysis = analysis
        self._kernels_dir = kernels_dir
        self._graph = None
        self.levels = 0

    def analyse(self) -> None:
        import cupy

        a = self._analysis or schedule.analyse(self.m.host)
        self.levels = a.levels
        warp = self.m.nnz / self.m.n > WARP_ROW_NNZ
        fn = kernels.function(STEM, "levelset_warp" if warp else "levelset_thread", self.m.device, self._kernels_dir)
        per_block = THREADS // 32 if warp else THREADS
        self._perm = cupy.asarray(a.perm)
        indptr, indices, data = self.m.csr
        stream = cupy.cuda.Stream(non_blocking=True)  # capture needs a stream apart from the legacy one
        with stream:
            stream.begin_capture()
            for k in range(a.levels):
                lo, hi = int(a.level_ptr[k]), int(a.level_ptr[k + 1])
                fn(_blocks(hi - lo, per_block), (THREADS, 1, 1),
                   (indptr, indices, data, self.b, self.x, self._perm[lo:hi], np.int32(hi - lo)))
            self._graph = stream.end_capture()
        self._stream = stream

    def solve(self) -> None:
        import cupy

        self._graph.launch(stream=cupy.cuda.get_current_stream())


class SyncFree:
    """Our synchronisation-free kernel (see the module doc for the variants)."""

    VARIANTS = {"warp": "syncfree_warp", "thread": "syncfree_thread", "levels": "syncfree_thread"}

    def __init__(self, m: DeviceMatrix, b, kernels_dir: Path | None = None, variant: str = "warp",
                 analysis: schedule.Analysis | None = None):
        import cupy

        if variant not in self.VARIANTS:
            raise ValueError(f"sync-free variant must be one of {sorted(self.VARIANTS)}, got {variant!r}")
        self.name = f"syncfree_{variant}"
        self.m, self.b, self.variant = m, b, variant
        self.x = cupy.zeros(m.n, dtype=np.float64)
        self.left_sum = cupy.zeros(m.n, dtype=np.float64)
        self.count = cupy.zeros(m.n, dtype=np.int32)
        self.ticket = cupy.zeros(1, dtype=np.int32)
        self.stalled = cupy.full(1, -1, dtype=np.int32)
        self.need = None
        self.order = np.uint64(0)  # null: natural order
        self._analysis = analysis
        self._fn = kernels.function(STEM, self.VARIANTS[variant], m.device, kernels_dir)
        rows_per_block = THREADS // 32 if variant == "warp" else THREADS
        self._grid = _blocks(m.n, rows_per_block)

    @property
    def host_analysis(self) -> bool:
        """Whether the analysis runs on the host (timed by the wall clock, not CUDA events)."""
        return self.variant == "levels"

    def analyse(self) -> None:
        """Each row's dependency count: its CSR length less the diagonal (one GPU pass); for
        "levels" also the rows in level order."""
        import cupy

        row_ptr = self.m.csr[0]
        self.need = (row_ptr[1:] - row_ptr[:-1] - 1).astype(np.int32)
        if self.variant == "levels":
            self.order = cupy.asarray((self._analysis or schedule.analyse(self.m.host)).perm)

    def solve(self) -> None:
        self.count.fill(0)
        self.left_sum.fill(0)
        self.ticket.fill(0)
        indptr, indices, data = self.m.csc
        self._fn(self._grid, (THREADS, 1, 1), (indptr, indices, data, self.b, self.x, self.left_sum, self.count,
                                               self.need, self.ticket, np.int32(self.m.n), self.order,
                                               np.int64(SPIN_LIMIT_CYCLES), self.stalled))

    def check(self) -> None:
        """Raise if any solve so far had a row wait past the spin limit (a deadlock or lost update)."""
        row = int(self.stalled.get()[0])
        if row >= 0:
            raise RuntimeError(f"{self.name}: row {row} waited more than {SPIN_LIMIT_CYCLES:.0e} cycles for its "
                               "dependencies: the solve stalled")


def device_levels(m: DeviceMatrix, kernels_dir: Path | None = None):
    """The level analysis on the GPU (sptrsv.cu ``level_analysis``, then the level order with CuPy):
    (level, perm, level_ptr, pos) as CuPy arrays, equal to schedule.analyse's on the host."""
    import cupy

    fn = kernels.function(STEM, "level_analysis", m.device, kernels_dir)
    with cupy.cuda.Device(m.device):
        depth = cupy.zeros(m.n, dtype=np.int32)
        ticket = cupy.zeros(1, dtype=np.int32)
        stalled = cupy.full(1, -1, dtype=np.int32)
        fn((kernels.sm_count(m.device) * BLOCKS_PER_SM, 1, 1), (THREADS, 1, 1),
           (m.csr[0], m.csr[1], depth, ticket, np.int32(m.n), np.uint32(MAX_SLEEP_NS), np.int64(SPIN_LIMIT_CYCLES),
            stalled))
        row = int(stalled.get()[0])
        if row >= 0:
            raise RuntimeError(f"level_analysis: row {row} waited more than {SPIN_LIMIT_CYCLES:.0e} cycles")
        level = depth - 1
        return (level, *schedule.level_order(level, cupy))


class SyncFreeV2:
    """The v2 sync-free kernels, ``variant`` "push" (CSC, counters) or "pull" (CSR, ready flags)."""

    METHOD: str | None = None  # a subclass's method name and kernel (v3); None: syncfree_<variant>
    KERNEL: str | None = None
    BLOCKS_PER_SM = BLOCKS_PER_SM  # the persistent grid's blocks an SM, unless the caller gives them

    def __init__(self, m: DeviceMatrix, b, kernels_dir: Path | None = None, variant: str = "push",
                 blocks_per_sm: int | None = None):
        import cupy

        if variant not in ("push", "pull"):
            raise ValueError(f"v2 sync-free variant must be 'push' or 'pull', got {variant!r}")
        self.name = self.METHOD or f"syncfree_{variant}"
        self.m, self.b, self.variant = m, b, variant
        self.x = cupy.zeros(m.n, dtype=np.float64)
        self.ticket = cupy.zeros(1, dtype=np.int32)
        self.stalled = cupy.full(1, -1, dtype=np.int32)
        if variant == "push":
            self.left_sum = cupy.zeros(m.n, dtype=np.float64)
            self.count = cupy.zeros(m.n, dtype=np.int32)
        else:
            self.ready = cupy.zeros(m.n, dtype=np.int32)
            self.epoch = 0
        self.need = self.need_local = self.perm = self.pos = None
        self._kernels_dir = kernels_dir
        self._fn = kernels.function(STEM, self.KERNEL or self.name, m.device, kernels_dir)
        self._grid = (kernels.sm_count(m.device) * (blocks_per_sm or self.BLOCKS_PER_SM), 1, 1)

    def analyse(self) -> None:
        """On the GPU: the levels (device_levels), the level order and each row's place in it, and
        for push the dependency counts, all and in the row's own chunk."""
        import cupy

        _, self.perm, _, self.pos = device_levels(self.m, self._kernels_dir)
        if self.variant == "push":
            row_ptr, col = self.m.csr[0], self.m.csr[1]
            self.need = (row_ptr[1:] - row_ptr[:-1] - 1).astype(np.int32)
            self.need_local = schedule.local_need(row_ptr, col, self.pos, THREADS, cupy)

    def solve(self) -> None:
        self.ticket.fill(0)
        limits = (np.uint32(MAX_SLEEP_NS), np.int64(SPIN_LIMIT_CYCLES), self.stalled)
        if self.variant == "push":
            self.count.fill(0)
            self.left_sum.fill(0)
            indptr, indices, data = self.m.csc
            self._fn(self._grid, (THREADS, 1, 1), (indptr, indices, data, self.b, self.x, self.left_sum, self.count,
                                                   self.need, self.need_local, self.perm, self.pos, self.ticket,
                                                   np.int32(self.m.n), *limits))
        else:
            self.epoch += 1  # a new epoch marks every row not ready: no reset of the flags
            indptr, indices, data = self.m.csr
            self._fn(self._grid, (THREADS, 1, 1), (indptr, indices, data, self.b, self.x, self.ready,
                                                   np.int32(self.epoch), self.perm, self.pos, self.ticket,
                                                   np.int32(self.m.n), *limits))

    check = SyncFree.check


class SyncFreeV3(SyncFreeV2):
    """The v3 sync-free kernel (``syncfree_pull_v3``): v2 pull, in-warp dependencies in rounds."""

    METHOD = "syncfree_v3"
    KERNEL = "syncfree_pull_v3"

    def __init__(self, m: DeviceMatrix, b, kernels_dir: Path | None = None, blocks_per_sm: int | None = None):
        super().__init__(m, b, kernels_dir, "pull", blocks_per_sm)


class SyncFreeV4(SyncFreeV3):
    """The v4 sync-free kernel (``syncfree_pull_v4``): v3 with the in-warp dependencies cached."""

    METHOD = "syncfree_v4"
    KERNEL = "syncfree_pull_v4"
    BLOCKS_PER_SM = V4_BLOCKS_PER_SM


def solvers(m: DeviceMatrix, b, kernels_dir: Path | None, analysis: schedule.Analysis | None = None,
            methods: tuple[str, ...] = METHODS) -> dict[str, Any]:
    """The named solvers for one uploaded matrix and right-hand side."""
    made: dict[str, Any] = {}
    for name in methods:
        if name == "cusparse":
            made[name] = CuSparse(m, b)
        elif name == "levelset":
            made[name] = LevelSet(m, b, kernels_dir, analysis)
        elif name == "syncfree_v3":
            made[name] = SyncFreeV3(m, b, kernels_dir)
        elif name == "syncfree_v4":
            made[name] = SyncFreeV4(m, b, kernels_dir)
        elif name in ("syncfree_push", "syncfree_pull"):
            made[name] = SyncFreeV2(m, b, kernels_dir, name.removeprefix("syncfree_"))
        elif name.startswith("syncfree_"):
            made[name] = SyncFree(m, b, kernels_dir, name.removeprefix("syncfree_"), analysis)
        else:
            raise ValueError(f"unknown solver {name!r}; choose from {', '.join(METHODS)}")
    return made
