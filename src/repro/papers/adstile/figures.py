"""Figures of ADS-Tile: the measured curves (curves.csv: latency against SMs per DNN; colocation.csv:
slowdown sharing all SMs vs in disjoint halves), the model (points.csv: fewest tiles per policy and
reallocation waste against deadline slack) and the tornado charts (tornado.csv)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402
from repro.sim import figures as sim_figures  # noqa: E402


SLACK = "deadline / worst-case chain latency on all tiles (tighter to the left; capped at the period)"


def curves(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "curves.csv")
    co = pd.read_csv(run_dir / "colocation.csv")
    unit = record.get("tags", {}).get("partition", "units")
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    sns.lineplot(data=df.assign(latency_ms=1e3 * df["latency_s"]), x="units", y="latency_ms", hue="dnn", marker="o",
                 ax=axes[0])
    axes[0].set(yscale="log", xlabel=unit, ylabel="latency (ms, median)", title="Each DNN alone on a partition")
    if len(co):
        pairs = co.assign(pair=co["a"] + " with " + co["b"]).melt(id_vars="pair", value_vars=["shared_slowdown", "partition_slowdown"],
                                                                  var_name="placement", value_name="slowdown")
        pairs["placement"] = pairs["placement"].map({"shared_slowdown": "sharing all units (vs alone on all)",
                                                     "partition_slowdown": "in disjoint halves (vs alone in half)"})
        sns.barplot(data=pairs, y="pair", x="slowdown", hue="placement", ax=axes[1])
        axes[1].axvline(1.0, color="black", lw=0.8)
        axes[1].set(xlabel="A's latency while B runs / A alone", ylabel="", title="Co-location interference")
        axes[1].legend(fontsize=7)
    return finish(fig, "ADS-Tile: DNN latency against SMs and co-location, measured", record, "partition")


def schedule(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "points.csv")
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    sns.lineplot(data=df, x="slack", y="tiles", hue="policy", style="policy", markers=True, ax=axes[0])
    axes[0].set(xscale="log", xlabel=SLACK, ylabel="fewest tiles with no deadline miss",
                title="Tiles each policy needs")
    sns.lineplot(data=df, x="slack", y="waste_pct", hue="policy", style="policy", markers=True, ax=axes[1], legend=False)
    axes[1].axhline(1.2, color="firebrick", ls=":", lw=1)
    axes[1].axhspan(17, 44, color="firebrick", alpha=0.08)
    axes[1].set(xscale="log", xlabel=SLACK, ylabel="reallocation waste (% of held tile-time)",
                title="Reallocation waste at those tiles (paper: WC 17-44%, ADS-Tile < 1.2%, shaded/dotted)")
    return finish(fig, "ADS-Tile scheduler model, latency curves measured", record, "curves_from", fontsize=9)


def tornado(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    params = record.get("params", {})
    metric = params.get("metric", "tiles_ratio_min")
    fig = sim_figures.tornado(pd.read_csv(run_dir / "tornado.csv"), params.get("target"), metric, "ADS-Tile model")
    return finish(fig, "ADS-Tile model: the headline over each assumed parameter's range", record, "curves_from",
                  fontsize=9)
