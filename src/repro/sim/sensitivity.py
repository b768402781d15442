"""One-at-a-time screening of assumed parameters: how far each moves a model's headline numbers.

``tornado`` evaluates the claim's headline metric at each assumed parameter's plausible low and high
end (a ``Span``: the range and why), the others at their defaults; its table, sorted by swing, is the
tornado chart beside the claim's verdict, and ``tornado_summary`` the range the report shows.

``screen`` evaluates ``headline(overrides)`` at the defaults and with each assumed parameter scaled
by each factor; a parameter whose largest relative change of any headline exceeds ``threshold``
is *sensitive* and gets a curve (``curve``) in the paper's sensitivity figure. A headline's keys
starting with ``_`` are carried along but not screened."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import pandas as pd

from repro.sim.params import ParamError

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
    from repro.sim.engine import pool_map  # here, not at the top: engine needs SimPy, which the GPU steps
    # that use the tornado (pimcaps' experiment module) neither have nor need

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


@dataclass
class Span:
    """An assumed parameter's plausible range and why. In the parameter's own unit; for a field of
    every scene / game / network at once, factors of each one's value (the default is then 1)."""

    low: float = math.nan
    high: float = math.nan
    why: str = ""


def check_spans(spans: dict[str, Span], defaults: dict[str, float]) -> None:
    """Every assumed parameter has a span, every span names an assumed parameter, and each range holds
    its default and says why."""
    if missing := sorted(set(defaults) - set(spans)):
        raise ParamError(f"spans: no range for the assumed parameter(s) {', '.join(missing)}")
    if unknown := sorted(set(spans) - set(defaults)):
        raise ParamError(f"spans: {', '.join(unknown)}: not an assumed parameter (assumed: {', '.join(sorted(defaults))})")
    for key, s in spans.items():
        if not (0 < s.low <= defaults[key] <= s.high < math.inf):
            raise ParamError(f"spans.{key}: need 0 < low <= default ({defaults[key]:g}) <= high, got {s.low!r} to {s.high!r}")
        if not str(s.why).strip():
            raise ParamError(f"spans.{key}.why: say why this range is plausible")


def order_by_swing(table: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by swing, the largest first (ties by key): the headline's extent over the row's low
    end, high end and the baseline."""
    ends = table[["value_low", "value_high", "base"]]
    table = table.assign(swing=ends.max(axis=1) - ends.min(axis=1))
    return table.sort_values(["swing", "key"], ascending=[False, True], kind="stable").reset_index(drop=True)


def tornado(headline: Headline, defaults: dict[str, float], spans: dict[str, Span], metric: str, mapper=map,
            progress=_no_progress) -> tuple[pd.DataFrame, float, float]:
    """The headline's ``metric`` at the baseline and at each span's low and high end, one parameter
    at a time. Returns (one row per parameter: key, default, low, high, why, value_low, value_high,
    base, swing; sorted by swing), the baseline value, and the simulated events summed from the
    headlines' ``_events`` (0 where they report none)."""
    check_spans(spans, defaults)
    keys = sorted(spans)
    points = [{}] + [{key: end} for key in keys for end in (spans[key].low, spans[key].high)]
    results = list(progress(mapper(headline, points), total=len(points), desc="tornado"))
    got = [r[metric] for r in results]
    base = got[0]
    rows = [dict(key=key, default=defaults[key], low=spans[key].low, high=spans[key].high, why=spans[key].why,
                 value_low=got[1 + 2 * i], value_high=got[2 + 2 * i], base=base) for i, key in enumerate(keys)]
    return order_by_swing(pd.DataFrame(rows)), base, float(sum(r.get("_events", 0.0) for r in results))


def tornado_summary(table: pd.DataFrame, base: float) -> tuple[dict, dict]:
    """The metrics and tags every tornado experiment reports: the baseline headline, its lowest and
    highest value over the assumed parameters' ranges, how many parameters, and which moves it most."""
    values = [base, *table["value_low"], *table["value_high"]]
    top = order_by_swing(table).iloc[0] if len(table) else None
    metrics = {"assumed_base": float(base), "assumed_min": float(min(values)), "assumed_max": float(max(values)),
               "assumed_parameters": float(len(table)), "assumed_largest_swing": float(top["swing"]) if top is not None
               else 0.0}
    return metrics, {"kind": "model", "assumed_largest": "" if top is None else str(top["key"])}
