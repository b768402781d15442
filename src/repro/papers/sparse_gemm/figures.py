"""Figures of the sparse-GEMM runs, in the papers' style.

gemm_bench  per dtype (rows) and sparsity (columns): speedup over cuBLAS dense per GEMM shape, bars per
            method (the TW paper's Fig. 13 / Shfl-BW's Fig. 8 style), the ideal shrunk GEMM and ours on the
            unpruned layer (the kernel's quality) among them;
            then ours as a fraction of the ideal, with the 0.8 target.
prune_arm   one arm's test top-1 per epoch, its phases shaded.
compare     top-1 against sparsity per pattern (the TW paper's accuracy-sparsity curves), dense as a line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.figures import run_record, run_subtitle

COLORS = {"ideal": "0.6", "nm24": "tab:purple", "bsr": "tab:brown", "csr": "tab:pink", "tw": "tab:blue",
          "sbw": "tab:orange", "tvw": "tab:green", "tvw_dense_mma": "tab:olive", "unstructured": "0.3",
          "identity": "tab:cyan",
          "nm": "tab:purple", "dense": "black"}
NAMES = {"ideal": "ideal (shrunk, cuBLAS)", "nm24": "2:4 (cuSPARSELt, 50 %)", "bsr": "BSR", "csr": "CSR (cuSPARSE)",
         "tw": "TW (ours)", "sbw": "Shfl-BW (ours)", "tvw": "TVW (ours, cuSPARSELt)",
         "tvw_dense_mma": "TVW packing, dense MMA", "unstructured": "unstructured", "nm": "2:4",
         "identity": "ours unpruned (kernel quality)"}


def _shape(r) -> str:
    return f"{r.m}\n{r.k}x{r.n}"


def _bars(ax, d: pd.DataFrame, methods, value: str) -> None:
    shapes = list(dict.fromkeys(_shape(r) for r in d.itertuples()))
    width = 0.8 / max(1, len(methods))
    for i, method in enumerate(methods):
        sub = d[d.method == method].set_index(d[d.method == method].apply(_shape, axis=1))
        ys = [float(sub[value].get(s, np.nan)) for s in shapes]
        ax.bar(np.arange(len(shapes)) + (i - (len(methods) - 1) / 2) * width, ys, width,
               color=COLORS[method], label=NAMES[method])
    ax.set_xticks(np.arange(len(shapes)), shapes, fontsize=7)


def gemm_bench(run_dir: Path):
    run_dir = Path(run_dir)
    df = pd.read_csv(run_dir / "points.csv")
    record = run_record(run_dir)
    dtypes = list(dict.fromkeys(df.dtype))
    sparsities = sorted(df.sparsity.unique())
    speed_methods = [m for m in ("ideal", "identity", "nm24", "bsr", "csr", "tw", "sbw", "tvw") if df[df.method == m].t_us.notna().any()]
    ours = [m for m in ("tw", "sbw", "tvw", "tvw_dense_mma") if df[df.method == m].t_us.notna().any()]
    rows = 2 * len(dtypes)
    fig = Figure(figsize=(5.5 * len(sparsities), 3.4 * rows))
    axes = np.atleast_2d(fig.subplots(rows, len(sparsities), squeeze=False))
    for i, dtype in enumerate(dtypes):
        for j, s in enumerate(sparsities):
            d = df[(df.dtype == dtype) & (df.sparsity == s)]
            ax = axes[i, j]
            _bars(ax, d, speed_methods, "speedup")
            ax.axhline(1.0, color="black", lw=0.8, ls="--")
            if s == 0.75:
                ax.axhline(1.95, color="tab:red", lw=0.8, ls=":", label="1.95x (TW paper)")
            ax.set(title=f"{dtype}, {s * 100:g} % sparse: speedup over dense", ylabel="x over cuBLAS dense")
            ax = axes[len(dtypes) + i, j]
            _bars(ax, d, ours, "frac_ideal")
            ax.axhline(0.8, color="tab:red", lw=0.8, ls=":", label="0.8 target")
            ax.axhline(1.0, color="black", lw=0.8, ls="--")
            ax.set(title=f"{dtype}, {s * 100:g} % sparse: fraction of the ideal", ylabel="ideal time / ours")
    axes[0, 0].legend(fontsize=7, ncols=2)
    axes[len(dtypes), 0].legend(fontsize=7)
    timing = record.get("tags", {}).get("timing", "")
    fig.suptitle(f"Sparse GEMM (M / KxN), Y = W^T X\n{run_subtitle(record)}; {timing}", fontsize=10)
    fig.tight_layout()
    return fig


def prune_arm(run_dir: Path):
    run_dir = Path(run_dir)
    epochs = pd.read_csv(run_dir / "epochs.csv")
    record = run_record(run_dir)
    tags, metrics = record.get("tags", {}), record.get("metrics", {})
    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    ax.plot(epochs.epoch, epochs.test_top1, marker="o", ms=3, color=COLORS.get(tags.get("pattern"), "tab:blue"))
    shades = {"pruning": "tab:orange", "masked": "tab:green"}
    for phase, color in shades.items():
        at = epochs[epochs.get("phase", pd.Series(dtype=str)) == phase].epoch
        if len(at):
            ax.axvspan(at.min() - 0.5, at.max() + 0.5, color=color, alpha=0.1, label=phase)
    ax.set(xlabel="epoch", ylabel="test top-1 (%)")
    ax.legend(fontsize=8)
    fig.suptitle(f"VGG-16 pruned {tags.get('pattern', '?')} to {metrics.get('sparsity', float('nan')):.3f}: "
                 f"final {metrics.get('final_top1', float('nan')):.2f}%\n{run_subtitle(record)}", fontsize=10)
    fig.tight_layout()
    return fig


def compare(run_dir: Path):
    run_dir = Path(run_dir)
    arms = pd.read_csv(run_dir / "arms.csv")
    record = run_record(run_dir)
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    dense = arms[arms.pattern == "dense"].final_top1
    if len(dense):
        ax.axhline(float(dense.iloc[0]), color="black", lw=1, label="dense")
        ax.axhline(float(dense.iloc[0]) - 1, color="black", lw=0.8, ls=":", label="dense - 1 point")
    for pattern, d in arms[arms.pattern != "dense"].groupby("pattern"):
        d = d.sort_values("sparsity")
        ax.plot(d.sparsity * 100, d.final_top1, marker="o", color=COLORS.get(pattern), label=NAMES.get(pattern, pattern))
    ax.set(xlabel="sparsity of the pruned layers (%)", ylabel="test top-1 (%)",
           title="CIFAR-10 VGG-16: accuracy against sparsity per pattern")
    ax.legend(fontsize=8)
    fig.suptitle(run_subtitle(record), fontsize=9)
    fig.tight_layout()
    return fig
