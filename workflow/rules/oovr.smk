# OO-VR (Xie et al., arXiv 2001.03537): object-oriented VR rendering on a NUMA multi-GPU, as a SimPy
# model (CPU steps: gpus 0).
use rule experiment as oovr with:
    wildcard_constraints:
        paper="oovr",
        exp=experiments("oovr"),
