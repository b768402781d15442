"""Figures of Edgent: the measured inputs (``nets``: per-layer latency of each trained net on the
device at each thread count and on the edge, and top-1 per exit) and the configurators (``configure``:
accuracy delivered under the deadline per method over bandwidth, Edgent's agreement with the oracle,
the headline over the device slowdown, and the dynamic run)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402

LABELS = {"edgent": "Edgent", "oracle": "oracle (exhaustive, measured)", "device_only": "device only",
          "edge_only": "edge only", "neurosurgeon": "Neurosurgeon (split only)", "exit_only": "exit only"}


def nets(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    layers = pd.read_csv(run_dir / "layers.csv")
    acc = pd.read_csv(run_dir / "exits.csv")
    names = sorted(acc["net"].unique())
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(5 * (len(names) + 1), 4))
    for ax, net in zip(axes, names):
        g = layers[(layers["net"] == net) & (layers["variant"] == "trained") & (layers["where"] == "layer")]
        for (role, threads), d in g.groupby(["role", "threads"]):
            label = f"device, {threads} thread(s)" if role == "device" else f"edge ({record['tags'].get('edge', '')[:20]})"
            ax.plot(d["index"], d["time_s"] * 1e6, marker="o" if role == "edge" else ".", ms=3, label=label)
        for a in acc.loc[acc["net"] == net, "attach"]:
            ax.axvline(a - 0.5, color="gray", ls=":", lw=0.8)
        ax.set(yscale="log", xlabel="layer (dotted: an exit after it)", ylabel="median latency, batch 1 (us)",
               title=f"{net}: per-layer latency")
        ax.legend(fontsize=7)
    for net, d in acc.groupby("net"):
        axes[-1].plot(d["exit"], 100 * d["accuracy"], marker="o", label=net)
    axes[-1].set(xlabel="exit", ylabel="top-1 on the test images (%)", title="accuracy per exit")
    axes[-1].legend(fontsize=7)
    return finish(fig, "Edgent inputs: exit nets on CIFAR-10, profiled on the device and the edge", record,
                  "edge", fontsize=9)


def configure(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    points = pd.read_csv(run_dir / "points.csv")
    curve = pd.read_csv(run_dir / "curve.csv")
    dyn = pd.read_csv(run_dir / "dynamic.csv")
    target = record.get("params", {}).get("target")
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    feasible = points[points["oracle_met"]]
    by_bw = feasible.groupby(["method", "bandwidth_mbps"])["accuracy"].mean().reset_index()
    ax = axes[0, 0]
    for method, d in by_bw.groupby("method"):
        ax.plot(d["bandwidth_mbps"], 100 * d["accuracy"], marker=".", label=LABELS[method])
    ax.set(xscale="log", xlabel="bandwidth (Mbit/s)", ylabel="top-1 delivered under the deadline (%)",
           title="accuracy delivered (mean over deadlines, nets, device threads)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    e = feasible[feasible["method"] == "edgent"]
    grid = e.pivot_table(index="deadline_ms", columns="bandwidth_mbps", values="matches_oracle", aggfunc="mean")
    im = ax.imshow(grid.to_numpy(float), origin="lower", aspect="auto", vmin=0, vmax=1, cmap="RdYlGn")
    ax.set_xticks(range(grid.shape[1])[::3], [f"{v:.2g}" for v in grid.columns[::3]])
    ax.set_yticks(range(grid.shape[0])[::3], [f"{v:.2g}" for v in grid.index[::3]])
    ax.set(xlabel="bandwidth (Mbit/s)", ylabel="deadline (ms)",
           title=f"Edgent = oracle's accuracy (share over nets, threads): {record['metrics']['oracle_match']:.3f}")
    fig.colorbar(im, ax=ax)
    ax = axes[1, 0]
    ax.plot(curve["device_slowdown"], curve["oracle_match"], marker="o", label="Edgent matches the oracle")
    ax.plot(curve["device_slowdown"], curve["oracle_feasible_share"], marker=".", ls="--",
            label="points where some configuration meets the deadline")
    if target is not None:
        ax.axhline(target, color="firebrick", ls=":", label=f"claim's target {target}")
    ax.set(xscale="log", ylim=(0, 1.05), xlabel="device slowdown (assumed; 1 = this CPU as measured)",
           ylabel="share of (bandwidth, deadline) points", title="the headline over the device slowdown")
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    ax.plot(dyn["time_s"], dyn["bandwidth_mbps"], lw=0.7, color="gray", label="bandwidth")
    ax.plot(dyn["time_s"], dyn["regime_mbps"], lw=1.2, color="black", label="regime mean")
    ax.plot(dyn["time_s"], dyn["estimate_mbps"], lw=1.2, color="tab:blue", label="estimate since the last change point")
    ax.set(yscale="log", xlabel="time (s)", ylabel="Mbit/s")
    m = record["metrics"]
    ax.set_title(f"dynamic (deadline {m['dynamic_deadline_ms']:.3g} ms): top-1 delivered "
                 f"{100 * m['dynamic_edgent_dynamic_accuracy']:.1f}% (change points), "
                 f"{100 * m['dynamic_fixed_accuracy']:.1f}% (fixed), {100 * m['dynamic_oracle_accuracy']:.1f}% (oracle)",
                 fontsize=8)
    ax.legend(fontsize=7)
    return finish(fig, "Edgent's configurators (model fed by measured profiles)", record, "kind", fontsize=9)
