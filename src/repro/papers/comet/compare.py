"""compare: cross-arm ratios from the arms' records (inputs uncompressed, fixed_eb, adaptive_eb,
actnn2bit): mem_reduction, vs_actnn, top1_loss; throughput_ratio from inputs.step_bench when given,
else from the arms' records."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from repro import records
from repro.experiment import Context, Result, experiment


@dataclass
class CompareParams:
    ours: str = "adaptive_eb"  # the arm reported as "ours" in the claims (adaptive_eb or fixed_eb)


ARMS = ("uncompressed", "fixed_eb", "adaptive_eb", "actnn2bit")
METHOD_OF = {"uncompressed": "none", "fixed_eb": "fixed", "adaptive_eb": "adaptive", "actnn2bit": "actnn"}


def mem_reduction(base: dict, m: dict) -> float:
    """comet.mem's ratio from two records' metrics: the uncompressed arm's activation memory / an arm's."""
    return base["act_mem_bytes"] / m["act_mem_bytes"]


def top1_loss(base: dict, m: dict) -> float:
    """comet.acc's loss from two records' metrics: the uncompressed arm's final top-1 - an arm's, points."""
    return base["final_top1"] - m["final_top1"]


@experiment(params=CompareParams, needs_gpu=False)
def compare(p: CompareParams, ctx: Context) -> Result:
    if p.ours not in ("fixed_eb", "adaptive_eb"):
        raise ValueError(f"ours must be fixed_eb or adaptive_eb, got {p.ours!r}")
    arms = {}
    for name in ARMS:
        if name not in ctx.inputs:
            raise records.RecordError(f"inputs.{name} is missing: pass the {name} arm's record.json")
        arms[name] = records.read(ctx.inputs[name])["metrics"]
    base, ours, actnn = arms["uncompressed"], arms[p.ours], arms["actnn2bit"]

    def reduction(m):
        return mem_reduction(base, m)

    arm_speed = ours["images_per_s"] / base["images_per_s"]
    if "step_bench" in ctx.inputs:
        bench = records.read(ctx.inputs["step_bench"])["metrics"]
        speed, speed_from = bench[f"speed_ratio_{METHOD_OF[p.ours]}"], "step_bench (side by side, one process)"
    else:
        speed, speed_from = arm_speed, "the arms' records (each arm's own run)"
    metrics = dict(
        mem_reduction=reduction(ours),
        vs_actnn=reduction(ours) / reduction(actnn),
        top1_loss=top1_loss(base, ours),
        throughput_ratio=speed,
        throughput_ratio_arm_runs=arm_speed,
        peak_reduction=base["peak_mem_bytes"] / ours["peak_mem_bytes"],
        actnn_mem_reduction=reduction(actnn),
        actnn_top1_loss=top1_loss(base, actnn),
        top1_vs_actnn=ours["final_top1"] - actnn["final_top1"],
    )
    for name in ("fixed_eb", "adaptive_eb"):
        metrics[f"mem_reduction_{name}"] = reduction(arms[name])
        metrics[f"top1_loss_{name}"] = top1_loss(base, arms[name])
    rows = [dict(arm=name, act_mem_bytes=m["act_mem_bytes"], act_ratio=m.get("act_ratio"),
                 mem_reduction=reduction(m), final_top1=m["final_top1"], images_per_s=m["images_per_s"],
                 peak_mem_bytes=m["peak_mem_bytes"], step_peak_bytes=m.get("step_peak_bytes"))
            for name, m in arms.items()]
    tags = dict(ours=p.ours, throughput_ratio=speed_from, mem_reduction="activation memory of the uncompressed arm / ours (probe step: CUDA "
                                           "allocated after forward - before on a GPU, accounted bytes on the CPU)")
    return Result(metrics=metrics, tables={"arms": pd.DataFrame(rows)}, tags=tags)
