"""The shared trainer: :func:`train` with :class:`TrainConfig`, hooks for the arms
(:class:`TrainHooks`), and the single-step machinery (:class:`TrainStep`) for callers with their
own data (e.g. synthetic ImageNet batches)."""

from repro.train.hooks import TrainHooks, fast_mode_conflict
from repro.train.step import TrainStep
from repro.train.trainer import TrainConfig, TrainingDiverged, TrainResult, evaluate, make_sgd, train

__all__ = ["TrainConfig", "TrainResult", "TrainingDiverged", "TrainHooks", "TrainStep", "evaluate", "make_sgd", "train",
           "fast_mode_conflict"]
