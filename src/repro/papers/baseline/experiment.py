"""Baseline arm: dense CIFAR-10 training with the shared trainer, and a benchmark of that trainer
against a plain PyTorch loop.

train_cifar    trains one model (params.model) on the prepared split files ctx.inputs["train"] and
               ctx.inputs["test"]; writes model.pt (weights, for the arms that start from a dense
               model) and the per-epoch table epochs.csv. A model with a data-dependent first layer
               (airbench94's whitening conv: ``init_whitening``) is initialised from the first
               WHITEN_IMAGES training images, normalised as the trainer normalises them.
trainer_bench  images/s of our trainer and, in the same run, of the plain loop in
               repro.papers.baseline.reference_loop on the same model and images.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from repro.experiment import Context, Result, experiment
from repro.models import build_model, count_params
from repro.papers.baseline.reference_loop import reference_epochs
from repro.train import train
from repro.train.arm import TrainParams, finish_arm, run_arm, splits, train_config
from repro.train.augment import channel_stats, first_batch

WHITEN_IMAGES = 5000  # airbench94's: the patch covariance of the first 5000 training images


@dataclass
class BenchParams(TrainParams):
    epochs: int = 3  # of our trainer; epoch 1 is warm-up
    ref_epochs: int = 2  # of the reference loop; epoch 1 is warm-up (worker start-up)
    ref_workers: int = 4  # DataLoader worker processes of the reference loop
    n_test: int = 1000
    checkpoint: bool = False


@experiment(params=TrainParams, needs_gpu=False)
def train_cifar(p: TrainParams, ctx: Context) -> Result:
    train_split, test_split = splits(p, ctx)
    torch.manual_seed(ctx.seed)
    model = build_model(p.model, num_classes=len(train_split.classes), **p.model_kw)
    whitened_on = 0
    if hasattr(model, "init_whitening"):
        whitened_on = min(WHITEN_IMAGES, len(train_split))
        model.init_whitening(first_batch(train_split, whitened_on, "cpu")[0])
    result = run_arm(p, ctx, model, train_split, test_split)
    metrics, tags, artifacts = finish_arm(
        p, ctx, result, train_split, "training pass only, epochs 2.. (epoch 1 pays warm-up/capture/compilation)")
    history = result.history
    metrics.update(first_epoch_s=history.train_s.iloc[0], eval_s_mean=history.eval_s.mean(),
                   n_train_images=len(train_split), n_test_images=len(test_split), params=count_params(model))
    tags.update(resumed_epochs=result.resumed_epochs, data_on_device=result.data_on_device)
    if whitened_on:
        metrics.update(whitened_on_images=whitened_on)
    return Result(metrics=metrics, tables={"epochs": history}, artifacts=artifacts, tags=tags)


@experiment(params=BenchParams, needs_gpu=False)
def trainer_bench(p: BenchParams, ctx: Context) -> Result:
    train_split, test_split = splits(p, ctx)
    torch.manual_seed(ctx.seed)
    ours = train(build_model(p.model, num_classes=len(train_split.classes), **p.model_kw), train_split, test_split,
                 train_config(p), device=ctx.device, seed=ctx.seed, log=ctx.log)
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

