"""ScissionLite (Ahn, Lee, Hong, Varghese; arXiv 2105.02019, IEEE TII 2024): a trained transfer layer
(a down-sampling/up-sampling pair) at the split point of a DNN split between a weak device and an edge
server, so that the tensor sent is small. ``nets``: CIFAR ResNet, VGG and DenseNet trained on CIFAR-10,
transfer layers trained at their split points (accuracy drop measured), every layer and codec timed on
the device and the edge (repro.split); ``split``: the split latency model fed by those measurements
against device only, edge only, Scission's best plain split and an int8 split tensor (claims
scl.vs_local, scl.vs_scission)."""
