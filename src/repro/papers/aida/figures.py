"""Figures of AIDA: the model per EIE benchmark layer (layers.csv: AIDA's cycles by phase against
EIE's, and AIDA's speedup) and the tornado charts (tornado.csv: a headline at each assumed
parameter's low and high end)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402
from repro.sim import figures as sim_figures  # noqa: E402

PHASES = {"ap_broadcast_cycles": "AIDA broadcast", "ap_multiply_cycles": "AIDA multiply", "ap_reduce_cycles": "AIDA reduce"}


def model(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "layers.csv")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    bottom = None
    for col, label in PHASES.items():
        axes[0].bar(df["layer"], df[col], bottom=bottom, label=label)
        bottom = df[col] if bottom is None else bottom + df[col]
    axes[0].plot(df["layer"], df["eie_cycles"] * record["params"]["ap"]["clock_ghz"] / record["params"]["eie"]["clock_ghz"],
                 "k_", ms=28, mew=2, label="EIE (in AIDA cycles)")
    axes[0].set(yscale="log", ylabel="cycles per layer (batch 1)", title="AIDA cycles by phase against EIE")
    axes[0].legend(fontsize=7)
    axes[1].bar(df["layer"], df["speedup"], color="tab:green")
    axes[1].axhline(1.0, color="black", lw=0.8)
    axes[1].axhline(2.5, color="firebrick", ls=":", label="paper: 2.5x throughput")
    axes[1].set(ylabel="EIE time / AIDA time", title="AIDA speedup per EIE benchmark layer (model)")
    axes[1].legend(fontsize=7)
    return finish(fig, "AIDA model against EIE's configuration", record, fontsize=9)


def tornado(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    params = record.get("params", {})
    label = {"peak_ratio": "peak performance over EIE (x)",
             "throughput_geomean": "throughput over EIE (x, geomean of the layers)"}[params.get("metric", "throughput_geomean")]
    fig = sim_figures.tornado(pd.read_csv(run_dir / "tornado.csv"), params.get("target"), label, "AIDA model")
    return finish(fig, "AIDA model: the headline over each assumed parameter's range", record, "metric", fontsize=9)


def gpu_context(run_dir: Path) -> plt.Figure:
    """Per EIE layer: the GPU's batch-1 CSR SpMV and dense GEMV times beside the modelled EIE and AIDA."""
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "layers.csv")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    layers = list(dict.fromkeys(df["layer"]))
    x = range(len(layers))
    first = df.drop_duplicates("layer").set_index("layer").loc[layers]
    axes[0].plot(x, first["eie_model_s"] * 1e6, "k_", ms=20, mew=2, label="EIE (model)")
    axes[0].plot(x, first["aida_model_s"] * 1e6, "_", color="tab:green", ms=20, mew=2, label="AIDA (model)")
    for dtype, g in df.groupby("dtype"):
        g = g.set_index("layer").loc[layers]
        axes[0].plot(x, g["spmv_s"] * 1e6, "o-", label=f"CSR SpMV {dtype} (measured)")
        axes[0].plot(x, g["gemv_s"] * 1e6, "s--", label=f"dense GEMV {dtype} (measured)")
    axes[0].set(xticks=list(x), xticklabels=layers, yscale="log", ylabel="time per layer, batch 1 (us)",
                title=f"{record['tags'].get('processor', '')} beside the models")
    axes[0].legend(fontsize=7)
    for dtype, g in df.groupby("dtype"):
        g = g.set_index("layer").loc[layers]
        axes[1].plot(x, g["eie_over_spmv"], "o-", label=f"EIE model / SpMV {dtype}")
    axes[1].axhline(1.0, color="black", lw=0.8)
    axes[1].set(xticks=list(x), xticklabels=layers, yscale="log", ylabel="modelled EIE time / measured SpMV time",
                title="above 1: the measured SpMV is faster than the modelled EIE")
    axes[1].legend(fontsize=7)
    return finish(fig, "AIDA context (no verdict): EIE's layers on a GPU at batch 1", record, fontsize=9)
