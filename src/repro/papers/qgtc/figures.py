"""Figures of the QGTC runs, in the paper's style (bars per path or bit width, log scale where the
paths span decades), from a run folder's tables (columns: see gemm.py and gnn.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global figure state (headless)

from repro.figures import finish, open_run

LABELS = {"qgtc": "QGTC 1-bit (ours)", "qgtc_pack": "QGTC 1-bit, packing included", "int8_rowB": "cuBLAS int8 (B row-major)",
          "int8_colB": "cuBLAS int8 (B col-major)", "fp8": "cuBLAS fp8 (_scaled_mm)", "bf16": "cuBLAS bf16"}


def gemm(run_dir: Path) -> Figure:
    """Left: throughput of each path at the paper's shape (the b1 issue-rate ceiling dotted); right:
    QGTC's throughput per bit width (GPU) or the twin's CPU time per bit width (CPU)."""
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "points.csv")
    sns.set_theme(style="whitegrid", context="paper")
    fig = Figure(figsize=(11, 4.2))
    left, right = fig.subplots(1, 2)
    m, k, n = (int(df[c].iloc[0]) for c in ("m", "k", "n"))
    if (df["kind"] == "qgtc_twin").all():
        df["bits"] = [f"{a}x{b}" for a, b in zip(df.a_bits, df.b_bits)]
        sns.barplot(data=df, x="bits", y="t_us", color="tab:blue", ax=left)
        left.set(yscale="log", xlabel="bit widths (A x B)", ylabel="time (us, CPU)",
                 title=f"NumPy twin on the CPU, {m} x {k} x {n}")
        sns.barplot(data=df, x="bits", y="mmas", color="tab:gray", ax=right)
        right.set(xlabel="bit widths (A x B)", ylabel="b1 MMAs (m16n8k256) the kernel would issue",
                  title="work per bit width: a_bits x b_bits plane pairs")
        return finish(fig, "QGTC bit-decomposed GEMM: the twin (no GPU timing)", record)
    one = (df.a_bits == 1) & (df.b_bits == 1)
    paths = df[df.kind.isin(LABELS) & (one | ~df.kind.str.startswith("qgtc"))].copy()
    paths["path"] = paths["kind"].map(LABELS)
    sns.barplot(data=paths, y="path", x="tops", hue="path", palette="viridis", legend=False, ax=left)
    peak = record.get("metrics", {}).get("peak_b1_tops")
    if peak:
        left.axvline(peak, color="black", ls=":", lw=1)
        left.text(peak, -0.6, " b1 MMA issue rate", fontsize=7, va="bottom")
    left.set(xscale="log", xlabel="TOPS (2MNK / time)", ylabel="", title=f"M = {m}, K = {k}, N = {n}")
    bits = df[df.kind == "qgtc"].copy()
    bits["bits"] = [f"{a}x{b}" for a, b in zip(bits.a_bits, bits.b_bits)]
    sparse = df[df.kind == "qgtc_sparse"].copy()
    sparse["bits"] = [f"1x1, {f:.0%} tiles empty" for f in sparse.empty_tile_fraction]
    both = pd.concat([bits, sparse])
    sns.barplot(data=both, x="bits", y="tops", color="tab:blue", ax=right)
    right.set(yscale="log", xlabel="bit widths (A x B); zero-tile jumping", ylabel="TOPS (dense-equivalent)",
              title="QGTC per bit width")
    right.tick_params(axis="x", labelsize=7, rotation=15)
    return finish(fig, "QGTC 1-bit GEMM against cuBLAS", record, "timing")


def gnn(run_dir: Path) -> Figure:
    """Left (GPU runs): speedup of the 2-bit QGTC inference epoch over the fp32 cuSPARSE GCN and PyG per
    graph (the paper's Fig. 7 style, bars per dataset); right: test accuracy per bit width against fp32."""
    run_dir, record = open_run(run_dir)
    acc = pd.read_csv(run_dir / "accuracy.csv", dtype={"bits": str})
    epochs = run_dir / "epochs.csv"
    sns.set_theme(style="whitegrid", context="paper")
    fig = Figure(figsize=(11 if epochs.exists() else 6, 4.2))
    axes = fig.subplots(1, 2 if epochs.exists() else 1, squeeze=False)[0]
    if epochs.exists():
        t = pd.read_csv(epochs).pivot(index="graph", columns="path", values="t_ms")
        ours = (record.get("tags") or {}).get("ours", "qgtc")
        pairs = [(ours, "fp32_cusparse", f"{'graph' if ours.endswith('_graph') else 'ours'} over eager fp32 cuSPARSE "
                                         "(DGL stand-in; the claim)"),
                 ("qgtc_graph", "fp32_cusparse_graph", "graph over graph fp32 cuSPARSE"),
                 ("qgtc", "fp32_cusparse", "eager over eager fp32 cuSPARSE"),
                 (ours, "pyg", "over PyG GCNConv (eager)")]
        seen, rows = set(), []
        for path, base, label in pairs:
            if path in t and base in t and (path, base) not in seen:
                seen.add((path, base))
                rows += [dict(graph=g, baseline=label, speedup=t.loc[g, base] / t.loc[g, path]) for g in t.index]
        speed = pd.DataFrame(rows).dropna()
        sns.barplot(data=speed, x="graph", y="speedup", hue="baseline", ax=axes[0])
        axes[0].axhline(1.0, color="black", lw=0.8, ls="--")
        if len(speed) and speed["speedup"].max() / speed["speedup"].min() > 20:
            axes[0].set_yscale("log")
        axes[0].set(ylabel="speedup of the inference epoch (x)", xlabel="",
                    title="QGTC 2-bit Cluster-GCN (ours) over fp32")
        axes[0].tick_params(axis="x", labelsize=7)
        axes[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2)
    ax = axes[-1]
    order = ["fp32"] + sorted((b for b in acc["bits"].unique() if b != "fp32"), key=int)
    acc["bits"] = pd.Categorical(acc["bits"], order)
    sns.barplot(data=acc, x="graph", y="test_acc", hue="bits", palette="viridis", ax=ax)
    ax.set(ylim=(0, 1.05), ylabel="test accuracy (planted labels)", xlabel="",
           title="quantized training per bit width against fp32")
    ax.legend(title="bits", fontsize=7, ncols=5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    ax.tick_params(axis="x", labelsize=7)
    return finish(fig, "QGTC quantized Cluster-GCN on synthetic power-law graphs", record)
