"""The SpTRSV experiments (Xie et al., ICPP 2021; Liu et al., Euro-Par 2016).

- ``emulation`` (CPU): every matrix's dependency statistics, and the NumPy twins of the
  level-set, sync-free (adversarial order), v2 chunked (push and pull), v3 warp rounds and multi-GPU task-pool
  schedules (k virtual GPUs)
  checked against SciPy's spsolve_triangular; what the CPU machines verify of the kernels.
- ``single_gpu`` (1 GPU): cuSPARSE vs our level-set and sync-free kernels (the first three
  mappings and the v2 push and pull kernels), each matrix's levels x hop latency beside them
  (bench.py).
- ``multi_gpu`` (2 or 4 GPUs, the experiment file's ``gpus``): unified memory vs zero-copy with
  the task pool (multi.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro import kernels
from repro.experiment import Context, Result, experiment
from repro.papers.sptrsv import schedule
from repro.data.matrices import specs


def _small_matrices() -> list[dict]:
    return [{"name": "poisson2d_40x30", "kind": "poisson", "shape": [40, 30]},
            {"name": "poisson3d_10", "kind": "poisson", "shape": [10, 10, 10]},
            {"name": "ilu0_2d_30x30", "kind": "poisson", "shape": [30, 30], "factor": "ilu0"},
            {"name": "powerlaw_3k", "kind": "powerlaw", "n": 3000, "min_offset": 20},
            {"name": "banded_2k", "kind": "banded", "n": 2000},
            {"name": "bar", "kind": "gallery", "example": "bar"}]


@dataclass
class EmulationParams:
    matrices: list[dict] = field(default_factory=_small_matrices)  # {name, kind, ...generator arguments}
    virtual_gpus: list[int] = field(default_factory=lambda: [2, 4])  # k of the multi-GPU schedule
    workers: int = 8  # persistent warps per virtual GPU
    grain: int = 2  # rows per task of the pool
    orders: list[str] = field(default_factory=lambda: ["natural", "levels"])  # the pools' row orders
    sequential_max_rows: int = 3000  # the one-row-at-a-time adversary only up to this size
    chunk_blocks: int = 4  # persistent blocks of the v2 kernels' chunked schedule
    chunk_threads: int = 32  # rows per chunk (256 on the GPU; fewer here, so more chunks meet)
    tol: float = 1e-10  # max |x - x_scipy| / max |x_scipy|


def rel_err(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(x - ref).max() / max(np.abs(ref).max(), 1e-300))


@experiment(params=EmulationParams, needs_gpu=False)
def emulation(p: EmulationParams, ctx: Context) -> Result:
    """The schedules' NumPy twins against SciPy, per matrix; stats of every matrix."""
    from scipy.sparse.linalg import spsolve_triangular

    rows, traces = [], []
    for i, spec in enumerate(ctx.progress(specs(p.matrices), desc="emulation")):
        L = spec.build()
        a = schedule.analyse(L)
        b = np.random.default_rng(ctx.seed + i).standard_normal(L.shape[0])
        ref = spsolve_triangular(L, b, lower=True)
        row = {"matrix": spec.name, "family": spec.kind, **schedule.stats(L, a),
               "err_levelset": rel_err(schedule.levelset_solve(L, b, a), ref),
               "err_syncfree_rounds": rel_err(schedule.syncfree_solve(L, b, seed=ctx.seed + i), ref)}
        for variant in ("push", "pull"):
            x, trace = schedule.chunked_solve(L, b, variant, blocks=p.chunk_blocks, threads=p.chunk_threads,
                                              seed=ctx.seed + i, analysis=a)
            row[f"err_v2_{variant}"] = rel_err(x, ref)
        row["v2_shared_fraction"] = trace.shared_fraction
        x, trace = schedule.warp_round_solve(L, b, blocks=p.chunk_blocks, threads=p.chunk_threads,
                                             warp=int(np.gcd(32, p.chunk_threads)), seed=ctx.seed + i, analysis=a)
        row["err_v3_warp_rounds"] = rel_err(x, ref)
        row["v3_warp_fraction"] = trace.warp_fraction  # dependencies resolved in a warp's rounds
        row["v3_max_rounds"] = max(trace.rounds_per_warp.values())
        if L.shape[0] <= p.sequential_max_rows:
            x = schedule.syncfree_solve(L, b, seed=ctx.seed + i, sequential=True)
            row["err_syncfree_sequential"] = rel_err(x, ref)
        for k, order in itertools.product(p.virtual_gpus, p.orders):
            x, trace = schedule.multigpu_solve(L, b, k, workers=p.workers, grain=p.grain, seed=ctx.seed + i,
                                               order=order, analysis=a)
            row[f"err_multigpu_k{k}_{order}"] = rel_err(x, ref)
            traces.append({"matrix": spec.name, "k": k, "order": order, "remote_fraction": trace.remote_fraction,
                           "ticks": trace.ticks,
                           **{f"rows_gpu{g}": int(np.diff(trace.bounds)[g]) for g in range(k)},
                           **{f"remote_gpu{g}": int(trace.remote_pushes[g]) for g in range(k)}})
        rows.append(row)
    df = pd.DataFrame(rows)
    errs = df[[c for c in df if c.startswith("err_")]]
    metrics = {"n_matrices": len(df), "max_rel_err": float(errs.max().max()),
               "n_over_tol": int((errs > p.tol).any(axis=1).sum())}
    for c in errs:
        metrics[f"max_{c}"] = float(errs[c].max())
    return Result(metrics=metrics, tables={"points": df, "multigpu": pd.DataFrame(traces)},
                  tags={"mode": "NumPy twin of the kernels' schedules (CPU)"})


def _bench_matrices() -> list[dict]:
    return [{"name": "poisson2d_1000", "kind": "poisson", "shape": [1000, 1000]},
            {"name": "poisson3d_100", "kind": "poisson", "shape": [100, 100, 100]}]


@dataclass
class SingleGPUParams:
    matrices: list[dict] = field(default_factory=_bench_matrices)  # {name, kind, ...generator arguments}
    methods: list[str] = field(default_factory=lambda: ["cusparse", "levelset", "syncfree_warp", "syncfree_thread",
                                                        "syncfree_levels", "syncfree_push", "syncfree_pull",
                                                        "syncfree_v3"])
    warmup: int = 3
    repeats: int = 20  # CUDA-event-timed solves per method (median), at most
    min_repeats: int = 3  # at least, however slow the solver
    target_s: float = 0.5  # GPU time per method and matrix that sizes the repeats
    analysis_repeats: int = 5
    hop_rounds: int = 20000  # ping-pong round trips per launch of the hop-latency kernel (the ceiling)
    hop_repeats: int = 5  # its launches (median)
    tol: float = 1e-10  # backward error and difference from cuSPARSE's x


@experiment(params=SingleGPUParams, needs_gpu=True)
def single_gpu(p: SingleGPUParams, ctx: Context) -> Result:
    """cuSPARSE vs our level-set and sync-free kernels on one GPU."""
    from repro.papers.sptrsv import bench

    if "cusparse" not in p.methods:
        raise ValueError(f"methods must include cusparse (the speedups' denominator), got {p.methods}")
    kernels_dir = Path(ctx.inputs["kernels"]) if "kernels" in ctx.inputs else kernels.default_dir()
    hop = bench.hop_latency(kernels_dir, p.hop_rounds, p.hop_repeats)  # on the idle GPU, before the solvers
    ctx.log.info("hop latency %.3f us (median; %.3f-%.3f)", hop["hop_us"], hop["hop_us_min"], hop["hop_us_max"])
    rows = [bench.measure(spec, p, kernels_dir, ctx.seed + i, ctx.log, hop["hop_us"])
            for i, spec in enumerate(ctx.progress(specs(p.matrices), desc="sptrsv"))]
    df = pd.DataFrame(rows)
    for _, r in df[~df["ok"]].iterrows():
        ctx.log.error("%s: a solver's x is off by more than tol=%g", r.matrix, p.tol)
    return Result(metrics={**bench.summarize(df), **hop}, tables={"points": df},
                  tags={"timing": "CUDA events, median; levels computed on the host (wall clock)",
                        "gpu": _gpu_name()})


@dataclass
class MultiGPUParams:
    matrices: list[dict] = field(default_factory=_bench_matrices)  # {name, kind, ...generator arguments}
    warmup: int = 1
    repeats: int = 5  # timed solves per design (median)
    grain: int = 4  # rows per task of each GPU's pool
    blocks_per_sm: int = 4  # persistent blocks of 256 threads per SM
    level_order: bool = True  # each GPU's pool hands out its rows by level (False: ascending rows)
    scaling: list[int] = field(default_factory=list)  # fewer GPU counts to run too (the scaling curve)
    tol: float = 1e-10  # backward error of each design's x


@experiment(params=MultiGPUParams, needs_gpu=True)
def multi_gpu(p: MultiGPUParams, ctx: Context) -> Result:
    """Unified memory vs zero-copy with the task pool on the run's GPUs (2 or 4), and on the
    fewer GPUs of ``scaling`` for the scaling curve."""
    import torch

    from repro.papers.sptrsv import bench, multi

    k = ctx.gpus or torch.cuda.device_count()
    multi.check_gpus(k, torch.cuda.device_count())
    counts = sorted(set(p.scaling) | {k})
    if counts[0] < 1 or counts[-1] > k:
        raise ValueError(f"scaling: GPU counts must be between 1 and the run's {k}, got {p.scaling}")
    kernels_dir = Path(ctx.inputs["kernels"]) if "kernels" in ctx.inputs else kernels.default_dir()
    timing = dict(kernels_dir=kernels_dir, warmup=p.warmup, repeats=p.repeats, grain=p.grain,
                  blocks_per_sm=p.blocks_per_sm, level_order=p.level_order)
    mats = specs(p.matrices)
    seeds = [ctx.seed + i for i in range(len(mats))]
    built = [m.build() for m in mats]
    rhs = [np.random.default_rng(s).standard_normal(L.shape[0]) for s, L in zip(seeds, built, strict=True)]
    rows = []
    for c in ctx.progress(counts, desc="GPU counts"):
        zero_copy = multi.zero_copy(mats, seeds, c, **timing)
        for spec, L, b, zc in zip(mats, built, rhs, zero_copy, strict=True):
            um = multi.unified_memory(L, b, c, **timing)
            zc_backward = multi.backward_error(L, zc["x"], b)
            rows.append({"matrix": spec.name, "family": spec.kind, "gpus": c, **schedule.stats(L),
                         "remote_fraction": multi.remote_fraction(L, schedule.partition(L, c)),
                         "um_solve_ms": um["solve_s"] * 1e3, "zc_solve_ms": zc["solve_s"] * 1e3,
                         "um_backward": um["backward"], "zc_backward": zc_backward,
                         "speedup": um["solve_s"] / zc["solve_s"],
                         "ok": bool(max(um["backward"], zc_backward) <= p.tol)})
            ctx.log.info("%s on %d GPU(s): unified memory %.3f ms, zero-copy %.3f ms", spec.name, c,
                         rows[-1]["um_solve_ms"], rows[-1]["zc_solve_ms"])
    df = pd.DataFrame(rows)
    main = df[df["gpus"] == k]
    metrics = {"gpus": k, "n_matrices": len(main), "n_incorrect": int((~df["ok"]).sum()),
               "geomean_speedup": bench.geomean(main["speedup"]), "max_speedup": float(main["speedup"].max()),
               "min_speedup": float(main["speedup"].min())}
    for c in counts:
        at = df[df["gpus"] == c]
        metrics[f"geomean_speedup_{c}gpu"] = bench.geomean(at["speedup"])
        metrics[f"geomean_zc_ms_{c}gpu"] = bench.geomean(at["zc_solve_ms"])
    return Result(metrics=metrics, tables={"points": df},
                  tags={"timing": "CUDA events; zero-copy: slowest rank, barrier to barrier", "gpu": _gpu_name(),
                        "zero_copy": "torch symmetric memory (CUDA backend), peer pointers, system-scope atomics"})


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)
