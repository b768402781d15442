"""Inference latency of the pruned arms against the dense network: where can their sparsity make a
conv run faster on the GPU, and where does it not pay?

Two ways a pruned conv can skip work on today's kernels, each timed per conv layer and for the whole
network (CUDA events, median of ``repeats`` after ``warmup``, for every batch size and half dtype in
the params), always against cuDNN running the same layer dense (its time does not depend on the
weights' values, so one dense timing per layer shape serves every arm):

2:4 (the sparse24 arm)  cuDNN has no sparse conv, so the conv becomes an explicit GEMM: im2col of
    the NHWC input, K ordered (kernel row, kernel column, input channel), so that the arm's 2:4
    groups of 4 consecutive input channels are 4 consecutive K entries; then a matmul with the
    weights as ``torch.sparse.to_sparse_semi_structured`` (a prototype API; on sm_90 only its
    cuSPARSELt backend works, shipped in the CUDA wheels and Hopper-capable since cuSPARSELt 0.6 /
    torch 2.5; fp16/bf16, both weight dimensions multiples of 16, the dense operand padded by the
    library; its maintainers expect gains only for large GEMMs). It is timed with and without the
    im2col (materialising the kh*kw times larger matrix is part of the price) and against the same
    im2col + a dense matmul, which isolates the sparse tensor cores' gain.
connectivity (clicktrain, admm, prunetrain)  a pattern (4 of 9 weights per kernel) has no fast
    path in cuDNN or the sparse libraries; what a dense kernel can skip is whole channels: an output
    channel none of whose kernels survived, an input channel no kept kernel reads. The layer then
    runs as a smaller cuDNN conv: 'compact' times that conv alone on an already narrowed input
    (what a network compacted end to end pays), 'compact_scatter' adds the gather of the read input
    channels and the scatter into the full output (what the layer pays on its own, and what the
    whole-network variant runs). Reported beside the pattern-sparse MAC ratio the masks promise.

Whole network: dense cuDNN; per arm every conv in its compact_scatter form; for sparse24 every 2:4
conv as im2col + GEMM, dense ('gemm_dense') and 2:4 ('gemm_24'). Eager, and replayed as a CUDA
graph where capture works (launch overhead out: what the kernels cost). Every variant's logits and
every layer method's output are checked against the dense path (rel_err = max abs difference / max
abs dense value). A failing 2:4 conversion or capture is recorded with the library's message, not
raised. On a CPU (smoke scale) everything but the 2:4 matmul runs at tiny sizes: the code path only,
the timings mean nothing.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.sparse import to_sparse_semi_structured

from repro import records
from repro.papers.clicktrain.experiment import PrunedModel, load_pruned
from repro.papers.clicktrain.masks import nm_violations
from repro.experiment import Context, NeedsGPU, Result, experiment
from repro.timing import cuda_graph, time_cpu, time_cuda

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NAN = float("nan")


@dataclass
class InferenceParams:
    arms: list = field(default_factory=lambda: ["clicktrain", "admm", "prunetrain", "sparse24"])
    batch_sizes: list = field(default_factory=lambda: [1, 128, 1024])
    dtypes: list = field(default_factory=lambda: ["bf16", "fp16"])  # 2:4 tensor cores take half types
    warmup: int = 10  # untimed calls first (cuDNN autotuning, cuSPARSELt plans)
    repeats: int = 100  # CUDA-event samples per timing; the median is reported
    cuda_graph: bool = True  # also time each whole network replayed as a CUDA graph


def im2col(x: torch.Tensor, kernel: tuple, stride: tuple, padding: tuple) -> torch.Tensor:
    """(N*Ho*Wo, kh*kw*C) patch matrix of ``x`` (N, C, H, W), rows in NHWC pixel order and K in
    (kernel row, kernel column, channel) order. One copy (after the pad) from a channels-last input;
    a 1x1 stride-1 conv needs none (a plain matmul on the NHWC view)."""
    n, c, _, _ = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    nhwc = x.permute(0, 2, 3, 1)
    if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
        return nhwc.reshape(-1, c)
    padded = F.pad(nhwc, (0, 0, pw, pw, ph, ph))
    patches = padded.unfold(1, kh, sh).unfold(2, kw, sw)  # (N, Ho, Wo, C, kh, kw)
    return patches.permute(0, 1, 2, 4, 5, 3).reshape(-1, kh * kw * c)


def gemm_weight(weight: torch.Tensor) -> torch.Tensor:
    """Conv weight (O, C, kh, kw) as the (O, kh*kw*C) GEMM operand matching :func:`im2col`'s K order."""
    return weight.permute(0, 2, 3, 1).reshape(weight.shape[0], -1).contiguous()


def out_size(kernel: tuple, stride: tuple, padding: tuple, h: int, w: int) -> tuple[int, int]:
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    return (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1


class GemmConv(nn.Module):
    """A conv (groups 1, dilation 1) run as im2col + a GEMM with ``weight2d`` (dense, or a
    semi-structured sparse tensor); output channels-last, as cuDNN's."""

    def __init__(self, conv: nn.Conv2d, weight2d: torch.Tensor):
        super().__init__()
        if conv.groups != 1 or conv.dilation != (1, 1) or isinstance(conv.padding, str):
            raise ValueError(f"GemmConv needs groups 1, dilation 1 and numeric padding, got {conv}")
        self.kernel, self.stride, self.padding = conv.kernel_size, conv.stride, conv.padding
        self.weight2d, self.bias = weight2d, conv.bias

    def forward(self, x):
        ho, wo = out_size(self.kernel, self.stride, self.padding, x.shape[2], x.shape[3])
        y = F.linear(im2col(x, self.kernel, self.stride, self.padding), self.weight2d, self.bias)
        return y.reshape(x.shape[0], ho, wo, -1).permute(0, 3, 1, 2)


def channel_support(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the output channels with a nonzero weight and of the input channels some nonzero
    weight reads: the rest of a pruned conv's work is removable by a smaller dense conv."""
    nonzero = weight != 0
    keep_out = nonzero.flatten(1).any(1).nonzero().flatten()
    keep_in = nonzero.transpose(0, 1).flatten(1).any(1).nonzero().flatten()
    return keep_out, keep_in


class CompactConv(nn.Module):
    """A pruned conv as a cuDNN conv over only the channels it needs: gather the read input channels,
    convolve with the kept output channels' weights, scatter into a zero output (the pruned conv's
    value in the removed output channels). Skips the gather/scatter where nothing is removed."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        if conv.bias is not None:
            raise ValueError("CompactConv needs a conv without bias (a removed output channel must be zero)")
        keep_out, keep_in = channel_support(conv.weight)
        self.out_channels = conv.out_channels
        self.keep_out = None if len(keep_out) == conv.out_channels else keep_out
        self.keep_in = None if len(keep_in) == conv.in_channels else keep_in
        self.conv = nn.Conv2d(len(keep_in), len(keep_out), conv.kernel_size, conv.stride, conv.padding, bias=False,
                              device=conv.weight.device, dtype=conv.weight.dtype)
        weight = conv.weight.detach()[keep_out][:, keep_in]
        self.conv.weight = nn.Parameter(weight.contiguous(memory_format=torch.channels_last), requires_grad=False)

    def gather(self, x):
        if self.keep_in is None:
            return x
        return x.permute(0, 2, 3, 1).index_select(3, self.keep_in).permute(0, 3, 1, 2)

    def forward(self, x):
        y = self.conv(self.gather(x))
        if self.keep_out is None:
            return y
        n, _, h, w = y.shape
        out = y.new_zeros(n, h, w, self.out_channels)
        out.index_copy_(3, self.keep_out, y.permute(0, 2, 3, 1))
        return out.permute(0, 3, 1, 2)


def sparse24_weight(weight2d: torch.Tensor):
    """The 2:4 semi-structured form of a GEMM weight, or the library's reason why not (dtype, shape,
    device, no cuSPARSELt), as a string."""
    try:
        return to_sparse_semi_structured(weight2d)
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.float()
    return float((y.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _conv_inputs(model: nn.Module, input_size: int, device: str) -> dict[str, tuple[int, int, int]]:
    """(C, H, W) of every conv's input, from one forward pass."""
    shapes: dict[str, tuple[int, int, int]] = {}
    convs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    handles = [m.register_forward_hook(lambda mod, inp, out, n=n: shapes.__setitem__(n, tuple(inp[0].shape[1:])))
               for n, m in convs.items()]
    x = torch.zeros(1, 3, input_size, input_size, device=device, dtype=next(model.parameters()).dtype)
    try:
        with torch.inference_mode():
            model(x.contiguous(memory_format=torch.channels_last))
    finally:
        for h in handles:
            h.remove()
    return shapes


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


class _Bench:
    """Median seconds of a callable on the experiment's device (CUDA events on a GPU)."""

    def __init__(self, p: InferenceParams, device: str):
        self.p, self.cuda = p, device == "cuda"

    def __call__(self, fn) -> float:
        timer = time_cuda if self.cuda else time_cpu
        return timer(fn, warmup=self.p.warmup, repeats=self.p.repeats).median_s

    def graph(self, fn, x: torch.Tensor):
        """``fn(x)`` captured as a CUDA graph: (replay, its output)."""
        static = x.clone()
        return cuda_graph(lambda: fn(static))


def _arms(p: InferenceParams, ctx: Context) -> dict[str, PrunedModel]:
    arms = {}
    for arm in p.arms:
        if arm not in ctx.inputs:
            raise records.RecordError(f"inputs.{arm} is missing: pass the {arm} run record (record.json)")
        rec = records.read(ctx.inputs[arm])
        if "pruned" not in rec.get("artifacts", {}):
            raise records.RecordError(f"{ctx.inputs[arm]}: the {arm} run exported no pruned model (status "
                                      f"{rec['status']}: {rec.get('reason')})")
        arms[arm] = load_pruned(Path(rec["_dir"]) / rec["artifacts"]["pruned"])
    nets = {(a.meta["model"], str(a.meta["model_kw"])) for a in arms.values()}
    if len(nets) != 1:
        raise ValueError(f"the arms prune different networks {sorted(nets)}: one network per inference run")
    return arms


def _prepare(model: nn.Module, device: str, dtype: torch.dtype) -> nn.Module:
    return copy.deepcopy(model).to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()


class _Layers:
    """Per-layer timings. The arm-independent ones (dense cuDNN, im2col, dense GEMM, 2:4 GEMM: their
    time does not depend on weight values) run once per distinct layer shape."""

    def __init__(self, bench: _Bench):
        self.bench = bench
        self.cache: dict[tuple, list[dict]] = {}

    def shape_rows(self, conv: nn.Conv2d, x: torch.Tensor, sparse24: nn.Conv2d | None) -> list[dict]:
        """cudnn, im2col, gemm_dense, im2col_gemm_dense (arm 'dense') and, given the sparse24 arm's
        2:4 conv of this shape, gemm_24 and im2col_gemm_24 (arm 'sparse24')."""
        key = (tuple(conv.weight.shape), conv.stride, conv.padding, tuple(x.shape), sparse24 is not None)
        if key not in self.cache:
            self.cache[key] = self._dense(conv, x) + (self._sparse24(sparse24, x) if sparse24 is not None else [])
        return self.cache[key]

    def _dense(self, conv: nn.Conv2d, x: torch.Tensor) -> list[dict]:
        bench, geometry = self.bench, (conv.kernel_size, conv.stride, conv.padding)
        cols, w2d = im2col(x, *geometry), gemm_weight(conv.weight.detach())
        layer = GemmConv(conv, w2d)
        return [dict(arm="dense", method="cudnn", time_s=bench(lambda: conv(x)), rel_err=0.0),
                dict(arm="dense", method="im2col", time_s=bench(lambda: im2col(x, *geometry)), rel_err=NAN),
                dict(arm="dense", method="gemm_dense", time_s=bench(lambda: F.linear(cols, w2d)), rel_err=NAN),
                dict(arm="dense", method="im2col_gemm_dense", time_s=bench(lambda: layer(x)),
                     rel_err=rel_err(layer(x), conv(x)))]

    def _sparse24(self, conv: nn.Conv2d, x: torch.Tensor) -> list[dict]:
        cols, w2d = im2col(x, conv.kernel_size, conv.stride, conv.padding), gemm_weight(conv.weight.detach())
        sparse = sparse24_weight(w2d)
        if isinstance(sparse, str):
            return [dict(arm="sparse24", method=m, time_s=NAN, rel_err=NAN, status=sparse)
                    for m in ("gemm_24", "im2col_gemm_24")]
        layer = GemmConv(conv, sparse)
        return [dict(arm="sparse24", method="gemm_24", time_s=self.bench(lambda: F.linear(cols, sparse)),
                     rel_err=rel_err(F.linear(cols, sparse), F.linear(cols, w2d))),
                dict(arm="sparse24", method="im2col_gemm_24", time_s=self.bench(lambda: layer(x)),
                     rel_err=rel_err(layer(x), conv(x)))]

    def compact_rows(self, conv: nn.Conv2d, x: torch.Tensor) -> list[dict]:
        layer = CompactConv(conv)
        narrowed = layer.gather(x).contiguous(memory_format=torch.channels_last)
        return [dict(method="compact", time_s=self.bench(lambda: layer.conv(narrowed)), rel_err=NAN),
                dict(method="compact_scatter", time_s=self.bench(lambda: layer(x)), rel_err=rel_err(layer(x), conv(x)))]


def _is_24(conv: nn.Conv2d) -> bool:
    """The conv's weights are 2:4 along input channels (the sparse24 arm's masked layers)."""
    return conv.in_channels % 4 == 0 and nm_violations(conv.weight) == 0


def _layer_rows(ctx: Context, bench: _Bench, arms: dict[str, PrunedModel], dtype_name: str, batch: int,
                geometry: dict) -> list[dict]:
    dtype = DTYPES[dtype_name]
    layers = _Layers(bench)
    models = {arm: _prepare(pruned.model, ctx.device, dtype) for arm, pruned in arms.items()}
    reference = next(iter(models.values()))
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
    rows = []
    convs = [(n, m) for n, m in reference.named_modules() if isinstance(m, nn.Conv2d)]
    for index, (name, conv) in enumerate(convs):
        c, h, w = geometry[name]
        x = torch.randn(batch, c, h, w, device=ctx.device, dtype=dtype, generator=gen).contiguous(
            memory_format=torch.channels_last)
        pixels = math.prod(out_size(conv.kernel_size, conv.stride, conv.padding, h, w)) * batch
        base = dict(layer=name, index=index, shape="x".join(map(str, conv.weight.shape)), out_ch=conv.out_channels,
                    in_ch=conv.in_channels, stride=conv.stride[0], in_hw=h, dtype=dtype_name, batch=batch,
                    macs_dense=conv.weight.numel() * pixels, status="ok")
        s24 = models["sparse24"].get_submodule(name) if "sparse24" in models else None
        rows += [{**base, **r} for r in layers.shape_rows(conv, x, s24 if s24 is not None and _is_24(s24) else None)]
        for arm, model in models.items():
            arm_conv = model.get_submodule(name)
            keep_out, keep_in = channel_support(arm_conv.weight)
            kernel = conv.kernel_size[0] * conv.kernel_size[1]
            extra = dict(arm=arm, kept_out=len(keep_out), kept_in=len(keep_in),
                         macs_nonzero=int((arm_conv.weight != 0).sum()) * pixels,
                         macs_compact=len(keep_out) * len(keep_in) * kernel * pixels)
            rows += [{**base, **extra, **r} for r in layers.compact_rows(arm_conv, x)]
    return rows


def _network_variants(arm: str, model: nn.Module) -> dict[str, tuple[nn.Module | None, str]]:
    """Whole-network variants of one arm's model (on its device and dtype): name -> (model, note);
    no model where no conv could take the variant's form (the note says why)."""
    convs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    compact = copy.deepcopy(model)
    for name, conv in convs.items():
        _replace(compact, name, CompactConv(conv))
    variants = {"compact": (compact, "")}
    if arm != "sparse24":
        return variants
    gemm_dense, gemm_24, failed = copy.deepcopy(model), copy.deepcopy(model), {}
    for name, conv in convs.items():
        if not _is_24(conv):
            continue
        w2d = gemm_weight(conv.weight.detach())
        sparse = sparse24_weight(w2d)
        if isinstance(sparse, str):
            failed[name] = sparse
            continue
        _replace(gemm_dense, name, GemmConv(conv, w2d))
        _replace(gemm_24, name, GemmConv(conv, sparse))
    n_gemm = sum(isinstance(m, GemmConv) for m in gemm_24.modules())
    note = (f"{n_gemm} of {len(convs)} convs as im2col + GEMM, the rest cuDNN"
            + (f"; 2:4 failed for {len(failed)}: {next(iter(failed.values()))}" if failed else ""))
    variants.update(gemm_dense=(gemm_dense if n_gemm else None, note), gemm_24=(gemm_24 if n_gemm else None, note))
    return variants


def _network(ctx: Context, bench: _Bench, arms: dict[str, PrunedModel], dtype_name: str, batch: int, size: int,
             mode: str) -> list[dict]:
    """Whole-network rows of one dtype and batch, eager or replayed as CUDA graphs. The caller takes
    the graph rows after every eager timing: a capture that fails cannot disturb those."""
    dtype = DTYPES[dtype_name]
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
    x = torch.randn(batch, 3, size, size, device=ctx.device, dtype=dtype, generator=gen).contiguous(
        memory_format=torch.channels_last)
    nets = [("dense", "cudnn", _prepare(next(iter(arms.values())).model, ctx.device, dtype), "", None)]
    for arm, pruned in arms.items():
        dense = _prepare(pruned.model, ctx.device, dtype)
        ref = dense(x)
        nets += [(arm, name, net, note, ref) for name, (net, note) in _network_variants(arm, dense).items()]
    rows = []
    for arm, variant, net, note, ref in nets:
        row = dict(dtype=dtype_name, batch=batch, arm=arm, variant=variant, mode=mode, time_s=NAN, rel_err=NAN,
                   status=note or "ok")
        if net is None:  # no conv could take this form: the note says why
            if mode == "eager":
                rows.append(row)
            continue
        try:
            run, out = (lambda: net(x), net(x)) if mode == "eager" else bench.graph(net, x)
            row.update(time_s=bench(run), rel_err=0.0 if ref is None else rel_err(out, ref))
        except RuntimeError as exc:
            if mode == "eager":
                raise
            row.update(status=f"capture failed: {str(exc).splitlines()[0]}")
        rows.append(row)
    return rows


# per layer, the 2:4 methods are also compared with the same GEMM dense (the sparse tensor cores' own gain)
DENSE_COUNTERPART = {"gemm_24": "gemm_dense", "im2col_gemm_24": "im2col_gemm_dense"}


def _speedups(layers: pd.DataFrame, network: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """speedup = dense cuDNN time / this time (per layer: the same layer, dtype and batch; per network:
    the same dtype, batch and mode); speedup_vs_gemm = the dense counterpart's time / this time."""
    key = ["layer", "dtype", "batch"]
    times = layers[layers.arm == "dense"].set_index(key + ["method"]).time_s

    def lookup(method: pd.Series) -> pd.Series:
        index = pd.MultiIndex.from_frame(layers[key].assign(method=method.values))
        return pd.Series(times.reindex(index).values, index=layers.index)

    layers = layers.assign(speedup=lookup(pd.Series("cudnn", index=layers.index)) / layers.time_s,
                           speedup_vs_gemm=lookup(layers.method.map(DENSE_COUNTERPART).fillna("")) / layers.time_s)
    nkey = ["dtype", "batch", "mode"]
    dense = network[network.variant == "cudnn"].set_index(nkey).time_s
    network = network.assign(speedup=dense.reindex(pd.MultiIndex.from_frame(network[nkey])).values / network.time_s)
    return layers, network


def _metrics(p: InferenceParams, layers: pd.DataFrame, network: pd.DataFrame, arms: dict[str, PrunedModel]) -> dict:
    """Whole-network speedups (graph mode where every variant was captured, else eager); per arm how
    much of the pattern-sparse MAC reduction survives as removable channels; the best per-layer 2:4
    gains at the largest batch; the worst output error of any path."""
    graphs = network[network["mode"] == "graph"]
    mode = "graph" if len(graphs) and graphs.time_s.notna().all() else "eager"
    metrics = {"graph_mode": float(mode == "graph")}
    for row in network[(network["mode"] == mode) & (network.variant != "cudnn")].itertuples():
        metrics[f"speedup_{row.arm}_{row.variant}_b{row.batch}_{row.dtype}"] = row.speedup
    one = layers[(layers.dtype == p.dtypes[0]) & (layers.batch == min(p.batch_sizes)) & (layers.method == "compact")]
    for arm in arms:
        rows = one[one.arm == arm]
        metrics[f"flops_ratio_{arm}"] = rows.macs_dense.sum() / rows.macs_nonzero.sum()
        metrics[f"compact_flops_ratio_{arm}"] = rows.macs_dense.sum() / rows.macs_compact.sum()
        metrics[f"removed_out_channels_{arm}"] = 1 - rows.kept_out.sum() / rows.out_ch.sum()
        metrics[f"removed_in_channels_{arm}"] = 1 - rows.kept_in.sum() / rows.in_ch.sum()
    largest = layers[layers.batch == max(p.batch_sizes)]
    for dtype in p.dtypes:
        rows = largest[largest.dtype == dtype]
        if rows[rows.method == "gemm_24"].time_s.notna().any():
            metrics[f"best_layer_speedup_im2col_gemm_24_{dtype}"] = rows[rows.method == "im2col_gemm_24"].speedup.max()
            metrics[f"best_layer_gain_gemm_24_{dtype}"] = rows[rows.method == "gemm_24"].speedup_vs_gemm.max()
    errors = pd.concat([layers.rel_err, network.rel_err]).dropna()
    metrics["max_rel_err"] = errors.max() if len(errors) else NAN
    metrics["sparse24_layers"] = float(layers[(layers.method == "gemm_24") & layers.time_s.notna()].layer.nunique())
    return {k: float(v) for k, v in metrics.items() if not math.isnan(v)}  # not measured: absent, not NaN


@experiment(params=InferenceParams, needs_gpu=False)
def inference(p: InferenceParams, ctx: Context) -> Result:
    if ctx.scale == "paper" and ctx.device != "cuda":
        raise NeedsGPU("clicktrain inference latency at paper scale needs a CUDA GPU; scale=smoke runs the code "
                       "path on the CPU")
    unknown = sorted(set(p.dtypes) - set(DTYPES))
    if unknown:
        raise ValueError(f"dtypes {unknown} unknown; choose from {sorted(DTYPES)}")
    arms = _arms(p, ctx)
    size = next(iter(arms.values())).meta["input_size"]
    bench = _Bench(p, ctx.device)
    layer_rows, net_rows = [], []
    prev_benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = ctx.device == "cuda"  # cuDNN picks its fastest algorithm per shape
    try:
        with torch.inference_mode():
            for dtype_name in p.dtypes:
                geometry = _conv_inputs(_prepare(next(iter(arms.values())).model, ctx.device, DTYPES[dtype_name]),
                                        size, ctx.device)
                for batch in p.batch_sizes:
                    ctx.log.info("inference timings: %s, batch %d", dtype_name, batch)
                    layer_rows += _layer_rows(ctx, bench, arms, dtype_name, batch, geometry)
                    net_rows += _network(ctx, bench, arms, dtype_name, batch, size, "eager")
            if p.cuda_graph and bench.cuda:
                for dtype_name in p.dtypes:
                    for batch in p.batch_sizes:
                        ctx.log.info("whole networks as CUDA graphs: %s, batch %d", dtype_name, batch)
                        net_rows += _network(ctx, bench, arms, dtype_name, batch, size, "graph")
    finally:
        torch.backends.cudnn.benchmark = prev_benchmark
    layers, network = _speedups(pd.DataFrame(layer_rows), pd.DataFrame(net_rows))
    metrics = _metrics(p, layers, network, arms)
    backend = (f"cuSPARSELt {torch.backends.cusparselt.version()}, default algorithm (alg_id 0)"
               if torch.backends.cusparselt.is_available()
               else "none: this torch has no cuSPARSELt (the 2:4 rows record the failure)")
    tags = dict(model=next(iter(arms.values())).meta["model"],
                timing=("CUDA events, median of each timing's repeats" if ctx.device == "cuda" else
                        "cpu (smoke: code path only, tiny sizes; the timings mean nothing)"),
                sparse_backend=backend,
                speedup="dense cuDNN conv (or network) time / this time, same layer shape, dtype, batch (and mode)",
                compact="cuDNN conv over the output channels with a kept kernel and the input channels a kept "
                        "kernel reads; compact_scatter adds the input gather and output scatter",
                gemm="im2col of the NHWC input, K in (kernel row, kernel column, channel) order, then F.linear; "
                     "2:4 weights via torch.sparse.to_sparse_semi_structured",
                metrics_mode="graph" if metrics["graph_mode"] else "eager")
    return Result(metrics=metrics, tables={"layers": layers, "network": network}, tags=tags)
