"""QGTC's 1-bit GEMM against cuBLAS int8 (claim qgtc.gemm) and the bit widths, side by side in one run.

The paper (Sec. 6.4, RTX 3090) times its 1-bit GEMM at M = K = 4096, N = 64: 46.8 TFLOP/s against
cuBLAS int8's 6.65 (7.0x). On a GPU this experiment times, on the same shape and in one process:

- `qgtc` (a_bits x b_bits): kernels/qgtc_bmma.cu on operands packed beforehand (the headline: 1 x 1),
  and `qgtc_pack` the same with both operands packed inside every call;
- `int8_rowB` / `int8_colB`: cuBLAS int8 through ``torch._int_mm`` with B row-major and column-major
  (cuBLASLt wants B column-major; both are timed and the faster is the baseline);
- `fp8`: ``torch._scaled_mm`` e4m3 (A row-major, B column-major, unit scales, bf16 out); `bf16`: ``torch.mm``;
- `qgtc_sparse`: the 1-bit GEMM on an A whose 16 x 256 tiles are empty at random with the given
  probability (zero-tile jumping; the kernel's counters say how many it jumped);
- the ceiling: the b1 MMA issue rate of the card (qgtc_b1_peak: register operands, no memory), as the
  time 2 M N K / rate; `ceiling_speedup_vs_int8` is the speedup over int8 of a GEMM at that rate.

Each time is the median over `repeats` CUDA-event timings of a CUDA graph of `calls` back-to-back
calls, divided by `calls` (no host cost counted on any side; the operands stay in L2, as in the paper's
repeated calls). TOPS count 2 M N K operations. Every
path's output is checked against an exact reference first (`ok`).

On a machine without a GPU the NumPy twin runs the same bit-width rows at the smoke shape instead:
its times are CPU times of the twin (`device` = cpu), never compared with a GPU's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.qgtc import bitplanes


@dataclass
class GemmParams:
    m: int = 4096  # QGTC Sec. 6.4: M = K = 4096, N = 64
    k: int = 4096
    n: int = 64
    bits: list[list[int]] = field(default_factory=lambda: [[1, 1], [1, 2], [2, 2], [4, 4], [8, 8]])  # (A, B)
    empty_tile_fraction: list[float] = field(default_factory=lambda: [0.5, 0.9])  # assumed: zero-tile rows
    warmup: int = 5
    repeats: int = 30
    calls: int = 20  # back-to-back calls per timing
    peak_iters: int = 4096  # MMAs per chain in the issue-rate kernel
    cpu_repeats: int = 3  # timings of the twin on a CPU


def _ops(m: int, k: int, n: int) -> float:
    return 2.0 * m * n * k


@experiment(params=GemmParams, needs_gpu=False)
def gemm(p: GemmParams, ctx: Context) -> Result:
    """The 1-bit GEMM over cuBLAS int8 at 4096 x 4096 x 64 (GPU); the twin's bit widths (CPU)."""
    if ctx.device == "cuda":
        return _gpu(p, ctx)
    return _cpu(p, ctx)


def _cpu(p: GemmParams, ctx: Context) -> Result:
    from repro.timing import time_cpu

    rng = np.random.default_rng(ctx.seed)
    rows = []
    for a_bits, b_bits in ctx.progress(p.bits, desc="twin"):
        qa = rng.integers(0, 1 << a_bits, (p.m, p.k))
        qb = rng.integers(0, 1 << b_bits, (p.k, p.n))
        c, stats = bitplanes.int_matmul(qa, a_bits, qb, b_bits)
        t = time_cpu(lambda: bitplanes.int_matmul(qa, a_bits, qb, b_bits), warmup=0, repeats=p.cpu_repeats)
        rows.append(dict(kind="qgtc_twin", device="cpu", a_bits=a_bits, b_bits=b_bits, m=p.m, k=p.k, n=p.n,
                         t_us=t.median_s * 1e6, tops=_ops(p.m, p.k, p.n) / t.median_s / 1e12,
                         ok=bool(np.array_equal(c, qa @ qb)), mmas=stats.mmas, tiles=stats.tiles,
                         jumped=stats.skipped))
    df = pd.DataFrame(rows)
    one = df[(df.a_bits == 1) & (df.b_bits == 1)]
    metrics = {"n_incorrect": int((~df["ok"]).sum()), "n_points": len(df)}
    if len(one):
        metrics["twin_cpu_us_1bit"] = float(one["t_us"].iloc[0])
    return Result(metrics=metrics, tables={"points": df},
                  tags={"device": "cpu: the NumPy twin only (times are CPU times, no GPU comparison)"})


def _gpu(p: GemmParams, ctx: Context) -> Result:
    import torch

    from repro import kernels
    from repro.papers.qgtc import bmma

    kdir = ctx.inputs.get("kernels") or kernels.default_dir()
    m, k, n = p.m, p.k, p.n
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)

    def timed(fn) -> float:
        """Seconds per call: `calls` back-to-back calls captured in a CUDA graph, the graph replayed
        (no host cost in the time: a 4096 x 4096 x 64 GEMM takes microseconds, less than a Python call)."""
        from repro.timing import cuda_graph, time_cuda

        def calls():
            for _ in range(p.calls):
                fn()
        replay, _ = cuda_graph(calls, warmup=max(1, -(-p.warmup // p.calls)))
        return time_cuda(replay, warmup=p.warmup, repeats=p.repeats).median_s / p.calls

    rows = []

    def row(kind, t, ok, **extra):
        rows.append(dict(kind=kind, device=torch.cuda.get_device_name(), m=m, k=k, n=n, t_us=t * 1e6,
                         tops=_ops(m, k, n) / t / 1e12, ok=bool(ok), **extra))

    # ours, per bit width, on pre-packed operands (and packing inside the call for 1 x 1)
    for a_bits, b_bits in p.bits:
        qa = torch.randint(0, 1 << a_bits, (m, k), device="cuda", generator=gen, dtype=torch.int32)
        qb = torch.randint(0, 1 << b_bits, (k, n), device="cuda", generator=gen, dtype=torch.int32)
        pa, pb = bmma.pack(qa, a_bits), bmma.pack(qb.T, b_bits, bitplanes.TILE_N)
        ref = (qa.double() @ qb.double()).to(torch.int64)
        launch, out = bmma.bind(pa, pb, kernels_dir=kdir)
        launch()
        ok = torch.equal(out.to(torch.int64), ref)
        row("qgtc", timed(launch), ok, a_bits=a_bits, b_bits=b_bits)
        if (a_bits, b_bits) == (1, 1):
            row("qgtc_pack", timed(lambda: bmma.int_matmul(qa, 1, qb, 1, kernels_dir=kdir)), ok, a_bits=1, b_bits=1)
            ones = (qa, qb, pb, ref)
        del pa, pb, out, ref

    # zero-tile jumping: 1-bit A with whole 16 x 256 tiles emptied at random
    qa1, qb1, pb1, _ = ones
    for frac in p.empty_tile_fraction:
        keep = (torch.rand((math.ceil(m / 16), math.ceil(k / 256)), device="cuda", generator=gen) >= frac)
        mask = keep.repeat_interleave(16, 0).repeat_interleave(256, 1)[:m, :k]
        qs = qa1 * mask
        ps = bmma.pack(qs, 1)
        counters = torch.zeros(2, dtype=torch.int64, device="cuda")
        out = bmma.run(ps, pb1, counters=counters, kernels_dir=kdir)
        ok = torch.equal(out.to(torch.int64), (qs.double() @ qb1.double()).to(torch.int64))
        visited, jumped = counters.tolist()
        launch, _ = bmma.bind(ps, pb1, out, kernels_dir=kdir)
        row("qgtc_sparse", timed(launch), ok, a_bits=1, b_bits=1,
            empty_tile_fraction=frac, jumped_fraction=jumped / max(visited, 1))
        del ps, out

    # cuBLAS int8 in both layouts of B, fp8 and bf16
    a8 = torch.randint(-128, 128, (m, k), device="cuda", generator=gen, dtype=torch.int8)
    b8_row = torch.randint(-128, 128, (k, n), device="cuda", generator=gen, dtype=torch.int8)
    b8_col = b8_row.T.contiguous().T
    ref8 = (a8.double() @ b8_row.double())
    for kind, b8 in (("int8_rowB", b8_row), ("int8_colB", b8_col)):
        ok = torch.equal(torch._int_mm(a8, b8).double(), ref8)
        row(kind, timed(lambda: torch._int_mm(a8, b8)), ok, a_bits=8, b_bits=8)
    af = torch.randn((m, k), device="cuda", generator=gen)
    bf = torch.randn((k, n), device="cuda", generator=gen)
    a_fp8, b_fp8 = af.to(torch.float8_e4m3fn), bf.T.contiguous().T.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    ref_fp8 = a_fp8.float() @ b_fp8.float()

    def fp8():
        return torch._scaled_mm(a_fp8, b_fp8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    err = ((fp8().float() - ref_fp8).abs().max() / ref_fp8.abs().max()).item()
    row("fp8", timed(fp8), err < 1e-2, a_bits=8, b_bits=8)
    a16, b16 = af.bfloat16(), bf.bfloat16()
    ref16 = a16.float() @ b16.float()
    err = ((torch.mm(a16, b16).float() - ref16).abs().max() / ref16.abs().max()).item()
    row("bf16", timed(lambda: torch.mm(a16, b16)), err < 1e-2, a_bits=16, b_bits=16)

    peak = bmma.peak_tops(iters=p.peak_iters, kernels_dir=kdir)
    df = pd.DataFrame(rows)
    one_bit = (df.a_bits == 1) & (df.b_bits == 1)
    t = {kind: float(df[(df.kind == kind) & (one_bit if kind.startswith("qgtc") else True)]["t_us"].iloc[0])
         for kind in ("qgtc", "qgtc_pack", "int8_rowB", "int8_colB", "fp8", "bf16")}
    t_int8 = min(t["int8_rowB"], t["int8_colB"])
    ideal_us = _ops(m, k, n) / (peak["peak_b1_tops"] * 1e12) * 1e6
    metrics = {
        "speedup_vs_int8": t_int8 / t["qgtc"],
        "speedup_vs_int8_with_pack": t_int8 / t["qgtc_pack"],
        "speedup_vs_int8_rowB": t["int8_rowB"] / t["qgtc"],
        "speedup_vs_fp8": t["fp8"] / t["qgtc"],
        "speedup_vs_bf16": t["bf16"] / t["qgtc"],
        "tops_qgtc_1bit": _ops(m, k, n) / t["qgtc"] / 1e6,
        "tops_int8": _ops(m, k, n) / t_int8 / 1e6,
        "peak_b1_tops": peak["peak_b1_tops"],
        "ideal_b1_us": ideal_us,
        "ceiling_speedup_vs_int8": t_int8 / ideal_us,
        "qgtc_frac_of_peak": ideal_us / t["qgtc"],
        "n_incorrect": int((~df["ok"]).sum()),
        "n_points": len(df),
    }
    return Result(metrics=metrics, tables={"points": df},
                  tags={"gpu": torch.cuda.get_device_name(), "timing": f"CUDA events, median of {p.repeats} "
                        f"replays of a CUDA graph of {p.calls} back-to-back calls", "int8_baseline":
                        "int8_rowB" if t["int8_rowB"] <= t["int8_colB"] else "int8_colB"})
