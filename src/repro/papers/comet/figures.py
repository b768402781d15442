"""Figures of the COMET experiments (seaborn): compressor throughput and ratio; per training arm
the accuracy curve, per-layer compression and (adaptive) the error bounds chosen over training;
across arms memory against accuracy; our ratios against SZ3's; the error-bound sweep against the
claim's target region."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402
from repro.figures import finish, open_run  # noqa: E402

MIB = 2**20


def compressor_bench(run_dir: Path) -> Figure:
    """GB/s of compress and decompress per case, with the copy and naive-quantise lines; ratio per case."""
    run_dir, record = open_run(run_dir)
    bench = pd.read_csv(run_dir / "bench.csv")
    metrics = record.get("metrics", {})
    sns.set_theme(style="whitegrid", context="paper")
    bench["case"] = bench.kind + "\neb=" + bench.eb.map("{:g}".format)
    if "layout" in bench and bench.layout.nunique() > 1:
        bench["case"] += "\n" + bench.layout
    if "codec" in bench and bench.codec.nunique() > 1:  # the v4 arm beside v3
        bench["case"] = bench.codec + " " + bench.case
    speed = bench.melt(id_vars=["case"], value_vars=["compress_gbps", "decompress_gbps"], var_name="direction",
                       value_name="GB/s")
    speed["direction"] = speed.direction.str.replace("_gbps", "")
    fig = Figure(figsize=(11, 4))
    ax, rx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    sns.barplot(data=speed, x="case", y="GB/s", hue="direction", ax=ax)
    for key, label, color in (("copy_gbps", "device copy", "black"), ("torch_quantize_gbps", "naive torch quantise",
                                                                         "firebrick")):
        if key in metrics:
            ax.axhline(metrics[key], color=color, ls="--", lw=1, label=f"{label} {metrics[key]:.0f}")
    ax.axhline(1000, color="grey", ls=":", lw=1, label="target 1000")
    ax.set(title="throughput (input bytes / time)", xlabel="")
    ax.legend(fontsize=7)
    sns.barplot(data=bench, x="case", y="ratio", ax=rx, color="tab:green")
    for i, row in enumerate(bench.itertuples()):
        rx.annotate(f"err/eb {row.max_err_over_eb:.3f}", (i, row.ratio), ha="center", va="bottom", fontsize=7)
    rx.set(title="compression ratio", xlabel="")
    return finish(fig, f"COMET compressor on {int(bench['values'].iloc[0]) * 4 / MIB:.0f} MiB of float32 activations",
                  record, "backend", fontsize=9)


def train_arm(run_dir: Path) -> Figure:
    """Test top-1 per epoch; stored vs raw bytes per layer in the probe step; eb over steps (adaptive)."""
    run_dir, record = open_run(run_dir)
    epochs = pd.read_csv(run_dir / "epochs.csv")
    layers = pd.read_csv(run_dir / "layers.csv")
    decisions = run_dir / "decisions.csv"
    sns.set_theme(style="whitegrid", context="paper")
    panels = 3 if decisions.is_file() else 2
    fig = Figure(figsize=(5 * panels, 4))
    axes = fig.subplots(1, panels)
    sns.lineplot(data=epochs, x="epoch", y="test_top1", marker="o", ax=axes[0])
    axes[0].set(ylabel="test top-1 (%)", title=f"final {epochs.test_top1.iloc[-1]:.2f}%")
    big = layers.sort_values("raw_bytes", ascending=False).head(24)
    long = big.melt(id_vars=["layer"], value_vars=["raw_bytes", "stored_bytes"], var_name="", value_name="bytes")
    long["MiB"] = long.bytes / MIB
    sns.barplot(data=long, y="layer", x="MiB", hue="", ax=axes[1], orient="h")
    m = record.get("metrics", {})
    axes[1].set(title=f"saved activations, probe step (ratio {m.get('act_ratio', float('nan')):.2f}x)", ylabel="")
    axes[1].tick_params(axis="y", labelsize=6)
    if panels == 3:
        d = pd.read_csv(decisions)
        sns.lineplot(data=d, x="step", y="eb_new", hue="rule", estimator="median", errorbar=("pi", 80), ax=axes[2])
        axes[2].set(yscale="log", ylabel="eb (median over layers, 10-90%)", title="adaptive error bounds")
    return finish(fig, f"{record.get('experiment', run_dir.name)}: {record.get('tags', {}).get('model', '')} "
                  f"method {record.get('tags', {}).get('method', '')}", record, fontsize=9)


def sz3_reference(run_dir: Path) -> Figure:
    """Total ratio of ours and SZ3 per error bound; per-tensor ratios."""
    run_dir, record = open_run(run_dir)
    table = pd.read_csv(run_dir / "sz3.csv")
    sns.set_theme(style="whitegrid", context="paper")
    codecs = ["ours"] + (["sz3"] if "sz3_bytes" in table else [])
    totals = pd.DataFrame([dict(eb=eb, codec=c, ratio=g.raw_bytes.sum() / g[f"{c}_bytes"].sum())
                           for eb, g in table.groupby("eb") for c in codecs])
    per_tensor = pd.DataFrame([dict(tensor=r.tensor, eb=r.eb, codec=c, ratio=r.raw_bytes / getattr(r, f"{c}_bytes"))
                               for r in table.itertuples() for c in codecs])
    fig = Figure(figsize=(11, 4))
    ax, tx = fig.subplots(1, 2)
    sns.barplot(data=totals, x="eb", y="ratio", hue="codec", ax=ax)
    ax.set(title="all saved activations", xlabel="absolute error bound")
    sns.lineplot(data=per_tensor, x="tensor", y="ratio", hue="codec", style="eb", ax=tx)
    tx.set(yscale="log", title="per saved tensor (forward order)")
    return finish(fig, f"ours vs SZ3 on dumped activations ({record.get('tags', {}).get('sz3', '')})", record, fontsize=9)


def compare(run_dir: Path) -> Figure:
    """Activation memory and top-1 per arm."""
    run_dir, record = open_run(run_dir)
    arms = pd.read_csv(run_dir / "arms.csv")
    arms["act MiB"] = arms.act_mem_bytes / MIB
    sns.set_theme(style="whitegrid", context="paper")
    fig = Figure(figsize=(11, 4))
    ax, tx = fig.subplots(1, 2)
    sns.barplot(data=arms, x="arm", y="act MiB", ax=ax, color="tab:blue")
    for i, (mib, reduction) in enumerate(zip(arms["act MiB"], arms.mem_reduction)):
        ax.annotate(f"{reduction:.1f}x", (i, mib), ha="center", va="bottom", fontsize=8)
    ax.set(title="activation memory of one training step", xlabel="")
    sns.barplot(data=arms, x="arm", y="final_top1", ax=tx, color="tab:orange")
    lo = arms.final_top1.min()
    tx.set(ylim=(max(0, lo - 5), arms.final_top1.max() + 1), title="final test top-1 (%)", xlabel="")
    m = record.get("metrics", {})
    return finish(fig, f"COMET vs uncompressed and ActNN 2-bit: reduction {m.get('mem_reduction', float('nan')):.2f}x, "
                  f"vs ActNN {m.get('vs_actnn', float('nan')):.2f}x, top-1 loss {m.get('top1_loss', float('nan')):.2f}",
                  record, fontsize=9)


def max_batch(run_dir: Path) -> Figure:
    """Memory of each probed training step against its batch, per method, with the cap."""
    run_dir, record = open_run(run_dir)
    probes = pd.read_csv(run_dir / "probes.csv")
    probes["MiB"] = probes.step_bytes / MIB
    sns.set_theme(style="whitegrid", context="paper")
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    sns.scatterplot(data=probes[probes.MiB < float("inf")], x="batch", y="MiB", hue="method", style="fits", ax=ax)
    cap = record.get("params", {}).get("cap_mib")
    if cap:
        ax.axhline(cap, color="grey", ls="--", lw=1, label=f"cap {cap} MiB")
    m = record.get("metrics", {})
    best = ", ".join(f"{k.removeprefix('max_batch_')} {v:.0f}" for k, v in m.items() if k.startswith("max_batch_"))
    ax.set(xscale="log", yscale="log", title=f"largest batch: {best}")
    ax.legend(fontsize=7)
    return finish(fig, f"{record.get('tags', {}).get('model', '')} training step memory", record, fontsize=9)


def step_bench(run_dir: Path) -> Figure:
    """Training-step images/s per arm (median round; ratios against none in the same mode), with the
    host time spent in the codec."""
    run_dir, record = open_run(run_dir)
    steps = pd.read_csv(run_dir / "steps.csv")
    if "arm" not in steps:  # records before the arena and CUDA-graph arms: one eager arm per method
        steps["arm"], steps["mode"] = steps.method, "eager"
    med = steps.groupby("arm", sort=False).median(numeric_only=True).reset_index()
    mode = steps.groupby("arm", sort=False)["mode"].first()
    speed = med.set_index("arm").images_per_s
    med["ratio"] = [speed[a] / speed["none@cudagraph" if mode[a] == "cudagraph" else "none"] for a in med.arm]
    base = float(speed["none"])
    sns.set_theme(style="whitegrid", context="paper")
    fig = Figure(figsize=(9, 4))
    ax, hx = fig.subplots(1, 2)
    sns.barplot(data=med, x="arm", y="images_per_s", ax=ax, color="tab:blue")
    for i, row in enumerate(med.itertuples()):
        ax.annotate(f"{row.ratio:.2f}x", (i, row.images_per_s), ha="center", va="bottom", fontsize=8)
    ax.axhline(0.8 * base, color="grey", ls=":", lw=1, label="target 0.8x uncompressed (eager)")
    if "none@cudagraph" in speed:
        ax.axhline(0.8 * speed["none@cudagraph"], color="black", ls=":", lw=1, label="0.8x uncompressed (CUDA graph)")
    ax.tick_params(axis="x", labelrotation=30)
    ax.set(title="training step, images/s", xlabel="arm", ylabel="images / s")
    ax.legend(fontsize=7)
    med["host_codec_ms"] = 1e3 * med.host_codec_s
    med["step_ms"] = 1e3 * med.step_s
    sns.barplot(data=med.melt(id_vars="arm", value_vars=["step_ms", "host_codec_ms"], var_name="part",
                              value_name="ms"), x="arm", y="ms", hue="part", ax=hx)
    hx.set(title="ms per step and host ms inside encode/decode", xlabel="arm")
    hx.tick_params(axis="x", labelrotation=30)
    tags = record.get("tags", {})
    return finish(fig, f"COMET arms side by side: {tags.get('model', '')}, batch {tags.get('batch', '')}", record,
                  fontsize=9)


OFF_SCALE = 10.0  # points of top-1 loss


def eb_sweep(run_dir: Path) -> Figure:
    """Top-1 loss against memory reduction per sweep point, one line per arm in order of its swept
    value (each point labelled with it), the target region shaded, ActNN 2-bit and the uncompressed
    run marked. Losses past ``OFF_SCALE`` points (a run that diverged) are drawn at that edge with
    their value written, so the points that matter keep their resolution."""
    run_dir, record = open_run(run_dir)
    pts = pd.read_csv(run_dir / "points.csv")
    params, m = record.get("params", {}), record.get("metrics", {})
    target, max_loss = params.get("target_reduction", 13.5), params.get("max_top1_loss", 0.5)
    pts["sweep"] = pts.arm + " (" + pts.parameter + ")"
    off = pts.top1_loss > OFF_SCALE
    pts["shown"] = pts.top1_loss.clip(upper=OFF_SCALE)
    sns.set_theme(style="whitegrid", context="paper")
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    sns.lineplot(data=pts, x="mem_reduction", y="shown", hue="sweep", marker="o", sort=False, estimator=None,
                 ax=ax)
    below = {sweep: i % 2 == 0 for i, sweep in enumerate(pts.sweep.unique())}  # alternate: close lines stay legible
    for row in pts.itertuples():
        ax.annotate(f"{row.value:g}", (row.mem_reduction, row.shown), xytext=(4, -10 if below[row.sweep] else 4),
                    textcoords="offset points", fontsize=7)
    for row in pts[off].itertuples():
        ax.scatter([row.mem_reduction], [row.shown], marker="^", s=60, color="tab:red", zorder=5)
        ax.annotate(f"off scale: {row.top1_loss:.1f} points", (row.mem_reduction, row.shown), xytext=(-8, -14),
                    textcoords="offset points", fontsize=7, color="tab:red", ha="right")
    xs, ys = [1.0, target, *pts.mem_reduction], [0.0, max_loss, *pts.shown]
    if "actnn_mem_reduction" in m:
        x, y = m["actnn_mem_reduction"], m["actnn_top1_loss"]
        ax.scatter([x], [y], marker="*", s=160, color="black", zorder=4, label=f"ActNN 2-bit ({x:.1f}x, {y:+.2f})")
        xs, ys = xs + [x], ys + [y]
    ax.scatter([1.0], [0.0], marker="X", s=60, color="grey", zorder=4, label="uncompressed")
    best = pts[pts.point == record.get("tags", {}).get("best_point")]
    if len(best):
        ax.scatter(best.mem_reduction, best.shown, s=220, facecolors="none", edgecolors="tab:green", linewidths=1.5,
                   zorder=5, label=f"largest reduction within {max_loss:g} points")
    xlim, ylim = (min(xs) / 1.3, max(xs) * 1.3), (min(ys) - 0.5, max(ys) + 0.5)
    # the claim's region: at least the target reduction at no more than the allowed top-1 loss
    ax.fill_between([target, xlim[1]], ylim[0], max_loss, color="tab:green", alpha=0.15, lw=0,
                    label=f"target: >= {target:g}x, loss <= {max_loss:g}")
    ax.axhline(0, color="black", lw=0.8)
    ticks = sorted(t for t in {1, 2, 3, 5, 10, 20, 30, 50, 100, target} if xlim[0] <= t <= xlim[1])
    ax.set(xscale="log", xlim=xlim, ylim=ylim, xticks=ticks, xticklabels=[f"{t:g}x" for t in ticks],
           xlabel="activation memory reduction (uncompressed / point)",
           ylabel="top-1 loss vs uncompressed (points; below 0: better)")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7)
    ax.set_title(f"largest reduction within {max_loss:g} points: "
                 f"{m.get('best_mem_reduction_within_acc', float('nan')):.2f}x "
                 f"({record.get('tags', {}).get('best_point', 'none')}); labels: swept value", fontsize=9)
    return finish(fig, "COMET error-bound sweep (ResNet-32 arms)", record, fontsize=9)
