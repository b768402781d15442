"""ClickTrain against the other arms on the ClickTrain artifact's wide ResNet-32, collected (CPU,
seconds) from the points of ``clicktrain/wide_compare`` (:func:`repro.papers.clicktrain.sweep.wide_run_points`).

Paired per seed: the configured runs of ClickTrain, ADMM and PruneTrain ran with the same seeds
(the run's own and ``seeds``); each difference and ratio is taken within a seed, and the record
gives its mean over seeds (the headline), its standard deviation (``<key>_sd``, NaN for one seed)
and the number of seeds (``<key>_n``):

- ``schedule_speedup``: ADMM's measured whole-schedule seconds / ClickTrain's (ct.e2e), on the
  card the points ran on; ``epoch_ratio``: ADMM's epochs / ClickTrain's (diagnostic, configured);
- ``top1_vs_admm``, ``compression`` (ClickTrain's), ``epoch_overhead``, ``schedule_vs_prunetrain``;
- ``top1_vs_prunetrain``: at each arm's own compression (not equal; diagnostic).

At equal compression (ct.vs_during), on curves: each arm's top-1 against log(compression) over its
configured run (mean over seeds) and its curve points (one run each), linearly interpolated,
never extrapolated (NaN and a tag where the other arm's compression lies outside the curve):
``top1_vs_prunetrain_equal`` = ClickTrain's mean top-1 - PruneTrain's curve at ClickTrain's mean
compression; ``top1_vs_prunetrain_at_pt`` = ClickTrain's curve at PruneTrain's compression -
PruneTrain's mean top-1. Their spread ``_sd``: the root sum of squares of the two configured runs'
standard deviations over seeds (a curve point is one run and is taken as having the same spread).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from repro import records
from repro.experiment import Context, Result, experiment
from repro.papers.clicktrain.sweep import WideParams, wide_run_points
from repro.sweep import read_points, record_seed

PAIRED = {  # key -> (function of one seed's arm metrics, what it is)
    "schedule_speedup": (lambda a: a["admm"]["schedule_s"] / a["clicktrain"]["schedule_s"],
                         "ADMM's measured whole-schedule seconds / ClickTrain's"),
    "epoch_ratio": (lambda a: a["admm"]["epochs"] / a["clicktrain"]["epochs"],
                    "diagnostic, configured: ADMM's epochs / ClickTrain's"),
    "e2e_speedup": (lambda a: a["admm"]["e2e_s"] / a["clicktrain"]["e2e_s"],
                    "training passes + pruning work only (evaluation excluded): ADMM / ClickTrain"),
    "top1_vs_admm": (lambda a: a["clicktrain"]["final_top1"] - a["admm"]["final_top1"], "points"),
    "top1_vs_prunetrain": (lambda a: a["clicktrain"]["final_top1"] - a["prunetrain"]["final_top1"],
                           "points, each arm at its own compression (not equal)"),
    "compression": (lambda a: a["clicktrain"]["compression"], "ClickTrain's conv compression"),
    "compression_vs_prunetrain": (lambda a: a["clicktrain"]["compression"] / a["prunetrain"]["compression"], "x"),
    "epoch_overhead": (lambda a: a["clicktrain"]["epoch_s_mean"] / a["clicktrain"]["dense_epoch_s"],
                       "ClickTrain pruning-phase epoch / its dense warm-up epoch"),
    "schedule_vs_prunetrain": (lambda a: a["clicktrain"]["schedule_s"] / a["prunetrain"]["schedule_s"],
                               "ClickTrain's schedule_s / PruneTrain's"),
}


def _value(fn, arms: dict) -> float:
    try:
        return float(fn(arms))
    except KeyError:  # an arm record from before the metric (schedule_s)
        return float("nan")


def curve_at(curve: pd.DataFrame, compression: float) -> float:
    """Top-1 of ``curve`` (columns compression, final_top1) at ``compression``, linear in
    log(compression) between its points; NaN outside the curve's range (never extrapolated)."""
    curve = curve.dropna(subset=["compression", "final_top1"]).sort_values("compression")
    x = np.log(curve.compression.to_numpy(float))
    if not len(x) or not math.isfinite(compression) or not x[0] - 1e-9 <= math.log(compression) <= x[-1] + 1e-9:
        return float("nan")
    return float(np.interp(math.log(compression), x, curve.final_top1.to_numpy(float)))


def _sd(values: pd.Series) -> float:
    return float(values.std()) if values.notna().sum() > 1 else float("nan")


@experiment(params=WideParams, needs_gpu=False)
def wide_compare(p: WideParams, ctx: Context) -> Result:
    rows, metrics_of = [], {}
    found, missing = read_points(ctx, wide_run_points(p), p.partial)
    for point, rec, source in found:
        m = metrics_of[point.name] = rec["metrics"]
        rows.append(dict(point=point.name, arm=point.labels["arm"], kind=point.labels["kind"], seed=record_seed(rec),
                         **{k: m.get(k, float("nan")) for k in ("final_top1", "compression", "flops_ratio",
                                                              "schedule_s", "e2e_s", "epochs", "epoch_s_mean",
                                                              "dense_epoch_s")},
                         source=source, record=str(Path(rec["_dir"]) / records.RECORD_NAME)))
    runs = pd.DataFrame(rows)
    configured = runs[runs.kind == "configured"]
    paired_rows = []
    for seed, group in configured.groupby("seed", dropna=False, sort=True):
        arms = {r.arm: metrics_of[r.point] for r in group.itertuples()}
        if {"clicktrain", "admm", "prunetrain"} <= set(arms):
            paired_rows.append(dict(seed=seed, **{k: _value(fn, arms) for k, (fn, _) in PAIRED.items()}))
    paired = pd.DataFrame(paired_rows, columns=["seed", *PAIRED])
    metrics: dict = {}
    for key in PAIRED:
        metrics[key] = float(paired[key].mean()) if paired[key].notna().any() else float("nan")
        metrics[f"{key}_sd"] = _sd(paired[key])
        metrics[f"{key}_n"] = int(paired[key].notna().sum())
    means = configured.groupby("arm", sort=False)[["final_top1", "compression", "schedule_s"]].agg(["mean", "std"])
    curves = {}
    for arm in ("clicktrain", "prunetrain"):
        own = runs[(runs.arm == arm) & (runs.kind == "curve")][["compression", "final_top1"]]
        mean_point = pd.DataFrame([dict(compression=means.loc[arm, ("compression", "mean")],
                                        final_top1=means.loc[arm, ("final_top1", "mean")])]) if arm in means.index \
            else pd.DataFrame(columns=["compression", "final_top1"])
        curves[arm] = pd.concat([mean_point, own], ignore_index=True)
    ct_c, ct_t = curves["clicktrain"].iloc[0] if len(curves["clicktrain"]) else (float("nan"), float("nan"))
    pt_c, pt_t = curves["prunetrain"].iloc[0] if len(curves["prunetrain"]) else (float("nan"), float("nan"))
    spread = math.hypot(*(means.loc[a, ("final_top1", "std")] if a in means.index else float("nan")
                          for a in ("clicktrain", "prunetrain")))
    metrics.update(top1_vs_prunetrain_equal=ct_t - curve_at(curves["prunetrain"], ct_c),
                   top1_vs_prunetrain_at_pt=curve_at(curves["clicktrain"], pt_c) - pt_t,
                   top1_vs_prunetrain_equal_sd=spread, top1_vs_prunetrain_at_pt_sd=spread,
                   compression_prunetrain=pt_c, prunetrain_curve_max_compression=curves["prunetrain"].compression.max(),
                   clicktrain_curve_min_compression=curves["clicktrain"].compression.min(),
                   points_missing=len(missing))
    curve_table = pd.concat([c.assign(arm=a) for a, c in curves.items()], ignore_index=True)
    tags = {key: f"{what}; mean over {metrics[key + '_n']} seed(s), paired by seed; {key}_sd: their sd "
                 "(NaN: one seed); NaN: an arm record lacks a metric it needs (ran before schedule_s: rerun it)"
            for key, (_, what) in PAIRED.items()}
    tags.update(
        top1_vs_prunetrain_equal="points, at equal compression, interpolated: ClickTrain's mean top-1 minus "
                                 "PruneTrain's curve (linear in log compression) at ClickTrain's mean compression; "
                                 "NaN: PruneTrain's curve does not reach it (never extrapolated); _sd: root sum of "
                                 "squares of the two configured runs' sd over seeds",
        top1_vs_prunetrain_at_pt="points, at equal compression, interpolated: ClickTrain's curve at PruneTrain's "
                                 "mean compression minus PruneTrain's mean top-1; NaN: outside ClickTrain's curve "
                                 "(4-of-9 patterns alone compress about 2.2x: it cannot go lower)")
    if missing:
        tags["missing"] = f"no record (partial collection): {', '.join(missing)}"
    return Result(metrics=metrics, tables={"points": runs, "paired": paired,
                                           "curves": curve_table}, tags=tags)
