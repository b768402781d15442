"""The tSparse experiment: ``spgemm``, A @ A on generated matrices spanning the 8x8 tile fill.

Per matrix: the tiling's statistics (tiles, mean fill, candidate and kept pairs, output tiles), our
phases timed apart (conversion of A into tiles; symbolic; numeric; CSR assembly: ``t_ours`` counts
symbolic + numeric + assembly, ``t_ours_total`` adds the conversion), the error of the fp16 and bf16
products against SciPy's fp64 product (max |C - C64| / max |C64|), our CSR pattern against the
structural product, and every baseline its machine has (baselines.py). On a GPU the numeric phase is
the Triton kernel, timed with CUDA events, beside it the CUDA C mma.sync m16n8k16 variant
(``*_mma`` columns: only the numeric phase differs), and the NumPy twin checks both on the matrices
of at most ``twin_max_pairs`` pairs; on a CPU (smoke) it is the NumPy twin, timed, and the Triton kernel runs
in the interpreter, untimed, on the matrices of at most ``interpret_max_out_tiles`` output tiles.

The ceiling (per matrix): the kept pairs' useful products (2 x 8^3 flops a pair) at the dense fp16
tensor-core rate measured in the same run, as a speedup over cuSPARSE fp32.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch

from repro.data.matrices import check_square, rcm_over_natural, specs
from repro.experiment import Context, Result, experiment
from repro.papers.tsparse import baselines, spgemm
from repro.papers.tsparse.tiles import DTYPES, T, assemble, csr_tensors, symbolic, tile
from repro.timing import time_cpu, time_cuda

log = logging.getLogger(__name__)
PAIR_FLOPS = 2 * T ** 3  # one 8x8x8 tile product


def _small_matrices() -> list[dict]:
    return [{"name": "laplacian2d_24", "kind": "laplacian", "shape": [24, 24]},
            {"name": "fem_200x3", "kind": "fem", "nodes": 200, "dofs": 3, "reach": 2},
            {"name": "rmat_9", "kind": "rmat", "scale": 9, "edge_factor": 4}]


@dataclass
class SpgemmParams:
    matrices: list[dict] = field(default_factory=_small_matrices)  # {name, kind, ...generator arguments}
    dtypes: list[str] = field(default_factory=lambda: ["float16", "bfloat16"])  # inputs; the first is timed
    warmup: int = 3  # GPU timings
    repeats: int = 20
    cpu_repeats: int = 3  # CPU timings (SciPy, GraphBLAS, the twin)
    twin_max_pairs: int = 2_000_000  # GPU: the twin checks the kernel up to this many pairs
    interpret_max_out_tiles: int = 64  # CPU: the kernel runs in Triton's interpreter up to this many output tiles
    tc_gemm_n: int = 8192  # the ceiling's dense fp16 GEMM size
    fill_threshold: float = 0.25  # the claim's subset: mean 8x8 fill of A >= this (assumed, ours)
    cpu_threads: int = 0  # threads of the CPU work (torch on a CPU run, GraphBLAS); 0: the libraries' default


def rel_err(C: sp.csr_matrix, ref: sp.csr_matrix) -> float:
    scale = abs(ref).max()
    return float(abs(C - ref).max() / scale) if scale > 0 else float(abs(C).max())


def geomean(xs) -> float:
    xs = [float(x) for x in xs if np.isfinite(x)]
    return float(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else math.nan


def _phases(A: sp.csr_matrix, dtype: torch.dtype, how: str, device: str, timer, kernels_dir=None) -> dict[str, float]:
    """Median seconds of each phase, each timed on the previous phase's output; with ``kernels_dir``
    the mma variant's numeric phase too (its other phases are the same)."""
    csr = csr_tensors(A, device)
    ta = tile(*csr, A.shape, dtype)
    pairs = symbolic(ta, ta)
    out = spgemm.numeric(ta, ta, pairs, how)
    t = {"t_convert": timer(lambda: tile(*csr, A.shape, dtype)),
         "t_symbolic": timer(lambda: symbolic(ta, ta)),
         "t_numeric": timer(lambda: spgemm.numeric(ta, ta, pairs, how)),
         "t_assemble": timer(lambda: assemble(pairs, out))}
    t["t_ours"] = t["t_symbolic"] + t["t_numeric"] + t["t_assemble"]
    t["t_ours_total"] = t["t_ours"] + t["t_convert"]
    t["t_numeric_mma"] = timer(lambda: spgemm.numeric(ta, ta, pairs, "mma", kernels_dir)) if kernels_dir else math.nan
    t["t_ours_mma"] = t["t_symbolic"] + t["t_numeric_mma"] + t["t_assemble"]
    return t


def _structure(A: sp.csr_matrix) -> sp.csr_matrix:
    P = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    S = P @ P  # no cancellation: every structural entry counts at least one product
    S.sort_indices()
    return S


def measure(name: str, kind: str, A: sp.csr_matrix, p: SpgemmParams, gpu: bool, gb, kernels_dir=None) -> dict:
    device = "cuda" if gpu else "cpu"
    how = "triton" if gpu else "twin"
    row: dict = {"matrix": name, "family": kind, "source": f"generated ({kind}); not SuiteSparse",
                 "n": A.shape[0], "nnz": A.nnz, "nnz_per_row": A.nnz / A.shape[0]}
    ref = A @ A
    row["nnz_C"] = ref.nnz
    row["flops"] = 2.0 * float(np.diff(A.indptr)[A.indices].sum())  # 2 x scalar products
    S = _structure(A)
    for i, dname in enumerate(p.dtypes):
        prod = spgemm.multiply(A, dtype=DTYPES[dname], how=how, device=device)
        C = prod.scipy()
        row[f"err_{dname}"] = rel_err(C, ref)
        row[f"pattern_ok_{dname}"] = bool(C.nnz == S.nnz and (C.indptr == S.indptr).all()
                                          and (C.indices == S.indices).all())
        if i == 0:
            pairs = prod.pairs
            row.update(tiles=prod.A.n_tiles, fill=prod.A.fill, candidates=pairs.candidates, pairs=pairs.n_pairs,
                       out_tiles=pairs.n_out, out_fill=S.nnz / max(pairs.n_out * T * T, 1),
                       pairs_per_out_tile=pairs.n_pairs / max(pairs.n_out, 1))
        # the kernels against the twin, on the same tiles
        check = (gpu and prod.pairs.n_pairs <= p.twin_max_pairs) or (not gpu and prod.pairs.n_out <= p.interpret_max_out_tiles)
        twin_out = spgemm.numeric(prod.A, prod.B, prod.pairs, "twin").cpu().numpy() if check else None
        row[f"kernel_vs_twin_{dname}"] = _vs(prod, "triton", twin_out)
        row[f"err_mma_{dname}"] = math.nan
        if kernels_dir:
            row[f"err_mma_{dname}"] = rel_err(spgemm.multiply(A, dtype=DTYPES[dname], how="mma", device=device,
                                                              kernels_dir=kernels_dir).scipy(), ref)
        row[f"mma_vs_twin_{dname}"] = _vs(prod, "mma", twin_out, kernels_dir) if kernels_dir else math.nan
    timed = DTYPES[p.dtypes[0]]
    if gpu:
        timer = lambda fn: time_cuda(fn, warmup=p.warmup, repeats=p.repeats).median_s  # noqa: E731
    else:
        timer = lambda fn: time_cpu(fn, warmup=1, repeats=p.cpu_repeats).median_s  # noqa: E731
    row.update(_phases(A, timed, how, device, timer, kernels_dir))
    row["t_scipy"] = baselines.scipy_time(A, p.cpu_repeats)
    row["t_graphblas"] = baselines.graphblas_time(gb, A, p.cpu_repeats) if gb is not None else math.nan
    for col in ("t_cusparse_fp32", "t_cusparse_fp64", "t_torch_csr", "ceiling_s", "err_cusparse_fp32"):
        row[col] = math.nan
    if gpu:
        for bits, dt in ((32, np.float32), (64, np.float64)):
            Ag = baselines.cupyx_matrix(A, dt)
            row[f"t_cusparse_fp{bits}"] = baselines.cusparse_time(Ag, p.warmup, p.repeats)
            if bits == 32:
                row["err_cusparse_fp32"] = rel_err((Ag @ Ag).get().astype(np.float64), ref)
            del Ag
        row["t_torch_csr"] = baselines.torch_csr_time(A, p.warmup, p.repeats)
    for base in ("scipy", "graphblas", "cusparse_fp32", "cusparse_fp64", "torch_csr"):
        row[f"speedup_{base}"] = row[f"t_{base}"] / row["t_ours"]
    row["speedup_cusparse_fp32_mma"] = row["t_cusparse_fp32"] / row["t_ours_mma"]
    return row


def _vs(prod: spgemm.Product, how: str, twin_out: np.ndarray | None, kernels_dir=None) -> float:
    """max |kernel - twin| / max |twin| of the product's tile products (NaN where the twin was not run)."""
    if twin_out is None:
        return math.nan
    if not twin_out.size:
        return 0.0
    kernel = spgemm.numeric(prod.A, prod.B, prod.pairs, how, kernels_dir).cpu().numpy()
    return float(np.abs(kernel - twin_out).max() / max(float(np.abs(twin_out).max()), 1e-30))


def summarize(df: pd.DataFrame, p: SpgemmParams) -> dict[str, float]:
    """The claim's metrics over the matrices in their natural order; the RCM variants (order "rcm")
    apart: their geomean speedup over cuSPARSE fp32, mean fill and the median ratio of their fill to
    their natural order's (a variant named <matrix>_rcm beside it)."""
    rcm = df[df["order"] == "rcm"] if "order" in df else df.iloc[:0]
    extra: dict[str, float] = {}
    if len(rcm):
        extra = {"n_rcm": len(rcm), "geomean_speedup_cusparse_fp32_rcm": geomean(rcm["speedup_cusparse_fp32"]),
                 "mean_fill_rcm": float(rcm["fill"].mean())}
        if ratios := rcm_over_natural(df["matrix"], df["order"], df["fill"]):
            extra["median_fill_rcm_over_natural"] = float(np.median(ratios))
    return _summarize(df.drop(rcm.index), p) | extra


def _summarize(df: pd.DataFrame, p: SpgemmParams) -> dict[str, float]:
    dense = df[df["fill"] >= p.fill_threshold]
    m: dict[str, float] = {"n_matrices": len(df), "n_fill_ge_threshold": len(dense),
                           "n_pattern_mismatch": int((~df[[c for c in df if c.startswith("pattern_ok_")]].all(axis=1)).sum()),
                           "mean_fill": float(df["fill"].mean())}
    for dname in p.dtypes:
        m[f"max_rel_err_{dname}"] = float(df[f"err_{dname}"].max())
        m[f"max_rel_err_mma_{dname}"] = float(df[f"err_mma_{dname}"].max())
        for kernel in ("kernel", "mma"):
            checked = df[f"{kernel}_vs_twin_{dname}"].dropna()
            m[f"max_{kernel}_vs_twin_{dname}"] = float(checked.max()) if len(checked) else math.nan
    m["max_rel_err"] = m[f"max_rel_err_{p.dtypes[0]}"]
    for base in ("scipy", "graphblas", "cusparse_fp32", "cusparse_fp64", "torch_csr"):
        m[f"geomean_speedup_{base}"] = geomean(df[f"speedup_{base}"])
    m["geomean_speedup_cusparse_fp32_fill25"] = geomean(dense["speedup_cusparse_fp32"])
    m["geomean_speedup_cusparse_fp32_mma"] = geomean(df["speedup_cusparse_fp32_mma"])
    m["geomean_speedup_cusparse_fp32_mma_fill25"] = geomean(dense["speedup_cusparse_fp32_mma"])
    m["min_speedup_cusparse_fp32"] = float(df["speedup_cusparse_fp32"].min())
    m["geomean_ceiling_speedup"] = geomean(df["ceiling_speedup"])
    m["geomean_ceiling_speedup_fill25"] = geomean(dense["ceiling_speedup"])
    m["geomean_numeric_of_ceiling"] = geomean(df["ceiling_s"] / df["t_numeric"])
    m["geomean_numeric_share"] = geomean(df["t_numeric"] / df["t_ours"])
    return m


@experiment(params=SpgemmParams, needs_gpu=False)
def spgemm_bench(p: SpgemmParams, ctx: Context) -> Result:
    """A @ A per matrix: our phases, errors, tile fill, the baselines present and the ceiling."""
    unknown = [d for d in p.dtypes if d not in DTYPES]
    if unknown or not p.dtypes:
        raise ValueError(f"dtypes must be a non-empty list of {sorted(DTYPES)}, got {p.dtypes}")
    gpu = ctx.gpus > 0 and torch.cuda.is_available()
    gb, gb_reason = baselines.graphblas()
    threads = torch.get_num_threads()
    if p.cpu_threads:
        torch.set_num_threads(p.cpu_threads)
        if gb is not None:
            gb.ss.config["nthreads"] = p.cpu_threads
    try:
        df, tc_rate = _run(p, ctx, gpu, gb, _kernels_dir(ctx, gpu))
    finally:
        torch.set_num_threads(threads)
    tags = {"numeric": "Triton kernel on the GPU (CUDA events)" if gpu else
            "NumPy twin on the CPU (the Triton kernel checked in the interpreter, untimed)",
            "source": "every matrix is generated (repro.data.matrices); the paper's SuiteSparse set is not downloadable here"}
    metrics = summarize(df, p)
    metrics["tc_tflops"] = tc_rate / 1e12
    if not gpu:
        for key in ("geomean_speedup_cusparse_fp32", "geomean_speedup_cusparse_fp32_fill25", "geomean_speedup_cusparse_fp64",
                    "geomean_speedup_torch_csr", "min_speedup_cusparse_fp32", "geomean_ceiling_speedup",
                    "geomean_ceiling_speedup_fill25", "geomean_numeric_of_ceiling", "tc_tflops",
                    *(["geomean_speedup_cusparse_fp32_rcm"] if "geomean_speedup_cusparse_fp32_rcm" in metrics else [])):
            tags[key] = "NaN: a GPU quantity (cuSPARSE, torch CSR, tensor cores); this run had no GPU"
    if df["t_numeric_mma"].isna().all():
        why = ("NaN: the mma.sync kernel runs on a GPU only" if not gpu else
               "NaN: no tsparse_mma cubin in this run's kernels folder (python -m repro.kernels.build)")
        for key in [k for k in metrics if "mma" in k]:
            tags[key] = why
    if gb is None:
        metrics["geomean_speedup_graphblas"] = math.nan
        tags["geomean_speedup_graphblas"] = f"NaN: {gb_reason}"
    if metrics["n_fill_ge_threshold"] == 0:
        tags["geomean_speedup_cusparse_fp32_fill25"] = f"NaN: no matrix has mean tile fill >= {p.fill_threshold}"
    return Result(metrics=metrics, tables={"matrices": df}, tags=tags)


def _kernels_dir(ctx: Context, gpu: bool):
    """The folder holding tsparse_mma.cubin, when this run is on a GPU and the build made it."""
    if not gpu:
        return None
    from repro import kernels

    folder = Path(ctx.inputs.get("kernels") or kernels.default_dir())
    return folder if (folder / "tsparse_mma.cubin").exists() else None


def _run(p: SpgemmParams, ctx: Context, gpu: bool, gb, kernels_dir) -> tuple[pd.DataFrame, float]:
    tc_rate = baselines.tensor_core_flops(p.tc_gemm_n, p.warmup, p.repeats) if gpu else math.nan
    rows = []
    for spec in ctx.progress(specs(p.matrices), desc="tsparse"):
        A = check_square(spec.build(), spec.name)
        row = measure(spec.name, spec.kind, A, p, gpu, gb, kernels_dir)
        row["order"] = spec.reorder  # "rcm": a reordered variant, summarised apart (summarize)
        row["ceiling_s"] = row["pairs"] * PAIR_FLOPS / tc_rate
        row["ceiling_speedup"] = row["t_cusparse_fp32"] / row["ceiling_s"]
        log.info("%s: fill %.3f, %d pairs, ours %.3g s", spec.name, row["fill"], row["pairs"], row["t_ours"])
        rows.append(row)
        if gpu:
            torch.cuda.empty_cache()
    return pd.DataFrame(rows), tc_rate
