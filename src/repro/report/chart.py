"""The picture of every claim on one axis: each claim's headline value placed against its target, so
that a claim that holds sits right of the line and one that misses left of it (CAPTION says how).
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from repro.report.claims import is_difference  # noqa: E402  (a claim placed by measured - target)

CAPTION = ("A ratio claim (a speedup, a bandwidth, a time) sits at log2(measured / target); a difference claim "
           "(top-1 points, or a target at or below zero) at measured - target, in the claim's unit. Both are turned "
           "so that right is better: a `<=` claim's sign flips. Values beyond the axis sit at its edge with an "
           "arrow. Circles are the reference machine's values, triangles this machine's at paper scale, hollow "
           "diamonds the paper's own value where it is in the claim's unit; a marker's colour is the claim's "
           "verdict on that side, also-conditions included, so a headline value right of the line can still be red.")
LIMIT = 3.0  # the axis runs from -LIMIT to +LIMIT
HELD, MISSED, NONE = "#2e7d32", "#c62828", "#9e9e9e"


def position(value, target, direction: str, difference: bool) -> float | None:
    """Where ``value`` sits on the common axis (0: the target; > 0: it holds), unclipped; None
    without a value."""
    if _missing(value) or _missing(target):
        return None
    if difference:
        x = value - target
    else:
        x = math.log2(value / target) if value > 0 else -math.inf
    return x if direction in (">=", ">") else -x


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _clip(x: float) -> tuple[float, bool]:
    return (max(-LIMIT, min(LIMIT, x)), abs(x) > LIMIT)


def _colour(verdict: str) -> str:
    return HELD if verdict == "reproduced" else MISSED if verdict == "not-reproduced" else NONE


def placed(df: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: its positions (reference, here at paper scale, the paper's value) and
    whether it is a difference claim; the picture draws these, the tests read them."""
    rows = []
    for r in df.itertuples():
        difference = is_difference(r.unit, r.target_value)
        here = r.here_value if r.here_verdict in ("reproduced", "not-reproduced", "inconclusive") else None
        paper = None if r.paper_unit else r.paper_value_value
        rows.append(dict(claim_id=r.claim_id, kind=r.kind, difference=difference,
                         reference=position(r.reference_value, r.target_value, r.direction, difference),
                         reference_verdict=r.reference_verdict,
                         here=position(here, r.target_value, r.direction, difference), here_verdict=r.here_verdict,
                         paper=position(paper, r.target_value, r.direction, difference)))
    return pd.DataFrame(rows)


def _label(r) -> str:
    return r.claim_id + (" (model)" if r.kind == "model" else "") + (" [\u0394]" if r.difference else "")


def draw(df: pd.DataFrame):
    """The figure: every claim of ``df`` (claims.build) on one row, in ledger order."""
    pos = placed(df)
    n = len(pos)
    fig, ax = plt.subplots(figsize=(9.5, 1.6 + 0.27 * n))
    ax.axvspan(-LIMIT - 0.3, 0, color=MISSED, alpha=0.06, lw=0)
    ax.axvspan(0, LIMIT + 0.3, color=HELD, alpha=0.06, lw=0)
    ax.axvline(0, color="black", lw=1)
    papers = df.paper.tolist()
    for i in range(1, n):
        if papers[i] != papers[i - 1]:
            ax.axhline(i - 0.5, color="#cccccc", lw=0.6)
    for i, r in enumerate(pos.itertuples()):
        if not _missing(r.paper):
            x, clipped = _clip(r.paper)
            ax.plot(x, i, marker="D", ms=7, mfc="none", mec="black", mew=1.0, zorder=3)
            if clipped:
                ax.annotate("", xy=(x + (0.28 if x > 0 else -0.28), i), xytext=(x, i),
                            arrowprops=dict(arrowstyle="->", color="black", lw=1.0))
        drawn = False
        for value, verdict, marker, dy in ((r.reference, r.reference_verdict, "o", -0.12),
                                           (r.here, r.here_verdict, "^", 0.12)):
            if _missing(value):
                continue
            x, clipped = _clip(value)
            ax.plot(x, i + dy, marker=marker, ms=8, color=_colour(verdict), zorder=4)
            if clipped:
                ax.annotate("", xy=(x + (0.28 if x > 0 else -0.28), i + dy), xytext=(x, i + dy),
                            arrowprops=dict(arrowstyle="->", color=_colour(verdict), lw=1.2))
            drawn = True
        if not drawn:
            verdict = r.reference_verdict if r.reference_verdict != "no-reference" else r.here_verdict
            text = {"pending": "pending (not implemented)", "unavailable": "unavailable (no toolchain here)",
                    "no-reference": "no run yet",
                    "not-run-here": "no run yet", "smoke": "smoke run only (not judged)"}.get(verdict, "no value")
            colour = MISSED if verdict == "not-reproduced" else NONE
            missed = colour == MISSED  # judged, with no value: at the misses end; no run: out of the way
            ax.text(-LIMIT + 0.05 if missed else LIMIT - 0.05, i, ("\u2717 " if missed else "") + text,
                    va="center", ha="left" if missed else "right",
                    fontsize=7.5, color=colour, style="italic")
    ax.set_yticks(range(n), [_label(r) for r in pos.itertuples()], fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(-LIMIT - 0.35, LIMIT + 0.35)
    ticks = [-3, -2, -1, 0, 1, 2, 3]
    ax.set_xticks(ticks, [f"{t:+d}\n\u00d7{2.0 ** t:g}" if t else "0\ntarget" for t in ticks], fontsize=8)
    ax.set_xlabel("misses  \u2190   distance from the target   \u2192  holds\n"
                  "ratio claims: log2(measured / target), the second row the factor;  [\u0394] difference "
                  "claims: measured \u2212 target (points)", fontsize=8)
    handles = [plt.Line2D([], [], ls="", marker="o", color=HELD, label="reference run, holds"),
               plt.Line2D([], [], ls="", marker="o", color=MISSED, label="reference run, misses"),
               plt.Line2D([], [], ls="", marker="^", color="#555555", label="here, paper scale"),
               plt.Line2D([], [], ls="", marker="D", mfc="none", mec="black", label="the paper's value")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0 + 0.9 / (1.6 + 0.27 * n)), ncol=4,
              fontsize=7.5, frameon=False)
    ax.set_title("Every claim against its target", fontsize=10, pad=22)
    fig.tight_layout()
    return fig


def png(df: pd.DataFrame) -> bytes:
    """The figure as PNG bytes (100 dpi, a palette of 64 colours: a few tens of kB)."""
    from PIL import Image

    fig = draw(df)
    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=100)
    plt.close(fig)
    out = io.BytesIO()
    Image.open(raw).convert("RGB").quantize(colors=64).save(out, format="PNG", optimize=True)
    return out.getvalue()
