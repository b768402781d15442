"""Figures of PIM-CapsNet: the characterisation (points.csv: routing share and launches against
batch, eager and fused) and the model (sweep.csv: speedup and energy saving against the vaults'
internal bandwidth, one line per configuration at its largest batch) and the tornado chart
(tornado.csv: the speedup at each assumed parameter's low and high end)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import finish, open_run, run_record, run_subtitle  # noqa: E402
from repro.sim import figures as sim_figures  # noqa: E402


def characterise(run_dir: Path) -> plt.Figure:
    df = pd.read_csv(Path(run_dir) / "points.csv")
    sns.set_theme(style="whitegrid", context="paper")
    count = "routing_kernels" if "routing_kernels" in df and df["routing_kernels"].notna().any() else "routing_ops"
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    sns.lineplot(data=df, x="batch", y="routing_share", hue="config", style="variant", markers=True, ax=axes[0])
    axes[0].set(xscale="log", ylim=(0, 1), ylabel="routing / (conv + routing)", title="Routing share of inference time")
    sns.lineplot(data=df[df["variant"] == "eager"], x="batch", y="u_hat_bytes", hue="config", markers=True, ax=axes[1])
    axes[1].set(xscale="log", yscale="log", ylabel="bytes", title="Prediction vectors u_hat per batch")
    sns.lineplot(data=df, x="batch", y=count, hue="config", style="variant", markers=True, ax=axes[2])
    axes[2].set(xscale="log", ylabel=count.replace("_", " "),
                title="GPU kernels per routing procedure" if count == "routing_kernels" else "operators per routing procedure")
    fig.suptitle("CapsNet dynamic routing (3 iterations), measured\n" + run_subtitle(run_record(run_dir)), fontsize=9)
    fig.tight_layout()
    return fig


def model(run_dir: Path) -> plt.Figure:
    df = pd.read_csv(Path(run_dir) / "sweep.csv")
    largest = df.groupby("config")["batch"].transform("max")
    df = df[df["batch"] == largest]
    df["label"] = df["config"] + " (batch " + df["batch"].astype(str) + ")"
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sns.lineplot(data=df, x="internal_gbps", y="speedup", hue="label", marker="o", ax=axes[0])
    axes[0].axhline(2.44, color="firebrick", ls=":", lw=1, label="paper: 2.44x")
    axes[0].axhline(1.0, color="black", ls="--", lw=0.8)
    axes[0].set(xscale="log", xlabel="stack internal bandwidth (GB/s)", ylabel="speedup over GPU only (x)",
                title="PIM-CapsNet speedup (model)")
    axes[0].legend(fontsize=7)
    sns.lineplot(data=df, x="internal_gbps", y="energy_saving", hue="label", marker="o", ax=axes[1], legend=False)
    axes[1].axhline(0.6491, color="firebrick", ls=":", lw=1)
    axes[1].set(xscale="log", xlabel="stack internal bandwidth (GB/s)", ylabel="energy saving (1 - E_pim / E_gpu)",
                title="Energy saving (model; paper 64.91%)")
    fig.suptitle("PIM-CapsNet model, GPU side measured\n" + run_subtitle(run_record(run_dir), "gpu_side"), fontsize=9)
    fig.tight_layout()
    return fig


def tornado(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    target = record.get("params", {}).get("target")
    fig = sim_figures.tornado(pd.read_csv(run_dir / "tornado.csv"), target,
                              "speedup over GPU only (x, geomean)", "PIM-CapsNet model")
    return finish(fig, "PIM-CapsNet model: the headline over each assumed parameter's range", record, "gpu_side",
                  fontsize=9)
