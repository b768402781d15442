"""SuperNeurons (Wang et al., PPoPP 2018): a dynamic GPU memory runtime for PyTorch training.

liveness.py        per-layer profile (saved tensors, sizes, working sets) and the memory estimates
tensor_pool.py     unified tensor pool: LRU-budgeted offload to pinned host memory on a side stream,
                   prefetch ahead of use in backward
runtime.py         the plan (segments, recompute / keep / merge, speed- vs memory-centric, resident
                   first and offload only the excess) and the wrapped model; SuperNeuronsHooks plugs it
                   into the shared trainer
sgd_in_backward.py SGD applied per parameter as soon as its gradient is accumulated (gradient liveness)
arms.py            the arms the experiments compare (plain, checkpoint_sequential, save_on_cpu, ours)
probe.py           one bounded training probe, runnable in a subprocess for a clean memory state (and
                   the cuDNN workspace cap in that subprocess's environment)
experiment.py      peak_memory, depth, throughput; figures.py draws them
"""
