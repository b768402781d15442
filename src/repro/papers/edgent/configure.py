"""Edgent's configurators as a model fed by measurements (``configure``, claim edgent.oracle).

From the ``nets`` record: each trained net's per-layer latency on the device (this CPU at each thread
count) and the edge, its split sizes and exit accuracies. The regression predictors
(repro.split.predict) are fitted per processor and layer type on the other-width variants and predict
every layer of the trained nets. Then, on a grid of (bandwidth, deadline):

- Edgent (static): the search of repro.split.optimise.best on the *predicted* latencies;
- the oracle: exhaustive search on the *measured* latencies;
- device only (final exit, no transfer), edge only (send the input, final exit), Neurosurgeon (final
  exit, the split of least predicted latency), exit only (on the device, the most accurate exit whose
  predicted latency meets the deadline).
Each choice is judged on the measured latencies: a late answer delivers no accuracy. The headline is
the share of points where Edgent delivers the oracle's accuracy, over the points where the oracle
meets the deadline. Latency = device part + 8 bytes /
bandwidth + rtt + edge part.

Dynamic (Edgent's change-point configurator): a bandwidth trace with regime changes
(repro.split.traces); at each step ``ruptures``' PELT finds the last change point in the recent
window of observed bandwidth, the bandwidth since it (geometric mean) is the estimate, and the
static configurator is applied to it; against a configuration fixed from the first window, the
configuration from the last sample alone, and the per-step oracle on the true bandwidth.

Assumed parameters (none set from the paper's result; the tornado moves each over its span): the
device slowdown (this CPU is not a Raspberry Pi 3: its measured times times this factor), the round
trip, and the bandwidth range. The deadline grid spans the latencies the configurations can reach."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.sim import sensitivity
from repro.split import optimise
from repro.split.predict import Predictor, relative_errors
from repro.split.traces import regime_trace

METHODS = ("edgent", "oracle", "device_only", "edge_only", "neurosurgeon", "exit_only")


@dataclass
class Assumed:
    device_slowdown: float = 1.0  # assumed: the device's measured times times this (1: this CPU as it is)
    rtt_ms: float = 1.0  # assumed: a one-hop LAN round trip between the device and the edge server
    bandwidth_scale: float = 1.0  # assumed: the bandwidth grid (bw_low_mbps..bw_high_mbps) times this


@dataclass
class Grid:
    bw_low_mbps: float = 0.1  # assumed: a weak 3G uplink
    bw_high_mbps: float = 100.0  # assumed: a good Wi-Fi link
    bandwidths: int = 16  # log-spaced
    deadlines: int = 16  # log-spaced over the latencies the configurations reach (see deadline_range)


@dataclass
class Dynamic:
    net: str = "alexnet"
    regimes: int = 10  # assumed: level shifts in the trace
    regime_s: float = 30.0  # assumed: seconds per regime
    cv: float = 0.3  # assumed: fluctuation within a regime (lognormal cv)
    corr_s: float = 2.0  # assumed: its correlation time
    step_s: float = 0.5  # one bandwidth observation (and one configuration decision) per step
    window: int = 40  # observations PELT sees
    min_size: int = 3  # shortest segment PELT may find
    deadline_quantile: float = 0.5  # the deadline: this quantile of the static grid's deadlines


@dataclass
class ConfigureParams:
    assumed: Assumed = field(default_factory=Assumed)
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # assumed.<field> -> range and why
    grid: Grid = field(default_factory=Grid)
    dynamic: Dynamic = field(default_factory=Dynamic)
    curve: list[float] = field(default_factory=lambda: [0.3, 1.0, 3.0, 10.0, 30.0, 100.0])  # device slowdowns drawn
    target: float = 0.95  # the claim's target (config/claims/edgent.yaml), drawn on the figure


def read_nets(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    run = Path(path).parent
    return pd.read_csv(run / "layers.csv"), pd.read_csv(run / "exits.csv")


def _side(rows: pd.DataFrame, col: str, exits: int) -> tuple[np.ndarray, np.ndarray]:
    layers = rows[rows["where"] == "layer"].sort_values("index")[col].to_numpy(float)
    heads = np.array([rows.loc[rows["where"] == f"head{e}", col].sum() for e in range(exits)])
    return layers, heads


def predicted_layers(layers: pd.DataFrame) -> pd.DataFrame:
    """The trained nets' rows with ``predicted_s``: per processor (role, threads), per layer type,
    fitted on the fitting variants of every net."""
    out = []
    for _, g in layers.groupby(["role", "threads"]):
        fitted = Predictor().fit(g[g["variant"] != "trained"])
        trained = g[g["variant"] == "trained"].copy()
        trained["predicted_s"] = fitted.predict(trained.reset_index(drop=True))
        out.append(trained)
    return pd.concat(out, ignore_index=True)


def profiles(rows: pd.DataFrame, acc: pd.DataFrame, col: str) -> dict[tuple[str, int], optimise.Profile]:
    """(net, device threads) -> Profile from the measured (``time_s``) or predicted (``predicted_s``) times."""
    out = {}
    for net, g in rows.groupby("net"):
        a = acc[acc["net"] == net].sort_values("exit")
        edge = g[g["role"] == "edge"]
        e_layers, e_heads = _side(edge, col, len(a))
        for threads, d in g[g["role"] == "device"].groupby("threads"):
            d_layers, d_heads = _side(d, col, len(a))
            layer_rows = d[d["where"] == "layer"].sort_values("index")
            sizes = [int(layer_rows["in_bytes"].iloc[0]), *layer_rows["out_bytes"].astype(int)]
            out[(net, int(threads))] = optimise.Profile(d_layers, e_layers, d_heads, e_heads, sizes,
                                                        a["attach"].to_numpy(), a["accuracy"].to_numpy())
    return out


def deadline_range(p: optimise.Profile, bandwidths: np.ndarray, rtt_s: float) -> tuple[float, float]:
    """From the fastest configuration at the best bandwidth (no configuration meets a shorter
    deadline) to 1.5x the full net on the device: the range where the choice depends on the deadline."""
    fastest = float(optimise.latency(p, bandwidths.max(), rtt_s).min())
    full = float(p.device.sum() + p.device_head[-1])
    return fastest, 1.5 * max(full, fastest)


def _choose(method: str, measured: np.ndarray, predicted: np.ndarray, acc: np.ndarray, deadline: float,
            final: int) -> optimise.Choice:
    if method == "edgent":
        return optimise.best(predicted, acc, deadline)
    if method == "oracle":
        return optimise.exhaustive(measured, acc, deadline)
    if method == "device_only":
        return optimise.Choice(final, measured.shape[1] - 1)
    if method == "edge_only":
        return optimise.Choice(final, 0)
    if method == "neurosurgeon":
        return optimise.Choice(final, int(np.argmin(predicted[final])))
    device_only = np.full_like(predicted, np.inf)  # exit only: each exit run whole on the device
    for e, a in enumerate(np.asarray([int(np.isfinite(r).sum()) - 1 for r in predicted])):
        device_only[e, a] = predicted[e, a]
    return optimise.best(device_only, acc, deadline)


def static_points(measured: dict, predicted: dict, a: Assumed, g: Grid) -> pd.DataFrame:
    rows = []
    bws = np.geomspace(g.bw_low_mbps, g.bw_high_mbps, g.bandwidths) * a.bandwidth_scale * 1e6
    rtt = a.rtt_ms / 1e3
    for key, m in measured.items():
        m, pr = m.scaled(a.device_slowdown), predicted[key].scaled(a.device_slowdown)
        lo, hi = deadline_range(m, bws, rtt)
        final = len(m.accuracy) - 1
        for bw in bws:
            tm, tp = optimise.latency(m, bw, rtt), optimise.latency(pr, bw, rtt)
            for deadline in np.geomspace(lo, hi, g.deadlines):
                base = dict(net=key[0], threads=key[1], bandwidth_mbps=bw / 1e6, deadline_ms=deadline * 1e3)
                got = {}
                for method in METHODS:
                    c = _choose(method, tm, tp, m.accuracy, deadline, final)
                    t, delivered, met = optimise.outcome(c, tm, m.accuracy, deadline)
                    got[method] = (delivered, met)
                    rows.append({**base, "method": method, "exit": c.exit, "split": c.split, "latency_ms": t * 1e3,
                                 "accuracy": delivered, "met": met})
                for r in rows[-len(METHODS):]:
                    r["matches_oracle"] = abs(r["accuracy"] - got["oracle"][0]) < 1e-12
                    r["oracle_met"] = got["oracle"][1]
    return pd.DataFrame(rows)


def headline(points: pd.DataFrame) -> dict[str, float]:
    """The share of points where Edgent delivers the oracle's accuracy, over the points where some
    configuration meets the deadline (elsewhere every method delivers nothing and matches trivially)."""
    e = points[points["method"] == "edgent"]
    feasible = e[e["oracle_met"]]
    share = float(feasible["matches_oracle"].mean()) if len(feasible) else float("nan")
    return {"oracle_match": share, "oracle_feasible_share": float(e["oracle_met"].mean())}


@dataclass
class Headline:
    """The static headline with assumed parameters overridden (``assumed.<field>``); picklable."""

    measured: dict
    predicted: dict
    assumed: Assumed
    grid: Grid

    def __call__(self, overrides: dict) -> dict[str, float]:
        a = dataclasses.replace(self.assumed, **{k.split(".", 1)[1]: float(v) for k, v in overrides.items()})
        return headline(static_points(self.measured, self.predicted, a, self.grid))


def last_change(window: np.ndarray, pen: float, min_size: int) -> int:
    """Index in ``window`` where its last segment starts (PELT, l2 cost on log bandwidth)."""
    import ruptures

    if len(window) < 2 * min_size:
        return 0
    bkps = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(np.log(window)).predict(pen=pen)
    return bkps[-2] if len(bkps) > 1 else 0


def change_point_counts(change_at: np.ndarray, levels: np.ndarray, first_step: int, tolerance: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct change points PELT reported over the run, the trace's true regime changes), as
    step indices: ``change_at`` per step is the detected start of the window's last segment (-1
    where the window holds none), ``levels`` the true regime level per step from ``first_step``; only
    changes the windows could see (after the first window) count as true. A point reported again a
    few steps apart, as windows slide, is one point: reports within ``tolerance`` steps of the
    previous one join it."""
    seen = np.unique(change_at[change_at >= 0])
    found = seen[np.r_[True, np.diff(seen) > tolerance]] if seen.size else seen
    true = first_step + np.flatnonzero(np.diff(levels) != 0) + 1
    return found, true


def dynamic_run(measured: optimise.Profile, predicted: optimise.Profile, d: Dynamic, a: Assumed, g: Grid,
                deadline: float, seed: int) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per step: the true bandwidth, the detected regime start, the estimate and each policy's outcome."""
    trace, levels = regime_trace(g.bw_low_mbps * a.bandwidth_scale, g.bw_high_mbps * a.bandwidth_scale, d.regimes,
                                 d.regime_s, d.cv, d.corr_s, d.step_s, seed)
    m, pr = measured.scaled(a.device_slowdown), predicted.scaled(a.device_slowdown)
    rtt = a.rtt_ms / 1e3
    pen = 2.0 * math.log1p(d.cv ** 2) * math.log(d.window)  # BIC: 2 sigma^2 ln n on log bandwidth
    bps = trace.bps
    fixed_bw = float(np.exp(np.log(bps[: d.window]).mean()))
    rows = []
    for t in range(d.window, len(bps)):
        seen = bps[t - d.window:t]
        start = last_change(seen, pen, d.min_size)
        estimates = {"edgent_dynamic": float(np.exp(np.log(seen[start:]).mean())), "fixed": fixed_bw,
                     "last_sample": float(seen[-1]), "oracle": float(bps[t])}
        truth = optimise.latency(m, bps[t], rtt)
        row = dict(step=t, time_s=t * d.step_s, bandwidth_mbps=bps[t] / 1e6, regime_mbps=levels[t] / 1e6,
                   change_at=t - d.window + start if start else -1, estimate_mbps=estimates["edgent_dynamic"] / 1e6)
        for policy, bw in estimates.items():
            table = truth if policy == "oracle" else optimise.latency(pr, bw, rtt)
            c = (optimise.exhaustive if policy == "oracle" else optimise.best)(table, m.accuracy, deadline)
            _, delivered, met = optimise.outcome(c, truth, m.accuracy, deadline)
            row.update({f"{policy}_accuracy": delivered, f"{policy}_met": met, f"{policy}_exit": c.exit})
        rows.append(row)
    df = pd.DataFrame(rows)
    metrics = {}
    for policy in ("edgent_dynamic", "fixed", "last_sample", "oracle"):
        metrics[f"dynamic_{policy}_accuracy"] = float(df[f"{policy}_accuracy"].mean())
        metrics[f"dynamic_{policy}_met"] = float(df[f"{policy}_met"].mean())
    metrics["dynamic_deadline_ms"] = deadline * 1e3
    found, true = change_point_counts(df["change_at"].to_numpy(), levels[d.window:len(bps)], d.window, d.min_size)
    metrics["dynamic_change_points"] = float(len(found))
    metrics["dynamic_true_changes"] = float(len(true))
    metrics["dynamic_true_changes_found"] = float(sum(bool(np.any(np.abs(found - c) <= d.min_size)) for c in true))
    return df, metrics


@experiment(params=ConfigureParams, needs_gpu=False)
def configure(p: ConfigureParams, ctx: Context) -> Result:
    layers, acc = read_nets(ctx.inputs["nets"])
    rows = predicted_layers(layers)
    err = relative_errors(rows["time_s"], rows["predicted_s"])
    measured, predicted = profiles(rows, acc, "time_s"), profiles(rows, acc, "predicted_s")
    points = static_points(measured, predicted, p.assumed, p.grid)
    metrics = headline(points)
    # the ceiling: Edgent's search fed the measured latencies (perfect predictors)
    metrics["oracle_match_measured_profile"] = headline(static_points(measured, measured, p.assumed, p.grid))["oracle_match"]
    metrics["predictor_error_median"] = float(np.median(err))
    for role, g in rows.assign(err=err).groupby("role"):
        metrics[f"predictor_error_median_{role}"] = float(g["err"].median())
    summary = points[points["oracle_met"]].groupby("method").agg(accuracy=("accuracy", "mean"), met=("met", "mean"),
                                           matches_oracle=("matches_oracle", "mean")).reset_index()
    for r in summary.itertuples():
        metrics[f"{r.method}_accuracy"], metrics[f"{r.method}_met"] = float(r.accuracy), float(r.met)
        metrics[f"{r.method}_matches_oracle"] = float(r.matches_oracle)

    head = Headline(measured, predicted, p.assumed, p.grid)
    defaults = {f"assumed.{f.name}": float(getattr(p.assumed, f.name)) for f in dataclasses.fields(Assumed)}
    tornado, base, _ = sensitivity.tornado(head, defaults, p.spans, "oracle_match", progress=ctx.progress)
    t_metrics, t_tags = sensitivity.tornado_summary(tornado, base)
    curve = pd.DataFrame([{"device_slowdown": s, **head({"assumed.device_slowdown": s})} for s in p.curve])

    d = p.dynamic
    key = (d.net, min(k[1] for k in measured if k[0] == d.net))
    deadlines = points.loc[(points["net"] == key[0]) & (points["threads"] == key[1]), "deadline_ms"].unique()
    deadline = float(np.quantile(deadlines, d.deadline_quantile)) / 1e3
    dynamic, d_metrics = dynamic_run(measured[key], predicted[key], d, p.assumed, p.grid, deadline, ctx.seed)
    metrics.update(t_metrics)
    metrics.update(d_metrics)
    return Result(metrics=metrics, tables={"points": points, "layers": rows, "summary": summary, "tornado": tornado,
                                           "curve": curve, "dynamic": dynamic},
                  tags={**t_tags, "kind": "model", "dynamic_net": f"{key[0]}, device {key[1]} thread(s)"})
