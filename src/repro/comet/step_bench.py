"""step_bench: training-step images/s of every arm side by side in one process (the speed claim's
measurement: the arms' own images/s depend on what shared the GPU), and the host time spent inside
encode/decode per step."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd
import torch

from repro.comet.arms import METHODS, check_choices, hooked_step
from repro.comet.hooks import make_hooks
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
    methods: list = field(default_factory=lambda: list(METHODS))
    eb: float = 0.05  # fixed and adaptive (before any re-tune: the bench is shorter than W)
    min_numel: int = 4096
    group_size: int = 256
    value_order: str = "logical"
    warmup: int = 5
    steps: int = 40
    rounds: int = 2  # the methods run round-robin this many times; the median round counts


class _HostClock:
    """Wraps hooks.encode/decode to add up the host seconds spent inside them."""

    def __init__(self, hooks):
        self.seconds = 0.0
        for name in ("encode", "decode"):
            setattr(hooks, name, self._timed(getattr(hooks, name)))

    def _timed(self, fn):
        def timed(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


@experiment(params=StepBenchParams, needs_gpu=False)
def step_bench(p: StepBenchParams, ctx: Context) -> Result:
    check_choices("methods", p.methods, METHODS, require="none")
    cuda = ctx.device == "cuda"
    gen = torch.Generator().manual_seed(ctx.seed)
    x = torch.randn(p.batch_size, 3, p.image_size, p.image_size, generator=gen).to(ctx.device)
    if p.channels_last and cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, p.num_classes, (p.batch_size,), generator=gen).to(ctx.device)
    setups = {}
    for method in p.methods:
        torch.manual_seed(ctx.seed)
        model = build_model(p.model, num_classes=p.num_classes, **p.model_kw).to(ctx.device)
        if p.channels_last and cuda:
            model = model.to(memory_format=torch.channels_last)
        hooks = make_hooks(method, eb=p.eb, min_numel=p.min_numel, group_size=p.group_size, seed=ctx.seed,
                           kernels_dir=ctx.inputs.get("kernels"), value_order=p.value_order)
        clock = None
        if hooks is not None:
            hooks.wrap_model(model)
            clock = _HostClock(hooks)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=cuda)
        setups[method] = (model, hooks, clock, opt)

    def run(method: str, steps: int) -> tuple[float, float]:
        model, hooks, clock, opt = setups[method]
        host0 = clock.seconds if clock else 0.0
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            hooked_step(model, hooks, x, y, opt)  # the uncompressed arm: no hooks at all
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps, ((clock.seconds if clock else 0.0) - host0) / steps

    for method in p.methods:
        run(method, p.warmup)
    rows = []
    for r in range(p.rounds):
        for method in p.methods:
            step_s, host_s = run(method, p.steps)
            rows.append(dict(round=r, method=method, step_s=step_s, host_codec_s=host_s,
                             images_per_s=p.batch_size / step_s))
            ctx.log.info("round %d %-9s %7.2f ms/step (%6.0f img/s), host time in encode/decode %6.2f ms/step",
                         r, method, 1e3 * step_s, p.batch_size / step_s, 1e3 * host_s)
    table = pd.DataFrame(rows)
    med = table.groupby("method").median(numeric_only=True)
    metrics = {}
    for method in p.methods:
        metrics[f"images_per_s_{method}"] = med.images_per_s[method]
        metrics[f"host_codec_ms_{method}"] = 1e3 * med.host_codec_s[method]
        metrics[f"speed_ratio_{method}"] = med.images_per_s[method] / med.images_per_s["none"]
    tags = dict(model=p.model, batch=p.batch_size, data="random CIFAR-shaped batch (no loader, no augmentation)",
                mode="eager (the arms' mode)", timing=f"wall clock over {p.steps} steps after a device sync; "
                                                       f"median of {p.rounds} round-robin rounds")
    return Result(metrics=metrics, tables={"steps": table}, tags=tags)
