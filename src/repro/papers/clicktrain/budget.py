"""The schedule-length sweep, collected (CPU, seconds): every arm's final top-1, compression and
end-to-end seconds at every budget, and per arm the shortest budget at which its accuracy stops
improving, i.e. whose final top-1 is within ``tolerance`` points of the arm's best over the sweep.
An arm whose shortest such budget is the largest one swept has not been shown to converge: more
budget may still help it (``converged`` 0). Which runs make up the sweep: :mod:`repro.papers.clicktrain.sweep`.

A budget run again with other seeds (``repeat_budgets``, ``repeat_seeds``) counts by its mean: the
convergence rule and the comparison with ADMM read the mean top-1 of a point's runs, ``spread.csv``
gives each repeated point's standard deviation, the yardstick for the sweep's differences, and
(``tolerance_from_spread``) the tolerance is at least their pooled standard deviation.

Inputs: every point's record under the point's name, as :mod:`repro.sweep` passes them (an arm's
configured run where the point is that run; ``dense`` is the baseline network).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro import records
from repro.papers.clicktrain.sweep import BudgetParams, budget_points
from repro.experiment import Context, Result, experiment
from repro.sweep import read_points, record_seed


def mean_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, budget): the mean over its runs (one, or the first and its repeats) and, for
    top-1, their number and standard deviation (NaN for a single run)."""
    grouped = runs.groupby(["arm", "budget"], sort=False)
    means = grouped[["final_top1", "best_top1", "compression", "e2e_s"]].mean()
    means["runs"] = grouped.size()
    means["top1_sd"] = grouped.final_top1.std()
    return means.reset_index()


def pooled_sd(spread: pd.DataFrame) -> float:
    """One run's standard deviation, pooled over repeated points (each weighted by runs - 1)."""
    dof = spread.runs - 1
    return float(((dof * spread.top1_sd ** 2).sum() / dof.sum()) ** 0.5)


def converged_budgets(points: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per arm: best final top-1 over the sweep, the shortest budget within ``tolerance`` of it, and
    whether that budget is shorter than the largest swept (else the arm may still be improving)."""
    rows = []
    for arm, runs in points.groupby("arm", sort=False):
        runs = runs.sort_values("budget")
        best = runs.final_top1.max()
        shortest = runs[runs.final_top1 >= best - tolerance].iloc[0]
        rows.append(dict(arm=arm, best_top1=best, best_budget=int(runs.loc[runs.final_top1.idxmax(), "budget"]),
                         shortest_budget=int(shortest.budget), top1_at_shortest=shortest.final_top1,
                         e2e_s_at_shortest=shortest.e2e_s, compression_at_shortest=shortest.compression,
                         largest_budget=int(runs.budget.max()),
                         converged=bool(shortest.budget < runs.budget.max())))
    return pd.DataFrame(rows)


def versus_admm(points: pd.DataFrame) -> pd.DataFrame:
    """Per budget that both ran: ClickTrain against pruning-after-training (ADMM), as ct.e2e
    compares them at the configured budget: top-1 difference and end-to-end time ratio."""
    by_arm = {arm: runs.set_index("budget") for arm, runs in points.groupby("arm")}
    if not {"clicktrain", "admm"} <= set(by_arm):
        return pd.DataFrame(columns=["budget", "top1_vs_admm", "e2e_speedup"])
    ct, ad = by_arm["clicktrain"], by_arm["admm"]
    both = sorted(set(ct.index) & set(ad.index))
    return pd.DataFrame(dict(budget=both, top1_vs_admm=[ct.final_top1[b] - ad.final_top1[b] for b in both],
                             e2e_speedup=[ad.e2e_s[b] / ct.e2e_s[b] for b in both]))


@experiment(params=BudgetParams, needs_gpu=False)
def budget(p: BudgetParams, ctx: Context) -> Result:
    rows = []
    found, missing = read_points(ctx, budget_points(p), p.partial)
    for point, rec, source in found:
        arm, epochs = point.labels["arm"], point.labels["budget"]
        m = rec["metrics"]
        if "final_top1" not in m:
            raise records.RecordError(f"{rec['_dir']}: no final_top1 (status {rec['status']}: {rec.get('reason')})")
        rows.append(dict(arm=arm, budget=epochs, seed=record_seed(rec), epochs_trained=m["epochs"],
                         final_top1=m["final_top1"], best_top1=m["best_top1"], compression=m.get("compression", 1.0),
                         e2e_s=m.get("e2e_s", m.get("total_train_s")), source=source,
                         record=str(Path(rec["_dir"]) / records.RECORD_NAME)))
    runs = pd.DataFrame(rows)
    means = mean_points(runs)
    spread = means[means.runs > 1][["arm", "budget", "runs", "final_top1", "top1_sd"]]
    spread = spread.rename(columns={"final_top1": "top1_mean"})
    metrics = {}
    tolerance = p.tolerance
    if len(spread):
        metrics.update(top1_sd_max=spread.top1_sd.max(), top1_sd_pooled=pooled_sd(spread))
        if p.tolerance_from_spread:
            tolerance = max(tolerance, metrics["top1_sd_pooled"])
    metrics["tolerance"] = tolerance
    table = converged_budgets(means, tolerance)
    for row in table.itertuples():
        metrics.update({f"shortest_budget_{row.arm}": row.shortest_budget, f"best_top1_{row.arm}": row.best_top1,
                        f"top1_at_shortest_{row.arm}": row.top1_at_shortest,
                        f"e2e_s_at_shortest_{row.arm}": row.e2e_s_at_shortest, f"converged_{row.arm}": row.converged})
    metrics["arms_converged"] = int(table.converged.sum())
    vs_admm = versus_admm(means)
    for row in vs_admm.itertuples():
        metrics.update({f"top1_vs_admm_e{row.budget}": row.top1_vs_admm, f"e2e_speedup_e{row.budget}": row.e2e_speedup})
    metrics["points_missing"] = len(missing)
    tags = dict(budget="total epochs E of the dense / ClickTrain schedule; every phase keeps its share of E "
                       "(ADMM: dense E, then ADMM and retraining round(E/2) each)",
                converged=f"shortest budget whose final top-1 (mean of its runs) is within {tolerance:.3g} points of "
                          "the arm's best"
                          + (f" (the repeats' pooled sd, above the configured {p.tolerance})" if tolerance > p.tolerance
                             else "")
                          + "; converged 0: that is the largest budget swept, so more may still help",
                e2e_s="training passes + pruning work (the arms' e2e_s; the dense baseline's total_train_s); "
                      "per-epoch evaluation excluded")
    if missing:  # partial: an arm's largest budget is then the largest it has, its `converged` judged there
        tags["missing"] = f"no record (partial collection): {', '.join(missing)}"
    tags["vs_admm"] = ("ct.e2e's two measures at every budget both arms ran: ClickTrain's top-1 minus ADMM's, "
                       "ADMM's end-to-end seconds over ClickTrain's (the points' times: shared-GPU ones where "
                       "their records say so)")
    if p.repeat_budgets:
        tags["repeats"] = (f"budgets {p.repeat_budgets} run again with seeds {p.repeat_seeds}; a point with repeats "
                           "counts by its "
                           "mean top-1 (converged, vs_admm); top1_sd: their standard deviation (spread.csv); "
                           "top1_sd_pooled: one run's spread over all repeated points"
                           + ("; the convergence tolerance is at least that" if p.tolerance_from_spread else ""))
    return Result(metrics=metrics, tables={"points": runs, "converged": table, "vs_admm": vs_admm,
                                           "spread": spread}, tags=tags)
