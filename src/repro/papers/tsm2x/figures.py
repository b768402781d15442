"""Figures of the TSM2X runs, from a run folder's points.csv (columns: see bench.py).

Top row: speedup over the better cuBLAS route per shape, bars grouped by n, one panel per dtype
(the paper's Figs. 9-12 style). Bottom row: achieved bandwidth of compulsory traffic as a
fraction of the device copy bandwidth, ours (the dispatched path) against cuBLAS, by problem
size; the dotted lines mark the 90 % target and the 256 MiB size from which it applies.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global figure state (headless)

from repro.figures import finish, open_run

MIB = 1 << 20


def draw(run_dir: Path, title: str) -> Figure:
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "points.csv")
    sns.set_theme(style="whitegrid", context="paper")
    dtypes = [d for d in ("float32", "float64") if d in set(df["dtype"])]
    nshapes = df.groupby(["m", "k"]).ngroups
    fig = Figure(figsize=(max(6.0, 0.45 * nshapes) * len(dtypes), 7.5))
    axes = fig.subplots(2, len(dtypes), squeeze=False)
    use_frac = df["bw_frac_dispatch"].notna().any()
    for col, dtype in enumerate(dtypes):
        d = df[df["dtype"] == dtype].sort_values(["m", "k", "n"]).copy()
        d["shape"] = [f"{m:,}\n{k:,}" for m, k in zip(d["m"], d["k"])]
        ax = axes[0, col]
        sns.barplot(data=d, x="shape", y="speedup", hue="n", palette="viridis", ax=ax)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set(title=f"{title} {dtype}: speedup over cuBLAS (hatched: cuBLAS fallback)", xlabel="m / k",
               ylabel="speedup (x)")
        _hatch_fallbacks(ax, d)
        ax.tick_params(axis="x", labelsize=6)
        ax.set_ylim(0, float(d["speedup"].max()) * 1.25)  # headroom for the legend
        ax.legend(title="n", fontsize=7, ncols=4, loc="upper left")

        ax = axes[1, col]
        mib = d["bytes"] / MIB
        ours, theirs = ("bw_frac_dispatch", "bw_frac_cublas") if use_frac else ("gbps_dispatch", "gbps_cublas")
        ax.scatter(mib, d[ours], marker="o", s=18, label="TSM2X (ours, dispatched)", color="tab:blue")
        ax.scatter(mib, d[theirs], marker="x", s=18, label="cuBLAS (better route)", color="tab:red")
        ax.set_xscale("log")
        if use_frac:
            ax.axhline(0.9, color="gray", lw=0.8, ls=":")
            ax.set_ylim(0, max(1.05, float(d[[ours, theirs]].max().max()) * 1.05))
        ax.axvline(256, color="gray", lw=0.8, ls=":")
        ax.set(title=f"{title} {dtype}: bandwidth of compulsory traffic", xlabel="compulsory traffic (MiB)",
               ylabel="fraction of device copy bandwidth" if use_frac else "GB/s")
        ax.legend(fontsize=7)
    return finish(fig, f"{title} against cuBLAS", record, "timing")


def _hatch_fallbacks(ax, d: pd.DataFrame) -> None:
    """Hatch the bars of points where the dispatcher fell back to cuBLAS."""
    ns = sorted(d["n"].unique())
    shapes = list(dict.fromkeys(d["shape"]))
    for container, n in zip(ax.containers, ns):
        for bar, shape in zip(container, shapes):
            hit = d[(d["n"] == n) & (d["shape"] == shape)]
            if len(hit) and bool(hit["fallback"].iloc[0]):
                bar.set_hatch("///")


def tsm2_r(run_dir: Path) -> Figure:
    return draw(run_dir, "TSM2R")


def tsm2_l(run_dir: Path) -> Figure:
    return draw(run_dir, "TSM2L")
