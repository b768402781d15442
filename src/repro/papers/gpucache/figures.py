"""Figures of the caching model (partitions.csv) and the reorder run (runs.csv); columns: see
experiment.py. Model: replication factor and partition time per input and partitioner. Reorder:
speedup over the default order per input and partitioner, and measured time against the model's
predicted block loads (both relative to the default order of the same input)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import run_record, run_subtitle  # noqa: E402

ORDER = ["default", "random", "vertex", "edge", "hypergraph"]


def _methods(df: pd.DataFrame) -> list[str]:
    return [m for m in ORDER if m in set(df["method"])]


def model(run_dir: Path) -> plt.Figure:
    df = pd.read_csv(Path(run_dir) / "partitions.csv")
    df = df[df["status"] == "ok"]
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    hue = _methods(df)
    sns.barplot(data=df, x="input", y="rf", hue="method", hue_order=hue, ax=axes[0], palette="viridis")
    axes[0].set(yscale="log", ylabel="replication factor (copies per vertex)", xlabel="",
                title="Replication factor (lower is better; 1 = no sharing)")
    sns.barplot(data=df, x="input", y="partition_s", hue="method", hue_order=hue, ax=axes[1], palette="viridis")
    axes[1].set(yscale="log", ylabel="partition time (s)", xlabel="", title="Partition time")
    for ax in axes:
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle("Graph model for GPU caching: edge partition vs the others (model)\n"
                 + run_subtitle(run_record(run_dir)), fontsize=9)
    fig.tight_layout()
    return fig


def reorder(run_dir: Path) -> plt.Figure:
    df = pd.read_csv(Path(run_dir) / "runs.csv")
    df = df[df["status"] == "ok"].copy()
    base = df[df["method"] == "default"].set_index("input")
    df["loads_rel"] = df["block_loads"] / base["block_loads"].reindex(df["input"]).to_numpy()
    df["time_rel"] = df["time_s"] / base["time_s"].reindex(df["input"]).to_numpy()
    df["label"] = df["input"] + df["larger_than_cache"].map({True: "", False: "\n(fits in cache)"})
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    hue = _methods(df)
    sns.barplot(data=df, x="label", y="speedup", hue="method", hue_order=hue, ax=axes[0], palette="viridis")
    axes[0].axhline(1.0, color="black", lw=0.8, ls="--")
    axes[0].set(ylabel="speedup over the default order (x)", xlabel="", title="Measured speedup per input")
    axes[0].tick_params(axis="x", rotation=20)
    sns.scatterplot(data=df, x="loads_rel", y="time_rel", hue="method", hue_order=hue, style="input",
                    ax=axes[1], palette="viridis", s=45)
    axes[1].set(xscale="log", yscale="log", xlabel="predicted block loads / default order's",
                ylabel="measured time / default order's", title="Model beside measurement")
    axes[1].legend(fontsize=6, ncols=2)
    record = run_record(run_dir)
    fig.suptitle("Kernels run in each partitioner's schedule (measured)\n"
                 + run_subtitle(record, "cache", "timing"), fontsize=9)
    fig.tight_layout()
    return fig
