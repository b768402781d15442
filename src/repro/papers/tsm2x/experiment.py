"""TSM2R and TSM2L against cuBLAS on the paper's grids (claims tsm2.r_speedup, tsm2.l_speedup, tsm2.bw).

Per grid point, in one run side by side: our kernel (the tuner's best variant), cuBLAS through
torch (TF32 off) and cuBLAS through CuPy, all computing the same column-major C = A @ B from the
same random-normal column-major inputs, each timed as the median of many CUDA-event-timed calls
that rotate over enough input copies (>= rotate_bytes, at most max_copies) to read from HBM, not
L2. (Shapes under rotate_bytes / max_copies = 4 MiB can stay in L2; they are launch-bound anyway.)
The tuner's choices are cached in tuner_cache ("" = <run dir>/tuning.json, tuned afresh each run;
a relative path is relative to the working directory).

Columns of the `points` table (times in us, bandwidth in GB/s of compulsory traffic):
- t_ours_us: our best variant; t_torch_us / t_cupy_us: the two cuBLAS routes; t_cublas_us: the
  better of those; t_dispatch_us: what tuner.dispatch runs (`chosen`: ours or the cuBLAS route
  where ours was not faster while tuning; `fallback` says which).
- speedup = t_cublas / t_dispatch (the headline: never below 1 except by timing noise);
  speedup_kernel = t_cublas / t_ours; speedup_vs_torch / speedup_vs_cupy: dispatch vs each route.
- bytes = (m*k + k*n + m*n) * itemsize; gbps_* = bytes / t; bw_frac_* = gbps / device copy
  bandwidth (bytes read + written, from the ceilings run); gflops_* use 2mnk.
- err_* = max |C - C_ref| / max |C_ref| against an fp64 torch reference on the GPU; ok says
  whether ours and both cuBLAS routes are within tol (16 u sqrt(k), u the unit roundoff).
- launch_us: the empty-kernel launch floor from the ceilings run (small shapes sit near it).
- t_mix_us = read bytes / read_gbps + written bytes / write_gbps, with the read-only (torch.sum)
  and write-only (fill_) stream rates measured once per run on 1 GiB (metrics read_gbps,
  write_gbps): the time of this shape's traffic mix at those rates; mix_frac_* = t_mix / t. The
  copy ceiling is a 50/50 mix; TSM2R moves mostly reads, TSM2L's k = 2 shapes mostly writes.

`dispatch` (tsm2_dispatch) times the library call instead, as a caller's loop meets it: per shape,
tuner.matmul on torch operands and on CuPy views of the same memory against a bare A @ B in each
library, each as back-to-back calls (host clock until the device is idle, median of call_batches
batches), warm (the same operands) and cold (rotated over copies holding rotate_bytes). The first
matmul call tunes the shape into tuning.json. Its `points` table: t_<path>_<regime>_us for paths
torch, cupy, dispatch_torch, dispatch_cupy, wrap_torch and wrap_cupy (no_lookup: matmul's call with
nothing in it but A @ B) and t_cublas (the faster bare library); ratio_torch_* /
ratio_cupy_* = t_cublas / that caller's dispatch; ratio_cupy_own_* = CuPy's bare call / a CuPy
caller's dispatch; ratio_* = the worse of ratio_torch_* and ratio_cupy_own_* (the metrics' reading:
each caller against the fastest call it had, CuPy's own host cost per call not counted against us);
ceiling_* = the same reading of the wrap paths (what a dispatcher that looked nothing up would reach);
overhead_*_us = dispatch minus the same library's bare call; regimes (what decided), chosen and
fallback (the torch caller's choice), chosen_cupy and fallback_cupy (the CuPy caller's: each call
path is tuned on its own); err_* against an fp64 reference. Within a regime the six paths' batches
are interleaved (tuner.interleaved_times, call_batches rounds, median per path).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from repro import kernels
from repro.experiment import Context, Result, experiment
from repro.papers.tsm2x import blas, tsm2

MIB = 1 << 20
LARGE_BYTES = 256 * MIB  # shapes at least this big are bandwidth-bound: the 90 % target applies


@dataclass
class BenchParams:
    dtypes: list[str] = field(default_factory=lambda: ["float32", "float64"])
    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 200
    target_ms: float = 20.0  # GPU time per side-by-side measurement
    tune_min_repeats: int = 5
    tune_max_repeats: int = 40
    tune_target_ms: float = 4.0  # GPU time per candidate while tuning
    rotate_bytes: int = 256 * MIB  # rotate over input copies until they hold this many bytes (L2: 60 MB)
    max_copies: int = 64
    tuner_cache: str = ""  # JSON cache of the tuner's choices; "" = <run dir>/tuning.json


@dataclass
class TSM2RParams(BenchParams):
    m: list[int] = field(default_factory=lambda: [10240, 15360, 20480, 25600, 30720])
    k_over_m: list[float] = field(default_factory=lambda: [0.125, 0.25, 0.5, 1.0])
    n: list[int] = field(default_factory=lambda: [2, 4, 8, 16])


@dataclass
class TSM2LParams(BenchParams):
    m: list[int] = field(default_factory=lambda: [10_000, 100_000, 1_000_000, 10_000_000])
    k: list[int] = field(default_factory=lambda: [2, 4, 8, 16])
    n: list[int] = field(default_factory=lambda: [2, 4, 8, 16])


@dataclass
class DispatchParams:
    dtypes: list[str] = field(default_factory=lambda: ["float32", "float64"])
    warmup: int = 3
    rotate_bytes: int = 256 * MIB  # cold: rotate over operand copies holding this many bytes (L2: 50-60 MB)
    max_copies: int = 64
    tuner_cache: str = ""  # JSON cache of the tuner's times; "" = <run dir>/tuning.json
    m: list[int] = field(default_factory=lambda: [10_000, 100_003])
    k: list[int] = field(default_factory=lambda: [333, 1037, 4096])
    n: list[int] = field(default_factory=lambda: [1, 3, 8, 16])
    b_layouts: list[str] = field(default_factory=lambda: ["colmajor", "strided"])  # strided: B[:, ::2] of a k x 2n
    call_batches: int = 5  # back-to-back batches per timed call path (median)
    call_target_ms: float = 5.0  # host time per batch


def grid_r(p: TSM2RParams) -> list[tuple[str, int, int, int]]:
    return [(dt, m, max(1, round(m * f)), n) for dt in p.dtypes for m in p.m for f in p.k_over_m for n in p.n]


def grid_l(p: TSM2LParams) -> list[tuple[str, int, int, int]]:
    return [(dt, m, k, n) for dt in p.dtypes for m in p.m for k in p.k for n in p.n]


def grid_dispatch(p: DispatchParams) -> list[tuple[str, int, int, int, str]]:
    return [(dt, m, k, n, b) for dt in p.dtypes for m in p.m for k in p.k for n in p.n for b in p.b_layouts]


tolerance = tsm2.tolerance  # (dtype, k) -> accepted relative max error; shared with the tuner's check


def read_ceilings(path: Path | None) -> dict[str, float]:
    """copy_gbps and launch_us from the ceilings run record (NaN when absent)."""
    metrics = json.loads(Path(path).read_text()).get("metrics", {}) if path is not None else {}
    return {"copy_gbps": float(metrics.get("d2d_copy_GBps", math.nan)),
            "launch_us": float(metrics.get("launch_us", math.nan))}


def stream_rates(nbytes: int = 1 << 30) -> dict[str, float]:
    """GB/s of a read-only stream (a sum over nbytes of fp32) and of a write-only one (a fill)."""
    import torch

    from repro.papers.tsm2x.tuner import median_time

    x = torch.empty(nbytes // 4, device="cuda")
    x.fill_(1.0)
    read = median_time([lambda: x.sum()], warmup=3, min_repeats=10, max_repeats=50, target_s=0.05)
    write = median_time([lambda: x.fill_(0.0)], warmup=3, min_repeats=10, max_repeats=50, target_s=0.05)
    del x
    return {"read_gbps": nbytes / read / 1e9, "write_gbps": nbytes / write / 1e9}


def measure_point(kind: str, dtype: str, m: int, k: int, n: int, p: BenchParams, tuner, kernels_dir: Path,
                  ceilings: dict[str, float], seed: int) -> dict:
    """Tune, time side by side and check one shape; returns one row of the points table."""
    import torch

    from repro.papers.tsm2x.tuner import make_call, median_time, output_checker

    tdt = getattr(torch, dtype)
    item = torch.finfo(tdt).bits // 8
    nbytes = (m * k + k * n + m * n) * item
    copies = max(1, min(p.max_copies, math.ceil(p.rotate_bytes / nbytes)))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # column-major operands: transposes of contiguous (cols x rows) tensors
    As = [torch.randn(k, m, device="cuda", dtype=tdt, generator=gen).T for _ in range(copies)]
    Bs = [torch.randn(n, k, device="cuda", dtype=tdt, generator=gen).T for _ in range(copies)]
    Cs = [torch.empty(n, m, device="cuda", dtype=tdt).T for _ in range(copies)]

    def calls(name: str):
        return [make_call(kind, name, a, b, c, kernels_dir) for a, b, c in zip(As, Bs, Cs)]

    tune = dict(warmup=p.warmup, min_repeats=p.tune_min_repeats, max_repeats=p.tune_max_repeats,
                target_s=p.tune_target_ms / 1e3)
    cached = tuner.lookup(kind, tsm2.DTYPES[dtype], m, k, n)
    check = None if cached else output_checker(kind, As[0], Bs[0], Cs[0], kernels_dir)  # wrong variants never win
    # both regimes are recorded (tuning.json); the rotated calls timed here are cold, so cold decides
    timers = {"warm": lambda name: median_time([make_call(kind, name, As[0], Bs[0], Cs[0], kernels_dir)], **tune),
              "cold": lambda name: median_time(calls(name), **tune)}
    choice = tuner.choose(kind, tsm2.DTYPES[dtype], m, k, n, timers, check=check, regimes=("cold",))
    final = dict(warmup=p.warmup, min_repeats=p.min_repeats, max_repeats=p.max_repeats, target_s=p.target_ms / 1e3)
    paths = {"cublas_torch": "cublas_torch", "cublas_cupy": "cublas_cupy"}
    if choice.best_variant is not None:
        paths["ours"] = choice.best_variant
    t = {label: median_time(calls(name), **final) * 1e6 for label, name in paths.items()}
    t_ours = t.get("ours", math.nan)
    t_cublas = min(t["cublas_torch"], t["cublas_cupy"])
    t_dispatch = t[choice.choice] if choice.fallback else t_ours

    # correctness of every path on copy 0, against an fp64 reference; outputs poisoned with NaN first
    ref = torch.mm(As[0].double(), Bs[0].double())
    ref_max = ref.abs().max().item()
    errs = {}
    for label, name in paths.items():
        Cs[0].fill_(math.nan)
        make_call(kind, name, As[0], Bs[0], Cs[0], kernels_dir)()
        errs[label] = ((Cs[0].double() - ref).abs().max().item() / ref_max) if ref_max > 0 else math.nan
    tol = tolerance(dtype, k)
    del As, Bs, Cs, ref

    def gbps(t_us: float) -> float:
        return nbytes / (t_us * 1e-6) / 1e9

    copy = ceilings["copy_gbps"]
    t_mix = ((m * k + k * n) * item / ceilings["read_gbps"] + m * n * item / ceilings["write_gbps"]) / 1e3  # us
    return dict(
        kind=f"tsm2{kind}", dtype=dtype, m=m, k=k, n=n, bytes=nbytes, copies=copies,
        chosen=choice.choice, fallback=choice.fallback, variant=choice.best_variant or "",
        failed_candidates=len(choice.errors),
        t_ours_us=t_ours, t_torch_us=t["cublas_torch"], t_cupy_us=t["cublas_cupy"], t_cublas_us=t_cublas,
        t_dispatch_us=t_dispatch,
        speedup=t_cublas / t_dispatch, speedup_kernel=t_cublas / t_ours,
        speedup_vs_torch=t["cublas_torch"] / t_dispatch, speedup_vs_cupy=t["cublas_cupy"] / t_dispatch,
        gbps_ours=gbps(t_ours), gbps_cublas=gbps(t_cublas), gbps_dispatch=gbps(t_dispatch),
        bw_frac_ours=gbps(t_ours) / copy, bw_frac_cublas=gbps(t_cublas) / copy,
        bw_frac_dispatch=gbps(t_dispatch) / copy,
        gflops_ours=2 * m * n * k / (t_ours * 1e-6) / 1e9, gflops_cublas=2 * m * n * k / (t_cublas * 1e-6) / 1e9,
        err_ours=errs.get("ours", math.nan), err_torch=errs["cublas_torch"], err_cupy=errs["cublas_cupy"], tol=tol,
        ok=all(e <= tol for e in errs.values()) and "ours" in errs,
        launch_us=ceilings["launch_us"],
        t_mix_us=t_mix, mix_frac_ours=t_mix / t_ours, mix_frac_dispatch=t_mix / t_dispatch,
    )


def _geomean(xs: pd.Series) -> float:
    return float(math.exp(statistics.fmean(math.log(x) for x in xs)))


def summarize(df: pd.DataFrame, kind: str) -> dict[str, float]:
    """The run's metrics from its points table (see the module doc for the columns)."""
    metrics: dict[str, float] = {"n_points": len(df), "n_fallback": int(df["fallback"].sum()),
                                 "n_incorrect": int((~df["ok"].astype(bool)).sum()),
                                 "n_failed_candidates": int(df["failed_candidates"].sum())}
    for dtype, tag in (("float32", "fp32"), ("float64", "fp64")):
        d = df[df["dtype"] == dtype]
        if len(d):
            metrics[f"geomean_speedup_{tag}"] = _geomean(d["speedup"])
            metrics[f"min_speedup_{tag}"] = float(d["speedup"].min())
            metrics[f"geomean_speedup_kernel_{tag}"] = _geomean(d["speedup_kernel"])
            metrics[f"max_err_{tag}"] = float(d["err_ours"].max())
            if d["bw_frac_cublas"].notna().all():
                # the speedup a kernel at exactly the copy ceiling would get: 1 / cuBLAS's fraction of it
                metrics[f"roofline_speedup_geomean_{tag}"] = _geomean(1 / d["bw_frac_cublas"])
    if kind == "r":
        metrics["mean_bw_gain_vs_cublas"] = float((df["gbps_dispatch"] / df["gbps_cublas"]).mean() - 1)
        metrics["mean_bw_gain_vs_cublas_kernel"] = float((df["gbps_ours"] / df["gbps_cublas"]).mean() - 1)
    else:
        metrics["geomean_speedup"] = _geomean(df["speedup"])
        metrics["min_speedup"] = float(df["speedup"].min())
        metrics["geomean_speedup_kernel"] = _geomean(df["speedup_kernel"])
        if df["bw_frac_cublas"].notna().all():
            metrics["roofline_speedup_geomean"] = _geomean(1 / df["bw_frac_cublas"])
    large = df[(df["bytes"] >= LARGE_BYTES) & df["bw_frac_dispatch"].notna()]
    if len(large):  # absent (not NaN) when no point is large or the copy ceiling is unknown
        metrics["min_bw_frac_large"] = float(large["bw_frac_dispatch"].min())
        metrics["min_bw_frac_large_kernel"] = float(large["bw_frac_ours"].min())
        metrics["n_large"] = len(large)
    if "mix_frac_dispatch" in df:
        mixed = df[df["bytes"] >= LARGE_BYTES]
        if len(mixed):
            metrics["min_mix_frac_large"] = float(mixed["mix_frac_dispatch"].min())
    return metrics


def run(kind: str, points: list[tuple[str, int, int, int]], p: BenchParams, ctx: Context) -> Result:
    import torch

    from repro.papers.tsm2x.tuner import Tuner, gpu_name

    kernels_dir = Path(ctx.inputs["kernels"]) if "kernels" in ctx.inputs else kernels.default_dir()
    ceilings = read_ceilings(ctx.inputs.get("ceilings")) | stream_rates()
    cache = Path(p.tuner_cache) if p.tuner_cache else ctx.out_dir / "tuning.json"
    tuner = Tuner(cache, gpu_name())
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS in true fp32, as our kernels
    try:
        rows = [measure_point(kind, dt, m, k, n, p, tuner, kernels_dir, ceilings, ctx.seed + i)
                for i, (dt, m, k, n) in enumerate(ctx.progress(points, desc=f"tsm2_{kind}"))]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    df = pd.DataFrame(rows)
    bad = df[~df["ok"]]
    for _, r in bad.iterrows():
        ctx.log.error("tsm2%s %s m=%d k=%d n=%d: error ours %.3g torch %.3g cupy %.3g > tol %.3g", kind, r.dtype,
                      r.m, r.k, r.n, r.err_ours, r.err_torch, r.err_cupy, r.tol)
    metrics = summarize(df, kind) | {"read_gbps": ceilings["read_gbps"], "write_gbps": ceilings["write_gbps"]}
    return Result(metrics=metrics, tables={"points": df}, artifacts={"tuning": cache},
                  tags={"gpu": gpu_name(), "timing": "CUDA events, median, calls queued behind a GPU spin",
                        "cupy_tf32": os.environ.get("CUPY_TF32", "0")})


@experiment(params=TSM2RParams, needs_gpu=True)
def tsm2_r(p: TSM2RParams, ctx: Context) -> Result:
    """TSM2R vs cuBLAS: m in 10240..30720, k = m/8..m, n = 2..16, fp32 and fp64."""
    return run("r", grid_r(p), p, ctx)


@experiment(params=TSM2LParams, needs_gpu=True)
def tsm2_l(p: TSM2LParams, ctx: Context) -> Result:
    """TSM2L vs cuBLAS: m = 1e4..1e7, k and n = 2..16, fp32 and fp64."""
    return run("l", grid_l(p), p, ctx)


# ---- the dispatch path (tsm2x.matmul) as a caller meets it ------------------------------------------


def no_lookup(A, B, *, tuner=None, kernels_dir=None):
    """matmul's signature with nothing between the caller and the library's A @ B: no route key, no
    lookup. Its time over the bare A @ B is the least any Python-level library call adds (the
    dispatch claim's ceiling where cuBLAS is the route); tuner and kernels_dir are taken as matmul
    takes them, so the call costs what a call of matmul costs before matmul's own work."""
    return A @ B


def measure_dispatch_point(dtype: str, m: int, k: int, n: int, b_layout: str, p: DispatchParams, tuner,
                           kernels_dir: Path, seed: int) -> dict:
    """One shape: matmul on torch and on CuPy operands against a bare A @ B in each library, warm
    (the same operands back to back) and cold (rotated over copies holding >= rotate_bytes)."""
    import functools

    import cupy
    import torch

    from repro.papers.tsm2x.tuner import deciding_regimes, dispatch, interleaved_times, l2_bytes, matmul

    tdt = getattr(torch, dtype)
    item = torch.finfo(tdt).bits // 8
    nbytes = (m * k + k * n + m * n) * item
    copies = max(1, min(p.max_copies, math.ceil(p.rotate_bytes / nbytes)))
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def make_b():
        if b_layout == "strided":  # neither row- nor column-major
            return torch.randn(k, 2 * n, device="cuda", dtype=tdt, generator=gen)[:, ::2]
        return torch.randn(n, k, device="cuda", dtype=tdt, generator=gen).T

    As = [torch.randn(k, m, device="cuda", dtype=tdt, generator=gen).T for _ in range(copies)]
    Bs = [make_b() for _ in range(copies)]
    cAs, cBs = [cupy.from_dlpack(a) for a in As], [cupy.from_dlpack(b) for b in Bs]
    run = functools.partial(matmul, tuner=tuner, kernels_dir=kernels_dir)
    wrap = functools.partial(no_lookup, tuner=tuner, kernels_dir=kernels_dir)  # the ceiling: matmul's call, no route
    paths = {"torch": lambda i: As[i] @ Bs[i], "cupy": lambda i: cAs[i] @ cBs[i],
             "dispatch_torch": lambda i: run(As[i], Bs[i]), "dispatch_cupy": lambda i: run(cAs[i], cBs[i]),
             "wrap_torch": lambda i: wrap(As[i], Bs[i]), "wrap_cupy": lambda i: wrap(cAs[i], cBs[i])}
    outputs = {"torch": run(As[0], Bs[0]), "cupy": torch.from_dlpack(run(cAs[0], cBs[0]))}  # tunes the shape
    kind = "r" if k > tsm2.MAX_K_L else "l"
    regimes = deciding_regimes(nbytes, l2_bytes(torch.cuda.current_device()))
    # each caller's choice (tuned per call path: its library, B's layout): matmul's, cached, not re-timed
    choices = {lib: dispatch(kind, a, b, tuner=tuner, kernels_dir=kernels_dir)[1]
               for lib, a, b in (("torch", As[0], Bs[0]), ("cupy", cAs[0], cBs[0]))}
    choice = choices["torch"]
    row = dict(kind=f"tsm2{kind}", dtype=dtype, m=m, k=k, n=n, b_layout=b_layout,
               bytes=nbytes, copies=copies, regimes="+".join(regimes), chosen=choice.choice,
               fallback=choice.fallback, chosen_cupy=choices["cupy"].choice, fallback_cupy=choices["cupy"].fallback,
               failed_candidates=len(choice.errors))
    for regime in ("warm", "cold"):
        idx = [0] if regime == "warm" else range(copies)
        # the six paths' batches interleaved: a slow spell of host or card hits them alike
        t = {label: v * 1e6 for label, v in interleaved_times(
            {label: [functools.partial(f, i) for i in idx] for label, f in paths.items()},
            rounds=p.call_batches, warmup=p.warmup, target_s=p.call_target_ms / 1e3).items()}
        t_cublas = min(t["torch"], t["cupy"])
        row |= {f"t_{label}_{regime}_us": v for label, v in t.items()}
        row |= {f"t_cublas_{regime}_us": t_cublas,
                f"ratio_torch_{regime}": t_cublas / t["dispatch_torch"],
                f"ratio_cupy_{regime}": t_cublas / t["dispatch_cupy"],
                f"ratio_cupy_own_{regime}": t["cupy"] / t["dispatch_cupy"],
                f"ratio_{regime}": min(t_cublas / t["dispatch_torch"], t["cupy"] / t["dispatch_cupy"]),
                f"ceiling_{regime}": min(t_cublas / t["wrap_torch"], t["cupy"] / t["wrap_cupy"]),
                f"overhead_torch_{regime}_us": t["dispatch_torch"] - t["torch"],
                f"overhead_cupy_{regime}_us": t["dispatch_cupy"] - t["cupy"]}
    ref = torch.mm(As[0].double(), Bs[0].double())
    scale = max(ref.abs().max().item(), 1e-30)
    errs = {label: (C.double() - ref).abs().max().item() / scale for label, C in outputs.items()}
    tol = tolerance(dtype, k)
    del As, Bs, cAs, cBs, outputs, ref
    return row | dict(err_torch=errs["torch"], err_cupy=errs["cupy"], tol=tol, ok=max(errs.values()) <= tol)


def summarize_dispatch(df: pd.DataFrame) -> dict[str, float]:
    """The dispatch run's metrics per regime: the worst and the geomean ratio (ratio_*: a torch caller's
    matmul against the faster bare cuBLAS call of torch and CuPy, a CuPy caller's against CuPy's own
    A @ B, whose host cost per call is CuPy's), and what the fallback's route lookup costs."""
    metrics: dict[str, float] = {"n_points": len(df), "n_fallback": int(df["fallback"].sum()),
                                 "n_incorrect": int((~df["ok"].astype(bool)).sum()),
                                 "n_failed_candidates": int(df["failed_candidates"].sum())}
    for regime in ("warm", "cold"):
        metrics[f"dispatch_min_vs_cublas_{regime}"] = float(df[f"ratio_{regime}"].min())
        if f"ceiling_{regime}" in df:  # absent in records made before the no-lookup wrapper was timed
            metrics[f"ceiling_min_vs_cublas_{regime}"] = float(df[f"ceiling_{regime}"].min())
            metrics[f"dispatch_min_vs_ceiling_{regime}"] = float((df[f"ratio_{regime}"] / df[f"ceiling_{regime}"]).min())
        metrics[f"dispatch_geomean_vs_cublas_{regime}"] = _geomean(
            pd.concat([df[f"ratio_torch_{regime}"], df[f"ratio_cupy_own_{regime}"]]))
    for lib, col in (("torch", "chosen"), ("cupy", "chosen_cupy")):
        if col in df:  # shapes whose route is the bound cuBLAS call (blas.BOUND), per caller
            metrics[f"n_bound_{lib}"] = int((df[col] == blas.BOUND).sum())
    fell = df[df["fallback"].astype(bool)]
    if len(fell):  # absent where no shape fell back
        metrics["fallback_overhead_us_torch"] = float(fell["overhead_torch_warm_us"].median())
    fell_cupy = df[df["fallback_cupy"].astype(bool)] if "fallback_cupy" in df else fell
    if len(fell_cupy):
        metrics["n_fallback_cupy"] = len(fell_cupy)
        metrics["fallback_overhead_us_cupy"] = float(fell_cupy["overhead_cupy_warm_us"].median())
    return metrics


@experiment(params=DispatchParams, needs_gpu=True)
def tsm2_dispatch(p: DispatchParams, ctx: Context) -> Result:
    """tsm2x.matmul against a bare A @ B (torch and CuPy), warm and cold, on mid-size and odd shapes."""
    import torch

    from repro.papers.tsm2x.tuner import Tuner, gpu_name

    kernels_dir = Path(ctx.inputs["kernels"]) if "kernels" in ctx.inputs else kernels.default_dir()
    cache = Path(p.tuner_cache) if p.tuner_cache else ctx.out_dir / "tuning.json"
    tuner = Tuner(cache, gpu_name())
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS in true fp32, as our kernels
    try:
        rows = [measure_dispatch_point(dt, m, k, n, b, p, tuner, kernels_dir, ctx.seed + i)
                for i, (dt, m, k, n, b) in enumerate(ctx.progress(grid_dispatch(p), desc="dispatch"))]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    df = pd.DataFrame(rows)
    for _, r in df[~df["ok"]].iterrows():
        ctx.log.error("dispatch %s m=%d k=%d n=%d %s: error torch %.3g cupy %.3g > tol %.3g", r.dtype, r.m, r.k, r.n,
                      r.b_layout, r.err_torch, r.err_cupy, r.tol)
    return Result(metrics=summarize_dispatch(df), tables={"points": df}, artifacts={"tuning": cache},
                  tags={"gpu": gpu_name(), "timing": "back-to-back calls, host clock to device idle, median batch",
                        "cupy_tf32": os.environ.get("CUPY_TF32", "0")})
