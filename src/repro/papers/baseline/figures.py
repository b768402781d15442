"""Figures of the baseline arm: accuracy and throughput per epoch; our trainer vs a plain loop."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global figure state (headless)
from matplotlib.ticker import MaxNLocator
from repro.figures import finish, open_run


def train_cifar(run_dir: Path):
    run_dir, record = open_run(run_dir)
    epochs = pd.read_csv(run_dir / "epochs.csv")
    fig = Figure(figsize=(10, 3.8))
    acc, speed = fig.subplots(1, 2)
    acc.plot(epochs.epoch, epochs.test_top1, marker="o", ms=3, label="test")
    acc.plot(epochs.epoch, epochs.train_top1, ls="--", label="train (augmented)")
    best = epochs.test_top1.max()
    acc.axhline(best, color="grey", lw=0.8, ls=":")
    acc.annotate(f"best {best:.2f}%, final {epochs.test_top1.iloc[-1]:.2f}%", (epochs.epoch.iloc[0], best),
                 textcoords="offset points", xytext=(0, 4), fontsize=8)
    acc.set(xlabel="epoch", ylabel="top-1 (%)", title="accuracy")
    for ax in (acc, speed):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    acc.legend(fontsize=8)
    speed.bar(epochs.epoch, epochs.images_per_s, color="tab:green")
    speed.set(xlabel="epoch", ylabel="training images/s", title="throughput (epoch 1 includes warm-up)")
    return finish(fig, f"{record.get('tags', {}).get('model', record.get('experiment', 'model'))} on CIFAR-10", record)


def trainer_bench(run_dir: Path):
    run_dir, record = open_run(run_dir)
    table = pd.read_csv(run_dir / "bench.csv")
    steady = table[~table.warmup] if (~table.warmup).any() else table
    means = steady.groupby("loop", sort=False).images_per_s.mean()
    fig = Figure(figsize=(6, 4.2))
    ax = fig.subplots()
    bars = ax.bar(means.index, means.values, color=["tab:blue", "tab:grey"][: len(means)])
    for bar, value in zip(bars, means.values):
        ax.annotate(f"{value:,.0f}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom", fontsize=9)
    if {"ours", "reference"} <= set(means.index):
        ax.set_title(f"speedup {means['ours'] / means['reference']:.2f}x", fontsize=10)
    labels = {loop: mode for loop, mode in zip(table.loop, table["mode"])}
    ax.set_xticks(range(len(means)), [f"{loop}\n({labels[loop]})" for loop in means.index], fontsize=8)
    ax.set_ylabel("training images/s (after warm-up)")
    model = record.get("tags", {}).get("model", "")
    return finish(fig, f"Our trainer vs a plain PyTorch loop, {model}", record, fontsize=9)
