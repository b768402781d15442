"""Call the TSM2R / TSM2L kernels on CuPy arrays or torch CUDA tensors, without copies.

The call to make is the tuned one, which runs our kernel only where it beat cuBLAS for this shape
on this card and the operands' own torch.mm / CuPy @ otherwise (tuner.py, the choice rule):

    from repro.papers.tsm2x import matmul
    C = matmul(A, B)                 # any A, B that A @ B takes; the first call of a shape tunes it
    C = matmul(A, B, expect="cold")  # a stream of different operands (default: by size against L2)

The raw kernels below run one variant, untuned: the default variant (no k split) is often slower
than cuBLAS (0.26-0.49x on mid-size shapes of an H100), so use them to test or time a variant:

    C = tsm2r(A, B)            # A: m x k (large), B: k x n, n <= 16
    C = tsm2l(A, B, out=C)     # A: m x k with k <= 16 (m up to ~1e7), B: k x n, n <= 16

Memory layout (checked; a wrong one raises ValueError naming the matrix and the problem):

- A (m x k) and C (m x n) must be **column-major** (Fortran order): consecutive rows of a column
  are adjacent in memory, columns are `ld` >= rows elements apart. That is what lets consecutive
  threads, each owning consecutive rows, read and write whole cache lines. A CuPy array made with
  ``order="F"`` qualifies; for torch, take the transpose of a contiguous tensor: ``At.T`` where
  ``At`` is a contiguous (k x m) tensor (``torch.randn(k, m, device="cuda").T``). Padded leading
  dimensions (a column-major slice of a taller matrix) are fine.
- B (k x n) is tiny and may have any non-negative strides (row- or column-major).
- Same dtype for all three (float32 or float64), same CUDA device; C must not overlap A or B.
- n (and, for TSM2L, k) from 1 to 16; any m and k otherwise. When A/C pointers and leading
  dimensions allow it, the kernels use 8- or 16-byte vector loads; otherwise scalar ones.

`out=None` allocates a column-major C with the library of A (torch in, torch out). Kernels run
on the current stream of that library (torch's current stream for torch tensors). The cubins
come from the pipeline's kernel build (``snakemake build_kernels``): `kernels_dir` argument,
else $REPRO_KERNELS_DIR, else results/build/kernels under the working directory.

Kernel variants are named ``tsm2r_<dtype>_n<N>_t<threads>_v<vec>_s<split>`` (tsm2r.cu: A through
registers), ``tsm2r_<dtype>_n<N>_t128_v<vec>_s<split>_w<kwarps>_p<ktile>x<stages>`` (tsm2r_pipelined.cu:
A and B through a cp.async ring in shared memory) and ``tsm2l_<dtype>_k<K>_n<N>_t<threads>_v<vec>_g<groups>``;
`TSM2R_VARIANTS` / `TSM2L_VARIANTS` list the instantiated ones (the same lists as the *_VARIANT lines of
the .cu files). A problem with n (or k) below an instantiated size runs on the next larger one, masked.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from repro import kernels

SIZES = (2, 4, 8, 16)  # instantiated N (both kernels) and K (TSM2L)
MAX_N = MAX_K_L = SIZES[-1]
DTYPES = {"float32": "f32", "float64": "f64"}
ITEMSIZE = {"f32": 4, "f64": 8}
DEFAULT_SMS = 132  # H200; used only when the device cannot be asked


@dataclass(frozen=True)
class Variant:
    """One kernel launch configuration: kind 'r' or 'l', dtype 'f32'/'f64', instantiated N (and K for
    TSM2L), threads per block, rows per thread per vector load (vec), k split across a cluster
    (TSM2R) or row groups per thread (TSM2L); for the grid-stride TSM2L kernel, ``persist`` blocks
    per SM (one kernel serves every ``persist``). The pipelined TSM2R kernel (``stages`` > 0) also
    splits k among ``kwarps`` warps of a block and copies ``ktile`` columns of A per ring slot."""

    kind: str
    dtype: str
    n: int
    threads: int
    vec: int
    split: int = 1
    k: int = 0
    groups: int = 1
    persist: int = 0
    kwarps: int = 1
    ktile: int = 0
    stages: int = 0

    @property
    def name(self) -> str:
        if self.kind == "r":
            base = f"tsm2r_{self.dtype}_n{self.n}_t{self.threads}_v{self.vec}_s{self.split}"
            return f"{base}_w{self.kwarps}_p{self.ktile}x{self.stages}" if self.stages else base
        tail = f"p{self.persist}" if self.persist else f"g{self.groups}"
        return f"tsm2l_{self.dtype}_k{self.k}_n{self.n}_t{self.threads}_v{self.vec}_{tail}"

    @property
    def kernel(self) -> str:
        """The extern "C" function this variant launches."""
        if self.persist:
            return f"tsm2l_{self.dtype}_k{self.k}_n{self.n}_t{self.threads}_v{self.vec}_stream"
        return self.name

    @property
    def stem(self) -> str:
        """The kernel source (and cubin) the function is in."""
        return "tsm2r_pipelined" if self.stages else f"tsm2{self.kind}"

    @property
    def rows_per_block(self) -> int:
        return self.threads // self.kwarps * self.vec * self.groups

    @property
    def reduces(self) -> bool:
        """Whether the kernel adds partial sums of a split k range before storing C."""
        return self.kind == "r" and (self.split > 1 or self.kwarps > 1)

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory per block (pipelined TSM2R: the larger of the ring and the partials;
        tsm2r_pipelined.cu's pipelined_smem_bytes, checked against its instantiation lines)."""
        if not self.stages:
            return 0
        warps, rows = self.threads // 32, 32 * self.vec
        ring = warps * self.stages * self.ktile * (rows + self.n) * ITEMSIZE[self.dtype]
        red = warps * rows * self.n * ITEMSIZE[self.dtype] if self.reduces else 0
        return max(ring, red)

    def grid(self, m: int, sms: int = DEFAULT_SMS) -> tuple[int, int, int]:
        blocks = math.ceil(m / self.rows_per_block)
        if self.persist:
            blocks = min(blocks, self.persist * sms)
        return (max(blocks, 1), self.split, 1)


def _tsm2r_variants() -> list[Variant]:
    shapes = {"f32": [(64, 4), (128, 4), (128, 2)], "f64": [(64, 2), (128, 2), (128, 1)]}
    registers = [Variant("r", dt, n, t, v, split=s)
                 for dt, tv in shapes.items() for n in SIZES for t, v in tv for s in (1, 2, 4, 8)]
    # fp32 only: cuBLAS's fp64 GEMM already runs the large shapes at the copy ceiling (gpu-notes v1).
    # Every portable cluster size: with S * KW parts per slab of 128 rows the grid has
    # m / 128 * S * KW / 4 blocks, and the choice of S lets it fill whole waves of 4 per SM.
    pipelined = [Variant("r", "f32", n, 128, 4, split=s, kwarps=w, ktile=8, stages=3)
                 for n in SIZES for s in range(1, 9) for w in (1, 2, 4)]
    return registers + pipelined


def _tsm2l_variants() -> list[Variant]:
    vec = {"f32": 4, "f64": 2}
    one_shot = [Variant("l", dt, n, t, v, k=kp, groups=g)
                for dt, v in vec.items() for kp in SIZES for n in SIZES
                for t, g in ((128, 1), (256, 1), (128, 2)) if not (g == 2 and kp > 8)]
    stream = [Variant("l", dt, n, 256, v, k=kp, persist=p)
              for dt, v in vec.items() for kp in SIZES for n in SIZES for p in (4, 8)]
    return one_shot + stream


TSM2R_VARIANTS: list[Variant] = _tsm2r_variants()
TSM2L_VARIANTS: list[Variant] = _tsm2l_variants()
VARIANTS: dict[str, Variant] = {v.name: v for v in TSM2R_VARIANTS + TSM2L_VARIANTS}


def tolerance(dtype: str, k: int) -> float:
    """Largest accepted relative max error (max |C - ref| / max |ref|) of a k-term product in dtype
    ('float32'/'float64' or 'f32'/'f64'): 16 units in the last place times sqrt(k)."""
    unit = {"float32": 2.0**-24, "float64": 2.0**-53, "f32": 2.0**-24, "f64": 2.0**-53}[dtype]
    return 16 * unit * math.sqrt(max(k, 1))


def padded(size: int, what: str) -> int:
    """The smallest instantiated size >= size (ValueError above 16)."""
    for s in SIZES:
        if size <= s:
            return s
    raise ValueError(f"{what} = {size} > {SIZES[-1]}: the TSM2 kernels keep {what} values per row in "
                     "registers and are instantiated up to 16; use cuBLAS (or tsm2r when k is large)")


def candidates(kind: str, dtype: str, k: int, n: int) -> list[Variant]:
    """The variants that can run a (k, n) problem of this kind and dtype ('f32'/'f64')."""
    np_ = padded(max(n, 1), "n")
    if kind == "r":
        return [v for v in TSM2R_VARIANTS if v.dtype == dtype and v.n == np_]
    if kind == "l":
        kp = padded(max(k, 1), "k")
        return [v for v in TSM2L_VARIANTS if v.dtype == dtype and v.n == np_ and v.k == kp]
    raise ValueError(f"kind must be 'r' or 'l', got {kind!r}")


def default_variant(kind: str, dtype: str, m: int, k: int, n: int, sms: int = DEFAULT_SMS) -> Variant:
    """An untuned choice: widest vectors, 128 threads, no k split.

    Split-K variants are left to the tuner, which checks every candidate's output against cuBLAS
    before timing it: on the H200 they gave wrong results on some shapes whose last row block is
    partial (docs/gpu-notes.md, TSM2R v1), a fault not yet found.
    """
    cands = [v for v in candidates(kind, dtype, k, n)
             if v.threads == 128 and v.groups == 1 and v.split == 1 and not v.persist and not v.stages]
    widest = max(v.vec for v in cands)
    return next(v for v in cands if v.vec == widest)


# ---- describing the operands (pure Python: testable without a GPU) --------------------------


@dataclass(frozen=True)
class Matrix:
    """A 2-D device array as the kernels see it: pointer, shape, strides in elements."""

    lib: str  # "torch", "cupy" or "cai" (another __cuda_array_interface__ exporter)
    ptr: int
    rows: int
    cols: int
    row_stride: int
    col_stride: int
    dtype: str  # "f32" / "f64"
    device: int | None  # CUDA device index, None when the exporter does not say

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    def span(self) -> tuple[int, int]:
        """[first byte, last byte + 1) touched by the matrix."""
        if self.rows == 0 or self.cols == 0:
            return (self.ptr, self.ptr)
        last = (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
        return (self.ptr, self.ptr + (last + 1) * self.itemsize)


_TYPESTR = {"<f4": "f32", "<f8": "f64", "=f4": "f32", "=f8": "f64"}


def describe(x: Any, name: str) -> Matrix:
    """Matrix view of a torch CUDA tensor or any __cuda_array_interface__ object (CuPy)."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.device.type != "cuda":
            raise ValueError(f"{name} is a torch tensor on {x.device}; TSM2 needs CUDA memory (.cuda())")
        if x.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
        dtype = {torch.float32: "f32", torch.float64: "f64"}.get(x.dtype)
        if dtype is None:
            raise ValueError(f"{name} has dtype {x.dtype}; TSM2 supports float32 and float64")
        return Matrix("torch", x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), x.stride(1), dtype, x.device.index)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise ValueError(f"{name} must be a CuPy array or a torch CUDA tensor, got {type(x).__module__}."
                         f"{type(x).__name__} (host memory is not accepted)")
    shape = tuple(cai["shape"])
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {shape}")
    dtype = _TYPESTR.get(cai["typestr"])
    if dtype is None:
        raise ValueError(f"{name} has dtype {cai['typestr']!r}; TSM2 supports float32 and float64")
    item = ITEMSIZE[dtype]
    strides = cai.get("strides") or (shape[1] * item, item)  # None means C-contiguous
    if any(s % item for s in strides):
        raise ValueError(f"{name} has byte strides {strides} that are not multiples of its itemsize {item}")
    device = getattr(getattr(x, "device", None), "id", None)
    lib = "cupy" if type(x).__module__.startswith("cupy") else "cai"
    return Matrix(lib, int(cai["data"][0]), shape[0], shape[1], strides[0] // item, strides[1] // item, dtype, device)


def _leading_dim(mat: Matrix, name: str) -> int:
    """Leading dimension of a column-major matrix, or ValueError saying what is wrong."""
    if mat.row_stride < 0 or mat.col_stride < 0:
        raise ValueError(f"{name} has negative strides {(mat.row_stride, mat.col_stride)} (elements)")
    if mat.rows > 1 and mat.row_stride != 1:
        raise ValueError(
            f"{name} ({mat.rows} x {mat.cols}) must be column-major (Fortran order: consecutive rows adjacent, "
            f"row stride 1), got strides {(mat.row_stride, mat.col_stride)} (elements). Use a CuPy array with "
            "order='F', or for torch the transpose of a contiguous tensor: At.T with At of shape "
            f"({mat.cols}, {mat.rows})")
    ld = mat.col_stride if mat.cols > 1 else max(mat.rows, 1)
    if ld < mat.rows:
        raise ValueError(f"{name} has leading dimension {ld} < its {mat.rows} rows: its columns overlap")
    return ld


@dataclass(frozen=True)
class Problem:
    """A checked C = A @ B for one kernel kind, with what a launch needs."""

    kind: str
    dtype: str
    m: int
    k: int
    n: int
    a: Matrix
    b: Matrix
    c: Matrix | None  # None: to be allocated
    lda: int
    ldc: int

    def vec_ok(self, mat: Matrix, ld: int, vec: int, ptr: int | None = None) -> bool:
        """Whether V-wide vector accesses are aligned: pointer (`ptr`, default mat's) and every
        column start."""
        return (mat.ptr if ptr is None else ptr) % (vec * mat.itemsize) == 0 and columns_aligned(mat, ld, vec)


def plan(kind: str, A: Any, B: Any, out: Any = None) -> Problem:
    """Check shapes, dtypes, layouts and devices of C = A @ B for TSM2R ('r') or TSM2L ('l')."""
    if kind not in ("r", "l"):
        raise ValueError(f"kind must be 'r' or 'l', got {kind!r}")
    a, b = describe(A, "A"), describe(B, "B")
    m, k = a.rows, a.cols
    if b.rows != k:
        raise ValueError(f"A is {m} x {k} but B is {b.rows} x {b.cols}: inner dimensions differ")
    n = b.cols
    if max(m, k) >= 2**31:
        raise ValueError(f"A is {m} x {k}: the kernels index rows and columns with 32-bit integers")
    padded(max(n, 1), "n")
    if kind == "l":
        padded(max(k, 1), "k")
    if b.dtype != a.dtype:
        raise ValueError(f"A is {_np_name(a.dtype)} but B is {_np_name(b.dtype)}: use one dtype")
    if b.row_stride < 0 or b.col_stride < 0:
        raise ValueError(f"B has negative strides {(b.row_stride, b.col_stride)} (elements)")
    lda = _leading_dim(a, "A")
    c, ldc = None, max(m, 1)
    if out is not None:
        c = describe(out, "out")
        if (c.rows, c.cols) != (m, n):
            raise ValueError(f"out is {c.rows} x {c.cols}, expected {m} x {n} (A is {m} x {k}, B is {k} x {n})")
        if c.dtype != a.dtype:
            raise ValueError(f"out is {_np_name(c.dtype)} but A and B are {_np_name(a.dtype)}")
        ldc = _leading_dim(c, "out")
        for other, oname in ((a, "A"), (b, "B")):
            lo, hi = c.span()
            olo, ohi = other.span()
            if lo < ohi and olo < hi:
                raise ValueError(f"out overlaps {oname} in memory; write C to separate storage")
    devices = {x.device for x in (a, b, c) if x is not None and x.device is not None}
    if len(devices) > 1:
        raise ValueError(f"A, B and out are on different CUDA devices {sorted(devices)}")
    return Problem(kind, a.dtype, m, k, n, a, b, c, lda, ldc)


def _np_name(dtype: str) -> str:
    return {"f32": "float32", "f64": "float64"}[dtype]


def check_variant(prob: Problem, variant: str | Variant) -> Variant:
    """The Variant named (or given), or ValueError if it cannot run this problem."""
    if isinstance(variant, str):
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; see TSM2R_VARIANTS / TSM2L_VARIANTS")
        variant = VARIANTS[variant]
    fits = candidates(prob.kind, prob.dtype, prob.k, prob.n)
    if variant not in fits:
        raise ValueError(f"variant {variant.name} cannot run a {_np_name(prob.dtype)} TSM2{prob.kind.upper()} problem "
                         f"with k = {prob.k}, n = {prob.n}; candidates: {[v.name for v in fits]}")
    return variant


# ---- kernels and launches (GPU) ---------------------------------------------------------------


STATIC_SHARED_LIMIT = 48 * 1024  # bytes of shared memory a block gets without opting in


def kernel_function(variant: Variant, kernels_dir: Path | None = None):
    """The CuPy kernel of a variant, from its cubin on the current device, allowed the dynamic shared
    memory the variant launches with."""
    import cupy

    fn = kernels.function(variant.stem, variant.kernel, cupy.cuda.runtime.getDevice(), kernels_dir)
    if variant.shared_bytes > STATIC_SHARED_LIMIT and fn.max_dynamic_shared_size_bytes < variant.shared_bytes:
        fn.max_dynamic_shared_size_bytes = variant.shared_bytes
    return fn


def empty_like_colmajor(A: Any, m: int, n: int):
    """An uninitialised column-major m x n matrix of A's library, dtype and device."""
    return allocator(A, m, n)()


def columns_aligned(mat: Matrix, ld: int, vec: int) -> bool:
    """Whether every column of `mat` (leading dimension `ld`) starts V-aligned relative to the first:
    the pointer-independent half of Problem.vec_ok."""
    return ld % vec == 0 or mat.cols == 1


def c_stores_may_vectorise(prob: "Problem", variant: Variant) -> bool:
    """c_vector_stores without the pointer's alignment (the split-K workaround and C's columns)."""
    partial_block = prob.m % variant.rows_per_block != 0
    return not (variant.reduces and partial_block) and columns_aligned(prob.c, prob.ldc, variant.vec)


def c_vector_stores(prob: "Problem", variant: Variant, c_ptr: int | None = None) -> bool:
    """Whether the kernel may store C (at `c_ptr`, default prob.c's) with vector instructions.

    Workaround (docs/gpu-notes.md, TSM2R v1): on the H200 the split-K epilogue wrote wrong values
    when C was stored with vector instructions and the last row block was partial; scalar stores
    were right in every case measured (a NumPy emulation of the kernel finds no indexing fault,
    so the cause is still open). The pipelined kernel's epilogue adds its partials the same way and
    gets the same treatment. C is m x n, small next to A, so scalar stores cost little.
    """
    ptr = prob.c.ptr if c_ptr is None else c_ptr
    return c_stores_may_vectorise(prob, variant) and ptr % (variant.vec * prob.c.itemsize) == 0


def _ptr(x: Any) -> int:
    """The device address of a torch tensor or __cuda_array_interface__ object."""
    data_ptr = getattr(x, "data_ptr", None)
    return data_ptr() if data_ptr is not None else int(x.__cuda_array_interface__["data"][0])


def pointer_getter(lib: str) -> Callable[[Any], int]:
    """x -> device address for operands of one library, the cheapest way each offers: a torch
    tensor's data_ptr(), a CuPy array's data.ptr (no __cuda_array_interface__ dict built per call)."""
    if lib == "torch":
        return lambda x: x.data_ptr()
    if lib == "cupy":
        return lambda x: x.data.ptr
    return _ptr


def allocator(A: Any, m: int, n: int) -> Callable[[], Any]:
    """() -> an uninitialised column-major m x n matrix like empty_like_colmajor(A, m, n), with the
    library, dtype and device looked up once (the per-call allocation of a bound launch)."""
    import torch

    if isinstance(A, torch.Tensor):  # one call, not empty((n, m)).T: the view costs about 1 us more a call
        return functools.partial(torch.empty_strided, (m, n), (1, m), dtype=A.dtype, device=A.device)
    import cupy

    a = describe(A, "A")
    dev, dtype = (a.device if a.device is not None else cupy.cuda.runtime.getDevice()), _np_name(a.dtype)
    current, empty_f = cupy.cuda.runtime.getDevice, functools.partial(cupy.empty, (m, n), dtype=dtype, order="F")

    def empty() -> Any:
        if current() == dev:  # entering a device context costs more than asking which is current
            return empty_f()
        with cupy.cuda.Device(dev):
            return empty_f()

    return empty


def launch_flags(prob: "Problem", variant: Variant) -> Callable[[int, int], tuple[int, int]]:
    """(a_ptr, c_ptr) -> (vector loads of A, vector stores of C) as 0/1: prob.vec_ok and
    c_vector_stores with everything but the two pointers' alignment worked out once."""
    a_width, c_width = variant.vec * prob.a.itemsize, variant.vec * prob.c.itemsize
    a_ld, c_ok = columns_aligned(prob.a, prob.lda, variant.vec), c_stores_may_vectorise(prob, variant)
    return lambda pa, pc: (int(a_ld and pa % a_width == 0), int(c_ok and pc % c_width == 0))


def bind(kind: str, A: Any, B: Any, out: Any, variant: str | Variant,
         kernels_dir: Path | None = None) -> Callable[[Any, Any, Any], Any]:
    """Check the operands once and return run(A2, B2, out2=None) -> C2 = A2 @ B2, for any operands
    with the same library, shapes, strides, dtype and device as A, B, out (out2 None where out is
    None: then run allocates a column-major C). Per call it reads only the pointers (and their
    alignment, which picks vector or scalar accesses), so a caller that repeats a call pays one
    kernel launch, not the operand checks: the allocation, pointer reads, alignment flags and stream
    lookup are each resolved to one closure here."""
    import cupy
    import numpy as np

    prob = plan(kind, A, B, out)
    device = prob.a.device if prob.a.device is not None else cupy.cuda.runtime.getDevice()
    variant = check_variant(prob, variant)
    m, n = prob.m, prob.n
    if out is None:
        prob = replace(prob, c=describe(empty_like_colmajor(A, m, n), "out"))
    if m == 0 or n == 0:
        return lambda A2, B2, out2=None: out2 if out2 is not None else empty_like_colmajor(A2, m, n)
    with cupy.cuda.Device(device):
        fn = kernel_function(variant, kernels_dir)
    a, b = prob.a, prob.b
    head = (np.int32(m), np.int32(n), np.int32(prob.k))
    lda, bstrides, ldc = np.int64(prob.lda), (np.int64(b.row_stride), np.int64(b.col_stride)), np.int64(prob.ldc)
    grid, block = variant.grid(m, kernels.sm_count(device)), (variant.threads, 1, 1)
    torch_operands = a.lib == "torch"
    alloc, flags = allocator(A, m, n), launch_flags(prob, variant)
    ptr_a, ptr_b, ptr_c = (pointer_getter(x.lib) for x in (a, b, prob.c))
    zero, off = np.uint64(0), np.int32(0)
    with cupy.cuda.Device(device):
        launch = kernels.Launch(fn, grid, block, head + (zero, lda, zero) + bstrides + (zero, ldc, off, off),
                                variant.shared_bytes)
    # the slots a call rewrites: A, B and C's pointers (3, 5, 8) and the vector-access flags (10, 11)
    slot_a, slot_b, slot_c, slot_va, slot_vc = (launch.slots[i] for i in (3, 5, 8, 10, 11))
    lock, start = launch.lock, launch.start

    def run(A2: Any, B2: Any, out2: Any = None) -> Any:
        if out2 is None:
            out2 = alloc()
        pa, pc = ptr_a(A2), ptr_c(out2)
        vec_a, vec_c = flags(pa, pc)
        with lock:
            slot_a.value, slot_b.value, slot_c.value = pa, ptr_b(B2), pc
            slot_va.value, slot_vc.value = vec_a, vec_c
            start(torch_operands, device)
        return out2

    return run


def prepare(kind: str, A: Any, B: Any, out: Any = None, variant: str | Variant | None = None,
            kernels_dir: Path | None = None) -> tuple[Callable[[], None], Any, Variant]:
    """Check the operands once and return (launch, C, variant): launch() computes C = A @ B.

    Benchmarks call launch() many times; tsm2r/tsm2l call it once.
    """
    prob = plan(kind, A, B, out)
    if variant is None:
        import cupy

        device = prob.a.device if prob.a.device is not None else cupy.cuda.runtime.getDevice()
        variant = default_variant(kind, prob.dtype, prob.m, prob.k, prob.n,
                                  cupy.cuda.Device(device).attributes["MultiProcessorCount"])
    variant = check_variant(prob, variant)
    if out is None:
        out = empty_like_colmajor(A, prob.m, prob.n)
    run = bind(kind, A, B, out, variant, kernels_dir)
    return (lambda: run(A, B, out)), out, variant


def tsm2r(A: Any, B: Any, out: Any = None, variant: str | Variant | None = None, kernels_dir: Path | None = None):
    """C = A @ B with TSM2R (large A, n <= 16). Returns C (`out` if given). See the module doc."""
    launch, out, _ = prepare("r", A, B, out, variant, kernels_dir)
    launch()
    return out


def tsm2l(A: Any, B: Any, out: Any = None, variant: str | Variant | None = None, kernels_dir: Path | None = None):
    """C = A @ B with TSM2L (tall-and-skinny A with k <= 16, n <= 16). Returns C. See the module doc."""
    launch, out, _ = prepare("l", A, B, out, variant, kernels_dir)
    launch()
    return out
