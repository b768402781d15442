"""VectorMesh: ZigZag's access counts of baseline accelerators (``baselines``) on a GEMM and a
convolution, the workload classes of the paper's claims. Context for the pending claims vmesh.gb and
vmesh.dram: the TEU mesh's own counts need its sizes (PEs per TEU, buffers, mesh), which no source
we could read states (docs/papers/vectormesh.md)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.vectormesh import accesses

WORKLOADS = {"gemm": accesses.gemm, "conv": accesses.conv}


@dataclass
class BaselinesParams:
    # [ZigZag hardware description, its mapping description], both bundled with zigzag-dse
    accelerators: list[list[str]] = field(default_factory=lambda: [["tpu_like", "tpu_like"], ["eyeriss_like", "default"]])
    # each {name, kind: gemm|conv, and that kind's sizes (accesses.gemm / accesses.conv arguments)}
    workloads: list[dict] = field(default_factory=lambda: [
        {"name": "gemm_256", "kind": "gemm", "m": 256, "k": 256, "n": 256},
        {"name": "conv3x3_64", "kind": "conv", "k": 64, "c": 64, "oy": 56, "ox": 56, "fy": 3, "fx": 3}])


def _layer(spec: dict) -> tuple[str, dict]:
    spec = dict(spec)
    name, kind = spec.pop("name", "?"), spec.pop("kind", None)
    if kind not in WORKLOADS:
        raise ValueError(f"workloads.{name}.kind: {kind!r}; known: {', '.join(WORKLOADS)}")
    try:
        return name, WORKLOADS[kind](**spec)
    except TypeError as exc:
        raise ValueError(f"workloads.{name}: {exc}") from None


@experiment(params=BaselinesParams, needs_gpu=False)
def baselines(p: BaselinesParams, ctx: Context) -> Result:
    """Per (workload, accelerator): every operand's accesses at every memory level (accesses.csv) and
    the reads out of the outermost level (DRAM) and out of the largest on-chip one (the global buffer)."""
    layers = dict(_layer(spec) for spec in p.workloads)
    for pair in p.accelerators:
        if len(pair) != 2:
            raise ValueError(f"accelerators: each entry is [hardware, mapping], got {pair!r}")
        accesses.bundled("hardware", pair[0]), accesses.bundled("mapping", pair[1])
    rows, summary = [], []
    grid = [(w, hw, mp) for w in layers for hw, mp in p.accelerators]
    with tempfile.TemporaryDirectory() as dump:  # ZigZag's own dumps (pickles, plots): not kept
        results = [(w, hw, *accesses.accesses(layers[w], hw, mp, Path(dump) / f"{w}_{hw}"))
                   for w, hw, mp in ctx.progress(grid, desc="zigzag")]
    for workload, hw, got, cost in results:
        rows += [dict(workload=workload, accelerator=hw, **r) for r in got]
        df, gb = pd.DataFrame(got), accesses.global_buffer(got)
        summary.append(dict(workload=workload, accelerator=hw, **cost, global_buffer=gb,
                            dram_reads=int(df.loc[df.depth == 0, "rd_out_to_low"].sum()),
                            gb_reads=int(df.loc[df.level == gb, "rd_out_to_low"].sum())))
    table = pd.DataFrame(summary)
    metrics = {f"{r.accelerator}_{r.workload}_{k}": float(getattr(r, k))
               for r in table.itertuples() for k in ("gb_reads", "dram_reads")}
    return Result(metrics=metrics, tables={"accesses": pd.DataFrame(rows), "summary": table},
                  tags={"tool": "zigzag-dse " + _version(), "kind": "model"})


def _version() -> str:
    from importlib.metadata import version

    return version("zigzag-dse")
