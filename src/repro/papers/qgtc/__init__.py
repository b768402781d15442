"""QGTC (Wang, Feng, Ding, PPoPP 2022, arXiv 2111.09547): quantized GNNs on tensor cores through bit
decomposition.

- ``bitplanes``: bit-plane packing and the NumPy twin of the bit-decomposed GEMM (AND + popcount per
  plane pair, weights 2^(i+j), zero-tile jumping);
- ``kernels/qgtc_bmma.cu`` and ``bmma``: the same on the b1 tensor-core MMA (m16n8k256 .and.popc) through
  CuPy, and the b1 MMA issue-rate microbenchmark;
- ``layers``: quantized Cluster-GCN and batched-GIN layers on it, and their float reference;
- ``gemm``, ``gnn``: the experiments (claims qgtc.gemm, qgtc.vs_dgl); ``figures``: their figures.
"""
