"""The figures every model paper draws from ``repro.sim.sensitivity``'s tables: the sensitivity figure
(``study``: a bar per screened parameter, largest relative change of any headline number, the
threshold dotted, and a curve per sensitive parameter) and the tornado chart (``tornado``: the
claim's headline at each assumed parameter's low and high end, the baseline and the target marked)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import pandas as pd  # noqa: E402


def sensitivity(screen: pd.DataFrame, curves: pd.DataFrame, headlines: dict[str, str], threshold: float,
                model: str) -> plt.Figure:
    """``headlines``: column -> axis label. Scene/game/network keys are factors (default 1). The
    caller titles and lays it out (``repro.figures.finish``)."""
    worst = screen.groupby("key")["max_rel_change_of_key"].max().sort_values()
    keys = sorted(curves["key"].unique()) if len(curves) else []
    ncols = 4
    nrows = 1 + math.ceil(len(keys) / ncols)
    fig = plt.figure(figsize=(4.2 * ncols, 3.0 * nrows + 0.6 * len(worst) / 8))
    grid = fig.add_gridspec(nrows, ncols, height_ratios=[max(1.0, len(worst) / 8)] + [1.0] * (nrows - 1))
    ax = fig.add_subplot(grid[0, :])
    colors = ["tab:red" if v > threshold else "tab:gray" for v in worst.values]
    ax.barh(worst.index, 100 * worst.values, color=colors)
    ax.axvline(100 * threshold, color="black", ls=":", lw=1)
    ax.set(xlabel="largest change of a headline number at the screened factors (%)",
           title=f"{model}: sensitivity to each assumed parameter (red: > {threshold:.0%}, curve below)")
    ax.tick_params(axis="y", labelsize=7)
    markers = ["o", "s", "^", "D"]
    for n, key in enumerate(keys):
        ax = fig.add_subplot(grid[1 + n // ncols, n % ncols])
        d = curves[curves["key"] == key].sort_values("value")
        default = float(d["default"].iloc[0])
        for m, (col, label) in enumerate(headlines.items()):
            target = ax if m == 0 else ax.twinx()
            target.plot(d["value"], d[col], marker=markers[m], ms=3, color=f"C{m}", label=label)
            target.set_ylabel(label, color=f"C{m}", fontsize=7)
            target.tick_params(labelsize=7)
        ax.axvline(default, color="black", ls=":", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_title(key, fontsize=8)
    return fig


def tornado(table: pd.DataFrame, target: float | None, metric: str, model: str) -> plt.Figure:
    """``table``: repro.sim.sensitivity.tornado's. One bar per assumed parameter from the baseline to
    the headline at its low end (blue) and its high end (orange), the largest swing on top, each
    labelled with its range; a solid line at the baseline value, a dashed one at the claim's target.
    The caller titles it (``repro.figures.finish``)."""
    base = float(table["base"].iloc[0])
    rows = table.sort_values(["swing", "key"], ascending=[True, False], kind="stable")
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.3 * len(rows)))
    for i, r in enumerate(rows.itertuples()):
        ax.barh(i, r.value_low - base, left=base, color="tab:blue", height=0.7)
        ax.barh(i, r.value_high - base, left=base, color="tab:orange", height=0.7, alpha=0.85)
    ax.set_yticks(range(len(rows)), [f"{r.key}  [{r.low:g} .. {r.high:g}]" for r in rows.itertuples()], fontsize=7)
    ax.axvline(base, color="black", lw=1.2)
    handles = [Patch(color="tab:blue", label="at the low end"), Patch(color="tab:orange", label="at the high end"),
               plt.Line2D([], [], color="black", lw=1.2, label=f"baseline {base:.3g}")]
    if target is not None:
        ax.axvline(target, color="firebrick", ls="--", lw=1.2)
        handles.append(plt.Line2D([], [], color="firebrick", ls="--", lw=1.2, label=f"claim's target {target:.3g}"))
    values = [base, *rows["value_low"], *rows["value_high"]]
    ax.set(xlabel=f"{metric}, one assumed parameter at an end of its range, the rest at their defaults",
           title=f"{model}: {metric} over each assumed parameter's range ({min(values):.3g} to {max(values):.3g})")
    ax.legend(handles=handles, fontsize=7, loc="best")
    return fig
