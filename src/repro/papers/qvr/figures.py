"""Figures of the Q-VR model runs, in the paper's style: latency CDF per network and FPS per arm,
FPS and speedup vs network bandwidth, and the sensitivity of the headline to every assumed
parameter."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402
from repro.sim import figures as sim_figures  # noqa: E402

COLORS = {"local": "tab:gray", "static": "tab:orange", "qvr": "tab:blue"}
STYLES = ["-", "--", ":", "-."]


TITLE = "Q-VR model (a SimPy simulation, not hardware)"


def traces(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    cdf, runs = pd.read_csv(run_dir / "latency_cdf.csv"), pd.read_csv(run_dir / "runs.csv")
    nets, games = list(dict.fromkeys(runs["network"])), list(dict.fromkeys(runs["game"]))
    target = record.get("params", {}).get("system", {}).get("latency_target_ms", 25.0)
    fig, axes = plt.subplots(1, len(nets) + 1, figsize=(4.0 * (len(nets) + 1), 3.8), squeeze=False)
    for ax, net in zip(axes[0], nets):
        for (arm, game), d in cdf[cdf["network"] == net].groupby(["arm", "game"], sort=False):
            ax.plot(d["latency_ms"], d["q"], color=COLORS.get(arm), ls=STYLES[games.index(game) % 4],
                    label=f"{arm} / {game}")
        ax.axvline(target, color="black", lw=0.8, ls=":")
        ax.set(title=net, xlabel="end-to-end latency (ms)", ylabel="CDF of frames", xscale="log")
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    axes[0][0].legend(fontsize=6)
    ax = axes[0][-1]
    fps = runs.groupby(["network", "arm"], sort=False)["fps"].mean().unstack()
    arms = [a for a in COLORS if a in fps.columns]
    for j, arm in enumerate(arms):
        ax.bar([i + (j - 1) * 0.27 for i in range(len(nets))], [fps.loc[n, arm] for n in nets], 0.27,
               color=COLORS[arm], label=arm)
    ax.set_xticks(range(len(nets)), nets)
    ax.set(ylabel="frames per second (mean over games)")
    ax.legend(fontsize=7)
    m = record.get("metrics", {})
    ax.set_title(f"speedup over local {m.get('speedup', float('nan')):.2f}x (paper 3.4x)\n"
                 f"FPS / static {m.get('fps_gain', float('nan')):.2f}x (paper 4.1x)", fontsize=8)
    return finish(fig, f"{TITLE}: latency distribution and frame rate per network trace", record, fontsize=9)


def bandwidth_sweep(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    d = pd.read_csv(run_dir / "sweep.csv")
    games = [c[len("speedup_"):] for c in d.columns if c.startswith("speedup_") and c[len("speedup_"):] not in
             ("max", "min", "vs_static")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.0))
    bw = d[d["kind"] == "bandwidth"].sort_values("value")
    for arm, color in COLORS.items():
        if f"fps_{arm}" in bw:
            axes[0].plot(bw["value"], bw[f"fps_{arm}"], marker="o", color=color, label=arm)
    axes[0].set(xscale="log", xlabel="network bandwidth (Mbit/s, constant)", ylabel="frames per second (mean over games)")
    axes[0].legend(fontsize=7)
    for ax, kind, xlabel in ((axes[1], "bandwidth", "network bandwidth (Mbit/s, constant)"),
                             (axes[2], "latency", "one-way network latency (ms, constant)")):
        k = d[d["kind"] == kind].sort_values("value")
        for j, g in enumerate(games):
            ax.plot(k["value"], k[f"speedup_{g}"], marker="o", ls=STYLES[j % 4], label=f"speedup over local, {g}")
        ax.plot(k["value"], k["fps_gain"], marker="s", color="black", label="FPS / static (mean)")
        ax.axhline(1.1, color="black", lw=0.8, ls=":")
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="x")
        ax.legend(fontsize=6)
    p = record.get("params", {})
    axes[1].set_title(f"latency {p.get('sweep_latency_ms', '?')} ms", fontsize=9)
    axes[2].set_title(f"bandwidth {p.get('sweep_bandwidth_mbps', '?')} Mbit/s; dotted: 1.1x", fontsize=9)
    return finish(fig, f"{TITLE}: frame rate and speedup vs network bandwidth and latency", record, fontsize=9)


def sensitivity(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    fig = sim_figures.sensitivity(pd.read_csv(run_dir / "screen.csv"), pd.read_csv(run_dir / "curves.csv"),
                                  {"speedup": "speedup over local (x)", "fps_gain": "FPS / static (x)"},
                                  record.get("params", {}).get("threshold", 0.10), "Q-VR")
    return finish(fig, f"{TITLE}: sensitivity of the headline", record, fontsize=9)


def tornado(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    fig = sim_figures.tornado(pd.read_csv(run_dir / "tornado.csv"), record.get("params", {}).get("target"),
                              "speedup over local rendering (x, mean)", "Q-VR")
    return finish(fig, f"{TITLE}: the headline over each assumed parameter's range", record, fontsize=9)
