"""Figure of the machine ceilings: bandwidths and GEMM rates as measured."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns


def ceilings(run_dir: Path):
    table = pd.read_csv(Path(run_dir) / "ceilings.csv")
    record = json.loads((Path(run_dir) / "record.json").read_text())
    prov = record["provenance"]
    machine = prov.get("gpu_name") or f"CPU ({prov.get('cpu')})"
    kinds = [k for k in ("bandwidth", "compute") if (table.kind == k).any()]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        part = table[table.kind == kind]
        sns.barplot(data=part, x="name", y="value", ax=ax, color="tab:blue")
        ax.set_ylabel(part.unit.iloc[0])
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=30)
        for patch, value in zip(ax.patches, part.value):
            ax.annotate(f"{value:.3g}", (patch.get_x() + patch.get_width() / 2, patch.get_height()),
                        ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"Measured ceilings on {machine} ({record['scale']} scale)")
    fig.tight_layout()
    return fig
