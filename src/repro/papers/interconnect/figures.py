"""Figures of the interconnect runs (the paper's bandwidth-vs-size curves and pair heat maps),
from a run folder's CSV tables (columns: see p2p.py, hostdevice.py, collectives.py)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import finish, run_record  # noqa: E402


def p2p(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    run_dir = Path(run_dir)
    df = pd.read_csv(run_dir / "points.csv")
    df["path"] = df["method"] + " " + df["direction"] + " P2P " + df["p2p"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    sns.lineplot(data=df, x="bytes", y="gbps", hue="path", style="path", markers=True, dashes=False,
                 errorbar=("pi", 100), ax=axes[0])
    axes[0].set(xscale="log", yscale="log", xlabel="bytes per direction", ylabel="GB/s",
                title="P2P bandwidth (band: spread over GPU pairs)")
    axes[0].legend(fontsize=6)
    top = df[(df["bytes"] == df["bytes"].max()) & (df["method"] == "ce") & (df["direction"] == "uni")
             & (df["p2p"] == "on")]
    grid = top.pivot(index="src", columns="dst", values="gbps")
    sns.heatmap(grid, annot=True, fmt=".0f", cmap="viridis", ax=axes[1], cbar_kws={"label": "GB/s"})
    axes[1].set(title="copy-engine one-way GB/s at the largest size")
    lat = pd.read_csv(run_dir / "latency.csv")
    sns.heatmap(lat.pivot(index="src", columns="dst", values="latency_us"), annot=True, fmt=".2f", cmap="magma_r",
                ax=axes[2], cbar_kws={"label": "us"})
    axes[2].set(title="remote load latency (dst reads src's memory)")
    return finish(fig, "GPU peer-to-peer bandwidth and latency", run_record(run_dir), "backend", fontsize=9)


def host_device(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    df = pd.read_csv(Path(run_dir) / "points.csv")
    df["path"] = df["direction"] + " " + df["memory"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(data=df, x="bytes", y="gbps", hue="path", style="path", markers=True, dashes=False, ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="bytes", ylabel="GB/s", title="host-device bandwidth")
    return finish(fig, "Host-device copies, pinned and pageable", run_record(run_dir), "backend", fontsize=9)


def collectives(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    df = pd.read_csv(Path(run_dir) / "points.csv")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    sns.lineplot(data=df, x="bytes", y="time_us", hue="op", marker="o", ax=axes[0])
    axes[0].set(xscale="log", yscale="log", xlabel="bytes (nccl-tests' S)", ylabel="time per op (us)",
                title="latency")
    sns.lineplot(data=df, x="bytes", y="busbw_gbps", hue="op", marker="o", ax=axes[1])
    axes[1].set(xscale="log", xlabel="bytes (nccl-tests' S)", ylabel="bus bandwidth (GB/s)",
                title="bus bandwidth (nccl-tests' busbw)")
    ranks = int(df["ranks"].iloc[0]) if len(df) else 0
    backend = df["backend"].iloc[0] if len(df) else "?"
    return finish(fig, f"Collectives on {ranks} ranks ({backend})", run_record(run_dir), "backend", fontsize=9)
