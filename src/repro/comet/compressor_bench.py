"""compressor_bench: GB/s of compress and decompress (input bytes / time, host sync and exact-size
allocation included), ratio and max error / eb on large synthetic activations (smooth post-ReLU and
Gaussian), beside a device copy and a naive torch quantise in the same run; on a GPU also that its
stream equals the NumPy codec's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from repro.comet import codec
from repro.comet.arms import check_choices
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
    n = p.size_mib * 2**20 // 4
    nbytes = 4 * n
    rows, metrics, tags = [], {}, {}
    if cuda:
        from repro.comet import gpu_codec

        kernels = ctx.inputs.get("kernels")

        def enc(x, eb):
            return gpu_codec.compress(x, eb, kernels)

        def dec(c):
            return gpu_codec.decompress(c, kernels_dir=kernels)

        def timed(fn):
            return time_cuda(fn, warmup=2, repeats=p.repeats).median_s
        tags["backend"] = "GPU kernels (comet_codec.cu via CuPy), times by CUDA events incl. the host sync"
    else:
        enc, dec = codec.compress, codec.decompress

        def timed(fn):
            return time_cpu(fn, warmup=1, repeats=max(1, min(p.repeats, 3))).median_s
        tags["backend"] = "NumPy reference codec on the CPU (GPU numbers need scale=paper on a GPU)"
    for kind in p.kinds:
        x = synthetic_activation(kind, n, ctx.device, ctx.seed)
        data = x if cuda else x.numpy()
        density = float((x != 0).float().mean())
        for eb in p.ebs:
            c = enc(data, eb)
            y = dec(c)
            err = _max_error(x, y if cuda else torch.from_numpy(y))
            t_c = timed(lambda: enc(data, eb))
            t_d = timed(lambda: dec(c))
            widths = (c.widths.cpu().numpy() if cuda else c.widths).astype(int)
            rows.append(dict(kind=kind, eb=eb, values=n, density=density, ratio=c.ratio, bits_per_value=32 / c.ratio,
                             max_err=err, max_err_over_eb=err / eb, compress_s=t_c, decompress_s=t_d,
                             compress_gbps=nbytes / t_c / 1e9, decompress_gbps=nbytes / t_d / 1e9,
                             zero_blocks=float((widths == 0).mean()), raw_blocks=float((widths == codec.RAW).mean()),
                             mean_width=float(widths.mean())))
            ctx.log.info("%s eb=%g: ratio %.2f, compress %.0f GB/s, decompress %.0f GB/s, max err / eb %.4f", kind, eb,
                         c.ratio, rows[-1]["compress_gbps"], rows[-1]["decompress_gbps"], err / eb)
            del c, y
        if cuda:
            eb = p.primary_eb
            scratch = torch.empty_like(x)
            t_copy = timed(lambda: scratch.copy_(x))
            t_quant = timed(lambda: torch.round(x / (2 * eb)).to(torch.int16))
            metrics[f"copy_gbps_{kind}"] = nbytes / t_copy / 1e9
            metrics[f"torch_quantize_gbps_{kind}"] = nbytes / t_quant / 1e9
            m = min(n, p.check_mib * 2**20 // 4)
            ref = codec.compress(x[:m].cpu().numpy(), eb)
            got = gpu_codec.to_cpu(gpu_codec.compress(x[:m], eb, kernels))
            same = np.array_equal(ref.widths, got.widths) and np.array_equal(ref.payload, got.payload)
            decoded_same = np.array_equal(codec.decompress(ref), gpu_codec.decompress(
                gpu_codec.compress(x[:m], eb, kernels), kernels_dir=kernels).cpu().numpy())
            metrics[f"stream_match_{kind}"] = float(same and decoded_same)
            del scratch
        del x, data
    table = pd.DataFrame(rows)
    primary = table[(table.kind == p.primary_kind) & (table.eb == p.primary_eb)].iloc[0]
    metrics.update(compress_gbps=primary.compress_gbps, decompress_gbps=primary.decompress_gbps, ratio=primary.ratio,
                   max_err_over_eb=table.max_err_over_eb.max(), min_compress_gbps=table.compress_gbps.min(),
                   min_decompress_gbps=table.decompress_gbps.min(), input_mib=p.size_mib)
    if cuda:
        metrics["copy_gbps"] = metrics[f"copy_gbps_{p.primary_kind}"]
        metrics["torch_quantize_gbps"] = metrics[f"torch_quantize_gbps_{p.primary_kind}"]
    tags.update(gbps="input bytes / median time; compress includes both passes, the prefix sum, the host sync "
                     "that reads the total size and the exact-size allocation",
                primary=f"{p.primary_kind}, eb={p.primary_eb}")
    return Result(metrics=metrics, tables={"bench": table}, tags=tags)
