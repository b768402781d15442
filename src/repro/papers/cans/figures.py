"""Figures of CANS: the measured surfaces (``edge_load``: per-layer latency on the device, and the
edge's whole-net latency over the number of concurrent clients) and the bandit (``bandit``: latency
and regret per step of each policy, and the headline over each assumed parameter's span)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402

LABELS = {"cans": "CANS (FedLinUCB-DW)", "fedlinucb_no_grouping": "FedLinUCB, no grouping",
          "fedlinucb_no_warm_start": "FedLinUCB, no warm start", "ans": "ANS (per-device LinUCB)",
          "static": "static split (Neurosurgeon)", "oracle": "oracle (true bandwidth)"}


def edge_load(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    layers = pd.read_csv(run_dir / "layers.csv")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (net, role, threads, clients), d in layers.groupby(["net", "role", "threads", "clients"]):
        if role == "device" or clients == layers["clients"].max() or clients == 1:
            label = f"{net}, device {threads} thread(s)" if role == "device" else f"{net}, edge, {clients} client(s)"
            axes[0].plot(d["unit"], d["time_s"] * 1e6, marker=".", ms=3, label=label)
    axes[0].set(yscale="log", xlabel="unit (layers, then the head)", ylabel="median latency, batch 1 (us)",
                title="per-layer latency")
    axes[0].legend(fontsize=7)
    edge = layers[layers["role"] == "edge"].groupby(["net", "clients"])["time_s"].sum().reset_index()
    for net, d in edge.groupby("net"):
        axes[1].plot(d["clients"], d["time_s"] * 1e3, marker="o", label=net)
    axes[1].set(xlabel="concurrent clients", ylabel="whole net on the edge, as one client sees it (ms)",
                title="the edge under load")
    axes[1].legend(fontsize=7)
    return finish(fig, "CANS inputs: latency surfaces of the device and the shared edge", record, "edge", fontsize=9)


def bandit(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    steps = pd.read_csv(run_dir / "steps.csv")
    tornado = pd.read_csv(run_dir / "tornado.csv")
    m = record.get("metrics", {})
    target = record.get("params", {}).get("target")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    window = max(1, int(steps["step"].max() + 1) // 20)
    for q, d in steps.groupby("policy", sort=False):
        for ax, col in zip(axes[:2], ("latency_ms", "regret_ms")):
            ax.plot(d["step"], d[col].rolling(window, min_periods=1).mean(), label=LABELS.get(q, q))
    axes[0].set(yscale="log", xlabel="step (one inference per device)", ylabel=f"mean latency (ms, {window}-step mean)",
                title="latency over time")
    axes[1].set(yscale="symlog", xlabel="step", ylabel=f"regret per step (ms, {window}-step mean)",
                title="regret: latency minus the best split's at that step")
    axes[0].legend(fontsize=7)
    ax = axes[2]
    rows = tornado.sort_values("swing")
    base = float(rows["base"].iloc[0]) if len(rows) else np.nan
    for i, r in enumerate(rows.itertuples()):
        ax.barh(i, r.value_low - base, left=base, color="tab:blue", height=0.7)
        ax.barh(i, r.value_high - base, left=base, color="tab:orange", height=0.7, alpha=0.85)
    ax.set_yticks(range(len(rows)), [f"{r.key.split('.', 1)[1]} [{r.low:g}..{r.high:g}]" for r in rows.itertuples()],
                  fontsize=7)
    ax.axvline(base, color="black", lw=1.2, label=f"baseline {base:.3g}%")
    if target is not None:
        ax.axvline(target, color="firebrick", ls="--", label=f"claim's target {target:g}%")
    ax.set(xlabel="1 - latency(CANS) / latency(ANS) (%): blue low end, orange high end",
           title="the headline over each assumed parameter")
    ax.legend(fontsize=7)
    below = (f"CANS {m.get('cans_latency_ms', np.nan):.3g} ms, ANS {m.get('ans_latency_ms', np.nan):.3g} ms: "
             f"{m.get('latency_reduction_pct', np.nan):.1f}% lower; oracle {m.get('oracle_reduction_vs_ans_pct', np.nan):.1f}%"
             f" lower; mabwiser agrees on {100 * m.get('mabwiser_choice_match', np.nan):.0f}% of choices")
    return finish(fig, "CANS: split-point bandits on a shared edge (model fed by measured surfaces)", record,
                  "kind", "devices", fontsize=9, below=below)
