"""Figures of the ClickTrain arms: per arm, accuracy per epoch coloured by phase and training time
per phase; across arms (compare), accuracy against compression and end-to-end time per phase; the
schedule-length sweep (budget); inference latency of the pruned models (inference); the wide
network's comparison (wide)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global figure state (headless)
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter
from repro.papers.clicktrain.budget import mean_points
from repro.figures import finish, open_run

PHASE_COLORS = {"dense": "tab:grey", "lasso": "tab:orange", "masked": "tab:blue", "admm": "tab:red",
                "retrain": "tab:purple"}


def _color(phase: str) -> str:
    return PHASE_COLORS.get(phase, "tab:green")


def _plain_log(ax, *axes: str) -> None:
    """Plain numbers (2, 5) rather than powers of ten on short log axes."""
    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())


def clicktrain(run_dir: Path) -> Figure:
    """One arm: test top-1 per epoch by phase; seconds per phase (training passes + pruning work)."""
    run_dir, record = open_run(run_dir)
    epochs = pd.read_csv(run_dir / "epochs.csv")
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
    return finish(fig, f"{record.get('experiment', run_dir.name)}: {record.get('tags', {}).get('model', '')} on CIFAR-10",
                  record)


admm = prunetrain = sparse24 = clicktrain  # the same per-arm figure


def compare(run_dir: Path) -> Figure:
    """All arms: top-1 against compression; end-to-end seconds per arm stacked by phase."""
    run_dir, record = open_run(run_dir)
    arms = pd.read_csv(run_dir / "arms.csv")
    phases = pd.read_csv(run_dir / "phases.csv")
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
    return finish(fig, "ClickTrain vs pruning after / during training and 2:4", record)


def budget(run_dir: Path) -> Figure:
    """The schedule-length sweep: final top-1 against the budget in epochs and in end-to-end seconds,
    compression against the budget; each arm's shortest converged budget ringed (open: the largest
    budget swept, so not shown to have converged)."""
    run_dir, record = open_run(run_dir)
    runs = pd.read_csv(run_dir / "points.csv")
    points = mean_points(runs)  # one row per (arm, budget): the mean of its runs
    repeated = bool((points.runs > 1).any())
    table = pd.read_csv(run_dir / "converged.csv")
    tolerance = record.get("metrics", {}).get("tolerance", record.get("params", {}).get("tolerance", float("nan")))
    fig = Figure(figsize=(14, 4.2))
    by_epochs, by_time, comp = fig.subplots(1, 3)
    style = dict(hue="arm", marker="o", hue_order=list(table.arm))
    sns.lineplot(runs, x="budget", y="final_top1", ax=by_epochs, errorbar="sd", **style)
    sns.lineplot(points, x="e2e_s", y="final_top1", ax=by_time, legend=False, **style)
    sns.lineplot(points, x="budget", y="compression", ax=comp, legend=False, **style)
    palette = dict(zip(table.arm, sns.color_palette(n_colors=len(table))))
    for row in table.itertuples():
        by_epochs.scatter(row.shortest_budget, row.top1_at_shortest, s=160, linewidths=1.5, zorder=4,
                          facecolors="none" if not row.converged else palette[row.arm], edgecolors=palette[row.arm],
                          alpha=0.35 if row.converged else 1.0)
    budgets = sorted(points.budget.unique())
    by_epochs.set(xscale="log", xticks=budgets, xlabel="budget E (epochs; ADMM trains 2E)",
                  ylabel="final test top-1 (%)",
                  title=f"ringed: shortest budget within {tolerance:.2g} of the arm's best\n(open ring: the "
                        "largest swept, not shown to converge)" + ("; band: ±1 sd over seeds" if repeated else ""))
    _plain_log(by_epochs, "x")
    by_time.set(xlabel="end-to-end seconds (training + pruning work)", ylabel="final test top-1 (%)",
                title="accuracy against time\n(times of runs that shared a GPU do not compare)")
    comp.set(xscale="log", xticks=budgets, xlabel="budget E (epochs)", ylabel="conv weight compression (dense / nonzero)",
             title="compression")
    _plain_log(comp, "x")
    missing = record.get("tags", {}).get("missing")
    return finish(fig, "ClickTrain arms against schedule length", record, below=missing)


def inference(run_dir: Path) -> Figure:
    """Inference latency: whole-network speedup over dense cuDNN per variant and batch; per layer the
    2:4 GEMM against cuDNN and against the same dense GEMM (largest batch); per arm the MAC reduction
    the masks promise against the speedup the removable channels deliver."""
    run_dir, record = open_run(run_dir)
    layers = pd.read_csv(run_dir / "layers.csv")
    network = pd.read_csv(run_dir / "network.csv")
    dtype = layers.dtype.iloc[0]
    mode = "graph" if record.get("metrics", {}).get("graph_mode") else "eager"
    fig = Figure(figsize=(15, 4.4))
    net, per_layer, promise = fig.subplots(1, 3)
    shown = network[(network.dtype == dtype) & (network["mode"] == mode) & (network.variant != "cudnn")]
    shown = shown.assign(variant=shown.arm + " " + shown.variant)
    sns.barplot(shown, x="batch", y="speedup", hue="variant", ax=net)
    net.axhline(1.0, color="black", lw=0.8)
    net.set(ylabel=f"speedup over dense cuDNN ({dtype}, {mode})", title="whole network")
    net.legend(fontsize=7)
    largest = layers[(layers.dtype == dtype) & (layers.batch == layers.batch.max())]
    rows = pd.concat([
        largest[largest.method == "im2col_gemm_24"].assign(comparison="im2col + 2:4 GEMM / cuDNN", value=lambda d: d.speedup),
        largest[largest.method == "gemm_24"].assign(comparison="2:4 GEMM / dense GEMM", value=lambda d: d.speedup_vs_gemm),
        largest[largest.method == "im2col_gemm_dense"].assign(comparison="im2col + dense GEMM / cuDNN",
                                                              value=lambda d: d.speedup)])
    if rows.value.notna().any():
        sns.lineplot(rows, x="index", y="value", hue="comparison", marker="o", ax=per_layer)
        per_layer.axhline(1.0, color="black", lw=0.8)
        per_layer.legend(fontsize=7)
    else:
        reasons = largest[largest.method == "gemm_24"].status.dropna().unique()
        per_layer.text(0.5, 0.5, "no 2:4 timing:\n" + "\n".join(r[:60] for r in reasons[:2]), ha="center",
                       va="center", fontsize=8, transform=per_layer.transAxes, wrap=True)
    per_layer.set(xlabel="conv layer", ylabel="speedup", yscale="log",
                  title=f"2:4 per layer, batch {largest.batch.max()} (above 1: faster)")
    _plain_log(per_layer, "y")
    compact = network[(network.dtype == dtype) & (network["mode"] == mode) & (network.variant == "compact")
                      & (network.batch == network.batch.max())]
    macs = layers[(layers.dtype == dtype) & (layers.batch == layers.batch.max()) & (layers.method == "compact")]
    macs = macs.groupby("arm")[["macs_dense", "macs_nonzero", "macs_compact"]].sum()
    for row in compact.itertuples():
        promised = macs.macs_dense[row.arm] / macs.macs_nonzero[row.arm]
        removable = macs.macs_dense[row.arm] / macs.macs_compact[row.arm]
        promise.scatter(promised, row.speedup, s=50, label=f"{row.arm} (removable channels: {removable:.2f}x MACs)")
        promise.annotate(row.arm, (promised, row.speedup), textcoords="offset points", xytext=(4, 4), fontsize=8)
    top = max(2.0, (macs.macs_dense / macs.macs_nonzero).max())
    promise.plot([1, top], [1, top], color="grey", ls=":", lw=1, label="speedup = MAC reduction")
    promise.set(xscale="log", yscale="log", xlabel="conv MACs dense / nonzero (the masks' promise)",
                ylabel=f"whole-network speedup, compact ({dtype}, batch {network.batch.max()})",
                title="pattern sparsity: promised vs delivered")
    _plain_log(promise, "x", "y")
    promise.legend(fontsize=7)
    return finish(fig, f"Inference latency of the pruned {record.get('tags', {}).get('model', '')} on "
                  f"{record.get('provenance', {}).get('gpu_name') or record.get('device', '')}", record,
                  "timing", "sparse_backend")


def wide(run_dir: Path) -> Figure:
    """The wide network's comparison: every run's top-1 against its compression (ClickTrain's and
    PruneTrain's curves through their configured means, the other arms' runs as points), and the
    measured whole-schedule seconds of each configured run by arm."""
    run_dir, record = open_run(run_dir)
    runs = pd.read_csv(run_dir / "points.csv")
    curves = pd.read_csv(run_dir / "curves.csv")
    metrics = record.get("metrics", {})
    fig = Figure(figsize=(11, 4.2))
    acc, times = fig.subplots(1, 2)
    palette = dict(zip(runs.arm.unique(), sns.color_palette(n_colors=runs.arm.nunique())))
    sns.scatterplot(runs, x="compression", y="final_top1", hue="arm", style="kind", ax=acc, s=40, palette=palette)
    for arm, curve in curves.groupby("arm", sort=False):
        curve = curve.sort_values("compression")
        acc.plot(curve.compression, curve.final_top1, lw=1, alpha=0.7, color=palette.get(arm))
    acc.set(xscale="log", xlabel="conv weight compression (dense / nonzero)", ylabel="final test top-1 (%)",
            title=f"at equal compression: ClickTrain {metrics.get('top1_vs_prunetrain_equal', float('nan')):+.2f}"
                  f" points over PruneTrain\n(interpolated in log compression, never extrapolated)")
    _plain_log(acc, "x")
    configured = runs[runs.kind == "configured"]
    sns.barplot(configured, x="arm", y="schedule_s", ax=times, errorbar="sd")
    times.set(xlabel="", ylabel="measured whole schedule (s)",
              title=f"ADMM / ClickTrain {metrics.get('schedule_speedup', float('nan')):.2f}x "
                    f"(sd {metrics.get('schedule_speedup_sd', float('nan')):.2f}, paired by seed)")
    return finish(fig, "ClickTrain on the artifact's wide ResNet-32", record, below=record.get("tags", {}).get("missing"))
