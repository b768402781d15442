"""step_bench: training-step images/s of every arm side by side in one process (the speed claim's
measurement: the arms' own images/s depend on what shared the GPU), and the host time spent inside
encode/decode per step; eager, arena-payload and CUDA-graph arms (step_arms)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch

from repro.papers.comet import step_arms
from repro.papers.comet.arms import METHODS, check_choices
from repro.experiment import Context, Result, experiment
from repro.models import build_model


@dataclass
class StepBenchParams:
    model: str = "resnet32"
    model_kw: dict = field(default_factory=dict)
    batch_size: int = 128
    image_size: int = 32
    num_classes: int = 10
    channels_last: bool = True
    methods: list = field(default_factory=lambda: list(METHODS))  # eager arms
    payloads: list = field(default_factory=lambda: ["exact"])  # of the eager COMET arms: exact | arena
    graph_methods: list = field(default_factory=list)  # also run as a CUDA-graph step (none, fixed; arena payload)
    eb: float = 0.05  # fixed and adaptive (before any re-tune: the bench is shorter than W)
    min_numel: int = 4096
    group_size: int = 256
    value_order: str = "logical"
    arena_margin: float = 1.1
    warmup: int = 5
    steps: int = 40
    rounds: int = 2  # the arms run round-robin this many times; the median round counts


@experiment(params=StepBenchParams, needs_gpu=False)
def step_bench(p: StepBenchParams, ctx: Context) -> Result:
    check_choices("methods", p.methods, METHODS, require="none")
    check_choices("payloads", p.payloads, ("exact", "arena"))
    check_choices("graph_methods", p.graph_methods, step_arms.GRAPH_METHODS,
                  require="none" if p.graph_methods else None)
    cuda = ctx.device == "cuda"
    gen = torch.Generator().manual_seed(ctx.seed)
    x = torch.randn(p.batch_size, 3, p.image_size, p.image_size, generator=gen).to(ctx.device)
    if p.channels_last and cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, p.num_classes, (p.batch_size,), generator=gen).to(ctx.device)
    hook_kw = dict(eb=p.eb, min_numel=p.min_numel, group_size=p.group_size, kernels_dir=ctx.inputs.get("kernels"),
                   value_order=p.value_order, arena_margin=p.arena_margin)
    arms = {name: step_arms.build(name, lambda: build_model(p.model, num_classes=p.num_classes, **p.model_kw),
                                  ctx.device, ctx.seed, p.channels_last, hook_kw, ctx.log)
            for name in step_arms.arm_names(p.methods, p.payloads, p.graph_methods)}
    for arm in arms.values():
        arm.warm_up(x, y, p.warmup)
    rows = []
    for r in range(p.rounds):
        for name, arm in arms.items():
            step_s, host_s = arm.run(x, y, p.steps)
            rows.append(dict(round=r, arm=name, method=arm.method, payload=arm.payload, mode=arm.mode, step_s=step_s,
                             host_codec_s=host_s, images_per_s=p.batch_size / step_s))
            ctx.log.info("round %d %-16s %7.2f ms/step (%6.0f img/s), host time in encode/decode %6.2f ms/step",
                         r, name, 1e3 * step_s, p.batch_size / step_s, 1e3 * host_s)
    table = pd.DataFrame(rows)
    med = table.groupby("arm").median(numeric_only=True)
    metrics = {}
    for name, arm in arms.items():
        key = name.replace("@", "_")
        metrics[f"images_per_s_{key}"] = med.images_per_s[name]
        metrics[f"host_codec_ms_{key}"] = 1e3 * med.host_codec_s[name]
        reference = "none@cudagraph" if arm.mode == "cudagraph" else "none"
        metrics[f"speed_ratio_{key}"] = med.images_per_s[name] / med.images_per_s[reference]
        if arm.mode == "cudagraph":
            metrics[f"speed_ratio_{key}_vs_eager"] = med.images_per_s[name] / med.images_per_s["none"]
        for k, v in arm.codec_metrics().items():
            metrics[f"{k}_{key}"] = v
    tags = dict(model=p.model, batch=p.batch_size, data="random CIFAR-shaped batch (no loader, no augmentation)",
                arms="<method>: eager, COMET exact-size payload; <method>@arena: eager, payload arena (no sync); "
                     "<method>@cudagraph: one captured CUDA graph per step (COMET: arena); speed_ratio against none "
                     "in the same mode (_vs_eager: against eager none)",
                timing=f"wall clock over {p.steps} steps after a device sync; median of {p.rounds} round-robin rounds")
    return Result(metrics=metrics, tables={"steps": table}, tags=tags)
