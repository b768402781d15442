# TSM2X (Rivera et al., JPDC 2021): tall-and-skinny GEMM kernels against cuBLAS.
use rule experiment as tsm2x with:
    wildcard_constraints:
        paper="tsm2x",
        exp=experiments("tsm2x"),
