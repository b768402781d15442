"""The single-GPU benchmark: cuSPARSE against our level-set and sync-free kernels, matrix by
matrix, analysis and solve timed apart (claim sptrsv.syncfree_speedup).

Per matrix, in one run side by side on the same uploaded matrix and right-hand side: each
solver's analysis (cuSPARSE's and the sync-free counts on the GPU by CUDA events, median of
``analysis_repeats``; the levels of the level-set and level-ordered sync-free solvers on the
host, once, by the wall clock, as they run there) and its solve (CUDA events, median of up to
``repeats``, see :func:`solve_time`). Every solver's x is checked after timing: its backward error max|Lx - b| / max(|L||x| + |b|) and its difference
from cuSPARSE's x, max|x - x_cusparse| / max|x_cusparse|, must be within ``tol``.

The ceiling: before the matrices, :func:`hop_latency` measures one dependency passed between two
thread blocks (write, release, flag, acquire-poll; median over ``hop_repeats`` launches of
``hop_rounds`` round trips). A sync-free solve waits for at least one such hop per level, so
``ceiling_ms`` = levels x hop is a floor of its solve time and ``ceiling_speedup`` =
cusparse_solve_ms / ceiling_ms the most any sync-free kernel can reach over cuSPARSE on that matrix.

Columns of the ``points`` table: the matrix's name, family, order ("natural", or "rcm" for a
matrix's reverse Cuthill-McKee variant: repro.data.matrices.rcm), rows, nnz, levels, critical_path;
``hop_us``, ``ceiling_ms``, ``ceiling_speedup``; per solver ``<s>_analysis_ms``, ``<s>_solve_ms``,
``<s>_backward``, ``<s>_vs_cusparse``; speedups ``speedup_<s>`` = cusparse_solve_ms / <s>_solve_ms
and ``total_speedup_<s>`` with analysis added; ``<s>_over_ceiling`` = <s>_solve_ms / ceiling_ms.
``v2_shared_fraction`` is the share of dependencies inside one 256-row chunk of the level order
(the v2 kernels resolve those in shared memory, below the hop: there the ceiling is not a floor).
``v2_variant`` is the v2 kernel the rule (schedule.v2_variant, by mean row length) picks before
any timing; where both v2 arms ran, ``syncfree_v2`` columns are the picked arm's. ``syncfree_v3``
(the v3 pull kernel, in-warp dependencies in rounds) has its own columns like every solver, so
``speedup_syncfree_v3`` sits beside ``speedup_syncfree_v2`` and the summary's
``geomean_speedup_syncfree_v3_deep`` beside ``geomean_speedup_syncfree_v2_deep``; ``syncfree_v4`` (v3 with
each row's in-warp dependencies cached in shared memory) likewise beside v3.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from repro.papers.sptrsv import schedule
from repro.data.matrices import MatrixSpec, rcm_over_natural
from repro.papers.sptrsv.solve import THREADS

OURS = ("levelset", "syncfree_warp", "syncfree_thread", "syncfree_levels", "syncfree_push", "syncfree_pull",
        "syncfree_v2", "syncfree_v3", "syncfree_v4")
SYNCFREE = ("syncfree_warp", "syncfree_thread", "syncfree_levels", "syncfree_push", "syncfree_pull", "syncfree_v3",
            "syncfree_v4")


def backward_error(L_gpu, x, b) -> float:
    """max|L x - b| / max(|L| |x| + |b|), on the GPU."""
    import cupy

    r = L_gpu @ x - b
    scale = abs(L_gpu) @ cupy.abs(x) + cupy.abs(b)
    return float(cupy.abs(r).max() / max(float(scale.max()), 1e-300))


def solve_time(solve, p) -> float:
    """Median CUDA-event time of solve(): one timed warm-up call sizes the repeats to about
    ``target_s`` of GPU time (between ``min_repeats`` and ``repeats``), so slow solvers cost
    seconds, not minutes."""
    from repro.timing import time_cuda

    first = time_cuda(solve, warmup=p.warmup, repeats=1).median_s
    repeats = max(p.min_repeats, min(p.repeats, int(p.target_s / max(first, 1e-9))))
    return time_cuda(solve, warmup=0, repeats=repeats).median_s


def hop_latency(kernels_dir, rounds: int, repeats: int, device: int = 0) -> dict[str, float]:
    """One dependency passed between two thread blocks (sptrsv.cu ``hop_latency``), in us: the
    median, min and max over ``repeats`` launches of ``rounds`` round trips (2 hops each)."""
    import cupy

    from repro import kernels
    from repro.papers.sptrsv.solve import SPIN_LIMIT_CYCLES, STEM

    if rounds < 1 or repeats < 1:
        raise ValueError(f"hop_rounds and hop_repeats must be >= 1, got {rounds}, {repeats}")
    fn = kernels.function(STEM, "hop_latency", device, kernels_dir)
    hops = []
    with cupy.cuda.Device(device):
        payload = cupy.zeros(48, dtype=np.float64)
        elapsed = cupy.zeros(1, dtype=np.int64)
        stalled = cupy.full(1, -1, dtype=np.int32)
        for _ in range(repeats + 1):  # the first launch loads the module and warms the lines
            flags = cupy.zeros(64, dtype=np.int32)
            fn((2, 1, 1), (32, 1, 1), (payload, flags, np.int32(rounds), elapsed, np.int64(SPIN_LIMIT_CYCLES),
                                        stalled))
            cupy.cuda.runtime.deviceSynchronize()
            if int(stalled.get()[0]) >= 0 or float(payload[32].get()) != 2.0 * rounds:
                raise RuntimeError(f"hop_latency: the ping-pong lost a hop (stalled at round {int(stalled.get()[0])}, "
                                   f"last value {float(payload[32].get())}, want {2.0 * rounds})")
            hops.append(float(elapsed.get()[0]) / (2 * rounds) / 1e3)
    hops = hops[1:]
    return {"hop_us": float(np.median(hops)), "hop_us_min": float(min(hops)), "hop_us_max": float(max(hops))}


def measure(spec: MatrixSpec, p, kernels_dir, seed: int, log, hop_us: float = math.nan) -> dict:
    """Build, analyse, time and check one matrix; returns its row of the points table."""
    import cupy
    import cupyx.scipy.sparse as csp

    from repro.papers.sptrsv.solve import solvers, upload
    from repro.timing import time_cuda

    L = spec.build()
    analysis = schedule.analyse(L)
    row = {"matrix": spec.name, "family": spec.kind, "order": spec.reorder, **schedule.stats(L, analysis)}
    row["hop_us"] = hop_us
    row["ceiling_ms"] = row["levels"] * hop_us / 1e3
    row["v2_variant"] = schedule.v2_variant(row["nnz_per_row"])
    row["v2_shared_fraction"] = schedule.shared_fraction(L, schedule.level_order(analysis.level)[2], THREADS)
    m = upload(L)
    b = cupy.asarray(np.random.default_rng(seed).standard_normal(m.n))
    L_gpu = csp.csr_matrix((m.csr[2], m.csr[1], m.csr[0]), shape=(m.n, m.n))
    made = solvers(m, b, kernels_dir, methods=tuple(p.methods))
    for name, s in made.items():
        if name == "levelset" or getattr(s, "host_analysis", False):
            t0 = time.perf_counter()
            s.analyse()
            cupy.cuda.runtime.deviceSynchronize()
            row[f"{name}_analysis_ms"] = (time.perf_counter() - t0) * 1e3
        else:
            row[f"{name}_analysis_ms"] = time_cuda(s.analyse, warmup=1, repeats=p.analysis_repeats).median_s * 1e3
        row[f"{name}_solve_ms"] = solve_time(s.solve, p) * 1e3
    for name, s in made.items():  # check after all timing, each from a fresh solve
        s.x.fill(math.nan)
        s.solve()
        if hasattr(s, "check"):
            s.check()
        row[f"{name}_backward"] = backward_error(L_gpu, s.x, b)
    if "cusparse" in made:
        ref = made["cusparse"].x
        scale = float(cupy.abs(ref).max())
        for name, s in made.items():
            row[f"{name}_vs_cusparse"] = float(cupy.abs(s.x - ref).max()) / scale
            row[f"speedup_{name}"] = row["cusparse_solve_ms"] / row[f"{name}_solve_ms"]
            row[f"{name}_over_ceiling"] = row[f"{name}_solve_ms"] / row["ceiling_ms"]
            row[f"total_speedup_{name}"] = ((row["cusparse_analysis_ms"] + row["cusparse_solve_ms"])
                                            / (row[f"{name}_analysis_ms"] + row[f"{name}_solve_ms"]))
        row["ceiling_speedup"] = row["cusparse_solve_ms"] / row["ceiling_ms"]
        if {"syncfree_push", "syncfree_pull"} <= made.keys():
            for col in ("analysis_ms", "solve_ms", "over_ceiling"):
                row[f"syncfree_v2_{col}"] = row[f"syncfree_{row['v2_variant']}_{col}"]
            for col in ("speedup", "total_speedup"):
                row[f"{col}_syncfree_v2"] = row[f"{col}_syncfree_{row['v2_variant']}"]
        made["cusparse"].close()
    errs = [row[k] for k in row if k.endswith(("_backward", "_vs_cusparse"))]
    row["ok"] = bool(all(np.isfinite(errs)) and max(errs) <= p.tol)
    log.info("%s: %d rows, %d levels; solve ms %s", spec.name, row["rows"], row["levels"],
             ", ".join(f"{n} {row[n + '_solve_ms']:.3f}" for n in made))
    del made, m, L_gpu
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def geomean(xs) -> float:
    xs = [float(x) for x in xs]
    return float(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else math.nan


def summarize(df: pd.DataFrame) -> dict[str, float]:
    """Geomean and worst speedups over all matrices and over the generated deep-chain ones in their
    natural order (the claim's set), and the ceiling's (levels x hop) speedup over cuSPARSE; the RCM
    variants apart (``*_rcm``: the best sync-free kernel and the ceiling over them, and the median
    ratio of their levels to their natural order's)."""
    metrics: dict[str, float] = {"n_matrices": len(df), "n_incorrect": int((~df["ok"].astype(bool)).sum())}
    natural = df["order"] != "rcm" if "order" in df else pd.Series(True, index=df.index)
    deep = df[(df["family"] != "gallery") & natural]
    rcm = df[~natural]
    sync = [f"speedup_{c}" for c in SYNCFREE if f"speedup_{c}" in df]
    if len(rcm):
        metrics["n_rcm"] = len(rcm)
        if sync:
            metrics["geomean_speedup_best_syncfree_rcm"] = geomean(rcm[sync].max(axis=1))
        if "ceiling_speedup" in df:
            metrics["geomean_ceiling_speedup_rcm"] = geomean(rcm["ceiling_speedup"])
        ratios = rcm_over_natural(df["matrix"], df["order"], df["levels"])
        if ratios:  # a variant named <matrix>_rcm beside its natural order
            metrics["median_levels_rcm_over_natural"] = float(np.median(ratios))
    for name in OURS:
        col = f"speedup_{name}"
        if col not in df:
            continue
        metrics[f"geomean_{col}"] = geomean(df[col])
        metrics[f"geomean_total_{col}"] = geomean(df[f"total_{col}"])
        if len(deep):
            metrics[f"geomean_{col}_deep"] = geomean(deep[col])
            metrics[f"min_{col}_deep"] = float(deep[col].min())
    if sync and len(deep):
        best = deep[sync].max(axis=1)
        metrics["geomean_speedup_best_syncfree_deep"] = geomean(best)
        metrics["min_speedup_best_syncfree_deep"] = float(best.min())
    if "speedup_syncfree_v2" in df and len(deep):
        other = deep["v2_variant"].map({"push": "pull", "pull": "push"})
        unpicked = [deep.at[i, f"speedup_syncfree_{v}"] for i, v in other.items()]
        metrics["v2_rule_right_deep"] = int((deep["speedup_syncfree_v2"] >= unpicked).sum())
    if "ceiling_speedup" in df:
        metrics["hop_us"] = float(df["hop_us"].median())
        metrics["geomean_ceiling_speedup"] = geomean(df["ceiling_speedup"])
        if len(deep):
            metrics["geomean_ceiling_speedup_deep"] = geomean(deep["ceiling_speedup"])
            if sync:
                # how far the best sync-free solve is from its floor (1.0: at the ceiling)
                metrics["geomean_best_syncfree_of_ceiling_deep"] = (metrics["geomean_speedup_best_syncfree_deep"]
                                                                    / metrics["geomean_ceiling_speedup_deep"])
    if "cusparse_analysis_ms" in df:
        ratio = df["cusparse_analysis_ms"] / df["cusparse_solve_ms"]
        metrics["median_cusparse_analysis_over_solve"] = float(ratio.median())
    return metrics
