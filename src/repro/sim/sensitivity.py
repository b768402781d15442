"""One-at-a-time screening of assumed parameters: how far each moves a model's headline numbers.

``screen`` evaluates ``headline(overrides)`` at the defaults and with each assumed parameter scaled
by each factor; a parameter whose largest relative change of any headline exceeds ``threshold``
is *sensitive* and gets a curve (``curve``) in the paper's sensitivity figure. A headline's keys
starting with ``_`` are carried along but not screened."""

from __future__ import annotations

from typing import Callable, Iterable

import pandas as pd

Headline = Callable[[dict], dict[str, float]]


def screen(headline: Headline, defaults: dict[str, float], keys: Iterable[str], factors: Iterable[float],
           threshold: float = 0.10, mapper=map) -> tuple[pd.DataFrame, dict[str, float]]:
    """Returns (rows: key, factor, value, headline columns and their relative change; base headline).
    ``mapper`` evaluates the points (``map``, or a process pool's ``map``)."""
    points = [{}] + [{key: defaults[key] * f} for key in keys for f in factors]
    results = list(mapper(headline, points))
    base = results[0]
    rows = []
    for point, got in zip(points[1:], results[1:]):
        (key, value), = point.items()
        row = {"key": key, "factor": value / defaults[key], "value": value}
        for name, v in got.items():
            row[name] = v
            if name.startswith("_"):  # bookkeeping (e.g. event counts), not a headline
                continue
            row[f"{name}_rel"] = v / base[name] - 1 if base[name] else float("nan")
        rows.append(row)
    df = pd.DataFrame(rows)
    rel = [c for c in df.columns if c.endswith("_rel")]
    worst = df.groupby("key")[rel].agg(lambda s: s.abs().max()).max(axis=1) if len(df) else pd.Series(dtype=float)
    df["max_rel_change_of_key"] = df["key"].map(worst)
    df["sensitive"] = df["max_rel_change_of_key"] > threshold
    return df, base


def curve(headline: Headline, points: Iterable[tuple[str, float]], mapper=map) -> pd.DataFrame:
    """The headline numbers at each (key, value)."""
    points = list(points)
    got = mapper(headline, [{k: v} for k, v in points])
    return pd.DataFrame([{"key": k, "value": v, **g} for (k, v), g in zip(points, got)])
