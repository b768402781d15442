"""Figures of the Caramel runs: the gradient timelines, iteration time per arm and link (model), and
the model against gloo runs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402

LABELS = {"no_overlap": "no overlap", "ddp": "DDP default (25 MiB)", "horovod": "Horovod fusion (simulated)",
          "caramel_ddp": "Caramel as a DDP hook", "caramel": "Caramel (transfer boundaries)"}


def timelines(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    d = pd.read_csv(run_dir / "timelines.csv")
    models = list(dict.fromkeys(d["model"]))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name in models:
        m = d[d["model"] == name].sort_values("ready_s")
        back = float(m["backward_s"].iloc[0])
        ax.step(1e3 * m["ready_s"], m["bytes"].cumsum() / 2**20, where="post",
                label=f"{name} ({m['bytes'].sum() / 2**20:.0f} MiB, backward {1e3 * back:.1f} ms)")
    ax.set(xlabel="time into backward (ms)", ylabel="gradient MiB ready (cumulative)")
    ax.legend(fontsize=7)
    device = record.get("tags", {}).get("device", "?")
    return finish(fig, f"Caramel: gradient timelines ({device})", record, fontsize=9)


def model(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    d = pd.read_csv(run_dir / "arms.csv")
    models = list(dict.fromkeys(d["model"]))
    linkorder = list(dict.fromkeys(d["link"]))
    arms = [a for a in LABELS if a in set(d["arm"])]
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4.0), squeeze=False)
    width = 0.8 / len(arms)
    for ax, name in zip(axes[0], models):
        m = d[d["model"] == name]
        for j, arm in enumerate(arms):
            vals = [1e3 * float(m[(m["link"] == link) & (m["arm"] == arm)]["iteration_s"].iloc[0]) for link in linkorder]
            ax.bar([i + (j - (len(arms) - 1) / 2) * width for i in range(len(linkorder))], vals, width, label=LABELS[arm])
        ax.axhline(1e3 * float(m["compute_s"].iloc[0]), color="black", lw=0.8, ls="--")
        ax.set_xticks(range(len(linkorder)), linkorder)
        ax.set_yscale("log")
        ax.set(title=name, ylabel="iteration time (ms; dashed: compute alone)")
    axes[0][0].legend(fontsize=7)
    m = record.get("metrics", {})
    return finish(fig, f"Caramel model (SimPy, not hardware): iteration time per arm and link; DDP / Caramel at 10 Gb/s "
                       f"max {m.get('speedup', float('nan')):.2f}x (paper up to 3.62x)", record, fontsize=9)


def gloo(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    d = pd.read_csv(run_dir / "arms.csv")
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(d))
    ax.bar([x - 0.2 for x in xs], 1e3 * d["measured_s"], 0.4, label="measured (gloo, loopback)")
    ax.bar([x + 0.2 for x in xs], 1e3 * d["model_s"], 0.4, label="model")
    for x, e in zip(xs, d["error"]):
        ax.annotate(f"{e:+.0%}", (x + 0.2, 0), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set_xticks(list(xs), [LABELS.get(a, a) for a in d["arm"]], fontsize=8)
    ax.set(ylabel="iteration time (ms)")
    ax.legend(fontsize=7)
    m = record.get("metrics", {})
    return finish(fig, f"Caramel: model vs gloo runs, largest error {m.get('model_error_max', float('nan')):.0%}",
                  record, fontsize=9)
