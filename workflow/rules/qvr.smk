# Q-VR (Xie et al., ASPLOS 2021, arXiv 2102.13191): foveated collaborative mobile VR rendering, as a
# SimPy model (CPU steps: gpus 0).
use rule experiment as qvr with:
    wildcard_constraints:
        paper="qvr",
        exp=experiments("qvr"),
