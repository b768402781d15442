"""Datasets: CIFAR-10 preparation into checksummed split files (:mod:`repro.data.cifar10`, also a
CLI), reading them back (:mod:`repro.data.arrays`), and synthetic ImageNet batches
(:mod:`repro.data.synthetic`). ``cifar10`` is not imported here so ``python -m
repro.data.cifar10`` runs it exactly once."""

from repro.data.arrays import DataError, Split, read_split, write_split
from repro.data.synthetic import SyntheticImageNet, synthetic_batch, synthetic_split

__all__ = ["DataError", "Split", "read_split", "write_split", "SyntheticImageNet", "synthetic_batch",
           "synthetic_split"]
