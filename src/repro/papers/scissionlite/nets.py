"""ScissionLite's measured inputs (``nets``): CIFAR ResNet, VGG and DenseNet trained on CIFAR-10; at
each net's transfer-layer split points (repro.split.transfer.points: the smallest split tensor at each
resolution) a transfer layer trained with the edge part (the device part frozen) and an int8 split
tensor, each with its top-1 on the test images; per-layer latency of the base nets and each codec's
two sides at batch 1 on the device (this CPU at 1-4 threads: not a TX2) and the edge (the GPU at paper
scale; at smoke scale, without a GPU, the CPU at all its threads stands in and the record says so)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.split import plain, processors, profile, transfer
from repro.split.train import DataParams, ExitTraining, exit_accuracy, train_exits
from repro.train.arm import splits


def _nets() -> list[dict]:
    return [{"name": "resnet", "kw": {"depth": 20, "width": 16}}, {"name": "vgg", "kw": {"depth": 16}},
            {"name": "densenet", "kw": {"growth": 12, "blocks": [6, 6, 6]}}]


@dataclass
class TransferParams:
    reduction: int = 4  # assumed: channels sent = channels / reduction (the paper's layer sizes were not read)
    spatial: int = 2  # 2x2 down/up-sampling, as the ScissionTL artifact's max-pool + nearest up-sampling
    training: ExitTraining = field(default_factory=lambda: ExitTraining(epochs=3, lr=0.02, warmup_epochs=0.0))


@dataclass
class NetsParams:
    nets: list[dict] = field(default_factory=_nets)  # name (repro.split.plain) and kw
    training: ExitTraining = field(default_factory=ExitTraining)  # the base nets
    transfer: TransferParams = field(default_factory=TransferParams)
    data: DataParams = field(default_factory=DataParams)
    device_threads: list[int] = field(default_factory=lambda: [1, 2, 3, 4])  # the device: this CPU at each count
    edge_threads: int = 0  # the CPU stand-in edge's threads when there is no GPU; 0 = all
    warmup: int = 5
    repeats: int = 30  # per layer and codec side; the median is used


def _net_rows(spec: dict, p: NetsParams, ctx: Context, runs, train, test, x) -> tuple[list, list, list, list]:
    """One base net's accuracy, codec, layer and loss rows: the net, a transfer layer at each split point
    and the int8 split there (a stage: a run killed after it keeps them)."""
    accuracy, codecs, layers, losses = [], [], [], []
    name = spec["name"]
    net = plain.build(name, **spec["kw"])
    losses.append(train_exits(net, train, p.training, ctx.device, ctx.seed, progress=ctx.progress)
                  .assign(net=name, split=-1))
    base = float(exit_accuracy(net, train, test, ctx.device)[-1])
    accuracy.append(dict(net=name, split=-1, codec="none", top1=base, drop_points=0.0))
    tensors = transfer.split_tensors(net.cpu(), x)
    for s in transfer.points(net, p.transfer.spatial):
        tl = transfer.TransferLayer(tensors[s].shape[1], p.transfer.reduction, p.transfer.spatial)
        tl_net = transfer.with_codec(net, s, tl)
        losses.append(train_exits(tl_net, train, p.transfer.training, ctx.device, ctx.seed, progress=ctx.progress)
                      .assign(net=name, split=s))
        for codec, coded in (("tl", tl_net), ("int8", transfer.with_codec(net, s, transfer.Int8Codec()))):
            top1 = float(exit_accuracy(coded, train, test, ctx.device)[-1])
            accuracy.append(dict(net=name, split=s, codec=codec, top1=top1, drop_points=100 * (base - top1)))
            side = coded.layers[1]
            for role, dev, threads in runs:
                t = transfer.codec_times(side, tensors[s], dev, threads, p.warmup, p.repeats)
                codecs.append(dict(net=name, split=s, codec=codec, role=role,
                                   threads=processors.recorded_threads(dev, threads),
                                   plain_bytes=tensors[s].numel() * tensors[s].element_size(), **t))
    for role, dev, threads in runs:
        df = profile.profile(net, dev, threads, p.warmup, p.repeats)
        layers.append(df.assign(net=name, kw=str(spec["kw"]), role=role,
                                threads=processors.recorded_threads(dev, threads)))
    return accuracy, codecs, layers, losses


@experiment(params=NetsParams, needs_gpu=False)
def nets(p: NetsParams, ctx: Context) -> Result:
    import torch

    runs = processors.processors(ctx.device, p.device_threads, p.edge_threads)
    train, test = splits(p.data, ctx)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    accuracy, codecs, layers, losses = [], [], [], []
    for spec in p.nets:
        rows = ctx.stage(spec["name"], lambda spec=spec: _net_rows(spec, p, ctx, runs, train, test, x))
        for into, part in zip((accuracy, codecs, layers, losses), rows):
            into += part
    acc, layers, codecs = pd.DataFrame(accuracy), pd.concat(layers, ignore_index=True), pd.DataFrame(codecs)
    metrics = {f"{n}_top1": a for n, a in acc.loc[acc["codec"] == "none", ["net", "top1"]].itertuples(index=False)}
    for (net, codec), g in acc[acc["codec"] != "none"].groupby(["net", "codec"]):
        metrics[f"{net}_{codec}_drop_max_points"] = float(g["drop_points"].max())
    metrics.update(processors.backbone_metrics(layers))
    tags = {**processors.tags(runs), "n_train": str(len(train)), "n_test": str(len(test))}
    return Result(metrics=metrics, tables={"accuracy": acc, "codecs": codecs, "layers": layers,
                                           "training": pd.concat(losses, ignore_index=True)}, tags=tags)
