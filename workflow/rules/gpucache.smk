# Graph model for GPU caching (Li et al., arXiv 1605.02043; SIGMETRICS 2017): the model's
# partitions (CPU) and the kernels run in each partitioner's order (CPU at smoke, H200 at paper).
use rule experiment as gpucache with:
    wildcard_constraints:
        paper="gpucache",
        exp=experiments("gpucache"),
