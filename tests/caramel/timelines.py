"""Synthetic gradient timelines for the plan and model tests (the columns timeline.record writes)."""

from __future__ import annotations

import pandas as pd

from repro.papers.caramel.timeline import COLUMNS


def synthetic(sizes: list[int], backward_s: float = 0.1, forward_s: float = 0.05, label: str = "synthetic") -> pd.DataFrame:
    """Parameters in registration order with ``sizes`` bytes; gradients ready in reverse order, evenly
    spread over backward; each needed in forward in registration order, evenly spread."""
    n = len(sizes)
    rows = [{"model": label, "index": i, "name": f"p{i}", "numel": b // 4, "bytes": b,
             "need_s": forward_s * i / n, "ready_s": backward_s * (n - i) / n, "ready_rank": n - 1 - i,
             "forward_s": forward_s, "backward_s": backward_s} for i, b in enumerate(sizes)]
    return pd.DataFrame(rows, columns=COLUMNS)
