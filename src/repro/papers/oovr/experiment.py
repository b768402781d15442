"""The OO-VR experiments (claim ``oovr``): per-scene arms, link-bandwidth / asymmetry sweeps, and
the sensitivity of the headline to every assumed parameter. All run on the CPU (``gpus: 0``).

Every experiment's metrics include ``events`` and ``events_per_s`` (simulated SimPy events per
second of wall time, summed over its worker processes' simulations)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field, fields

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.oovr import model
from repro.papers.oovr.scenes import SceneSpec
from repro.papers.oovr.system import ARMS, ASSUMED, SystemParams
from repro.sim import sensitivity
from repro.sim.curves import crossing
from repro.sim.engine import pool_map, simulation_speed
from repro.sim.params import ParamError


def _default_scenes() -> list[SceneSpec]:
    return [SceneSpec(name="default")]


@dataclass
class OOVRParams:
    system: SystemParams = field(default_factory=SystemParams)
    scenes: list[SceneSpec] = field(default_factory=_default_scenes)
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    frames: int = 2  # camera positions per scene
    workers: int = 2  # processes simulating scenes side by side
    link_gbps: list[float] = field(default_factory=lambda: [16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])
    asymmetry: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])  # DRAM / link at fixed link
    factors: list[float] = field(default_factory=lambda: [0.5, 2.0])  # screening of each assumed parameter
    curve_factors: list[float] = field(default_factory=lambda: [0.25, 0.5, 2.0, 4.0])  # those in factors are reused
    threshold: float = 0.10  # a parameter moving a headline number by more than this gets a curve
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # tornado: assumed key -> range and why
    target: float = math.nan  # tornado: the claim's target (config/claims/oovr.yaml), drawn on the chart


def _run(p: OOVRParams, ctx: Context, system: SystemParams | None = None, scenes=None, arms=None):
    return model.run(system or p.system, scenes or p.scenes, arms or p.arms, p.frames, ctx.seed, p.workers)


@experiment(params=OOVRParams, needs_gpu=False)
def scenes(p: OOVRParams, ctx: Context) -> Result:
    """Every arm on every scene: frame time, speedup, inter-GPM bytes and load imbalance."""
    model.check(p.system, p.scenes, p.arms, p.frames)
    t0 = time.perf_counter()
    rows = _run(p, ctx)
    wall = time.perf_counter() - t0
    table, metrics = model.summarize(rows)
    metrics.update(simulation_speed(float(rows["events"].sum()), wall, ctx.log, "oovr"))
    return Result(metrics=metrics, tables={"frames": rows, "scenes": table},
                  tags={"kind": "model", "arms": ",".join(p.arms), "scenes": ",".join(s.name for s in p.scenes)})


@experiment(params=OOVRParams, needs_gpu=False)
def link_sweep(p: OOVRParams, ctx: Context) -> Result:
    """Speedup vs inter-GPM link bandwidth (DRAM fixed) and vs DRAM/link asymmetry (link fixed)."""
    model.check(p.system, p.scenes, p.arms, p.frames)
    for key, values in (("link_gbps", p.link_gbps), ("asymmetry", p.asymmetry)):
        if not values or any(not (v > 0) for v in values):
            raise ParamError(f"{key}: must be a non-empty list of numbers > 0, got {values!r}")
    arms = [a for a in model.HEADLINE_ARMS if a in p.arms]
    points = [("link_gbps", v, dataclasses.replace(p.system, link_gbps=v)) for v in p.link_gbps]
    points += [("asymmetry", a, dataclasses.replace(p.system, dram_gbps=p.system.link_gbps * a)) for a in p.asymmetry]
    t0, all_rows, out = time.perf_counter(), [], []
    for kind, value, system in ctx.progress(points, desc="link sweep"):
        rows = _run(p, ctx, system=system, arms=arms)
        table, metrics = model.summarize(rows)
        all_rows.append(rows)
        per_arm = table.groupby("arm")["frame_ms"].mean()
        out.append({"kind": kind, "value": value, "link_gbps": system.link_gbps, "dram_gbps": system.dram_gbps,
                    **{f"frame_ms_{a}": per_arm.get(a, math.nan) for a in arms},
                    **{k: metrics.get(k, math.nan) for k in ("speedup", "traffic_reduction", "speedup_vs_sfr",
                                                              "speedup_vs_object", "speedup_vs_afr")}})
    wall = time.perf_counter() - t0
    sweep = pd.DataFrame(out)
    link = sweep[sweep["kind"] == "link_gbps"].sort_values("value")
    asym = sweep[sweep["kind"] == "asymmetry"].sort_values("value")
    metrics = {"advantage_gone_gbps": crossing(link["value"].to_numpy(), link["speedup"].to_numpy(), 1.0),
               "speedup_at_min_link": float(link["speedup"].iloc[0]), "speedup_at_max_link": float(link["speedup"].iloc[-1]),
               "speedup_at_min_asymmetry": float(asym["speedup"].iloc[0]),
               "speedup_at_max_asymmetry": float(asym["speedup"].iloc[-1])}
    metrics.update(simulation_speed(float(sum(r["events"].sum() for r in all_rows)), wall, ctx.log, "oovr"))
    return Result(metrics=metrics, tables={"sweep": sweep}, tags={"kind": "model"})


def assumed_keys(p: OOVRParams) -> dict[str, float]:
    """Every assumed numeric parameter -> its default (scene fields as factors, default 1)."""
    keys = {f"system.{k}": getattr(p.system, k) for k in sorted(ASSUMED)
            if isinstance(getattr(p.system, k), (int, float)) and not isinstance(getattr(p.system, k), bool)
            and getattr(p.system, k) > 0 and math.isfinite(getattr(p.system, k))}
    keys.update({f"scene.{f.name}": 1.0 for f in fields(SceneSpec)
                 if f.name != "name" and any(getattr(s, f.name) > 0 for s in p.scenes)})
    return keys


@dataclass
class Headline:
    """The headline (speedup, traffic reduction) with some parameters overridden; picklable, so a
    process pool can evaluate screening points side by side."""

    system: SystemParams
    scenes: list[SceneSpec]
    frames: int
    seed: int

    def __call__(self, overrides: dict) -> dict[str, float]:
        topology = overrides.get("system.topology")
        numeric = {k: v for k, v in overrides.items() if k != "system.topology"}
        system, scenes_ = model.with_overrides(self.system, self.scenes, numeric)
        if topology:
            system = dataclasses.replace(system, topology=topology)
        rows = model.run(system, scenes_, list(model.HEADLINE_ARMS), self.frames, self.seed)
        m = model.summarize(rows)[1]
        return {"speedup": m["speedup"], "traffic_reduction": m["traffic_reduction"],
                "_events": float(rows["events"].sum())}


@experiment(params=OOVRParams, needs_gpu=False)
def sensitivity_screen(p: OOVRParams, ctx: Context) -> Result:
    """Each assumed parameter at each factor (and the other topology): the headline's change; a curve
    for each parameter that moves it by more than ``threshold``."""
    model.check(p.system, p.scenes, p.arms, p.frames)
    defaults = assumed_keys(p)
    headline = Headline(p.system, p.scenes, p.frames, ctx.seed)
    t0 = time.perf_counter()
    other = "full" if p.system.topology == "switch" else "switch"
    screen, curves, base, events = sensitivity.study(headline, defaults, p.factors, p.curve_factors, p.threshold,
                                                     p.workers, categorical={"system.topology": other},
                                                     progress=ctx.progress)
    metrics, tags = sensitivity.summarize(
        screen, base, {"base_speedup": "speedup", "base_traffic_reduction": "traffic_reduction"}, p.threshold)
    metrics.update(simulation_speed(events, time.perf_counter() - t0, ctx.log, "oovr"))
    return Result(metrics=metrics, tables={"screen": screen, "curves": curves}, tags=tags)


@experiment(params=OOVRParams, needs_gpu=False)
def tornado(p: OOVRParams, ctx: Context) -> Result:
    """The claim's headline (speedup) at each assumed parameter's low and high end (``spans``: range
    and why), the others at their defaults: tornado.csv sorted by swing, and the range it spans."""
    model.check(p.system, p.scenes, p.arms, p.frames)
    t0 = time.perf_counter()
    with pool_map(p.workers) as mapper:
        table, base, events = sensitivity.tornado(Headline(p.system, p.scenes, p.frames, ctx.seed), assumed_keys(p), p.spans, "speedup",
                                                  mapper, ctx.progress)
    metrics, tags = sensitivity.tornado_summary(table, base)
    metrics.update(simulation_speed(events, time.perf_counter() - t0, ctx.log, "oovr"))
    return Result(metrics=metrics, tables={"tornado": table}, tags=tags)
