"""Edgent (Li, Zeng, Zhou, Chen; IEEE TWC 2020, arXiv 1910.05316): on-demand device-edge co-inference
by DNN partitioning and early exit under a latency deadline. ``nets``: exit-augmented networks trained
on CIFAR-10 and profiled layer by layer on the device and the edge (repro.split); ``configure``: the
regression predictors, the static and dynamic configurators and the baselines, as a model fed by
those measurements (claim edgent.oracle)."""
