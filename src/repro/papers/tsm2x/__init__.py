"""TSM2X (Rivera et al., "TSM2X: High-performance tall-and-skinny matrix-matrix multiplication on
GPUs", JPDC 2021, arXiv 2002.03258) as a library call: ``matmul(A, B)`` runs the tuned choice for the
shape, our kernel where it beat cuBLAS, cuBLAS bound like our kernels where that beat the operands'
own call (blas.py), and the operands' own cuBLAS call otherwise (tuner.py). Below
it: the TSM2R and TSM2L kernels (CUDA C, kernels/), their wrapper (tsm2.py), the benchmarks against
cuBLAS (experiment.py) and their figures (figures.py)."""

from repro.papers.tsm2x.tuner import matmul

__all__ = ["matmul"]
