"""The figure of tsparse/spgemm, from its matrices.csv (columns: experiment.py): speedup against the
mean 8x8 tile fill of A, one marker per baseline present in the run (the GPU's cuSPARSE fp32 with
the tensor-core ceiling beside it; on a CPU run SciPy and GraphBLAS over the NumPy twin), and each
matrix's time split into our phases beside the baselines."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import finish, run_record  # noqa: E402

BASELINES = ("cusparse_fp32", "cusparse_fp64", "torch_csr", "scipy", "graphblas")
PHASES = ("t_convert", "t_symbolic", "t_numeric", "t_assemble")


def spgemm(run_dir: Path) -> plt.Figure:
    sns.set_theme(style="whitegrid", context="paper")
    df = pd.read_csv(Path(run_dir) / "matrices.csv")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    ax = axes[0]
    for base, marker in zip(BASELINES, "osD^v"):
        col = f"speedup_{base}"
        if col in df and df[col].notna().any():
            ax.scatter(df["fill"], df[col], marker=marker, s=28, label=f"over {base}")
    if "ceiling_speedup" in df and df["ceiling_speedup"].notna().any():
        ax.scatter(df["fill"], df["ceiling_speedup"], marker="_", s=200, color="black",
                   label="ceiling over cusparse_fp32 (tile products at tensor-core rate)")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.axhline(2.0, color="gray", lw=0.8, ls=":")
    ax.axvline(0.25, color="gray", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="mean fill of A's non-empty 8x8 tiles",
           ylabel="speedup of ours (x, time over ours)",
           title="speedup against tile fill (dotted: 2x at fill >= 25 %, ours)")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7)
    ax = axes[1]
    x = np.arange(len(df))
    bottom = np.zeros(len(df))
    for phase in PHASES:
        ax.bar(x - 0.2, df[phase], 0.4, bottom=bottom, label=phase.removeprefix("t_"))
        bottom += df[phase].to_numpy()
    present = [b for b in BASELINES if f"t_{b}" in df and df[f"t_{b}"].notna().any()]
    for k, base in enumerate(present):
        ax.scatter(x + 0.2, df[f"t_{base}"], marker="osD^v"[k], s=24, color="black", label=base, zorder=3)
    ax.set_xticks(x, df["matrix"], rotation=45, ha="right", fontsize=7)
    ax.set(yscale="log", ylabel="seconds (median)", title="our phases (bars) and the baselines (markers)")
    ax.legend(fontsize=7)
    return finish(fig, "tSparse SpGEMM (A @ A, 8x8 bitmap tiles)", run_record(run_dir), fontsize=9)
