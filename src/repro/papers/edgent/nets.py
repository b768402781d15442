"""Edgent's measured inputs (``nets``): the exit-augmented AlexNet and ResNet trained jointly on
CIFAR-10 (accuracy per exit), and per-layer latency at batch 1 on the two processors, the device (this
CPU at 1-4 threads: not a Raspberry Pi or a TX2) and the edge (the GPU at paper scale; at smoke scale,
without a GPU, the CPU at all its threads stands in and the record says so). Each net is also profiled
at other widths: the layers the latency predictors are fitted on (configure.py), so their error on the
trained nets is out of sample."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.split import exits, processors, profile
from repro.split.train import DataParams, ExitTraining, exit_accuracy, train_exits
from repro.train.arm import splits


def _nets() -> list[dict]:
    return [{"name": "alexnet", "kw": {"width": 1.0}, "fit": [{"width": 0.5}, {"width": 0.75}, {"width": 1.5}]},
            {"name": "resnet", "kw": {"depth": 20, "width": 16},
             "fit": [{"depth": 20, "width": 8}, {"depth": 20, "width": 12}, {"depth": 20, "width": 24}]}]


@dataclass
class NetsParams:
    nets: list[dict] = field(default_factory=_nets)  # name (repro.split.exits), kw, fit: kw of the fitting variants
    training: ExitTraining = field(default_factory=ExitTraining)
    data: DataParams = field(default_factory=DataParams)
    device_threads: list[int] = field(default_factory=lambda: [1, 2, 3, 4])  # the device: this CPU at each count
    edge_threads: int = 0  # the CPU stand-in edge's threads when there is no GPU; 0 = all
    warmup: int = 5
    repeats: int = 30  # per layer; the median is used


def _net_rows(spec: dict, p: NetsParams, ctx: Context, runs, train, test) -> tuple[list, pd.DataFrame, list]:
    """One net's exit accuracies, training losses and layer profiles (a stage: a run killed after it keeps them)."""
    net = exits.build(spec["name"], **spec["kw"])
    hist = train_exits(net, train, p.training, ctx.device, ctx.seed, progress=ctx.progress)
    acc = exit_accuracy(net, train, test, ctx.device)
    accuracy = [dict(net=spec["name"], exit=e, attach=a, accuracy=float(v))
                for e, (a, v) in enumerate(zip(net.attach, acc))]
    layers = []
    for variant, kw in [("trained", spec["kw"]), *[(f"fit{k}", kw) for k, kw in enumerate(spec.get("fit", []))]]:
        model = net if variant == "trained" else exits.build(spec["name"], **kw)
        for role, dev, threads in runs:
            df = profile.profile(model, dev, threads, p.warmup, p.repeats)
            layers.append(df.assign(net=spec["name"], variant=variant, kw=str(kw), role=role,
                                    threads=processors.recorded_threads(dev, threads)))
    return accuracy, hist.assign(net=spec["name"]), layers


@experiment(params=NetsParams, needs_gpu=False)
def nets(p: NetsParams, ctx: Context) -> Result:
    runs = processors.processors(ctx.device, p.device_threads, p.edge_threads)
    train, test = splits(p.data, ctx)
    accuracy, losses, layers = [], [], []
    for spec in p.nets:
        acc_rows, hist, net_layers = ctx.stage(spec["name"], lambda spec=spec: _net_rows(spec, p, ctx, runs, train, test))
        accuracy += acc_rows
        losses.append(hist)
        layers += net_layers
    layers = pd.concat(layers, ignore_index=True)
    acc = pd.DataFrame(accuracy)
    trained = layers[layers["variant"] == "trained"]
    metrics = {f"{n}_exit{e}_top1": a for n, e, a in acc[["net", "exit", "accuracy"]].itertuples(index=False)}
    metrics.update(processors.backbone_metrics(trained))
    tags = {**processors.tags(runs), "n_train": str(len(train)), "n_test": str(len(test))}
    return Result(metrics=metrics, tables={"exits": acc, "layers": layers, "training": pd.concat(losses)}, tags=tags)
