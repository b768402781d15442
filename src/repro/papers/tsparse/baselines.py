"""The SpGEMM baselines timed beside tSparse, each where its machine has it: SciPy and
SuiteSparse:GraphBLAS (python-graphblas) on the CPU; cuSPARSE SpGEMM through cupyx (fp32 and fp64)
and torch's CSR @ CSR on the GPU; and the ceiling's denominator, the tensor cores' dense fp16 rate
(torch.matmul, fp32 accumulate) measured in the same run. spECK, nsparse, AC-SpGEMM, RMerge2 and
CUSP are CUDA sources with no Python package: not run (docs/papers/tsparse.md sets the paper's own
ratios beside ours)."""

from __future__ import annotations

import scipy.sparse as sp

from repro.timing import time_cpu, time_cuda


def graphblas():
    """The python-graphblas module, or None and the reason it cannot be used."""
    try:
        import graphblas as gb
    except ImportError as exc:
        return None, f"python-graphblas not installed ({exc}): pip install python-graphblas==2025.2.0"
    return gb, ""


def scipy_time(A: sp.csr_matrix, repeats: int) -> float:
    return time_cpu(lambda: A @ A, warmup=1, repeats=repeats).median_s


def graphblas_time(gb, A: sp.csr_matrix, repeats: int) -> float:
    M = gb.io.from_scipy_sparse(A)
    return time_cpu(lambda: M.mxm(M).new(), warmup=1, repeats=repeats).median_s


def cupyx_matrix(A: sp.csr_matrix, dtype):
    """A on the GPU as a cupyx CSR matrix of ``dtype`` (float32 or float64); a clear error without CuPy."""
    try:
        import cupyx.scipy.sparse as csp
    except ImportError as exc:
        raise RuntimeError(f"cuSPARSE's SpGEMM needs CuPy on the GPU machine (pip install cupy-cuda13x): {exc}") from None
    return csp.csr_matrix(A.astype(dtype))


def cusparse_time(Ag, warmup: int, repeats: int) -> float:
    """cuSPARSE SpGEMM (cupyx's csr @ csr: its work estimation, symbolic and numeric calls), median."""
    return time_cuda(lambda: Ag @ Ag, warmup=warmup, repeats=repeats).median_s


def torch_csr_time(A: sp.csr_matrix, warmup: int, repeats: int) -> float:
    import torch

    At = torch.sparse_csr_tensor(torch.as_tensor(A.indptr, dtype=torch.int64), torch.as_tensor(A.indices, dtype=torch.int64),
                                 torch.as_tensor(A.data, dtype=torch.float32), size=A.shape, device="cuda")
    return time_cuda(lambda: At @ At, warmup=warmup, repeats=repeats).median_s


def tensor_core_flops(n: int, warmup: int, repeats: int) -> float:
    """Dense fp16 GEMM (n x n x n, fp32 accumulate) flop/s: the rate the ceiling divides by."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    return 2.0 * n ** 3 / time_cuda(lambda: a @ b, warmup=warmup, repeats=repeats).median_s
