# Multi-GPU SpTRSV (Xie et al., ICPP 2021) and sync-free SpTRSV (Liu et al. 2016): the CPU twins,
# one GPU against cuSPARSE, and 2 or 4 GPUs (the experiment starts one process per GPU itself).
use rule experiment as sptrsv with:
    wildcard_constraints:
        paper="sptrsv",
        exp=experiments("sptrsv"),
