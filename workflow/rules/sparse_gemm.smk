# Tile-wise sparsity (Guo et al., SC 2020) and Shfl-BW (Huang et al., DAC 2022): the sparse-GEMM
# benchmark against dense, the shrunk ideal, 2:4, BSR and CSR, and the CIFAR-10 VGG-16 accuracy arms.
use rule experiment as sparse_gemm with:
    wildcard_constraints:
        paper="sparse_gemm",
        exp=experiments("sparse_gemm"),
