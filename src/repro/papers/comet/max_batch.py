"""max_batch: the largest batch whose training step fits a memory cap, uncompressed vs ours (fixed
eb) vs ActNN, on synthetic CIFAR-shaped batches."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn as nn

from repro.papers.comet.arms import check_choices, hooked_step
from repro.papers.comet.hooks import SavedTensorAccounting, make_hooks
from repro.experiment import Context, Result, experiment
from repro.models import build_model
from repro.search import largest_fit


@dataclass
class MaxBatchParams:
    model: str = "resnet32"
    model_kw: dict = field(default_factory=dict)
    methods: list = field(default_factory=lambda: ["none", "fixed", "actnn"])
    cap_mib: int = 8192  # memory one training step may use above the model and optimiser state
    start: int = 128  # first batch tried; doubled until a step no longer fits, then bisected
    limit: int = 65536  # largest batch tried
    resolution: int = 64  # the search stops when the bracket is this narrow
    eb: float = 0.05  # fixed: error bound of every layer (no training here, so no adaptive re-tuning)
    min_numel: int = 4096
    group_size: int = 256
    value_order: str = "logical"
    channels_last: bool = True


def _step_bytes(model: nn.Module, hooks: SavedTensorAccounting, optimizer, batch: int, device: str, seed: int,
                channels_last: bool) -> float:
    """Memory of one training step at this batch: CUDA peak allocated above the start (inf when it
    runs out of memory); on the CPU the accounted bytes of the saved activations (a proxy)."""
    from repro.data.synthetic import synthetic_batch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    try:
        x, y = synthetic_batch(batch, image_size=32, num_classes=10, seed=seed, device=device,
                               channels_last=channels_last)
        optimizer.zero_grad(set_to_none=True)
        hooked_step(model, hooks, x, y, optimizer)
        del x, y
        if cuda:
            torch.cuda.synchronize()
            return float(torch.cuda.max_memory_allocated() - before)
        return float(hooks.step_stored_bytes)
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        return float("inf")


def largest_batch(fits, start: int, limit: int, resolution: int) -> int:
    """The largest batch b in [1, limit] with fits(b) (repro.search.largest_fit: doubling from
    start, then bisection to ``resolution``; fits must be monotone: a larger batch never uses less
    memory); 0 if none."""
    if start < 1 or limit < start or resolution < 1:
        raise ValueError(f"need 1 <= start <= limit and resolution >= 1, got start={start}, limit={limit}, "
                         f"resolution={resolution}")
    best, _ = largest_fit(fits, start, 1, limit, abs_tol=resolution)
    return best or 0


@experiment(params=MaxBatchParams, needs_gpu=False)
def max_batch(p: MaxBatchParams, ctx: Context) -> Result:
    check_choices("methods", p.methods, ("none", "fixed", "actnn"), require="none")
    cap = p.cap_mib * 2**20
    rows, best = [], {}
    for method in p.methods:
        torch.manual_seed(ctx.seed)
        model = build_model(p.model, num_classes=10, **p.model_kw).to(ctx.device)
        if p.channels_last and ctx.device == "cuda":
            model = model.to(memory_format=torch.channels_last)
        hooks = make_hooks(method, eb=p.eb, min_numel=p.min_numel, group_size=p.group_size, seed=ctx.seed,
                           kernels_dir=ctx.inputs.get("kernels"), value_order=p.value_order) \
            or SavedTensorAccounting(p.min_numel)
        hooks.wrap_model(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def fits(batch: int, method=method, model=model, hooks=hooks, optimizer=optimizer) -> bool:
            used = _step_bytes(model, hooks, optimizer, batch, ctx.device, ctx.seed,
                               p.channels_last and ctx.device == "cuda")
            rows.append(dict(method=method, batch=batch, step_bytes=used, fits=used <= cap))
            ctx.log.info("max_batch %s: batch %d uses %.1f MiB (cap %d MiB)", method, batch, used / 2**20, p.cap_mib)
            return used <= cap

        best[method] = largest_batch(fits, p.start, p.limit, p.resolution)
        del model, hooks, optimizer
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    metrics = {f"max_batch_{m}": float(b) for m, b in best.items()}
    for m in best:
        if m != "none" and best["none"]:
            metrics[f"batch_ratio_{m}"] = best[m] / best["none"]
    tags = dict(model=p.model, cap=f"{p.cap_mib} MiB above the model and optimiser state",
                memory=("CUDA peak allocated over one training step (forward, backward, SGD step)"
                        if ctx.device == "cuda" else "CPU proxy: accounted bytes of the saved activations"),
                data="synthetic CIFAR-shaped batches", fixed_eb=f"{p.eb} for every layer")
    return Result(metrics=metrics, tables={"probes": pd.DataFrame(rows)}, tags=tags)
