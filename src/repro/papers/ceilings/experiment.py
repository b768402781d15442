"""Measure copy bandwidth, host-device bandwidth, GEMM rates and the launch floor.

On a GPU: device-to-device copy (bytes read + written), pinned and pageable host<->device
copies, dense GEMM in fp64, fp32 (TF32 off), TF32 and bf16, and the time of an (almost) empty
kernel. On a CPU: the same quantities for host memory and CPU GEMM, so the smoke scale has real
numbers of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.timing import time_cpu, time_cuda

GIB = 1 << 30


@dataclass
class CeilingsParams:
    copy_bytes: int = 2 * GIB  # far larger than the 60 MB L2 of an H200
    host_copy_bytes: int = 1 * GIB
    gemm_size: int = 8192  # square GEMM edge
    gemm_dtypes: list[str] = field(default_factory=lambda: ["fp64", "fp32", "tf32", "bf16"])
    repeats: int = 20
    warmup: int = 3


def _gpu(p: CeilingsParams, ctx: Context) -> list[dict]:
    import torch

    rows = []
    n = p.copy_bytes // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), p.warmup, p.repeats)
    rows.append(dict(name="d2d_copy", kind="bandwidth", value=2 * p.copy_bytes / t.median_s / 1e9, unit="GB/s",
                     bytes=2 * p.copy_bytes, median_s=t.median_s, spread_s=t.max_s - t.min_s))
    del src, dst

    m = p.host_copy_bytes // 4
    dev = torch.randn(m, device="cuda")
    for pinned in (True, False):
        host = torch.empty(m, pin_memory=pinned)
        label = "pinned" if pinned else "pageable"
        for name, fn in ((f"h2d_{label}", lambda: dev.copy_(host, non_blocking=pinned)),
                         (f"d2h_{label}", lambda: host.copy_(dev, non_blocking=pinned))):
            t = time_cuda(fn, p.warmup, max(5, p.repeats // 2))
            rows.append(dict(name=name, kind="bandwidth", value=p.host_copy_bytes / t.median_s / 1e9, unit="GB/s",
                             bytes=p.host_copy_bytes, median_s=t.median_s, spread_s=t.max_s - t.min_s))
    del dev, host

    dtypes = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for label in p.gemm_dtypes:
            size = p.gemm_size
            torch.backends.cuda.matmul.allow_tf32 = label == "tf32"
            a = torch.randn(size, size, device="cuda", dtype=dtypes[label])
            b = torch.randn(size, size, device="cuda", dtype=dtypes[label])
            t = time_cuda(lambda: a @ b, p.warmup, p.repeats)
            rows.append(dict(name=f"gemm_{label}", kind="compute", value=2 * size**3 / t.median_s / 1e12,
                             unit="TFLOP/s", size=size, median_s=t.median_s, spread_s=t.max_s - t.min_s))
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32

    tiny = torch.zeros(1, device="cuda")
    t = time_cuda(lambda: tiny.add_(1), p.warmup, 200)
    rows.append(dict(name="launch", kind="latency", value=t.median_s * 1e6, unit="us", median_s=t.median_s,
                     spread_s=t.max_s - t.min_s))
    return rows


def _cpu(p: CeilingsParams, ctx: Context) -> list[dict]:
    import numpy as np
    import torch

    rows = []
    src = np.random.default_rng(ctx.seed).standard_normal(p.host_copy_bytes // 8)
    dst = np.empty_like(src)
    t = time_cpu(lambda: np.copyto(dst, src), 1, p.repeats)
    rows.append(dict(name="host_copy", kind="bandwidth", value=2 * src.nbytes / t.median_s / 1e9, unit="GB/s",
                     bytes=2 * src.nbytes, median_s=t.median_s, spread_s=t.max_s - t.min_s))
    dtypes = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}
    size = p.gemm_size
    for label in p.gemm_dtypes:
        if label not in dtypes:  # tf32 is a GPU matrix-unit mode
            continue
        a = torch.randn(size, size, dtype=dtypes[label])
        b = torch.randn(size, size, dtype=dtypes[label])
        t = time_cpu(lambda: a @ b, 1, p.repeats)
        rows.append(dict(name=f"gemm_{label}", kind="compute", value=2 * size**3 / t.median_s / 1e12,
                         unit="TFLOP/s", size=size, median_s=t.median_s, spread_s=t.max_s - t.min_s))
    return rows


@experiment(params=CeilingsParams, needs_gpu=False)
def ceilings(p: CeilingsParams, ctx: Context) -> Result:
    rows = _gpu(p, ctx) if ctx.device == "cuda" else _cpu(p, ctx)
    table = pd.DataFrame(rows)
    metrics = {}
    for row in rows:
        suffix = {"GB/s": "GBps", "TFLOP/s": "TFLOPs", "us": "us"}[row["unit"]]
        metrics[f"{row['name']}_{suffix}"] = row["value"]
    for row in rows:
        ctx.log.info("%-16s %10.2f %s", row["name"], row["value"], row["unit"])
    return Result(metrics=metrics, tables={"ceilings": table}, tags={"device": ctx.device})
