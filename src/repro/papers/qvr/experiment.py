"""The Q-VR experiments (claim ``qvr``): every arm on seeded Wi-Fi- and cellular-like traces, FPS
and speedup vs a constant network's bandwidth, and the sensitivity of the headline to every
assumed parameter. All run on the CPU (``gpus: 0``); metrics include ``events_per_s``."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field, fields

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.qvr import model
from repro.papers.qvr.system import ARMS, ASSUMED, SystemParams
from repro.papers.qvr.workload import GameSpec
from repro.sim import sensitivity
from repro.sim.curves import crossing
from repro.sim.engine import pool_map, simulation_speed
from repro.sim.network import NetworkProfile
from repro.sim.params import ParamError


@dataclass
class QVRParams:
    system: SystemParams = field(default_factory=SystemParams)
    games: list[GameSpec] = field(default_factory=lambda: [GameSpec()])
    networks: list[NetworkProfile] = field(default_factory=lambda: [NetworkProfile()])
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    duration_s: float = 20.0  # simulated seconds per (network, game, arm)
    workers: int = 2  # processes simulating networks (or screening points) side by side
    bandwidth_mbps: list[float] = field(
        default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0])
    sweep_latency_ms: float = 5.0  # one-way latency of the constant networks of the bandwidth sweep
    latency_ms: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0, 40.0])  # the latency sweep
    sweep_bandwidth_mbps: float = 100.0  # bandwidth of the constant networks of the latency sweep
    factors: list[float] = field(default_factory=lambda: [0.5, 2.0])
    curve_factors: list[float] = field(default_factory=lambda: [0.25, 0.5, 2.0, 4.0])  # those in factors are reused
    threshold: float = 0.10
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # tornado: assumed key -> range and why
    target: float = math.nan  # tornado: the claim's target (config/claims/qvr.yaml), drawn on the chart


def _check(p: QVRParams) -> None:
    model.check(p.system, p.games, p.networks, p.arms, p.duration_s)


@experiment(params=QVRParams, needs_gpu=False)
def traces(p: QVRParams, ctx: Context) -> Result:
    """Every arm, game and network trace: latency distribution, FPS, quality proxy."""
    _check(p)
    t0 = time.perf_counter()
    runs, cdf = model.run(p.system, p.games, p.networks, p.arms, p.duration_s, ctx.seed, p.workers)
    metrics = model.summarize(runs)
    metrics.update(simulation_speed(float(runs["events"].sum()), time.perf_counter() - t0, ctx.log, "qvr"))
    return Result(metrics=metrics, tables={"runs": runs, "latency_cdf": cdf},
                  tags={"kind": "model", "networks": ",".join(n.name for n in p.networks),
                        "games": ",".join(g.name for g in p.games)})


@experiment(params=QVRParams, needs_gpu=False)
def bandwidth_sweep(p: QVRParams, ctx: Context) -> Result:
    """FPS and speedup of every arm on constant networks (no jitter, no drops): across bandwidths at
    ``sweep_latency_ms``, and across one-way latencies at ``sweep_bandwidth_mbps``."""
    _check(p)
    for key in ("bandwidth_mbps", "latency_ms"):
        values = getattr(p, key)
        if not values or any(not (v > 0) for v in values):
            raise ParamError(f"{key}: must be a non-empty list of numbers > 0, got {values!r}")
    points = [("bandwidth", b, NetworkProfile(name=f"bw_{b:g}", mean_mbps=b, latency_ms=p.sweep_latency_ms))
              for b in p.bandwidth_mbps]
    points += [("latency", l, NetworkProfile(name=f"lat_{l:g}", mean_mbps=p.sweep_bandwidth_mbps, latency_ms=l))
               for l in p.latency_ms]
    t0 = time.perf_counter()
    runs, _ = model.run(p.system, p.games, [n for _, _, n in points], p.arms, p.duration_s, ctx.seed, p.workers)
    where = {n.name: (kind, v) for kind, v, n in points}
    runs["kind"] = runs["network"].map(lambda n: where[n][0])
    runs["value"] = runs["network"].map(lambda n: where[n][1])
    rows = []
    for (kind, value), d in runs.groupby(["kind", "value"]):
        per_game = model.per_pair(d)
        rows.append({"kind": kind, "value": value, **model.summarize(d),
                     **{f"speedup_{g}": v for g, v in per_game["speedup"].items()},
                     **{f"fps_{a}": d.loc[d["arm"] == a, "fps"].mean() for a in p.arms},
                     **{f"latency_ms_{a}": d.loc[d["arm"] == a, "latency_ms"].mean() for a in p.arms}})
    sweep = pd.DataFrame(rows).sort_values(["kind", "value"])
    bw, lat = sweep[sweep["kind"] == "bandwidth"], sweep[sweep["kind"] == "latency"]
    metrics = {"speedup_at_max_bandwidth": float(bw["speedup"].iloc[-1]),
               "speedup_at_min_bandwidth": float(bw["speedup"].iloc[0]),
               "speedup_at_min_latency": float(lat["speedup"].iloc[0]),
               "speedup_at_max_latency": float(lat["speedup"].iloc[-1])}
    for g in p.games:  # where Q-VR should stay local: its gain over local under 1.1x
        speedup = f"speedup_{g.name}"
        metrics[f"stay_local_below_mbps_{g.name}"] = crossing(bw["value"].tolist(), bw[speedup].tolist(), 1.1, rising=True)
        metrics[f"stay_local_above_latency_ms_{g.name}"] = crossing(lat["value"].tolist(), lat[speedup].tolist(),
                                                                            1.1)
    metrics.update(simulation_speed(float(runs["events"].sum()), time.perf_counter() - t0, ctx.log, "qvr"))
    return Result(metrics=metrics, tables={"sweep": sweep, "runs": runs}, tags={"kind": "model"})


@dataclass
class Headline:
    """The headline with some parameters overridden (``system.<key>`` a value; ``game.<key>`` and
    ``network.<key>`` factors applied to every game / network); picklable for a process pool."""

    system: SystemParams
    games: list[GameSpec]
    networks: list[NetworkProfile]
    duration_s: float
    seed: int

    def __call__(self, overrides: dict) -> dict[str, float]:
        s, games, nets = self.system, self.games, self.networks
        for key, value in overrides.items():
            where, _, name = key.partition(".")
            if where == "system":
                old = getattr(s, name)
                s = dataclasses.replace(s, **{name: max(1, round(value)) if isinstance(old, int) else float(value)})
            elif where == "game":
                games = [dataclasses.replace(g, **{name: getattr(g, name) * value}) for g in games]
            elif where == "network":
                nets = [dataclasses.replace(n, **{name: _like(getattr(n, name), getattr(n, name) * value, name)}) for n in nets]
            else:
                raise KeyError(f"unknown parameter {key!r}")
        runs, _ = model.run(s, games, nets, list(ARMS), self.duration_s, self.seed)
        m = model.summarize(runs)
        return {"speedup": m["speedup"], "fps_gain": m["fps_gain"], "_events": float(runs["events"].sum())}


def _like(old, value, name):
    if isinstance(old, int):
        return max(1, round(value))
    return min(value, 0.5) if name == "drop_rate" else value


def assumed_keys(p: QVRParams) -> dict[str, float]:
    """Every assumed numeric parameter -> its default (game and network fields as factors of 1)."""
    keys = {f"system.{k}": float(getattr(p.system, k)) for k in sorted(ASSUMED) if getattr(p.system, k) > 0}
    keys.update({f"game.{f.name}": 1.0 for f in fields(GameSpec) if f.name != "name"
                 and any(getattr(g, f.name) > 0 for g in p.games)})
    keys.update({f"network.{f.name}": 1.0 for f in fields(NetworkProfile) if f.name not in ("name", "step_s")
                 and any(getattr(n, f.name) > 0 for n in p.networks)})
    return keys


@experiment(params=QVRParams, needs_gpu=False)
def sensitivity_screen(p: QVRParams, ctx: Context) -> Result:
    """Each assumed parameter at each factor: the headline's change; a curve for each parameter that
    moves it by more than ``threshold``."""
    _check(p)
    defaults = assumed_keys(p)
    headline = Headline(p.system, p.games, p.networks, p.duration_s, ctx.seed)
    t0 = time.perf_counter()
    screen, curves, base, events = sensitivity.study(headline, defaults, p.factors, p.curve_factors, p.threshold,
                                                     p.workers, progress=ctx.progress)
    metrics, tags = sensitivity.summarize(screen, base, {"base_speedup": "speedup", "base_fps_gain": "fps_gain"},
                                          p.threshold)
    metrics.update(simulation_speed(events, time.perf_counter() - t0, ctx.log, "qvr"))
    return Result(metrics=metrics, tables={"screen": screen, "curves": curves}, tags=tags)


@experiment(params=QVRParams, needs_gpu=False)
def tornado(p: QVRParams, ctx: Context) -> Result:
    """The claim's headline (speedup) at each assumed parameter's low and high end (``spans``: range
    and why), the others at their defaults: tornado.csv sorted by swing, and the range it spans."""
    _check(p)
    t0 = time.perf_counter()
    with pool_map(p.workers) as mapper:
        table, base, events = sensitivity.tornado(Headline(p.system, p.games, p.networks, p.duration_s, ctx.seed), assumed_keys(p), p.spans, "speedup",
                                                  mapper, ctx.progress)
    metrics, tags = sensitivity.tornado_summary(table, base)
    metrics.update(simulation_speed(events, time.perf_counter() - t0, ctx.log, "qvr"))
    return Result(metrics=metrics, tables={"tornado": table}, tags=tags)
