"""Figure of VectorMesh's baselines (summary.csv): global-buffer and DRAM reads per workload and
accelerator, as ZigZag counts them."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro.figures import finish, open_run  # noqa: E402


def baselines(run_dir: Path) -> plt.Figure:
    run_dir, record = open_run(run_dir)
    df = pd.read_csv(run_dir / "summary.csv")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, col, title in ((axes[0], "gb_reads", "global-buffer reads"), (axes[1], "dram_reads", "DRAM reads")):
        sns.barplot(data=df, x="workload", y=col, hue="accelerator", ax=ax)
        ax.set(yscale="log", ylabel="words", title=f"{title} (ZigZag, best-energy mapping)")
    return finish(fig, "VectorMesh baselines: memory reads per workload", record, "tool", fontsize=9)
