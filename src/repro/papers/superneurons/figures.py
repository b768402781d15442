"""Figures of the SuperNeurons experiments (seaborn on a matplotlib Figure, headless)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from repro.figures import finish, open_run

GIB = 2**30


def _metric(record: dict, key: str) -> str:
    """A metric for a title: measured, else the CPU estimate (marked), else n/a."""
    m = record.get("metrics", {})
    if key in m:
        return f"{m[key]:.2f}"
    return f"{m['est_' + key]:.2f} (estimate)" if "est_" + key in m else "n/a"


def peak_memory(run_dir: Path) -> Figure:
    """Per network: static and dynamic memory of each configuration; dynamic / largest layer."""
    run_dir, record = open_run(run_dir)
    table = pd.read_csv(run_dir / "peak_memory.csv")
    measured = bool(table.measured.any())
    dyn = "dynamic_bytes" if measured else "est_dynamic_bytes"
    static = "static_bytes" if measured else "est_static_bytes"
    ratio = "dynamic_over_largest_layer" if measured else "est_dynamic_over_largest_layer"
    table = table.assign(dynamic_gib=table[dyn] / GIB, static_gib=table[static] / GIB)
    fig = Figure(figsize=(13, 4.2))
    mem, rat = fig.subplots(1, 2)
    sns.barplot(table, x="network", y="dynamic_gib", hue="config", ax=mem)
    sns.barplot(table, x="network", y="static_gib", hue="config", ax=mem, alpha=0.25, legend=False,
                edgecolor="black", linewidth=0.3)
    mem.set(ylabel=("measured" if measured else "estimated") + " GiB (solid dynamic, pale static)",
            title="peak memory by configuration")
    sns.barplot(table, x="network", y=ratio, hue="config", ax=rat, legend=False)
    rat.axhline(1.3, color="firebrick", ls="--", lw=1, label="target 1.3")
    rat.axhline(1.0, color="grey", ls=":", lw=1, label="largest layer")
    rat.set(yscale="log", ylabel="peak dynamic / largest single-layer working set",
            title=f"sn.peak = {_metric(record, 'peak_dynamic_over_largest_layer')}")
    rat.legend(fontsize=8)
    return finish(fig, f"SuperNeurons peak memory, batch {record.get('params', {}).get('batch_size', '')}", record,
                  "memory_source", "timing", "cudnn", "workspace_cap")


def depth(run_dir: Path) -> Figure:
    """Deepest trainable network per arm, and every probe of the search: one row per network (the
    bottleneck ResNet in conv layers, as the record's claims count it; another family in its units)."""
    run_dir, record = open_run(run_dir)
    summary = pd.read_csv(run_dir / "depth.csv")
    probes = pd.read_csv(run_dir / "depth_probes.csv")
    networks = list(dict.fromkeys(summary.network)) if "network" in summary else [None]
    fig = Figure(figsize=(12, 4.2 * len(networks)))
    axes = fig.subplots(len(networks), 2, squeeze=False)
    cap = record.get("params", {}).get("cap_gib", "?")
    probes = probes.assign(outcome=probes.fits.map({True: "fits", False: "fails"}))
    for (bars, search), net in zip(axes, networks):
        rows = summary if net is None else summary[summary.network == net]
        tried = probes if net is None else probes[probes.network == net]
        resnet = "max_conv_layers" in rows and rows.max_conv_layers.notna().all()
        y, unit = ("max_conv_layers", "blocks") if resnet else ("max_depth", rows.unit.iloc[0])
        sns.barplot(rows, x="arm", y=y, hue="arm", ax=bars, legend=False)
        for i, row in enumerate(rows.itertuples()):
            n = row.max_depth if "max_depth" in rows else row.max_blocks
            bars.annotate(f"{n} blocks\n({row.bound})" if resnet else f"{n}\n({row.bound})",
                          (i, getattr(row, y)), ha="center", va="bottom", fontsize=8)
        suffix = "" if net in (None, "resnet") else f"_{net}"
        if resnet:
            bars.set_ylim(top=1.15 * max(rows.max_conv_layers.max(), 2500))  # room for the labels
            if record.get("scale") == "paper":
                bars.axhline(2500, color="firebrick", ls="--", lw=1, label="2,500 conv layers")
        else:
            bars.set_ylim(top=1.2 * max(rows.max_depth.max(), 1))
        bars.set(ylabel="conv layers (3 x blocks + 5)" if resnet else unit,
                 title=f"{net or 'bottleneck ResNet'}: max depth under {cap} GiB; "
                       f"ours / plain = {_metric(record, 'depth_ratio' + suffix)}x")
        x = "blocks" if resnet and "blocks" in tried else "depth"
        sns.scatterplot(tried, x=x, y="arm", hue="outcome", style="outcome", ax=search,
                        palette={"fits": "tab:green", "fails": "tab:red"}, s=50)
        search.set(xscale="log", xlabel=f"{unit} probed (log)", title="search probes")
    return finish(fig, "SuperNeurons depth", record, "memory_source", "timing")


def throughput(run_dir: Path) -> Figure:
    """Images/s of each arm at the equal depth and at the checkpointing arm's maximum depth."""
    run_dir, record = open_run(run_dir)
    table = pd.read_csv(run_dir / "throughput.csv")
    table = table.assign(depth=table.blocks.map(lambda b: f"{b} blocks"))
    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    rounds = int(table["round"].max()) if "round" in table else 1
    sns.barplot(table, x="depth", y="images_per_s", hue="arm", ax=ax, estimator="median",
                errorbar=("pi", 100) if rounds > 1 else None)  # the bars span every round
    ax.set(ylabel="images / s", title=f"ours / plain {_metric(record, 'speed_vs_plain')}x, "
                                      f"ours / checkpoint {_metric(record, 'speed_vs_checkpoint')}x"
                                      + (f"\nmedian of {rounds} rounds (bars: their range)" if rounds > 1 else ""))
    notes = []
    if "recomputed_units" in table:  # what limited ours: recomputation and host copies per step
        ours = table[(table.arm == "ours") & table.fits].drop_duplicates("blocks")
        notes = [f"ours at {r.blocks} blocks: {r.recomputed_units:.0f} units recomputed in "
                 f"{r.recomputed_segments:.0f} segments, {r.offloaded_bytes_per_step / GIB:.2f} GiB offloaded / step"
                 for r in ours.itertuples() if pd.notna(r.recomputed_units)]
    return finish(fig, "SuperNeurons throughput", record, "memory_source", "timing", footnote="\n".join(notes))


def max_batch(run_dir: Path) -> Figure:
    """Largest trainable batch per network and arm (a whisker up to the smallest failing batch where a
    search stopped short of its resolution), ours / plain above each network, and every probe."""
    run_dir, record = open_run(run_dir)
    summary = pd.read_csv(run_dir / "max_batch.csv")
    probes = pd.read_csv(run_dir / "max_batch_probes.csv")
    networks, arms = list(dict.fromkeys(summary.network)), list(dict.fromkeys(summary.arm))
    fig = Figure(figsize=(13, 4.4))
    bars, search = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    sns.barplot(summary, x="network", y="max_batch", hue="arm", order=networks, hue_order=arms, ax=bars)
    top = max(summary.max_batch.max(), summary.min_fail_batch.max(), 1)
    positive = summary.max_batch[summary.max_batch > 0]
    log = len(positive) and top / positive.min() > 20
    for container, arm in zip(bars.containers, arms):  # one bar per network, in order
        rows = summary[summary.arm == arm].set_index("network")
        for patch, net in zip(container, networks):
            r = rows.loc[net]
            x = patch.get_x() + patch.get_width() / 2
            if r.max_batch > 0 and r.min_fail_batch > r.max_batch and r.bound != "exact":  # a bracket
                bars.vlines(x, r.max_batch, r.min_fail_batch, color="black", lw=1)
            if r.max_batch > 0:
                label = ("≥" if r.bound != "exact" else "") + f"{r.max_batch:.0f}"
            else:  # nothing fitted: below the smallest failing batch
                label = f"<{r.min_fail_batch:.0f}" if r.bound == "time" and r.min_fail_batch else "none"
            bars.annotate(label, (x, max(r.max_batch, 1)), ha="center", va="bottom", fontsize=7)
    metrics = record.get("metrics", {})
    ratios = []  # ours / plain under each network's name
    for net in networks:
        key = next((k for k in (f"batch_ratio_{net}", f"est_batch_ratio_{net}") if k in metrics), None)
        ratios.append(f"{net}\n{metrics[key]:.2f}x" if key else net)
    bars.set_xticks(range(len(networks)), ratios)
    bars.set_yscale("log" if log else "linear")
    bars.set_ylim(bottom=1 if log else 0, top=top * (3 if log else 1.15))  # room for the labels
    cap = record.get("params", {}).get("cap_gib", "?")
    span = "n/a"
    for prefix, note in (("", ""), ("est_", " (estimate)")):
        if f"{prefix}batch_ratio_min" in metrics:
            span = (f"{metrics[prefix + 'batch_ratio_min']:.2f} to {metrics[prefix + 'batch_ratio_max']:.2f}x"
                    f"{note}")
            break
    bars.set(xlabel="network (ours / plain)", ylabel="largest batch that trains" + (" (log)" if log else ""),
             title=f"max batch under {cap} GiB; ours / plain {span}")
    bars.legend(title="arm", fontsize=8)
    probes = probes.assign(search=probes.network + " / " + probes.arm,
                           outcome=probes.fits.map({True: "fits", False: "fails"}))
    sns.scatterplot(probes, x="batch_size", y="search", hue="outcome", style="outcome", ax=search,
                    palette={"fits": "tab:green", "fails": "tab:red"}, s=40)
    search.set(xscale="log", xlabel="batch probed (log)", ylabel="", title="search probes")
    return finish(fig, "SuperNeurons largest batch", record, "memory_source", "timing")


def throughput_networks(run_dir: Path) -> Figure:
    """Today's alternatives beside ours, per network: images/s and peak memory of each arm side by side
    (ours at a matched arm's peak as "ours@<arm>"), the matched speed ratios in the title."""
    run_dir, record = open_run(run_dir)
    table = pd.read_csv(run_dir / "throughput.csv")
    matched = table.matched_to.fillna("") if "matched_to" in table else pd.Series("", index=table.index)
    measured = "peak_bytes" in table and table.peak_bytes.notna().any()
    peak = table.peak_bytes if measured else table.est_peak_bytes.where(table.est_peak_bytes > 0)
    table = table.assign(arm=[a if not m else f"{a}@{m}" for a, m in zip(table.arm, matched)], peak_gib=peak / GIB)
    fig = Figure(figsize=(11, 4.2))
    speed, mem = fig.subplots(1, 2)
    fitted = table[table.fits]
    sns.barplot(fitted, x="network", y="images_per_s", hue="arm", ax=speed, estimator="median", errorbar=None)
    sns.barplot(fitted, x="network", y="peak_gib", hue="arm", ax=mem, estimator="median", errorbar=None, legend=False)
    ratios = {k: v for k, v in record.get("metrics", {}).items() if k.startswith("speed_vs_") and "_matched_" in k}
    speed.set(ylabel="images (sequences) / s",
              title=", ".join(f"{k.removeprefix('speed_vs_')} {v:.2f}x" for k, v in ratios.items())
              or "matched-peak ratios: n/a (need CUDA peaks)")
    mem.set(ylabel="peak GiB (CUDA allocator)" if measured else "peak GiB (liveness estimate)",
            title="peak memory")
    return finish(fig, "SuperNeurons vs today's alternatives", record, "timing", "matched_peak")
