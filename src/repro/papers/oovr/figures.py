"""Figures of the OO-VR model runs, in the paper's style: per-scene speedup and inter-GPM traffic
(normalised to the split-frame baseline), speedup vs link bandwidth and vs DRAM/link asymmetry, and
the sensitivity of the headline to every assumed parameter."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402
from repro.sim import figures as sim_figures  # noqa: E402

LABELS = {"afr": "AFR (frame-level)", "sfr": "SFR baseline", "object": "object-level SFR",
          "oo_app": "OO-VR programming model", "oovr": "OO-VR"}


TITLE = "OO-VR model (a SimPy simulation, not hardware)"


def scenes(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    d = pd.read_csv(run_dir / "scenes.csv")
    arms = [a for a in LABELS if a in set(d["arm"])]
    names = list(dict.fromkeys(d["scene"]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    width = 0.8 / len(arms)
    for k, (col, ylabel) in enumerate((("speedup_vs_sfr", "frame speedup over SFR baseline (x)"),
                                        ("traffic_vs_sfr", "inter-GPM traffic / SFR baseline"))):
        ax = axes[k]
        for j, arm in enumerate(arms):
            vals = [float(d[(d["scene"] == s) & (d["arm"] == arm)][col].iloc[0]) for s in names]
            ax.bar([i + (j - (len(arms) - 1) / 2) * width for i in range(len(names))], vals, width, label=LABELS[arm])
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel(ylabel)
    axes[0].legend(fontsize=7, ncols=2)
    rec = record.get("metrics", {})
    axes[0].set_title(f"OO-VR over best earlier: {rec.get('speedup', float('nan')):.2f}x (paper 1.58x)", fontsize=9)
    axes[1].set_title(f"traffic reduction vs best earlier: {rec.get('traffic_reduction', float('nan')):.0%} (paper 76%)",
                      fontsize=9)
    return finish(fig, f"{TITLE}: speedup and inter-GPM traffic per scene", record, fontsize=9)


def link_sweep(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    d = pd.read_csv(run_dir / "sweep.csv")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, kind, xlabel in ((axes[0], "link_gbps", "inter-GPM link bandwidth (GB/s), DRAM fixed"),
                             (axes[1], "asymmetry", "local DRAM / link bandwidth, link 64 GB/s")):
        k = d[d["kind"] == kind].sort_values("value")
        ax.plot(k["value"], k["speedup"], marker="o", label="OO-VR / best earlier")
        for col, label in (("speedup_vs_sfr", "OO-VR / SFR"), ("speedup_vs_object", "OO-VR / object-level")):
            ax.plot(k["value"], k[col], marker=".", ls="--", label=label)
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set(xlabel=xlabel, ylabel="frame speedup (x)")
        ax.legend(fontsize=7)
    m = record.get("metrics", {})
    axes[0].set_title(f"advantage over the best earlier arm gone at {m.get('advantage_gone_gbps', float('nan')):.0f} GB/s",
                      fontsize=9)
    return finish(fig, f"{TITLE}: speedup vs link bandwidth and bandwidth asymmetry", record, fontsize=9)


def sensitivity(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    fig = sim_figures.sensitivity(pd.read_csv(run_dir / "screen.csv"), pd.read_csv(run_dir / "curves.csv"),
                                  {"speedup": "speedup (x)", "traffic_reduction": "traffic reduction"},
                                  record.get("params", {}).get("threshold", 0.10), "OO-VR")
    return finish(fig, f"{TITLE}: sensitivity of the headline", record, fontsize=9)


def tornado(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    fig = sim_figures.tornado(pd.read_csv(run_dir / "tornado.csv"), record.get("params", {}).get("target"),
                              "speedup over the best earlier arm (x, geomean)", "OO-VR")
    return finish(fig, f"{TITLE}: the headline over each assumed parameter's range", record, fontsize=9)
