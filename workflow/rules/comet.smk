# COMET (Jin et al., VLDB 2022): error-bounded lossy compression of saved activations. The GPU
# compressor's benchmark, the largest batch under a memory cap, four training arms on one eager
# schedule (uncompressed, fixed eb, adaptive eb, ActNN 2-bit) on ResNet-32 and (vgg16_) on VGG-16,
# SZ3 on dumped activations (CPU), the comparisons behind the claims, and the error-bound sweep
# (its points run through the spine's sweep_point rule).
use rule experiment as comet with:
    wildcard_constraints:
        paper="comet",
        exp=experiments("comet"),
