"""compressor_bench: GB/s of compress and decompress (input bytes / time; on a GPU the single-pass
path into a preallocated buffer and the exact-size path, bench_ops), ratio and max error / eb on
large synthetic activations (smooth post-ReLU and Gaussian; flat and channels-last), beside a device
copy and a naive torch quantise in the same run; on a GPU also that its stream equals the NumPy
codec's. The v4 arm (``codecs`` holding v4; flat layout): codec v4 (codec_v4 / gpu_codec_v4, the
exact-size stream: histogram, one sync, sizes, scan, one sync, pack) on the same data, rows with
codec "v4" and metrics ``v4_*`` beside v3's; on a GPU its stream is checked against the NumPy twin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from repro.papers.comet import bench_ops, codec, codec_v4
from repro.papers.comet.arms import check_choices
from repro.experiment import Context, Result, experiment
from repro.timing import time_cpu, time_cuda

KINDS = ("relu_smooth", "gaussian")


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
    codecs: list = field(default_factory=lambda: ["v3", "v4"])  # v3 (the primary metrics) and the v4 arm


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
    check_choices("codecs", p.codecs, ("v3", "v4"))
    if "v3" not in p.codecs:
        raise ValueError(f"codecs must include 'v3' (the primary metrics are v3's), got {p.codecs}")
    layouts = p.layouts if cuda else ["flat"]  # the NumPy codec sees flat values only
    n = p.size_mib * 2**20 // 4
    nbytes = 4 * n
    rows, metrics, tags = [], {}, {}
    kernels = ctx.inputs.get("kernels")
    if cuda:
        from repro.papers.comet import gpu_codec

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
        if "v4" in p.codecs and layout == "flat":
            rows += _v4_rows(x, kind, density, p, timed, kernels, metrics, ctx)
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
            row = dict(codec="v3", kind=kind, layout=layout, eb=eb, values=n, density=density, ratio=stream.ratio,
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
    v4 = table[table.codec == "v4"]
    table_v3 = table[table.codec == "v3"]
    flat = table_v3[table_v3.layout == "flat"]
    primary = flat[(flat.kind == p.primary_kind) & (flat.eb == p.primary_eb)].iloc[0]
    metrics.update(compress_gbps=primary.compress_gbps, decompress_gbps=primary.decompress_gbps, ratio=primary.ratio,
                   max_err_over_eb=table_v3.max_err_over_eb.max(), min_compress_gbps=flat.compress_gbps.min(),
                   min_decompress_gbps=flat.decompress_gbps.min(), input_mib=p.size_mib)
    if cuda:
        metrics["copy_gbps"] = metrics[f"copy_gbps_{p.primary_kind}"]
        metrics["torch_quantize_gbps"] = metrics[f"torch_quantize_gbps_{p.primary_kind}"]
        metrics["compress_exact_gbps"] = primary.compress_exact_gbps
        for layout in layouts[1:]:
            case = table_v3[(table_v3.layout == layout) & (table_v3.kind == p.primary_kind) & (table_v3.eb == p.primary_eb)]
            other = case.iloc[0]
            metrics[f"compress_gbps_{layout}"] = other.compress_gbps
            metrics[f"decompress_gbps_{layout}"] = other.decompress_gbps
    if len(v4):
        first = v4[(v4.kind == p.primary_kind) & (v4.eb == p.primary_eb)].iloc[0]
        metrics.update(v4_compress_gbps=first.compress_gbps, v4_decompress_gbps=first.decompress_gbps,
                       v4_ratio=first.ratio, v4_max_err_over_eb=v4.max_err_over_eb.max(),
                       v4_min_compress_gbps=v4.compress_gbps.min(), v4_min_decompress_gbps=v4.decompress_gbps.min())
    tags.update(gbps="input bytes / median time (see backend for what each direction includes)",
                primary=f"{p.primary_kind}, eb={p.primary_eb}, flat")
    return Result(metrics=metrics, tables={"bench": table}, tags=tags)


def _v4_rows(x: torch.Tensor, kind: str, density: float, p: BenchParams, timed, kernels, metrics: dict, ctx) -> list:
    """Codec v4 on x (flat) at every eb: ratio, max error / eb, GB/s each way (GPU: gpu_codec_v4, the
    exact-size path with its two host syncs; CPU: the NumPy twin); on a GPU also whether its stream
    on a check_mib prefix at primary_eb equals the twin's (``v4_stream_match_<kind>``)."""
    n, rows = x.numel(), []
    cuda = x.device.type == "cuda"
    if cuda:
        from repro.papers.comet import gpu_codec_v4

        out = torch.empty_like(x)

        def enc(eb):
            return gpu_codec_v4.compress(x, eb, kernels)

        def dec(c):
            return gpu_codec_v4.decompress(c, out, kernels)
    else:
        data = x.numpy()

        def enc(eb):
            return codec_v4.compress(data, eb)

        def dec(c):
            return torch.from_numpy(codec_v4.decompress(c))
    for eb in p.ebs:
        c = enc(eb)
        err = _max_error(x, dec(c))
        t_c, t_d = timed(lambda: enc(eb)), timed(lambda: dec(c))
        words = np.diff((c.offsets.cpu().numpy() if cuda else c.offsets).view(np.uint32).astype(np.int64))
        rows.append(dict(codec="v4", kind=kind, layout="flat", eb=eb, values=n, density=density, ratio=c.ratio,
                         bits_per_value=32 / c.ratio, max_err=err, max_err_over_eb=err / eb, compress_s=t_c,
                         decompress_s=t_d, compress_gbps=4 * n / t_c / 1e9, decompress_gbps=4 * n / t_d / 1e9,
                         zero_blocks=float((words == 0).mean()), raw_blocks=float((words == codec_v4.RAW_WORDS).mean()),
                         mode=c.mode))
        ctx.log.info("v4 %s eb=%g: ratio %.2f, compress %.0f GB/s, decompress %.0f GB/s, max err / eb %.4f", kind, eb,
                     c.ratio, rows[-1]["compress_gbps"], rows[-1]["decompress_gbps"], err / eb)
        del c
    if cuda:
        from repro.papers.comet import gpu_codec_v4

        m = min(n, p.check_mib * 2**20 // 4)
        ref = codec_v4.compress(x[:m].cpu().numpy(), p.primary_eb)
        got = gpu_codec_v4.compress(x[:m], p.primary_eb, kernels)
        host = gpu_codec_v4.to_cpu(got)
        same = (host.mode == ref.mode and np.array_equal(host.lengths, ref.lengths)
                and np.array_equal(host.offsets, ref.offsets) and np.array_equal(host.payload, ref.payload)
                and np.array_equal(codec_v4.decompress(ref), gpu_codec_v4.decompress(got, kernels_dir=kernels).cpu().numpy()))
        metrics[f"v4_stream_match_{kind}"] = float(same)
    return rows
