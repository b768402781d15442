"""Figures of the ClickTrain arms: per arm, accuracy per epoch coloured by phase and training time
per phase; across arms (compare), accuracy against compression and end-to-end time per phase."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global figure state (headless)
from matplotlib.ticker import MaxNLocator
from repro.figures import run_record, run_subtitle

PHASE_COLORS = {"dense": "tab:grey", "lasso": "tab:orange", "masked": "tab:blue", "admm": "tab:red",
                "retrain": "tab:purple"}


def _color(phase: str) -> str:
    return PHASE_COLORS.get(phase, "tab:green")


def clicktrain(run_dir: Path) -> Figure:
    """One arm: test top-1 per epoch by phase; seconds per phase (training passes + pruning work)."""
    run_dir = Path(run_dir)
    epochs = pd.read_csv(run_dir / "epochs.csv")
    record = run_record(run_dir)
    metrics = record.get("metrics", {})
    fig = Figure(figsize=(10, 3.8))
    acc, times = fig.subplots(1, 2)
    acc.plot(epochs.epoch, epochs.test_top1, color="black", lw=0.8)
    for phase, rows in epochs.groupby("phase", sort=False):
        acc.scatter(rows.epoch, rows.test_top1, s=12, color=_color(phase), label=phase, zorder=3)
    acc.set(xlabel="epoch", ylabel="test top-1 (%)",
            title=f"final {epochs.test_top1.iloc[-1]:.2f}%, compression {metrics.get('compression', float('nan')):.1f}x")
    acc.xaxis.set_major_locator(MaxNLocator(integer=True))
    acc.legend(fontsize=8)
    per_phase = epochs.groupby("phase", sort=False)[["train_s", "hook_s"]].sum().sum(axis=1)
    bars = times.bar(per_phase.index, per_phase.values, color=[_color(p) for p in per_phase.index])
    for bar, (phase, seconds) in zip(bars, per_phase.items()):
        n = int((epochs.phase == phase).sum())
        times.annotate(f"{seconds:.0f}s\n{n} ep", (bar.get_x() + bar.get_width() / 2, seconds), ha="center",
                       va="bottom", fontsize=8)
    times.set(ylabel="seconds (training + pruning work)", title=f"end to end {per_phase.sum():.0f}s")
    fig.suptitle(f"{record.get('experiment', run_dir.name)}: {record.get('tags', {}).get('model', '')} on CIFAR-10\n"
                 f"{run_subtitle(record)}", fontsize=10)
    fig.tight_layout()
    return fig


admm = prunetrain = sparse24 = clicktrain  # the same per-arm figure


def compare(run_dir: Path) -> Figure:
    """All arms: top-1 against compression; end-to-end seconds per arm stacked by phase."""
    run_dir = Path(run_dir)
    arms = pd.read_csv(run_dir / "arms.csv")
    phases = pd.read_csv(run_dir / "phases.csv")
    record = run_record(run_dir)
    fig = Figure(figsize=(11, 4.2))
    scatter, bars = fig.subplots(1, 2)
    for row in arms.itertuples():
        scatter.scatter(row.compression, row.final_top1, s=40)
        scatter.annotate(row.arm, (row.compression, row.final_top1), textcoords="offset points", xytext=(4, 4),
                         fontsize=8)
    scatter.set(xscale="log", xlabel="conv weight compression (dense / nonzero, log)", ylabel="final test top-1 (%)",
                title="accuracy vs compression")
    order = list(dict.fromkeys(phases.arm))
    bottom = pd.Series(0.0, index=order)
    for phase, rows in phases.groupby("phase", sort=False):
        values = rows.set_index("arm").seconds.reindex(order).fillna(0.0)
        bars.bar(order, values.values, bottom=bottom.values, color=_color(phase), label=phase)
        bottom += values
    speedup = record.get("metrics", {}).get("e2e_speedup")
    bars.set(ylabel="seconds (training + pruning work)",
             title="end-to-end time" + (f" (admm / clicktrain {speedup:.2f}x)" if speedup else ""))
    bars.legend(fontsize=8)
    fig.suptitle(f"ClickTrain vs pruning after / during training and 2:4\n{run_subtitle(record)}", fontsize=10)
    fig.tight_layout()
    return fig
