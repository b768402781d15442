# SuperNeurons (Wang et al., PPoPP 2018): the dynamic GPU memory runtime's peak memory per network,
# the deepest ResNet each arm trains under a 12 GiB cap, the largest batch and throughput (which reads
# the depth record). Synthetic data: no dataset step needed.
use rule experiment as superneurons with:
    wildcard_constraints:
        paper="superneurons",
        exp=experiments("superneurons"),
