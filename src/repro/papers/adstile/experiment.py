"""ADS-Tile's measurement: each DNN's latency against the number of SMs it may use (CUDA green
contexts on the GPU; at smoke scale on the CPU, intra-op threads stand in for SMs), and co-location
interference: a DNN alone vs sharing all SMs with another DNN running at once, and vs the two in
halves (overlapping where the partition cannot make them disjoint: ``halves_disjoint``). Imports no SimPy (the GPU machine has none); the model is schedule.py.

curves.csv      dnn, units, latency_s
colocation.csv  a, b, halves_disjoint, alone_full_s, shared_s, alone_half_s, partitioned_s, shared_slowdown, partition_slowdown
sizes.csv       dnn, weight_bytes, feature_bytes (what a reallocation moves)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment


@dataclass
class CurvesParams:
    dnns: list[str] = field(default_factory=lambda: ["detection", "segmentation", "tracking", "planning"])
    width: int = 32          # base channel width of the DNNs (networks.py)
    image: int = 384         # camera / BEV image side
    batch: int = 6           # cameras per frame
    tokens: int = 256        # tracks + detections (tracking), scene tokens (planning)
    units: list[int] = field(default_factory=list)  # [] = every multiple of the partition granularity, and the whole device
    iters: int = 5           # calls per timed group
    repeats: int = 5         # timed groups (median)
    pairs: list[list[str]] = field(default_factory=lambda: [["detection", "segmentation"], ["planning", "detection"],
                                                            ["tracking", "segmentation"]])


def unit_grid(p: CurvesParams, partition) -> list[int]:
    if p.units:
        return sorted({min(int(k), partition.units) for k in p.units})
    g = partition.granularity
    return sorted(set(range(g, partition.units + 1, g)) | {partition.units})


@experiment(params=CurvesParams, needs_gpu=False)
def curves(p: CurvesParams, ctx: Context) -> Result:
    """Latency against SMs (threads on the CPU) per DNN, and co-location slowdowns."""
    import torch

    from repro.papers.adstile import measure, networks
    from repro.papers.adstile.partition import SmPartition, ThreadPartition

    for name in p.dnns:
        if name not in networks.DNNS:
            raise ValueError(f"dnns: unknown DNN {name!r}; known: {', '.join(networks.DNNS)}")
    for a, b in p.pairs:
        if a not in p.dnns or b not in p.dnns:
            raise ValueError(f"pairs: {a}, {b}: both must be among dnns ({', '.join(p.dnns)})")
    torch.manual_seed(ctx.seed)
    partition = SmPartition(torch.cuda.current_device()) if ctx.device == "cuda" else ThreadPartition()
    fns, sizes = {}, []
    for name in p.dnns:
        model, x = networks.build(name, p.width, p.image, p.batch, p.tokens, ctx.device)
        fns[name] = (lambda m, t: lambda: m(t))(model, x)
        sizes.append(dict(dnn=name, **dict(zip(("weight_bytes", "feature_bytes"), networks.sizes(model, x)))))
    units = unit_grid(p, partition)
    rows = measure.curve(fns, partition, units, p.iters, p.repeats, progress=ctx.progress)
    alone = {(r["dnn"], r["units"]): r["latency_s"] for r in rows}
    co = measure.colocation(fns, partition, [tuple(x) for x in p.pairs], alone, p.iters, p.repeats)
    df, cdf = pd.DataFrame(rows), pd.DataFrame(co)
    metrics = {"units_total": float(partition.units), "points": float(len(df)),
               "shared_slowdown_mean": float(cdf["shared_slowdown"].mean()) if len(cdf) else float("nan"),
               "partition_slowdown_mean": float(cdf["partition_slowdown"].mean()) if len(cdf) else float("nan")}
    for name, d in df.groupby("dnn"):
        d = d.sort_values("units")
        metrics[f"{name}_speedup_full_over_fewest"] = float(d["latency_s"].iloc[0] / d["latency_s"].iloc[-1])
    tags = {"device": ctx.device, "partition": partition.kind, "torch": torch.__version__,
            "partitions_disjoint": str(partition.disjoint).lower()}
    if ctx.device == "cuda":
        from torch.cuda.green_contexts import GreenContext

        tags["green_context_api"] = "Stream()" if hasattr(GreenContext, "Stream") else "set_context()/pop_context()"
        tags["partition_caveat"] = "torch splits each green context from the whole device: the two halves share SMs"
    return Result(metrics=metrics, tables={"curves": df, "colocation": cdf, "sizes": pd.DataFrame(sizes)}, tags=tags)
