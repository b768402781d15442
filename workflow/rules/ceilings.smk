# Machine ceilings: the bandwidths and GEMM rates every kernel benchmark is measured against.
use rule experiment as ceilings with:
    wildcard_constraints:
        paper="ceilings",
        exp=experiments("ceilings"),
