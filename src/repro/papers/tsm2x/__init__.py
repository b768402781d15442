"""TSM2X (Rivera et al., "TSM2X: High-performance tall-and-skinny matrix-matrix multiplication on
GPUs", JPDC 2021, arXiv 2002.03258): the TSM2R and TSM2L kernels (CUDA C, kernels/), their CuPy
wrapper (tsm2.py), an autotuner with a cuBLAS fallback (tuner.py), the benchmark against cuBLAS
(bench.py) and its figures (figures.py)."""
