"""The error-bound sweep, collected (CPU, seconds): every point's final top-1, top-1 loss and memory
reduction against the uncompressed arm, with comet_compare's definitions (:func:`mem_reduction`,
:func:`top1_loss`), the largest reduction among the points within ``max_top1_loss`` (whether
comet.mem's target, ``target_reduction`` at that loss, is reachable by larger bounds) and the least
top-1 loss among the points at ``target_reduction`` or more (comet.acc judged at comet.mem's
reduction). Which runs make up the sweep: :mod:`repro.papers.comet.sweep`.

Inputs: ``uncompressed`` (the reference of every ratio), every point's record (under the point's
name, as :mod:`repro.sweep` passes them) and, optional, ``actnn2bit`` (ActNN 2-bit, shown beside
the sweep).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from repro import records
from repro.papers.comet.compare import mem_reduction, top1_loss
from repro.papers.comet.sweep import EbSweepParams, arm_points
from repro.experiment import Context, Result, experiment
from repro.sweep import read_point

# what every point must share with the uncompressed arm for the ratios to mean anything
SCHEDULE = ("model", "model_kw", "epochs", "batch_size", "n_train", "n_test")


def _metrics(rec: dict) -> dict:
    m = rec["metrics"]
    if "final_top1" not in m or "act_mem_bytes" not in m:
        raise records.RecordError(f"{rec['_dir']}: no final_top1 / act_mem_bytes (status {rec['status']}: "
                                  f"{rec.get('reason')})")
    return m


def _check_schedule(rec: dict, base: dict) -> None:
    """RecordError unless the point trained the uncompressed arm's schedule at its scale."""
    differ = {k: (rec["params"].get(k), base["params"].get(k)) for k in SCHEDULE
              if rec["params"].get(k) != base["params"].get(k)}
    if rec["scale"] != base["scale"]:
        differ["scale"] = (rec["scale"], base["scale"])
    if differ:
        raise records.RecordError(f"{rec['_dir']}: not the uncompressed arm's schedule ({base['_dir']}): "
                                  + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()))


def best_within(table: pd.DataFrame, max_loss: float) -> pd.Series | None:
    """The row with the largest mem_reduction among those with top1_loss <= ``max_loss`` (None if none)."""
    ok = table[table.top1_loss <= max_loss]
    return None if ok.empty else ok.loc[ok.mem_reduction.idxmax()]


@experiment(params=EbSweepParams, needs_gpu=False)
def eb_sweep(p: EbSweepParams, ctx: Context) -> Result:
    if "uncompressed" not in ctx.inputs:
        raise records.RecordError("inputs.uncompressed is missing: pass the uncompressed arm's record.json")
    base_rec = records.read(ctx.inputs["uncompressed"])
    base = _metrics(base_rec)
    rows = []
    for point in arm_points(p):
        rec, source = read_point(ctx, point)
        _check_schedule(rec, base_rec)
        m = _metrics(rec)
        arm = point.labels["arm"]
        rows.append(dict(point=point.name, arm=arm, parameter=point.labels["param"], value=point.labels["value"],
                         final_top1=m["final_top1"], best_top1=m["best_top1"], top1_loss=top1_loss(base, m),
                         mem_reduction=mem_reduction(base, m), act_mem_bytes=m["act_mem_bytes"],
                         act_ratio=m.get("act_ratio"), images_per_s=m["images_per_s"],
                         eb_median=m.get("eb_final_median", math.nan), source=source,
                         record=str(Path(rec["_dir"]) / records.RECORD_NAME)))
    table = pd.DataFrame(rows)
    best = best_within(table, p.max_top1_loss)
    at_target = table[table.mem_reduction >= p.target_reduction]
    # the answer first (the run's log line shows the first few)
    metrics = dict(best_mem_reduction_within_acc=math.nan if best is None else best["mem_reduction"],
                   target_reached=int(best is not None and best["mem_reduction"] >= p.target_reduction),
                   top1_loss_at_best=math.nan if best is None else best["top1_loss"],
                   top1_loss_at_target_reduction=at_target.top1_loss.min() if len(at_target) else math.nan,
                   n_points_at_target_reduction=len(at_target),
                   max_mem_reduction=table.mem_reduction.max(), uncompressed_top1=base["final_top1"])
    for arm, runs in table.groupby("arm", sort=False):
        arm_best = best_within(runs, p.max_top1_loss)
        metrics[f"best_mem_reduction_within_acc_{arm}"] = math.nan if arm_best is None else arm_best["mem_reduction"]
    for row in table.itertuples():
        metrics.update({f"final_top1_{row.point}": row.final_top1, f"top1_loss_{row.point}": row.top1_loss,
                        f"mem_reduction_{row.point}": row.mem_reduction})
    if "actnn2bit" in ctx.inputs:
        actnn = _metrics(records.read(ctx.inputs["actnn2bit"]))
        metrics.update(actnn_mem_reduction=mem_reduction(base, actnn), actnn_top1_loss=top1_loss(base, actnn))
    swept = "; ".join(f"{arm}: {a.param} {sorted(a.values)}" + "".join(f", {k} = {share:g} x {a.param}"
                                                                    for k, share in a.scaled.items())
                      for arm, a in p.arms.items())
    tags = dict(best_point="none" if best is None else best["point"], swept=swept,
                best_mem_reduction_within_acc=f"largest mem_reduction among the points with top1_loss <= "
                                              f"{p.max_top1_loss} (NaN: none); target {p.target_reduction}x",
                top1_loss_at_target_reduction=f"least top1_loss among the points with mem_reduction >= "
                                              f"{p.target_reduction}x (NaN: no point reaches it)",
                mem_reduction="activation memory of the uncompressed arm / the point's (probe step; as comet_compare)",
                top1_loss="final top-1 of the uncompressed arm - the point's, points (as comet_compare)",
                eb_median="adaptive arm: median over layers of the error bounds in use at the end (NaN: fixed eb)")
    return Result(metrics=metrics, tables={"points": table}, tags=tags)
