"""PIM-CapsNet (Zhang et al., HPCA 2020, arXiv 1911.03451): CapsNet's dynamic routing runs badly
on GPUs (large unshareable intermediates, a synchronisation between every step); the design keeps
the conv layers on the GPU and runs routing in the logic layer of 3D-stacked memory, pipelined
with the GPU.

capsnet.py       Sabour et al.'s CapsNet with dynamic routing, the three input configurations,
                 routing eager and fused by torch.compile.
characterise.py  the GPU (or CPU) characterisation: time of conv layers vs routing, prediction
                 vector bytes, kernel launches and synchronisations per batch, GPU power.
pim_model.py     the analytical model of routing in an HMC-like stack, pipelined with the GPU.
experiment.py    the characterisation (H200 at paper scale) and the model (CPU, from its record).
"""
