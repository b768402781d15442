"""Baseline arm: dense CIFAR-10 training with the shared trainer, and a benchmark of that trainer
against a plain PyTorch loop.

train_cifar    trains one model (params.model) on the prepared split files ctx.inputs["train"] and
               ctx.inputs["test"]; writes model.pt (weights, for the arms that start from a dense
               model) and the per-epoch table epochs.csv.
trainer_bench  images/s of our trainer and, in the same run, of the plain loop in
               repro.baseline.reference_loop on the same model and images.

Speed metrics leave out epoch 1, which pays for cuDNN autotuning, CUDA-graph capture and
compilation; total_train_s includes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd
import torch

from repro.data.arrays import DataError, read_split
from repro.atomic import atomic_write
from repro.experiment import Context, Result, experiment
from repro.models import build_model, count_params
from repro.baseline.reference_loop import reference_epochs
from repro.train import TrainConfig, train
from repro.train.augment import channel_stats


@dataclass
class TrainParams(TrainConfig):
    model: str = "resnet32"  # a name in repro.models.MODELS
    model_kw: dict = field(default_factory=dict)  # extra builder arguments, e.g. {width: 8}
    n_train: int = 0  # train on a class-balanced subset of this many images; 0 = the whole split
    n_test: int = 0  # evaluate on a class-balanced subset; 0 = the whole split
    checkpoint: bool = True  # checkpoint every epoch and resume an interrupted run


@dataclass
class BenchParams(TrainParams):
    epochs: int = 3  # of our trainer; epoch 1 is warm-up
    ref_epochs: int = 2  # of the reference loop; epoch 1 is warm-up (worker start-up)
    ref_workers: int = 4  # DataLoader worker processes of the reference loop
    n_test: int = 1000
    checkpoint: bool = False


def _train_config(p: TrainConfig) -> TrainConfig:
    return TrainConfig(**{f.name: getattr(p, f.name) for f in dataclasses.fields(TrainConfig)})


def _splits(p: TrainParams, ctx: Context):
    for name in ("train", "test"):
        if name not in ctx.inputs:
            raise DataError(f"inputs.{name} is missing: pass the prepared CIFAR-10 split files as "
                            "inputs={train: <dir>/train.npz, test: <dir>/test.npz}")
    return (read_split(ctx.inputs["train"]).balanced_subset(p.n_train),
            read_split(ctx.inputs["test"]).balanced_subset(p.n_test))


def _steady(history: pd.DataFrame) -> pd.DataFrame:
    """Epochs after the first (all of them if there is only one)."""
    return history.iloc[1:] if len(history) > 1 else history


@experiment(params=TrainParams, needs_gpu=False)
def train_cifar(p: TrainParams, ctx: Context) -> Result:
    train_split, test_split = _splits(p, ctx)
    torch.manual_seed(ctx.seed)
    model = build_model(p.model, num_classes=len(train_split.classes), **p.model_kw)
    checkpoint = ctx.out_dir / "checkpoint.pt" if p.checkpoint else None
    result = train(model, train_split, test_split, _train_config(p), device=ctx.device, seed=ctx.seed,
                   checkpoint=checkpoint, log=ctx.log, progress=ctx.progress)
    weights = ctx.out_dir / "model.pt"
    state = {k: v.cpu() for k, v in result.model.state_dict().items()}
    atomic_write(weights, lambda fh: torch.save(state, fh))
    if checkpoint:
        checkpoint.unlink(missing_ok=True)  # finished: a rerun must train again, not reuse stale state
    history, steady = result.history, _steady(result.history)
    metrics = dict(
        final_top1=result.final_top1,
        best_top1=result.best_top1,
        epoch_s_mean=steady.train_s.mean(),
        first_epoch_s=history.train_s.iloc[0],
        images_per_s=steady.images_per_s.mean(),
        eval_s_mean=history.eval_s.mean(),
        total_train_s=history.train_s.sum(),
        peak_mem_bytes=history.peak_mem_bytes.max(),
        n_train_images=len(train_split),
        n_test_images=len(test_split),
        epochs=len(history),
        params=count_params(model),
    )
    tags = dict(model=p.model, mode=result.mode, mode_notes="; ".join(result.notes) or "none",
                data_source=train_split.source, seed=ctx.seed, resumed_epochs=result.resumed_epochs,
                data_on_device=result.data_on_device,
                epoch_s_mean="training pass only, epochs 2.. (epoch 1 pays warm-up/capture/compilation)")
    return Result(metrics=metrics, tables={"epochs": history}, artifacts={"model": weights}, tags=tags)


@experiment(params=BenchParams, needs_gpu=False)
def trainer_bench(p: BenchParams, ctx: Context) -> Result:
    train_split, test_split = _splits(p, ctx)
    torch.manual_seed(ctx.seed)
    ours = train(build_model(p.model, num_classes=len(train_split.classes), **p.model_kw), train_split, test_split,
                 _train_config(p), device=ctx.device, seed=ctx.seed, log=ctx.log)
    torch.manual_seed(ctx.seed)  # the same initial weights as ours
    reference = build_model(p.model, num_classes=len(train_split.classes), **p.model_kw)
    mean, std = channel_stats(train_split.images)
    ref_times = reference_epochs(reference, train_split.images, train_split.labels, mean, std, device=ctx.device,
                                 epochs=p.ref_epochs, batch_size=p.batch_size, lr=p.lr, momentum=p.momentum,
                                 weight_decay=p.weight_decay, workers=p.ref_workers, seed=ctx.seed)
    seen = len(train_split) // p.batch_size * p.batch_size
    rows = [dict(loop="ours", mode=ours.mode, epoch=int(r.epoch), train_s=r.train_s, images_per_s=r.images_per_s,
                 warmup=i == 0) for i, r in enumerate(ours.history.itertuples())]
    rows += [dict(loop="reference", mode=f"eager, DataLoader with {p.ref_workers} workers", epoch=i + 1, train_s=t,
                  images_per_s=seen / t, warmup=i == 0) for i, t in enumerate(ref_times)]
    table = pd.DataFrame(rows)
    steady = table[~table.warmup] if (~table.warmup).any() else table
    ours_ips = steady[steady.loop == "ours"].images_per_s.mean()
    ref_ips = steady[steady.loop == "reference"].images_per_s.mean()
    speedup = ours_ips / ref_ips
    line = (f"trainer_bench {p.model} on {ctx.device}: ours {ours_ips:,.0f} img/s [{ours.mode}], "
            f"reference {ref_ips:,.0f} img/s, speedup {speedup:.2f}x")
    ctx.log.info(line)
    print(line)
    metrics = dict(ours_images_per_s=ours_ips, reference_images_per_s=ref_ips, speedup=speedup,
                   ours_epoch_s=seen / ours_ips, reference_epoch_s=seen / ref_ips, n_train_images=len(train_split))
    tags = dict(model=p.model, mode=ours.mode, mode_notes="; ".join(ours.notes) or "none",
                data_source=train_split.source, reference=f"DataLoader, {p.ref_workers} workers, eager fp32")
    return Result(metrics=metrics, tables={"bench": table}, tags=tags)

