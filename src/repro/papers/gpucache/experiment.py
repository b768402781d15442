"""The graph model for GPU caching: its predictions (``model``, a CPU step) and the real run of the
kernels in every partitioner's order (``reorder``: the CPU at smoke scale, CUDA on the H200).

Per input and partitioner (k = ceil(tasks / tasks_per_block) parts, one per thread block):
- ``rf``: replication factor; ``block_loads`` / ``wave_loads``: predicted cache-line loads of one
  per-vertex array (see cache_model.py); ``balance``: largest block / mean; ``partition_s``.
- reorder only: ``time_s`` (median of repeats; CUDA events on the GPU, perf_counter on the CPU),
  ``speedup`` = default order's time / this order's time, ``err`` = max |out - twin| / max |twin|
  against the float64 NumPy twin, and ``larger_than_cache`` (per-vertex data read + written above
  the cache the device has: the GPU's L2, the CPU's per-core L2).

The model experiment also times the edge partition of a 10^6-task input (``timing_input``) and
checks that the same seed gives the same partition.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.gpucache import cache_model, edge_kernels, partition, schedule, taskgraph
from repro.papers.gpucache.taskgraph import InputSpec, TaskGraph


def _spec(name, graph, size, kernel="spmv"):
    return InputSpec(name=name, graph=graph, size=size, kernel=kernel)


@dataclass
class ModelParams:
    inputs: list[InputSpec] = field(default_factory=lambda: [
        _spec("mesh2d", "mesh2d", 300), _spec("powerlaw", "powerlaw", 50_000),
        _spec("delaunay", "delaunay2d", 60_000, "flux"), _spec("nbody", "nbody", 60_000, "pair"),
        _spec("airfoil", "pyamg:airfoil", 0)])
    partitioners: list[str] = field(default_factory=lambda: list(partition.PARTITIONERS))
    tasks_per_block: int = 1024     # tasks of one thread block (256 threads x 4)
    hypergraph_max_tasks: int = 300_000  # Mt-KaHyPar runs only on inputs with at most this many tasks
    threads: int = 2                # Mt-KaHyPar threads
    line_bytes: int = 32            # cache granule of the loads (an H200 L2 sector)
    wave_blocks: int = 1056         # blocks resident at once: 132 SMs x 8 blocks of 256 threads (H200)
    timing_input: InputSpec = field(default_factory=lambda: _spec("mesh2d_1m", "mesh2d", 708))  # 1.0e6 tasks
    seed: int = 0                   # partitioner seed


@dataclass
class ReorderParams(ModelParams):
    warmup: int = 3
    repeats: int = 20
    workers: int = 1                # processes partitioning one input at once (fork; 1 = in process)
    cache_bytes: int = 0            # the cache to exceed; 0 = the device's (GPU L2, or the CPU's per-core L2)


def check_params(p: ModelParams) -> None:
    for name in p.partitioners:
        if name not in partition.PARTITIONERS:
            raise ValueError(f"partitioners: unknown {name!r}; known: {', '.join(partition.PARTITIONERS)}")
    if "default" not in p.partitioners or "edge" not in p.partitioners:
        raise ValueError("partitioners must include 'default' and 'edge' (the claim compares them)")
    for spec in p.inputs:
        taskgraph.check_spec(spec)
    names = [s.name for s in p.inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"inputs: names must be unique, got {names}")
    for key in ("tasks_per_block", "line_bytes", "wave_blocks", "threads"):
        if getattr(p, key) < 1:
            raise ValueError(f"{key} must be >= 1, got {getattr(p, key)}")


_GRAPH: dict[str, TaskGraph] = {}  # the graph the forked partition workers read


def _partition_worker(args) -> partition.Partition:
    method, k, seed, threads = args
    return partition.partition(_GRAPH["g"], method, k, seed=seed, threads=threads)


def partitions(g: TaskGraph, methods: list[str], k: int, p: ModelParams, workers: int) -> list[partition.Partition]:
    """Every method's partition of g; with workers > 1 in forked processes at once."""
    jobs = [(m, k, p.seed, p.threads) for m in methods]
    if workers <= 1 or len(jobs) == 1:
        return [partition.partition(g, m, k, seed=p.seed, threads=p.threads) for m, k, _, _ in jobs]
    _GRAPH["g"] = g
    try:
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_partition_worker, jobs))
    finally:
        _GRAPH.clear()


def plan(spec: InputSpec, p: ModelParams, workers: int = 1):
    """The input's graph, its schedules and one model row per partitioner."""
    g = taskgraph.build(spec)
    k = max(1, math.ceil(g.m / p.tasks_per_block))
    methods = [m for m in p.partitioners if m != "hypergraph" or g.m <= p.hypergraph_max_tasks]
    elem = taskgraph.vertex_bytes(spec) // 2  # one array's bytes per vertex: spmm 4F
    rows, schedules = [], {}
    for part in partitions(g, methods, k, p, workers):
        s = schedule.from_partition(g, part)
        schedules[part.method] = s
        rows.append(dict(
            input=spec.name, graph=spec.graph, kernel=spec.kernel, n=g.n, m=g.m, k=k, method=part.method,
            status="ok", rf=cache_model.replication_factor(g.u, g.v, part.parts, g.n),
            **cache_model.predicted_loads(s, elem, p.line_bytes, p.wave_blocks),
            balance=cache_model.block_balance(s), partition_s=part.seconds,
            data_bytes=g.n * taskgraph.vertex_bytes(spec)))
    for m in sorted(set(p.partitioners) - set(methods)):
        rows.append(dict(input=spec.name, graph=spec.graph, kernel=spec.kernel, n=g.n, m=g.m, k=k, method=m,
                         status=f"skipped: {g.m} tasks > hypergraph_max_tasks {p.hypergraph_max_tasks}"))
    return g, schedules, rows


def ratio_metrics(df: pd.DataFrame, column: str, num: str, den: str, prefix: str) -> dict[str, float]:
    """max / min / geomean over inputs of column[num] / column[den] (inputs with both)."""
    wide = df[df["status"] == "ok"].pivot(index="input", columns="method", values=column)
    if num not in wide or den not in wide:
        return {}
    r = (wide[num] / wide[den]).dropna()
    if r.empty:
        return {}
    return {f"{prefix}_max": float(r.max()), f"{prefix}_min": float(r.min()),
            f"{prefix}_geomean": float(math.exp(statistics.fmean(np.log(r))))}


@experiment(params=ModelParams, needs_gpu=False)
def model(p: ModelParams, ctx: Context) -> Result:
    """Replication factor, predicted loads and partition time of every partitioner on every input."""
    check_params(p)
    rows = []
    for spec in ctx.progress(p.inputs, desc="gpucache model"):
        rows += plan(spec, p)[2]
    df = pd.DataFrame(rows)
    metrics = {**ratio_metrics(df, "rf", "edge", "vertex", "rf_edge_over_vertex"),
               **ratio_metrics(df, "rf", "edge", "default", "rf_edge_over_default"),
               **ratio_metrics(df, "block_loads", "edge", "default", "block_loads_edge_over_default")}
    if "hypergraph" in p.partitioners:
        metrics.update(ratio_metrics(df, "rf", "edge", "hypergraph", "rf_edge_over_hypergraph"))
        metrics.update(ratio_metrics(df, "partition_s", "hypergraph", "edge", "time_hypergraph_over_edge"))
    g = taskgraph.build(p.timing_input)
    k = math.ceil(g.m / p.tasks_per_block)
    first = partition.partition(g, "edge", k, seed=p.seed)
    again = partition.partition(g, "edge", k, seed=p.seed)
    vertex = [partition.partition(g, "vertex", k, seed=p.seed).parts for _ in range(2)]
    metrics.update(edge_partition_s_timing=first.seconds, timing_input_tasks=g.m,
                   same_seed_same_partition=float(np.array_equal(first.parts, again.parts)
                                                  and np.array_equal(*vertex)),
                   n_inputs=len(p.inputs))
    return Result(metrics=metrics, tables={"partitions": df},
                  tags={"cpu_threads": str(os.cpu_count()), "timing_input": f"{p.timing_input.graph} {p.timing_input.size}"})


def device_cache_bytes(device: str) -> tuple[int, str]:
    """The cache an input must exceed: the GPU's L2, or the CPU's per-core L2 (sysfs)."""
    if device == "cuda":
        import torch

        props = torch.cuda.get_device_properties(0)
        return int(props.L2_cache_size), f"{props.name} L2"
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        if (index / "level").read_text().strip() == "2":
            text = (index / "size").read_text().strip()
            return int(text[:-1]) * 1024 if text.endswith("K") else int(text), "CPU per-core L2"
    return 2 << 20, "CPU L2 (assumed 2 MiB: sysfs has no level-2 cache)"


@experiment(params=ReorderParams, needs_gpu=False)
def reorder(p: ReorderParams, ctx: Context) -> Result:
    """Each input's kernel run in every partitioner's schedule, timed side by side."""
    check_params(p)
    import torch

    from repro.timing import time_cpu

    cache, cache_name = (p.cache_bytes, "cache_bytes parameter") if p.cache_bytes else device_cache_bytes(ctx.device)
    planned = [(spec, *plan(spec, p, p.workers)) for spec in ctx.progress(p.inputs, desc="gpucache plan")]
    kernels_dir = Path(ctx.inputs["kernels"]) if "kernels" in ctx.inputs else None
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for spec, g, schedules, model_rows in ctx.progress(planned, desc="gpucache run"):
            data = edge_kernels.vertex_data(spec.kernel, g, p.seed, spec.width)
            for row in model_rows:
                if row["status"] != "ok":
                    rows.append(row)
                    continue
                s = schedules[row["method"]]
                if ctx.device == "cuda":
                    run = edge_kernels.CudaRun(spec.kernel, s, data, kernels_dir)
                    t, t_min = run.time(p.warmup, p.repeats)
                    out = run.result()
                    del run
                else:
                    run = edge_kernels.TorchRun(spec.kernel, s, data)
                    timing = time_cpu(run, warmup=min(p.warmup, 1), repeats=p.repeats)
                    t, t_min = timing.median_s, timing.min_s
                    out = run().numpy()
                ref = edge_kernels.schedule_reference(spec.kernel, s, data)
                err = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))
                rows.append(dict(row, time_s=t, time_min_s=t_min, err=err, ok=err <= 1e-4,
                                 larger_than_cache=row["data_bytes"] > cache))
    finally:
        torch.set_num_threads(prev_threads)
    df = pd.DataFrame(rows)
    ok = df["status"] == "ok"
    default_t = df[ok & (df["method"] == "default")].set_index("input")["time_s"]
    df.loc[ok, "speedup"] = default_t.reindex(df.loc[ok, "input"]).to_numpy() / df.loc[ok, "time_s"]
    return Result(metrics=summarize(df), tables={"runs": df},
                  tags={"cache": f"{cache_name}: {cache} bytes", "device": ctx.device,
                        "timing": "CUDA events, median" if ctx.device == "cuda" else "perf_counter, median, 1 thread"})


def summarize(df: pd.DataFrame) -> dict[str, float]:
    ok = df[df["status"] == "ok"]
    edge = ok[ok["method"] == "edge"]
    large = edge[edge["larger_than_cache"].astype(bool)]
    metrics = {"n_inputs": float(ok["input"].nunique()), "n_large": float(len(large)),
               "n_incorrect": float((~ok["ok"].astype(bool)).sum()), "max_err": float(ok["err"].max())}
    if len(large):
        metrics["min_speedup_edge_vs_default_large"] = float(large["speedup"].min())
        metrics["geomean_speedup_edge_vs_default_large"] = float(math.exp(np.log(large["speedup"]).mean()))
    for method in sorted(set(ok["method"]) - {"default", "edge"}):
        other = ok[ok["method"] == method].set_index("input")["time_s"]
        r = other.reindex(edge["input"]).to_numpy() / edge["time_s"].to_numpy()
        r = r[np.isfinite(r)]
        if len(r):
            metrics[f"geomean_speedup_edge_vs_{method}"] = float(math.exp(np.log(r).mean()))
    # the model beside the run: per input, the rank correlation of predicted loads and measured time
    for col in ("block_loads", "wave_loads"):
        corr = [grp["time_s"].corr(grp[col], method="spearman") for _, grp in ok.groupby("input")
                if grp["time_s"].nunique() > 1 and grp[col].nunique() > 1]
        corr = [c for c in corr if np.isfinite(c)]
        if corr:
            metrics[f"mean_rank_corr_time_{col}"] = float(np.mean(corr))
    return metrics
