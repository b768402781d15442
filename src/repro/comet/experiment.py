"""COMET (Jin et al., VLDB 2022): error-bounded lossy compression of the activations saved for
backward, against uncompressed training and the ActNN 2-bit quantiser, on the shared trainer.

compressor_bench  GB/s of compress and decompress (input bytes / time; on a GPU the single-pass
                  path into a preallocated buffer and the exact-size path, bench_ops), ratio and
                  max error / eb on large synthetic activations (smooth post-ReLU and Gaussian;
                  flat and channels-last), beside a device copy and a naive torch quantise in the
                  same run; on a GPU also that its stream equals the NumPy codec's.
train_arm         one training arm (params.method): none (the plain trainer, no hooks), fixed
                  (one eb for every layer), adaptive (EBController), actnn (2-bit per group).
                  After training, a probe step on one batch measures activation memory: CUDA
                  memory allocated after the forward pass minus before it (on the CPU, the
                  accounted bytes of the saved activations), and the peak of that step.
sz3_reference     the activations saved by one training-mode forward of the trained uncompressed
                  model (inputs.uncompressed) on real images, compressed on the CPU by our NumPy
                  codec and by SZ3 itself (pysz) at the same absolute error bounds.
max_batch         the largest batch whose training step fits a memory cap, uncompressed vs ours
                  (fixed eb) vs ActNN, on synthetic CIFAR-shaped batches.
step_bench        training-step images/s of every arm side by side in one process (the speed
                  claim's measurement: the arms' own images/s depend on what shared the GPU), and
                  the host time spent inside encode/decode per step; eager, arena-payload and
                  CUDA-graph arms (step_arms).
compare           cross-arm ratios from the arms' records (inputs uncompressed, fixed_eb,
                  adaptive_eb, actnn2bit): mem_reduction, vs_actnn, top1_loss; throughput_ratio
                  from inputs.step_bench when given, else from the arms' records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from repro import records
from repro.train.arm import TrainParams, finish_arm, run_arm, splits
from repro.comet import bench_ops, codec, step_arms
from repro.comet.hooks import SavedTensorAccounting, make_hooks
from repro.experiment import Context, Result, experiment
from repro.models import build_model
from repro.search import largest_fit
from repro.timing import time_cpu, time_cuda
from repro.train.augment import first_batch

METHODS = ("none", "fixed", "adaptive", "actnn")
KINDS = ("relu_smooth", "gaussian")


def check_choices(name: str, values, known, require: str | None = None) -> None:
    """ValueError naming the parameter unless every value is known (and ``require`` is among them)."""
    for value in values:
        if value not in known:
            raise ValueError(f"{name}: unknown value {value!r}; known: {', '.join(map(str, known))}")
    if require is not None and require not in values:
        raise ValueError(f"{name} must include {require!r} (the uncompressed reference every ratio is taken against)")


# ---- compressor benchmark ----------------------------------------------------------------------


@dataclass
class BenchParams:
    size_mib: int = 1024  # float32 values per case, in MiB of input
    kinds: list = field(default_factory=lambda: list(KINDS))
    ebs: list = field(default_factory=lambda: [0.01, 0.05, 0.1])
    primary_kind: str = "relu_smooth"  # the case reported as compress_gbps / decompress_gbps
    primary_eb: float = 0.05
    repeats: int = 10
    check_mib: int = 16  # GPU: prefix whose stream is compared with the NumPy codec's
    layouts: list = field(default_factory=lambda: ["flat"])  # GPU: flat | channels_last (bench_ops.LAYOUTS)


def synthetic_activation(kind: str, n: int, device, seed: int = 0) -> torch.Tensor:
    """relu_smooth: ReLU of a moving average of Gaussian noise (std 1, half zeros, neighbours
    correlated, like a conv output after ReLU); gaussian: iid N(0, 1), the hard case."""
    gen = torch.Generator(device=device).manual_seed(seed)
    if kind == "gaussian":
        return torch.randn(n, generator=gen, device=device)
    if kind == "relu_smooth":
        width = 16
        noise = torch.randn(n + width - 1, generator=gen, device=device)
        smooth = nn.functional.avg_pool1d(noise.view(1, 1, -1), width, stride=1).view(-1)
        del noise
        return smooth.mul_(width ** 0.5).relu_()
    raise ValueError(f"unknown activation kind {kind!r}; known: {', '.join(KINDS)}")


def _max_error(x: torch.Tensor, y: torch.Tensor, chunk: int = 1 << 26) -> float:
    """max |x - y| in float64, in chunks (no 2x float64 copy of the whole tensor)."""
    worst = 0.0
    for s in range(0, x.numel(), chunk):
        worst = max(worst, float((x[s:s + chunk].double() - y[s:s + chunk].double()).abs().max()))
    return worst


@experiment(params=BenchParams, needs_gpu=False)
def compressor_bench(p: BenchParams, ctx: Context) -> Result:
    check_choices("kinds", p.kinds, KINDS)
    if p.primary_kind not in p.kinds or p.primary_eb not in p.ebs:
        raise ValueError(f"primary_kind/primary_eb ({p.primary_kind}, {p.primary_eb}) must be among kinds {p.kinds} "
                         f"and ebs {p.ebs}")
    cuda = ctx.device == "cuda"
    check_choices("layouts", p.layouts, bench_ops.LAYOUTS, require="flat")
    layouts = p.layouts if cuda else ["flat"]  # the NumPy codec sees flat values only
    n = p.size_mib * 2**20 // 4
    nbytes = 4 * n
    rows, metrics, tags = [], {}, {}
    kernels = ctx.inputs.get("kernels")
    if cuda:
        from repro.comet import gpu_codec

        def timed(fn):
            return time_cuda(fn, warmup=2, repeats=p.repeats).median_s
        tags["backend"] = ("GPU kernels (comet_codec.cu via CuPy), times by CUDA events; compress: into a preallocated "
                           "buffer (scratch memset + one launch, sizes on the device); compress_exact: the exact-size "
                           "stream (two launches, one host sync, allocation)")
    else:
        def timed(fn):
            return time_cpu(fn, warmup=1, repeats=max(1, min(p.repeats, 3))).median_s
        tags["backend"] = "NumPy reference codec on the CPU (GPU numbers need scale=paper on a GPU)"
    for kind, layout in [(k, lay) for k in p.kinds for lay in layouts]:
        x = synthetic_activation(kind, n, ctx.device, ctx.seed)
        density = float((x != 0).float().mean())
        if cuda:
            ops = bench_ops.Ops(bench_ops.as_layout(x, layout), kernels)
            enc, dec, exact = ops.compress, ops.decompress, ops.compress_exact
        else:
            data = x.numpy()

            def enc(eb, data=data):
                return codec.compress(data, eb)
            dec, exact = codec.decompress, None
        for eb in p.ebs:
            c = enc(eb)
            y = dec(c)
            stream = ops.stream(eb) if cuda else c
            if cuda:
                err = _max_error(ops.memory_order(ops.x), ops.memory_order(y))
            else:
                err = _max_error(x, torch.from_numpy(y))
            t_c = timed(lambda: enc(eb))
            t_d = timed(lambda: dec(c))
            row = dict(kind=kind, layout=layout, eb=eb, values=n, density=density, ratio=stream.ratio,
                       bits_per_value=32 / stream.ratio, max_err=err, max_err_over_eb=err / eb, compress_s=t_c,
                       decompress_s=t_d, compress_gbps=nbytes / t_c / 1e9, decompress_gbps=nbytes / t_d / 1e9)
            if cuda:
                t_e = timed(lambda: exact(eb))
                row.update(compress_exact_s=t_e, compress_exact_gbps=nbytes / t_e / 1e9)
            widths = (stream.widths.cpu().numpy() if cuda else stream.widths).astype(int)
            row.update(zero_blocks=float((widths == 0).mean()), raw_blocks=float((widths == codec.RAW).mean()),
                       mean_width=float(widths.mean()))
            rows.append(row)
            ctx.log.info("%s %s eb=%g: ratio %.2f, compress %.0f GB/s, decompress %.0f GB/s, max err / eb %.4f", kind,
                         layout, eb, stream.ratio, row["compress_gbps"], row["decompress_gbps"], err / eb)
            del c, y, stream
        if cuda:  # the timed path's whole stream equals the exact-size path's
            ops.compress(p.primary_eb)
            timed_c, exact_c = ops.stream(p.primary_eb), ops.compress_exact(p.primary_eb)
            metrics[f"arena_match_{layout}_{kind}"] = float(all(torch.equal(a, b) for a, b in (
                (getattr(timed_c, a), getattr(exact_c, a)) for a in ("widths", "anchors", "payload", "tile_starts"))))
            del timed_c, exact_c
        if cuda and layout != "flat":
            eb = p.primary_eb
            per = int(np.prod(bench_ops.CHW))
            m = max(per, min(n, p.check_mib * 2**20 // 4) // per * per)
            flat_c = gpu_codec.compress(x[:m], eb, kernels)
            other = gpu_codec.compress_source(gpu_codec.Source.nhwc_of(bench_ops.as_layout(x[:m], layout)), eb, kernels)
            metrics[f"stream_match_{layout}_{kind}"] = float(all(torch.equal(a, b) for a, b in (
                (flat_c.widths, other.widths), (flat_c.anchors, other.anchors), (flat_c.payload, other.payload))))
            del ops, flat_c, other
            continue
        if cuda:
            del ops
            eb = p.primary_eb
            scratch = torch.empty_like(x)
            t_copy = timed(lambda: scratch.copy_(x))
            t_quant = timed(lambda: torch.round(x / (2 * eb)).to(torch.int16))
            metrics[f"copy_gbps_{kind}"] = nbytes / t_copy / 1e9
            metrics[f"torch_quantize_gbps_{kind}"] = nbytes / t_quant / 1e9
            m = min(n, p.check_mib * 2**20 // 4)
            ref = codec.compress(x[:m].cpu().numpy(), eb)
            got_dev = gpu_codec.compress(x[:m], eb, kernels)
            got = gpu_codec.to_cpu(got_dev)
            same = np.array_equal(ref.widths, got.widths) and np.array_equal(ref.payload, got.payload)
            decoded_same = np.array_equal(codec.decompress(ref),
                                          gpu_codec.decompress(got_dev, kernels_dir=kernels).cpu().numpy())
            metrics[f"stream_match_{kind}"] = float(same and decoded_same)
            del scratch, got_dev
        del x
    table = pd.DataFrame(rows)
    flat = table[table.layout == "flat"]
    primary = flat[(flat.kind == p.primary_kind) & (flat.eb == p.primary_eb)].iloc[0]
    metrics.update(compress_gbps=primary.compress_gbps, decompress_gbps=primary.decompress_gbps, ratio=primary.ratio,
                   max_err_over_eb=table.max_err_over_eb.max(), min_compress_gbps=flat.compress_gbps.min(),
                   min_decompress_gbps=flat.decompress_gbps.min(), input_mib=p.size_mib)
    if cuda:
        metrics["copy_gbps"] = metrics[f"copy_gbps_{p.primary_kind}"]
        metrics["torch_quantize_gbps"] = metrics[f"torch_quantize_gbps_{p.primary_kind}"]
        metrics["compress_exact_gbps"] = primary.compress_exact_gbps
        for layout in layouts[1:]:
            case = table[(table.layout == layout) & (table.kind == p.primary_kind) & (table.eb == p.primary_eb)]
            other = case.iloc[0]
            metrics[f"compress_gbps_{layout}"] = other.compress_gbps
            metrics[f"decompress_gbps_{layout}"] = other.decompress_gbps
    tags.update(gbps="input bytes / median time (see backend for what each direction includes)",
                primary=f"{p.primary_kind}, eb={p.primary_eb}, flat")
    return Result(metrics=metrics, tables={"bench": table}, tags=tags)


# ---- training arms ------------------------------------------------------------------------------


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
    with hooks.saved_tensors_hooks():
        loss = nn.functional.cross_entropy(model(x), y)
    if cuda:
        torch.cuda.synchronize()
        after_forward = torch.cuda.memory_allocated()
    raw, stored = hooks.step_raw_bytes, hooks.step_stored_bytes
    loss.backward()
    hooks.after_backward(model)
    out = dict(act_raw_bytes=raw, act_stored_bytes=stored, act_alloc_bytes=float("nan"), step_peak_bytes=float("nan"))
    if cuda:
        torch.cuda.synchronize()
        out.update(act_alloc_bytes=after_forward - before, step_peak_bytes=torch.cuda.max_memory_allocated() - before)
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
                       value_order=p.value_order, payload=p.payload, arena_margin=p.arena_margin)
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


# ---- largest batch under a memory cap ----------------------------------------------------------


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
        with hooks.saved_tensors_hooks():
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        hooks.after_backward(model)
        optimizer.step()
        del x, y, loss
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


# ---- SZ3 reference ------------------------------------------------------------------------------


@dataclass
class SZ3Params:
    batch: int = 128  # images in the forward pass whose saved activations are dumped
    ebs: list = field(default_factory=lambda: [0.01, 0.05, 0.1])
    min_numel: int = 4096


class _Capture(SavedTensorAccounting):
    """Identity hooks that keep a CPU copy of every eligible saved activation (logical NCHW)."""

    def __init__(self, min_numel: int):
        super().__init__(min_numel)
        self.captured: list[tuple[str, np.ndarray]] = []

    def encode(self, t: torch.Tensor, layer: str):
        self.captured.append((layer, t.detach().cpu().contiguous().numpy().copy()))
        return t, t.numel() * t.element_size()


def _sz3():
    """(pysz module, None) or (None, why it is unavailable)."""
    try:
        import pysz
    except ImportError as exc:
        return None, f"pysz is not installed ({exc}); pip install pysz (PyPI, SZ3 bindings)"
    return pysz, None


def sz3_compress(pysz, arr: np.ndarray, eb: float) -> tuple[int, float]:
    """(compressed bytes, max abs error) of SZ3 at absolute error bound eb on arr (its own shape)."""
    cfg = pysz.szConfig(arr.shape)
    cfg.errorBoundMode = pysz.szErrorBoundMode.ABS
    cfg.absErrorBound = float(eb)
    compressed, _ = pysz.sz.compress(arr, cfg)
    out, _ = pysz.sz.decompress(compressed, arr.dtype, arr.shape)
    return int(compressed.nbytes), float(np.abs(out.astype(np.float64) - arr.astype(np.float64)).max())


@experiment(params=SZ3Params, needs_gpu=False)
def sz3_reference(p: SZ3Params, ctx: Context) -> Result:
    if "uncompressed" not in ctx.inputs:
        raise records.RecordError("inputs.uncompressed is missing: pass the uncompressed arm's record.json "
                                  "(its model.pt is the trained model whose activations are dumped)")
    arm = records.read(ctx.inputs["uncompressed"])
    weights = Path(arm["_dir"]) / arm["artifacts"]["model"]
    name, model_kw = arm["params"]["model"], arm["params"].get("model_kw") or {}
    split = _load_test(ctx)
    model = build_model(name, num_classes=len(split.classes), **model_kw)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    capture = _Capture(p.min_numel)
    capture.attach(model)
    x, y = first_batch(split, p.batch, "cpu")
    probe_memory(model, capture, x, y)
    pysz, why = _sz3()
    if why:
        ctx.log.warning("SZ3 reference skipped: %s", why)
    rows = []
    for i, (layer, arr) in enumerate(capture.captured):
        for eb in p.ebs:
            ours = codec.compress(arr, eb)
            err = float(np.abs(codec.decompress(ours).astype(np.float64) - arr.reshape(-1).astype(np.float64)).max())
            row = dict(tensor=i, layer=layer, shape="x".join(map(str, arr.shape)), eb=eb, raw_bytes=arr.nbytes,
                       ours_bytes=ours.nbytes, ours_max_err=err, density=float((arr != 0).mean()))
            if pysz is not None:
                nbytes, sz_err = sz3_compress(pysz, arr, eb)
                row.update(sz3_bytes=nbytes, sz3_max_err=sz_err)
            rows.append(row)
    table = pd.DataFrame(rows)
    metrics, tags = {}, dict(model=name, activations=f"{len(capture.captured)} saved tensors of one training-mode "
                                                         f"forward, batch {len(x)}, NCHW, on the CPU")
    for eb, g in table.groupby("eb"):
        metrics[f"ours_ratio_eb{eb:g}"] = g.raw_bytes.sum() / g.ours_bytes.sum()
        if pysz is not None:
            metrics[f"sz3_ratio_eb{eb:g}"] = g.raw_bytes.sum() / g.sz3_bytes.sum()
            metrics[f"sz3_over_ours_eb{eb:g}"] = g.ours_bytes.sum() / g.sz3_bytes.sum()
    metrics["ours_max_err_over_eb"] = float((table.ours_max_err / table.eb).max())
    if pysz is not None:
        metrics["sz3_max_err_over_eb"] = float((table.sz3_max_err / table.eb).max())
        from importlib.metadata import version

        tags["sz3"] = f"pysz {version('pysz')}, ABS mode, the tensor's own NCHW shape"
    else:
        tags["sz3"] = f"skipped: {why}"
    return Result(metrics=metrics, tables={"sz3": table}, tags=tags)


def _load_test(ctx: Context):
    from repro.data.arrays import DataError, read_split

    if "test" not in ctx.inputs:
        raise DataError("inputs.test is missing: pass the prepared CIFAR-10 test split (.npz)")
    return read_split(ctx.inputs["test"])


# ---- training-step speed of every arm, side by side ---------------------------------------------


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


# ---- cross-arm comparison -----------------------------------------------------------------------


@dataclass
class CompareParams:
    ours: str = "adaptive_eb"  # the arm reported as "ours" in the claims (adaptive_eb or fixed_eb)


ARMS = ("uncompressed", "fixed_eb", "adaptive_eb", "actnn2bit")
METHOD_OF = {"uncompressed": "none", "fixed_eb": "fixed", "adaptive_eb": "adaptive", "actnn2bit": "actnn"}


def mem_reduction(base: dict, m: dict) -> float:
    """comet.mem's ratio from two records' metrics: the uncompressed arm's activation memory / an arm's."""
    return base["act_mem_bytes"] / m["act_mem_bytes"]


def top1_loss(base: dict, m: dict) -> float:
    """comet.acc's loss from two records' metrics: the uncompressed arm's final top-1 - an arm's, points."""
    return base["final_top1"] - m["final_top1"]


@experiment(params=CompareParams, needs_gpu=False)
def compare(p: CompareParams, ctx: Context) -> Result:
    if p.ours not in ("fixed_eb", "adaptive_eb"):
        raise ValueError(f"ours must be fixed_eb or adaptive_eb, got {p.ours!r}")
    arms = {}
    for name in ARMS:
        if name not in ctx.inputs:
            raise records.RecordError(f"inputs.{name} is missing: pass the {name} arm's record.json")
        arms[name] = records.read(ctx.inputs[name])["metrics"]
    base, ours, actnn = arms["uncompressed"], arms[p.ours], arms["actnn2bit"]

    def reduction(m):
        return mem_reduction(base, m)

    arm_speed = ours["images_per_s"] / base["images_per_s"]
    if "step_bench" in ctx.inputs:
        bench = records.read(ctx.inputs["step_bench"])["metrics"]
        speed, speed_from = bench[f"speed_ratio_{METHOD_OF[p.ours]}"], "step_bench (side by side, one process)"
    else:
        speed, speed_from = arm_speed, "the arms' records (each arm's own run)"
    metrics = dict(
        mem_reduction=reduction(ours),
        vs_actnn=reduction(ours) / reduction(actnn),
        top1_loss=top1_loss(base, ours),
        throughput_ratio=speed,
        throughput_ratio_arm_runs=arm_speed,
        peak_reduction=base["peak_mem_bytes"] / ours["peak_mem_bytes"],
        actnn_mem_reduction=reduction(actnn),
        actnn_top1_loss=top1_loss(base, actnn),
        top1_vs_actnn=ours["final_top1"] - actnn["final_top1"],
    )
    for name in ("fixed_eb", "adaptive_eb"):
        metrics[f"mem_reduction_{name}"] = reduction(arms[name])
        metrics[f"top1_loss_{name}"] = top1_loss(base, arms[name])
    rows = [dict(arm=name, act_mem_bytes=m["act_mem_bytes"], act_ratio=m.get("act_ratio"),
                 mem_reduction=reduction(m), final_top1=m["final_top1"], images_per_s=m["images_per_s"],
                 peak_mem_bytes=m["peak_mem_bytes"], step_peak_bytes=m.get("step_peak_bytes"))
            for name, m in arms.items()]
    tags = dict(ours=p.ours, throughput_ratio=speed_from, mem_reduction="activation memory of the uncompressed arm / ours (probe step: CUDA "
                                           "allocated after forward - before on a GPU, accounted bytes on the CPU)")
    return Result(metrics=metrics, tables={"arms": pd.DataFrame(rows)}, tags=tags)
