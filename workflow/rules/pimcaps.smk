# PIM-CapsNet (Zhang et al., HPCA 2020): CapsNet routing characterised on the GPU, and the model of
# routing in 3D-stacked memory set from that characterisation.
use rule experiment as pimcaps with:
    wildcard_constraints:
        paper="pimcaps",
        exp=experiments("pimcaps"),
