"""Figures of the Q-VR model runs, in the paper's style: latency CDF per network and FPS per arm,
FPS and speedup vs network bandwidth, and the sensitivity of the headline to every assumed
parameter."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import run_record, run_subtitle  # noqa: E402
from repro.sim import figures as sim_figures  # noqa: E402

COLORS = {"local": "tab:gray", "static": "tab:orange", "qvr": "tab:blue"}
STYLES = ["-", "--", ":", "-."]


def _title(run_dir: Path, what: str) -> str:
    return f"Q-VR model: {what}\n{run_subtitle(run_record(run_dir))} (model, not hardware)"


def traces(run_dir: Path) -> plt.Figure:
    run_dir = Path(run_dir)
    cdf, runs = pd.read_csv(run_dir / "latency_cdf.csv"), pd.read_csv(run_dir / "runs.csv")
    nets, games = list(dict.fromkeys(runs["network"])), list(dict.fromkeys(runs["game"]))
    target = run_record(run_dir).get("params", {}).get("system", {}).get("latency_target_ms", 25.0)
    fig, axes = plt.subplots(1, len(nets) + 1, figsize=(4.0 * (len(nets) + 1), 3.8), squeeze=False)
    for ax, net in zip(axes[0], nets):
        for (arm, game), d in cdf[cdf["network"] == net].groupby(["arm", "game"], sort=False):
            ax.plot(d["latency_ms"], d["q"], color=COLORS.get(arm), ls=STYLES[games.index(game) % 4],
                    label=f"{arm} / {game}")
        ax.axvline(target, color="black", lw=0.8, ls=":")
        ax.set(title=net, xlabel="end-to-end latency (ms)", ylabel="CDF of frames", xscale="log")
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
    m = run_record(run_dir).get("metrics", {})
    ax.set_title(f"speedup over local {m.get('speedup', float('nan')):.2f}x (paper 3.4x), "
                 f"FPS / static {m.get('fps_gain', float('nan')):.2f}x (paper 4.1x)", fontsize=8)
    fig.suptitle(_title(run_dir, "latency distribution and frame rate per network trace"), fontsize=9)
    fig.tight_layout()
    return fig


def bandwidth_sweep(run_dir: Path) -> plt.Figure:
    d = pd.read_csv(Path(run_dir) / "sweep.csv").sort_values("bandwidth_mbps")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
    for arm, color in COLORS.items():
        if f"fps_{arm}" in d:
            axes[0].plot(d["bandwidth_mbps"], d[f"fps_{arm}"], marker="o", color=color, label=arm)
    axes[0].set(xscale="log", xlabel="network bandwidth (Mbit/s, constant)", ylabel="frames per second (mean over games)")
    axes[0].legend(fontsize=7)
    axes[1].plot(d["bandwidth_mbps"], d["speedup"], marker="o", label="Q-VR latency speedup over local")
    axes[1].plot(d["bandwidth_mbps"], d["fps_gain"], marker="s", label="Q-VR FPS / static")
    axes[1].axhline(1.0, color="black", lw=0.8, ls=":")
    axes[1].set(xscale="log", yscale="log", xlabel="network bandwidth (Mbit/s, constant)", ylabel="x")
    axes[1].legend(fontsize=7)
    m = run_record(run_dir).get("metrics", {})
    axes[1].set_title(f"Q-VR within 1.1x of local below {m.get('stay_local_below_mbps', float('nan')):.2g} Mbit/s",
                      fontsize=9)
    fig.suptitle(_title(run_dir, "frame rate and speedup vs network bandwidth"), fontsize=9)
    fig.tight_layout()
    return fig


def sensitivity(run_dir: Path) -> plt.Figure:
    run_dir = Path(run_dir)
    rec = run_record(run_dir)
    return sim_figures.sensitivity(pd.read_csv(run_dir / "screen.csv"), pd.read_csv(run_dir / "curves.csv"),
                                   {"speedup": "speedup over local (x)", "fps_gain": "FPS / static (x)"},
                                   rec.get("params", {}).get("threshold", 0.10), "Q-VR model",
                                   _title(run_dir, "sensitivity").replace("\n", ", "))
