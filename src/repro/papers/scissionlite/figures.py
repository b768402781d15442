"""Figures of ScissionLite: the measured inputs (``nets``: per-layer latency of each base net on the
device at each thread count and on the edge, the bytes each split sends plain, through the transfer
layer and as int8, and each codec's top-1 drop) and the split model (``split``: latency per method and
net, the headlines over the device slowdown and over the bandwidth with the targets, the tornado)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402

LABELS = {"device_only": "device only", "edge_only": "edge only", "scission": "Scission (best plain split)",
          "int8": "int8 split tensor", "scissionlite": "ScissionLite (transfer layer)",
          "ideal": "ideal (nothing sent, ceiling)"}


def nets(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    layers = pd.read_csv(run_dir / "layers.csv")
    acc = pd.read_csv(run_dir / "accuracy.csv")
    codecs = pd.read_csv(run_dir / "codecs.csv")
    names = sorted(acc["net"].unique())
    fig, axes = plt.subplots(2, len(names), figsize=(5 * len(names), 8), squeeze=False)
    for k, net in enumerate(names):
        ax = axes[0, k]
        g = layers[(layers["net"] == net) & (layers["where"] == "layer")]
        for (role, threads), d in g.groupby(["role", "threads"]):
            label = f"device, {threads} thread(s)" if role == "device" else "edge"
            ax.plot(d["index"], d["time_s"] * 1e6, marker="o" if role == "edge" else ".", ms=3, label=label)
        d = g[(g["role"] == "edge")].sort_values("index")
        tw = ax.twinx()
        tw.step(d["index"], d["out_bytes"] / 1e3, where="mid", color="gray", lw=0.8)
        tw.set(yscale="log", ylabel="bytes after the layer (kB, gray)")
        ax.set(yscale="log", xlabel="layer", ylabel="median latency, batch 1 (us)", title=f"{net}: per-layer latency")
        ax.legend(fontsize=7)
        ax = axes[1, k]
        c = codecs[(codecs["net"] == net) & (codecs["role"] == "edge")]
        a = acc[(acc["net"] == net) & (acc["codec"] != "none")]
        for codec, d in c.groupby("codec"):
            ax.plot(d["split"], d["plain_bytes"] / d["bytes"], marker="o", label=f"{codec}: bytes reduction")
        ax.set(xlabel="split point", ylabel="x fewer bytes sent", title=f"{net}: codecs at the split points")
        tw = ax.twinx()
        for codec, d in a.groupby("codec"):
            tw.plot(d["split"], d["drop_points"], ls="--", marker="x", label=f"{codec}: top-1 drop")
        tw.axhline(1.0, color="firebrick", ls=":", lw=0.8)
        tw.set(ylabel="top-1 drop (points, dashed; dotted: 1 point)")
        ax.legend(fontsize=7, loc="upper left")
        tw.legend(fontsize=7, loc="upper right")
    top1 = ", ".join(f"{n} {100 * v:.1f}%" for n, v in
                     acc.loc[acc["codec"] == "none", ["net", "top1"]].itertuples(index=False))
    return finish(fig, "ScissionLite inputs: CIFAR-10 nets with transfer layers, profiled on the device and the edge",
                  record, "edge", fontsize=9, below=f"base top-1: {top1}")


def split(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    points = pd.read_csv(run_dir / "points.csv")
    curve = pd.read_csv(run_dir / "curve.csv")
    targets = record.get("params", {}).get("targets", {})
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    one = points[points["threads"] == points["threads"].min()]
    wide = one.pivot_table(index="net", columns="method", values="latency_ms").reindex(columns=list(LABELS))
    wide.rename(columns=LABELS).plot.bar(ax=ax, rot=0, width=0.8)
    ax.set(yscale="log", ylabel="latency per image (ms)",
           title=f"latency, device at {one['threads'].min()} thread(s)")
    ax.legend(fontsize=7)
    m = record.get("metrics", {})
    ratio = (f"; device/edge time ratio at the default {m['device_edge_ratio_min']:.3g}-{m['device_edge_ratio_max']:.3g}x"
             if "device_edge_ratio_min" in m else "")
    for ax, key, xlabel in ((axes[1], "assumed.device_slowdown", f"device slowdown (assumed; 1 = this CPU as measured){ratio}"),
                            (axes[2], "bandwidth_mbps", "bandwidth (Mbit/s; the paper's 58.8)")):
        d = curve[curve["key"] == key].sort_values("value")
        for h, color in (("vs_local", "tab:blue"), ("vs_scission", "tab:orange")):
            ax.plot(d["value"], d[h], marker="o", color=color, label=f"ScissionLite {h.replace('_', ' ')}")
            ax.plot(d["value"], d[f"{h}_ceiling"], ls="--", color=color, label=f"ideal split {h.replace('_', ' ')} (ceiling)")
            if h in targets:
                ax.axhline(targets[h], color=color, ls=":", lw=0.8)
        ax.set(xscale="log", yscale="log", ylabel="speedup, largest over nets and threads (x)",
               title="headlines (dotted: the claims' targets)")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.legend(fontsize=7)
    below = (f"at the defaults: {m.get('vs_local', float('nan')):.3g}x over device only, "
             f"{m.get('vs_scission', float('nan')):.3g}x over Scission") if m else ""
    return finish(fig, "ScissionLite's split model (fed by measured profiles)", record, "kind", fontsize=9, below=below)
