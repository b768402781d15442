"""Baseline arm: dense CIFAR-10 training with the shared trainer (repro.train) and its benchmark."""
