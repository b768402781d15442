"""One-at-a-time screening of assumed parameters: how far each moves a model's headline numbers.

``screen`` evaluates ``headline(overrides)`` at the defaults and with each assumed parameter scaled
by each factor; a parameter whose largest relative change of any headline exceeds ``threshold``
is *sensitive* and gets a curve (``curve``) in the paper's sensitivity figure. A headline's keys
starting with ``_`` are carried along but not screened."""

from __future__ import annotations

from typing import Callable, Iterable

import pandas as pd

from repro.sim.engine import pool_map

Headline = Callable[[dict], dict[str, float]]


def _no_progress(iterable, total=None, desc=""):
    return iterable


def screen(headline: Headline, defaults: dict[str, float], keys: Iterable[str], factors: Iterable[float],
           threshold: float = 0.10, mapper=map, progress=_no_progress) -> tuple[pd.DataFrame, dict[str, float]]:
    """Returns (rows: key, factor, value, headline columns and their relative change; base headline).
    ``mapper`` evaluates the points (``map``, or a process pool's ``map``); ``progress`` wraps the
    results as they come (``ctx.progress``)."""
    points = [{}] + [{key: defaults[key] * f} for key in keys for f in factors]
    results = list(progress(mapper(headline, points), total=len(points), desc="screening"))
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


def curve(headline: Headline, points: Iterable[tuple[str, float]], mapper=map, progress=_no_progress) -> pd.DataFrame:
    """The headline numbers at each (key, value)."""
    points = list(points)
    got = progress(mapper(headline, [{k: v} for k, v in points]), total=len(points), desc="curves")
    return pd.DataFrame([{"key": k, "value": v, **g} for (k, v), g in zip(points, got)])


def study(headline: Headline, defaults: dict[str, float], factors: Iterable[float], curve_factors: Iterable[float],
          threshold: float = 0.10, workers: int = 1, categorical: dict[str, object] | None = None,
          progress=_no_progress):
    """The whole sensitivity study: ``screen`` every key of ``defaults``, evaluate each
    ``categorical`` alternative (key -> the other value), and for each sensitive numeric key a
    ``curve`` over ``curve_factors`` (reusing the screened points). Returns (screen, curves, base,
    events), ``events`` summed from the headlines' ``_events`` where they report it."""
    factors, curve_factors = list(factors), list(curve_factors)
    with pool_map(workers) as mapper:
        table, base = screen(headline, defaults, defaults, factors, threshold, mapper, progress)
        extra = []
        alternatives = list((categorical or {}).items())
        for (key, alt), got in zip(alternatives, mapper(headline, [{k: v} for k, v in alternatives])):
            row = {"key": key, "factor": float("nan"), "value": float("nan"), "alternative": str(alt), **got}
            rel = {n: got[n] / base[n] - 1 for n in got if not n.startswith("_") and base[n]}
            row.update({f"{n}_rel": v for n, v in rel.items()})
            row["max_rel_change_of_key"] = max(map(abs, rel.values()))
            row["sensitive"] = row["max_rel_change_of_key"] > threshold
            extra.append(row)
        if extra:
            table = pd.concat([table, pd.DataFrame(extra)], ignore_index=True)
        sensitive = sorted(set(table.loc[table["sensitive"] & table["factor"].notna(), "key"]))
        more = [(k, defaults[k] * f) for k in sensitive for f in curve_factors if f not in factors]
        curves = curve(headline, more, mapper, progress)
    names = [n for n in base if not n.startswith("_")]
    cols = ["key", "value", *names]
    curves = pd.concat([curves.reindex(columns=cols + ["_events"]), table.loc[table["key"].isin(sensitive), cols],
                        pd.DataFrame([{"key": k, "value": defaults[k], **{n: base[n] for n in names}} for k in sensitive],
                                     columns=cols)], ignore_index=True).sort_values(["key", "value"])
    curves["default"] = curves["key"].map(defaults)
    events = sum(float(x) for x in (*table.get("_events", []), base.get("_events", 0.0), *curves.get("_events", []))
                 if x == x)
    return table, curves.drop(columns=["_events"], errors="ignore"), base, events


def summarize(screen: pd.DataFrame, base: dict, headlines: dict[str, str], threshold: float) -> tuple[dict, dict]:
    """The metrics and tags every sensitivity experiment reports: the base headlines (metric name ->
    key of ``base``), how many assumed parameters were screened, how many move a headline by more
    than ``threshold`` (relative), the largest move and which parameter made it."""
    worst = screen.groupby("key")["max_rel_change_of_key"].max()
    metrics = {**{name: base[key] for name, key in headlines.items()},
               "assumed_screened": float(len(worst)), "sensitive": float(int((worst > threshold).sum())),
               "largest_rel_change": float(worst.max())}
    tags = {"kind": "model", "sensitive": ",".join(sorted(worst[worst > threshold].index)),
            "largest": str(worst.idxmax())}
    return metrics, tags
