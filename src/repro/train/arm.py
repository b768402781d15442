"""What every training arm shares: its parameters on top of the trainer's, the prepared splits it
reads, and its ending (weights saved, checkpoint dropped, top-1 and steady-epoch metrics, tags).

    p: TrainParams (a paper's arm params subclass it)
    train_split, test_split = splits(p, ctx)
    result = run_arm(p, ctx, model, train_split, test_split, hooks=...)
    metrics, tags, artifacts = finish_arm(p, ctx, result, train_split)

Speed metrics leave out epoch 1, which pays for cuDNN autotuning, CUDA-graph capture and
compilation (:func:`steady`); total_train_s includes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from repro.atomic import atomic_write
from repro.data.arrays import DataError, read_split
from repro.train.trainer import TrainConfig, TrainResult, train


@dataclass
class TrainParams(TrainConfig):
    model: str = "resnet32"  # a name in repro.models.MODELS
    model_kw: dict = field(default_factory=dict)  # extra builder arguments, e.g. {width: 8}
    n_train: int = 0  # train on a class-balanced subset of this many images; 0 = the whole split
    n_test: int = 0  # evaluate on a class-balanced subset; 0 = the whole split
    checkpoint: bool = True  # checkpoint every epoch and resume an interrupted run


def train_config(p: TrainConfig) -> TrainConfig:
    """The trainer's own fields of an arm's params."""
    return TrainConfig(**{f.name: getattr(p, f.name) for f in dataclasses.fields(TrainConfig)})


def splits(p: TrainParams, ctx):
    """The prepared CIFAR-10 train and test splits (ctx.inputs["train"], ["test"]), subset as p says."""
    for name in ("train", "test"):
        if name not in ctx.inputs:
            raise DataError(f"inputs.{name} is missing: pass the prepared CIFAR-10 split files as "
                            "inputs={train: <dir>/train.npz, test: <dir>/test.npz}")
    return (read_split(ctx.inputs["train"]).balanced_subset(p.n_train),
            read_split(ctx.inputs["test"]).balanced_subset(p.n_test))


def steady(history: pd.DataFrame) -> pd.DataFrame:
    """Epochs after the first (all of them if there is only one)."""
    return history.iloc[1:] if len(history) > 1 else history


def run_arm(p: TrainParams, ctx, model, train_split, test_split, hooks=None) -> TrainResult:
    """Train ``model`` with the shared trainer, checkpointing every epoch into the run folder (a
    killed run resumes); the finished run's checkpoint is dropped, so that a rerun trains again."""
    checkpoint = ctx.out_dir / "checkpoint.pt" if p.checkpoint else None
    result = train(model, train_split, test_split, train_config(p), device=ctx.device, seed=ctx.seed, hooks=hooks,
                   checkpoint=checkpoint, log=ctx.log, progress=ctx.progress)
    if checkpoint:
        checkpoint.unlink(missing_ok=True)
    return result


def finish_arm(p: TrainParams, ctx, result: TrainResult, train_split, epoch_s_note: str):
    """The arm's weights written to model.pt, and the metrics and tags every arm reports:
    (metrics, tags, artifacts). ``epoch_s_note`` says what epoch_s_mean times."""
    import torch

    weights = ctx.out_dir / "model.pt"
    state = {k: v.cpu() for k, v in result.model.state_dict().items()}
    atomic_write(weights, lambda fh: torch.save(state, fh))
    history, later = result.history, steady(result.history)
    metrics = dict(
        final_top1=result.final_top1,
        best_top1=result.best_top1,
        epoch_s_mean=later.train_s.mean(),
        images_per_s=later.images_per_s.mean(),
        total_train_s=history.train_s.sum(),
        peak_mem_bytes=history.peak_mem_bytes.max(),
        epochs=len(history),
    )
    tags = dict(model=p.model, mode=result.mode, mode_notes="; ".join(result.notes) or "none",
                data_source=train_split.source, seed=ctx.seed, epoch_s_mean=epoch_s_note)
    return metrics, tags, {"model": weights}
