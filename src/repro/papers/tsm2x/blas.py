"""A bound cuBLAS GEMM: dispatch's third kind of candidate, beside our kernels and the caller's own
library call.

Where a call's host cost exceeds its device time (a 10000 x 333 fp64 product takes the card 3-5 us,
`torch.mm` 9 us of host time, CuPy's `@` 13 us on the H100's host), the caller's own cuBLAS call is
bound by the library's per-call work: argument parsing, dtype and layout checks, the output's
allocation, handle and workspace lookup. `bind` does that work once per operand signature, as
tsm2.bind does for our kernels, and leaves a call that reads three pointers, allocates C (one
`torch.empty_strided` / `cupy.empty`) and calls `cublas<s|d>gemm` on a handle of its own (host
pointer mode, cuBLAS's default math: no TF32), so it computes what the library's call computes,
column-major C = A B with no transposes of A and B's layout (column- or row-major) passed as an
operation, not a copy.

Streams: the GEMM runs on the stream the caller's library would use (torch's current stream for
torch operands, CuPy's for CuPy operands). CuPy's cuBLAS wrappers may set a handle's stream to
CuPy's current stream before each call, so a torch caller whose current stream is not CuPy's runs
inside `cupy.cuda.ExternalStream` of torch's (the slow path; torch's default stream and CuPy's
default are the same legacy stream, the usual case).

The tuner treats the bound call like one of our variants (checked against cuBLAS once, timed,
re-timed interleaved against the caller's call, chosen only by DISPATCH_MARGIN in every deciding
regime): it runs only where it measured faster than the caller's own call.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any, Callable

from repro.papers.tsm2x import tsm2

BOUND = "cublas_bound"  # the candidate's name in the tuner's times and choices
OP_N, OP_T = 0, 1  # cublasOperation_t
_HANDLES: dict[int, int] = {}  # device -> our cuBLAS handle (host pointer mode, default math)
_LOCKS: dict[int, threading.Lock] = {}  # handle -> the lock its bound calls share
_LAST_STREAM: dict[int, int] = {}  # handle -> the stream we last set on it
_SCALARS = {"f32": (ctypes.c_float(1.0), ctypes.c_float(0.0)), "f64": (ctypes.c_double(1.0), ctypes.c_double(0.0))}


def b_operation(b: tsm2.Matrix) -> tuple[int, int]:
    """(operation, ldb) under which cuBLAS reads the k x n B in place: OP_N with B's column stride
    for a column-major B, OP_T with its row stride for a row-major one (cuBLAS reads B^T, n x k,
    column-major). A single row or column has one stride that matters. ValueError for a B neither
    layout holds (strided both ways, or a stride below what cuBLAS accepts: 0 for a broadcast)."""
    k, n = b.rows, b.cols
    if k == 0 or n == 0:  # no element read
        return OP_N, max(k, 1)
    if n == 1:  # one column: its elements b.row_stride apart
        if b.row_stride == 1 or k <= 1:
            return OP_N, max(k, 1)
        if b.row_stride >= 1:
            return OP_T, b.row_stride  # B^T: one row of k elements, a 1 x k column-major matrix
    elif k == 1:  # one row: its elements b.col_stride apart, a 1 x n column-major matrix
        if b.col_stride >= 1:
            return OP_N, b.col_stride
    elif b.row_stride == 1 and b.col_stride >= k:
        return OP_N, b.col_stride
    elif b.col_stride == 1 and b.row_stride >= n:
        return OP_T, b.row_stride
    raise ValueError(f"B ({k} x {n}, strides {(b.row_stride, b.col_stride)} elements) is neither column- nor "
                     "row-major: cuBLAS cannot read it in place")


def handle(device: int) -> int:
    """Our cuBLAS handle on `device` (made once): its pointer mode and math mode are its own, not
    changed by CuPy's or torch's use of theirs."""
    h = _HANDLES.get(device)
    if h is None:
        import cupy
        from cupy_backends.cuda.libs import cublas

        with cupy.cuda.Device(device):
            h = _HANDLES[device] = cublas.create()
    return h


def bind(kind: str, A: Any, B: Any, out: Any = None) -> Callable[..., Any]:
    """Check the operands once (tsm2.plan: A column-major, one dtype and device) and return
    run(A2, B2, out2=None) -> C2 = A2 @ B2 through cuBLAS, for operands with the same library,
    shapes, strides, dtype and device (out2 None where out is None: C allocated column-major).
    ValueError where cuBLAS cannot take B in place (b_operation)."""
    import cupy
    from cupy_backends.cuda.libs import cublas

    from repro import kernels

    prob = tsm2.plan(kind, A, B, out)
    m, n, k = prob.m, prob.n, prob.k
    transb, ldb = b_operation(prob.b)
    device = prob.a.device if prob.a.device is not None else cupy.cuda.runtime.getDevice()
    h = handle(device)
    gemm = cublas.sgemm if prob.dtype == "f32" else cublas.dgemm
    one, zero = (ctypes.addressof(x) for x in _SCALARS[prob.dtype])
    lda, ldc = prob.lda, prob.ldc  # ldc: out's, or max(m, 1) for the column-major C allocated per call
    alloc = tsm2.allocator(A, m, n)
    ptr_a, ptr_b, ptr_c = (tsm2.pointer_getter(x.lib) for x in (prob.a, prob.b, prob.c or prob.a))
    torch_operands = prob.a.lib == "torch"
    stream_of = kernels.stream_getter(torch_operands)
    cupy_stream = kernels.stream_getter(False)
    call = functools.partial(gemm, h, OP_N, transb, m, n, k, one)
    set_stream, current_device = cublas.setStream, cupy.cuda.runtime.getDevice
    lock, last = _LOCKS.setdefault(h, threading.Lock()), _LAST_STREAM  # one handle, shared by the bound calls

    def run(A2: Any, B2: Any, out2: Any = None) -> Any:
        if out2 is None:
            out2 = alloc()
        if m == 0 or n == 0:
            return out2
        stream = stream_of(device)
        args = (ptr_a(A2), lda, ptr_b(B2), ldb, zero, ptr_c(out2), ldc)
        with lock:  # the handle's stream and the call it is set for go together
            if current_device() != device or (torch_operands and cupy_stream(device) != stream):
                with cupy.cuda.Device(device), cupy.cuda.ExternalStream(stream, device):
                    set_stream(h, stream)
                    call(*args)
                last[h] = stream
                return out2
            if last.get(h) != stream:
                set_stream(h, stream)
                last[h] = stream
            call(*args)
        return out2

    return run
