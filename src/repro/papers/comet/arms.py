"""The COMET training arms on the shared trainer, and what the other COMET experiments share:
one training step under saved-tensor hooks (:func:`hooked_step`) and the activation-memory probe.

train_arm  one arm (params.method): none (the plain trainer, no hooks), fixed (one eb for every
           layer), adaptive (EBController), actnn (2-bit per group). After training, a probe step on
           one batch measures activation memory: CUDA memory allocated after the forward pass minus
           before it (on the CPU, the accounted bytes of the saved activations), and that step's peak.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn as nn

from repro.papers.comet.hooks import SavedTensorAccounting, make_hooks
from repro.experiment import Context, Result, experiment
from repro.models import build_model
from repro.train.arm import TrainParams, finish_arm, run_arm, splits
from repro.train.augment import first_batch

METHODS = ("none", "fixed", "adaptive", "actnn")


def check_choices(name: str, values, known, require: str | None = None) -> None:
    """ValueError naming the parameter unless every value is known (and ``require`` is among them)."""
    for value in values:
        if value not in known:
            raise ValueError(f"{name}: unknown value {value!r}; known: {', '.join(map(str, known))}")
    if require is not None and require not in values:
        raise ValueError(f"{name} must include {require!r} (the uncompressed reference every ratio is taken against)")


def hooked_step(model: nn.Module, hooks, x: torch.Tensor, y: torch.Tensor, optimizer=None, after_forward=None):
    """One training step under the saved-tensor hooks (None: plain autograd, the uncompressed arm):
    forward, ``after_forward()`` if given (a memory reading between forward and backward), backward,
    the hooks' after_backward, and the optimiser step (when given; gradients are then cleared)."""
    with hooks.saved_tensors_hooks() if hooks is not None else contextlib.nullcontext():
        loss = nn.functional.cross_entropy(model(x), y)
    if after_forward is not None:
        after_forward()
    loss.backward()
    if hooks is not None:
        hooks.after_backward(model)
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


@dataclass
class ArmParams(TrainParams):
    cuda_graph: bool = False  # saved-tensor hooks need eager mode: every arm runs eager, so speeds compare
    method: str = "none"  # none | fixed | adaptive | actnn
    eb: float = 0.05  # fixed: every layer's absolute error bound; adaptive: the bound before the first re-tune
    grad_error_fraction: float = 0.1  # adaptive: weight-gradient error / gradient norm to aim at
    bn_fraction: float = 0.05  # adaptive: BatchNorm-input eb as a share of sqrt(3) * min channel sigma
    eb_min: float = 1e-4
    eb_max: float = 1.0
    retune_every: int = 100  # adaptive: steps between re-tunes (W)
    min_numel: int = 4096  # smaller saved tensors are kept as they are
    group_size: int = 256  # actnn: values per quantisation group
    value_order: str = "logical"  # the order codecs see a tensor's values: logical (NCHW) | memory (hooks.dense_flat)
    probe_batch: int = 0  # batch of the memory probe; 0 = batch_size
    payload: str = "exact"  # COMET on CUDA: exact (one sync per saved tensor) | arena (no sync; graph-safe if fixed)
    arena_margin: float = 1.1  # arena: payload budget / largest payload seen
    codec: str = "v3"  # COMET's codec: v3 (bit planes, codec.py) | v4 (Huffman + zero runs, codec_v4.py; exact payload)
    book_tol: float = 0.05  # v4: a slot's cached code book is rebuilt when it spends > (1 + book_tol) x a new book's bits


def probe_memory(model: nn.Module, hooks: SavedTensorAccounting, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One training step's forward and backward (no optimiser step) under ``hooks``: activation
    bytes (CUDA: allocated after forward - before; CPU: NaN), peak over the step above the start,
    and the hooks' accounted raw / stored bytes of the saved activations."""
    cuda = x.device.type == "cuda"
    model.train()
    model.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    seen = {}

    def after_forward():
        if cuda:
            torch.cuda.synchronize()
            seen["alloc"] = torch.cuda.memory_allocated() - before
        seen["raw"], seen["stored"] = hooks.step_raw_bytes, hooks.step_stored_bytes

    hooked_step(model, hooks, x, y, after_forward=after_forward)
    out = dict(act_raw_bytes=seen["raw"], act_stored_bytes=seen["stored"], act_alloc_bytes=float("nan"),
               step_peak_bytes=float("nan"))
    if cuda:
        torch.cuda.synchronize()
        out.update(act_alloc_bytes=seen["alloc"], step_peak_bytes=torch.cuda.max_memory_allocated() - before)
    model.zero_grad(set_to_none=True)
    return out


@experiment(params=ArmParams, needs_gpu=False)
def train_arm(p: ArmParams, ctx: Context) -> Result:
    if p.method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {p.method!r}")
    train_split, test_split = splits(p, ctx)
    torch.manual_seed(ctx.seed)
    model = build_model(p.model, num_classes=len(train_split.classes), **p.model_kw)
    hooks = make_hooks(p.method, eb=p.eb, fraction=p.grad_error_fraction, bn_fraction=p.bn_fraction,
                       eb_min=p.eb_min, eb_max=p.eb_max, retune_every=p.retune_every, min_numel=p.min_numel,
                       group_size=p.group_size, seed=ctx.seed, kernels_dir=ctx.inputs.get("kernels"),
                       value_order=p.value_order, payload=p.payload, arena_margin=p.arena_margin,
                       codec_version=p.codec, book_tol=p.book_tol)
    result = run_arm(p, ctx, model, train_split, test_split, hooks=hooks)
    metrics, tags, artifacts = finish_arm(p, ctx, result, train_split, "training pass only, epochs 2.. (eager for every arm)")
    tables = {"epochs": result.history}
    train_layers = pd.DataFrame(hooks.layer_table()) if hooks else pd.DataFrame()
    probe_hooks = hooks
    if probe_hooks is None:  # the plain trainer ran; count its activations with identity hooks
        probe_hooks = SavedTensorAccounting(p.min_numel)
        probe_hooks.attach(model)
    probe_hooks.totals = {}
    x, y = first_batch(train_split, p.probe_batch or p.batch_size, ctx.device, p.channels_last and ctx.device == "cuda")
    probe = probe_memory(model, probe_hooks, x, y)
    probe_layers = pd.DataFrame(probe_hooks.layer_table())
    if hooks is not None and hasattr(hooks, "controller"):
        probe_layers["eb"] = [hooks.controller.eb_for(layer) for layer in probe_layers.layer]
        if hooks.controller.decisions:
            tables["decisions"] = pd.DataFrame(hooks.controller.decisions)
    tables["layers"] = probe_layers
    if len(train_layers):
        tables["train_layers"] = train_layers
    act_mem = probe["act_alloc_bytes"] if ctx.device == "cuda" else probe["act_stored_bytes"]
    metrics.update(
        act_mem_bytes=act_mem,
        act_raw_bytes=probe["act_raw_bytes"],
        act_stored_bytes=probe["act_stored_bytes"],
        act_ratio=probe["act_raw_bytes"] / probe["act_stored_bytes"],
        step_peak_bytes=probe["step_peak_bytes"],
    )
    if len(train_layers):
        metrics["train_ratio"] = train_layers.raw_bytes.sum() / train_layers.stored_bytes.sum()
    if hasattr(hooks, "codec_metrics"):
        metrics.update(hooks.codec_metrics())
    if "decisions" in tables:
        d = tables["decisions"]
        metrics.update(eb_final_median=float(pd.Series(hooks.controller.eb).median()), retunes=int(d.step.nunique()))
    tags.update(method=p.method,
                act_mem_bytes=("CUDA memory allocated after the probe forward minus before (real bytes held for "
                               "backward)" if ctx.device == "cuda" else
                               "CPU: accounted bytes of the saved activations (no allocator to ask)"),
                probe=f"one training-mode step on the first {len(x)} training images after training")
    return Result(metrics=metrics, tables=tables, artifacts=artifacts, tags=tags)
