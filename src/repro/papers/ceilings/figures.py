"""Figure of the machine ceilings: bandwidths and GEMM rates as measured."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global figure state (headless)

from repro.figures import finish, open_run


def ceilings(run_dir: Path) -> Figure:
    run_dir, record = open_run(run_dir)
    table = pd.read_csv(run_dir / "ceilings.csv")
    kinds = [k for k in ("bandwidth", "compute") if (table.kind == k).any()]
    fig = Figure(figsize=(5 * len(kinds), 3.6))
    axes = fig.subplots(1, len(kinds), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        part = table[table.kind == kind]
        sns.barplot(data=part, x="name", y="value", ax=ax, color="tab:blue")
        ax.set_ylabel(part.unit.iloc[0])
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=30)
        for patch, value in zip(ax.patches, part.value):
            ax.annotate(f"{value:.3g}", (patch.get_x() + patch.get_width() / 2, patch.get_height()),
                        ha="center", va="bottom", fontsize=8)
    return finish(fig, "Measured ceilings", record)
