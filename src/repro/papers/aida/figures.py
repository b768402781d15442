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
