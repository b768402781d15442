"""Figures of the SpTRSV runs, from a run folder's CSV tables (columns: see bench.py, experiment.py).

- single_gpu: solve time per matrix for every solver (log scale, levels x hop marked) and the sync-free speedups over
  cuSPARSE's solve (Liu et al.'s per-matrix bars), plus analysis time against solve time.
- multi_gpu: zero-copy over unified memory per matrix (the paper's Fig. 7 style), with each
  matrix's share of remote pushes.
- emulation: each matrix's levels and critical path, and the twins' errors against SciPy.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import finish, run_record  # noqa: E402

SOLVERS = ("cusparse", "levelset", "syncfree_warp", "syncfree_thread", "syncfree_levels", "syncfree_push",
           "syncfree_pull", "syncfree_v3", "syncfree_v4")


def single_gpu(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    df = pd.read_csv(Path(run_dir) / "points.csv")
    solvers = [s for s in SOLVERS if f"{s}_solve_ms" in df]
    colour = dict(zip(SOLVERS, sns.color_palette("tab10", len(SOLVERS))))  # one colour a solver in every panel
    fig, axes = plt.subplots(3, 1, figsize=(max(7.0, 0.7 * len(df)), 10))
    long = df.melt(id_vars="matrix", value_vars=[f"{s}_solve_ms" for s in solvers], var_name="solver", value_name="ms")
    long["solver"] = long["solver"].str.removesuffix("_solve_ms")
    sns.barplot(data=long, x="matrix", y="ms", hue="solver", palette=colour, ax=axes[0])
    if "ceiling_ms" in df:  # levels x hop: the floor of a solve whose levels each wait one hop between blocks
        axes[0].scatter(range(len(df)), df["ceiling_ms"], marker="_", s=300, color="black", zorder=3,
                        label="levels x hop")
    axes[0].set(yscale="log", ylabel="solve time (ms)", xlabel="",
                title="solve time (CUDA events, median; black: levels x hop)")
    speed = df.melt(id_vars="matrix", value_vars=[f"speedup_{s}" for s in solvers if s != "cusparse"],
                    var_name="solver", value_name="x")
    speed["solver"] = speed["solver"].str.removeprefix("speedup_")
    sns.barplot(data=speed, x="matrix", y="x", hue="solver", palette=colour, ax=axes[1])
    axes[1].axhline(1.0, color="black", lw=0.8, ls="--")
    axes[1].axhline(2.0, color="gray", lw=0.8, ls=":")
    axes[1].set(yscale="log", ylabel="speedup over cuSPARSE solve (x)", xlabel="",
                title="solve speedup (dotted: 2x target)")
    for i, s in enumerate(solvers):  # one marker per solver, however many there are
        axes[2].scatter(df[f"{s}_solve_ms"], df[f"{s}_analysis_ms"], label=s, marker="osD^v<>phX*"[i % 11], s=20,
                        color=colour[s])
    axes[2].set(xscale="log", yscale="log", xlabel="solve (ms)", ylabel="analysis (ms)",
                title="analysis against solve, per matrix (levels: host wall clock)")
    for ax in axes:  # beside the axes, where no bar hides behind it
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    for ax in axes[:2]:
        ax.tick_params(axis="x", rotation=45, labelsize=7)
    return finish(fig, "SpTRSV on one GPU: cuSPARSE vs level-set and sync-free", run_record(run_dir), fontsize=9)


def multi_gpu(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    df = pd.read_csv(Path(run_dir) / "points.csv")
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.2 * len(df)), 4))
    sns.barplot(data=df, x="matrix", y="speedup", color="tab:green", ax=axes[0])
    axes[0].axhline(1.0, color="black", lw=0.8, ls="--")
    axes[0].axhline(3.53, color="gray", lw=0.8, ls=":")
    axes[0].set(ylabel="zero-copy over unified memory (x)", xlabel="",
                title="speedup (dotted: the paper's 3.53x on 4 V100)")
    sns.barplot(data=df, x="matrix", y="remote_fraction", color="tab:purple", ax=axes[1])
    axes[1].set(ylabel="share of pushes to another GPU", xlabel="", title="remote pushes of the row partition")
    for ax in axes:
        ax.tick_params(axis="x", rotation=45, labelsize=7)
    gpus = int(df["gpus"].iloc[0]) if len(df) else 0
    return finish(fig, f"SpTRSV on {gpus} GPUs: zero-copy + task pool vs unified memory", run_record(run_dir), fontsize=9)


def emulation(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    df = pd.read_csv(Path(run_dir) / "points.csv")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].scatter(df["rows"], df["levels"], label="levels")
    axes[0].scatter(df["rows"], df["critical_path"], marker="x", label="critical path (nnz)")
    for _, r in df.iterrows():
        axes[0].annotate(r["matrix"], (r["rows"], r["levels"]), fontsize=6)
    axes[0].set(xscale="log", yscale="log", xlabel="rows", title="dependency depth")
    axes[0].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # labelled minor ticks overlapped
    axes[0].legend(fontsize=7)
    errs = df.melt(id_vars="matrix", value_vars=[c for c in df if c.startswith("err_")], var_name="schedule",
                   value_name="error")
    errs["error"] = errs["error"].clip(lower=1e-18)
    sns.stripplot(data=errs, x="schedule", y="error", hue="matrix", ax=axes[1], dodge=False, size=5)
    axes[1].axhline(1e-10, color="gray", lw=0.8, ls=":")
    axes[1].set(yscale="log", ylabel="max |x - x_scipy| / max |x_scipy|", xlabel="",
                title="twins vs SciPy (dotted: 1e-10; zeros drawn at 1e-18)")
    axes[1].tick_params(axis="x", rotation=30, labelsize=7)
    axes[1].legend(fontsize=5, ncols=2)
    return finish(fig, "SpTRSV schedules as NumPy twins (model of the kernels' order, CPU)", run_record(run_dir), fontsize=9)
