"""ADS-Tile's scheduler model (CPU steps over the ``adstile/curves`` record; scheduler.py is the model):

schedule  for each deadline slack and policy, the fewest
          tiles meeting every end-to-end deadline and, there, the reallocation waste (% of held
          tile-time stalled by reallocation); points.csv, and the headlines: ADS-Tile's tiles over
          work-conserving's (the smallest ratio over the sweep: the paper's "up to"; and at the tightest
          slack both meet), ADS-Tile's largest waste and work-conserving's range. A chain's deadline is
          min(period, slack x its worst-case latency on every tile): slack 1 is the tightest possible.
tornado   one headline (``metric``) at each assumed parameter's low and high end (repro.sim.sensitivity).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import pandas as pd

from repro import records
from repro.experiment import Context, Result, experiment
from repro.papers.adstile import scheduler
from repro.papers.adstile.scheduler import ModelParams
from repro.papers.adstile.workload import ChainSpec, Curve
from repro.sim import sensitivity
from repro.sim.engine import pool_map, simulation_speed
from repro.sim.params import choices, count, fraction, positive

PAPER_TILES = 0.68      # ADS-Tile's tiles over work-conserving's: "up to 32% fewer" (abstract)
PAPER_WASTE = 1.2       # ADS-Tile's reallocation waste, % ("below 1.2%", abstract)
# ModelParams fields not from the paper or a measurement (interference: measured only where the curves'
# halves are disjoint, which torch before 2.15 cannot make)
ASSUMED = ("variation_shape", "restart_us", "migrate_gbps", "quantile", "interference")


def _chains() -> list[ChainSpec]:
    return [ChainSpec("front_camera", 30.0, ["detection", "tracking", "planning"]),
            ChainSpec("surround_lidar", 10.0, ["segmentation", "tracking"]),
            ChainSpec("control", 60.0, ["planning"])]


@dataclass
class ScheduleParams:
    model: ModelParams = field(default_factory=ModelParams)
    chains: list[ChainSpec] = field(default_factory=_chains)
    # each chain's end-to-end deadline = min(period, slack x its worst-case latency (vmax) on every tile):
    # 1 is the tightest any policy can meet, and the sweep spans tight to loose whatever the DNNs' speed
    slack: list[float] = field(default_factory=lambda: [1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0])
    tiles_limit: int = 0          # most tiles searched; 0 = the measured device's units
    policies: list[str] = field(default_factory=lambda: list(scheduler.POLICIES))
    # slowdown while jobs co-run on their own tiles; NaN: the measured partition_slowdown_mean where the
    # curves' halves were disjoint, else 1 (no residual interference between isolated tiles: assumed)
    interference: float = math.nan
    workers: int = 1              # processes for the tornado's points


def check(p: ScheduleParams) -> None:
    choices("policies", p.policies, scheduler.POLICIES)
    for name in ("work_conserving", "ads_tile"):
        if name not in p.policies:
            raise ValueError(f"policies: the headlines need {name}")
    m = p.model
    positive("model.vmax", m.vmax)
    if m.vmax < 1:
        raise ValueError(f"model.vmax: the largest execution-time factor must be >= 1, got {m.vmax}")
    for key in ("variation_shape", "migrate_gbps", "horizon_s"):
        positive(f"model.{key}", getattr(m, key))
    positive("model.restart_us", m.restart_us + 1e-30)
    fraction("model.quantile", m.quantile)
    if not p.chains or not p.slack:
        raise ValueError("chains and slack must not be empty")
    for x in p.slack:
        positive("slack", x)
    count("tiles_limit", p.tiles_limit, minimum=0)


@dataclass
class Measured:
    """What the model reads from the curves record."""
    curves: dict[str, Curve]
    sizes: dict[str, tuple[float, float]]
    units: int
    interference: float          # NaN where the measured halves were not disjoint
    gpu: str


def read_curves(ctx: Context) -> Measured:
    folder, rec = records.read_input(ctx.inputs, "curves", "adstile/curves")
    df = pd.read_csv(folder / "curves.csv")
    sizes = pd.read_csv(folder / "sizes.csv").set_index("dnn")
    curves = {name: Curve(d["units"], d["latency_s"]) for name, d in df.groupby("dnn")}
    disjoint = rec.get("tags", {}).get("partitions_disjoint") == "true"
    inter = float(rec["metrics"].get("partition_slowdown_mean", math.nan)) if disjoint else math.nan
    gpu = rec.get("provenance", {}).get("gpu_name") or f"cpu ({rec.get('tags', {}).get('partition', 'threads')})"
    return Measured(curves, {n: (float(r["weight_bytes"]), float(r["feature_bytes"])) for n, r in sizes.iterrows()},
                    int(rec["metrics"]["units_total"]), inter, gpu)


def evaluate(p: ScheduleParams, m: Measured, seed: int, mp: ModelParams | None = None, progress=None) -> tuple[pd.DataFrame, int]:
    """points.csv's rows (policy x slack) and the simulated events."""
    mp = mp or p.model
    limit = p.tiles_limit or m.units
    tasks = scheduler.build_tasks(p.chains, m.curves, m.sizes)
    factors = scheduler.draw_factors(p.chains, mp, seed)
    grid = [(x, pol) for x in p.slack for pol in p.policies]
    rows, events = [], 0
    for x, pol in (progress(grid, desc="adstile schedule") if progress else grid):
        deadlines = chain_deadlines(p.chains, tasks, x, mp.vmax, limit)
        pt = scheduler.fewest_tiles(pol, p.chains, tasks, deadlines, mp, factors, limit)
        events += pt.events
        st = pt.stats
        rows.append(dict(slack=x, policy=pol, tiles=pt.tiles,
                         deadline_over_period=sum(d * c.hz for d, c in zip(deadlines, p.chains)) / len(deadlines),
                         waste_pct=st.waste_pct if st else math.nan,
                         waste_capacity_pct=100 * st.stall_tile_s / (pt.tiles * mp.horizon_s) if st else math.nan,
                         reallocations_per_job=st.reallocations / st.jobs if st and st.jobs else math.nan,
                         busy_share=st.busy_tile_s / st.held_tile_s if st and st.held_tile_s else math.nan,
                         misses=st.misses if st else math.nan, jobs=st.jobs if st else 0,
                         worst_slack_ms=1e3 * st.worst_slack_s if st else math.nan))
    return pd.DataFrame(rows), events


def chain_deadlines(chains: list[ChainSpec], tasks, slack: float, vmax: float, limit: int) -> list[float]:
    """Each chain's end-to-end deadline at ``slack``: min(period, slack x vmax x its stages' latency on
    ``limit`` tiles)."""
    return [min(1.0 / c.hz, slack * vmax * scheduler.chain_latency(t, [limit] * len(t), 1.0)) for c, t in zip(chains, tasks)]


def headlines(df: pd.DataFrame) -> dict[str, float]:
    piv = df.pivot(index="slack", columns="policy", values="tiles")
    ratio = (piv["ads_tile"] / piv["work_conserving"]).dropna()
    ads, wc = df[df["policy"] == "ads_tile"].dropna(subset=["tiles"]), df[df["policy"] == "work_conserving"].dropna(subset=["tiles"])
    tight = ratio.index.min() if len(ratio) else math.nan
    return {"tiles_ratio_min": float(ratio.min()) if len(ratio) else math.nan,
            "tiles_ratio_tightest": float(ratio.loc[tight]) if len(ratio) else math.nan,
            "slack_tightest_both": float(tight),
            "ads_tile_waste_max_pct": float(ads["waste_pct"].max()) if len(ads) else math.nan,
            "work_conserving_waste_min_pct": float(wc["waste_pct"].min()) if len(wc) else math.nan,
            "work_conserving_waste_max_pct": float(wc["waste_pct"].max()) if len(wc) else math.nan,
            "ads_tile_misses": float(ads["misses"].sum()) if len(ads) else math.nan}


def with_measured(p: ScheduleParams, m: Measured) -> tuple[ModelParams, str]:
    """The model's parameters with the interference set, and where it comes from."""
    if not math.isnan(p.interference):
        inter, source = p.interference, "params.interference"
    elif not math.isnan(m.interference):
        inter, source = max(1.0, m.interference), "measured (partition_slowdown_mean, disjoint halves)"
    else:
        inter, source = 1.0, "assumed 1: the measured halves were not disjoint"
    return dataclasses.replace(p.model, interference=inter), source


@experiment(params=ScheduleParams, needs_gpu=False)
def schedule(p: ScheduleParams, ctx: Context) -> Result:
    """Fewest tiles and reallocation waste per policy over the deadline sweep."""
    check(p)
    m = read_curves(ctx)
    mp, source = with_measured(p, m)
    t0 = time.perf_counter()
    df, events = evaluate(p, m, ctx.seed, mp, ctx.progress)
    head = headlines(df)
    metrics = {**head, "tiles_over_paper": head["tiles_ratio_min"] / PAPER_TILES, "interference": mp.interference,
               "tiles_limit": float(p.tiles_limit or m.units),
               **simulation_speed(events, time.perf_counter() - t0, ctx.log, "adstile schedule")}
    return Result(metrics=metrics, tables={"points": df},
                  tags={"kind": "model", "curves_from": f"measured on {m.gpu} (inputs.curves)", "interference": source})


@dataclass
class TornadoParams(ScheduleParams):
    metric: str = "tiles_ratio_min"     # the headline screened (a key of ``headlines``)
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # model.<assumed field> -> range and why
    target: float = math.nan            # the claim's target, drawn on the chart


@dataclass
class Headline:
    """``headlines`` with model parameters overridden (``model.<field>``: a value); picklable."""
    p: ScheduleParams
    m: Measured
    mp: ModelParams
    seed: int

    def __call__(self, overrides: dict) -> dict[str, float]:
        mp = dataclasses.replace(self.mp, **{k.removeprefix("model."): float(v) for k, v in overrides.items()})
        df, events = evaluate(self.p, self.m, self.seed, mp)
        return {**headlines(df), "_events": float(events)}


@experiment(params=TornadoParams, needs_gpu=False)
def tornado(p: TornadoParams, ctx: Context) -> Result:
    """The headline ``metric`` at each assumed parameter's low and high end, sorted by swing."""
    check(p)
    m = read_curves(ctx)
    mp, source = with_measured(p, m)
    defaults = {f"model.{k}": float(getattr(mp, k)) for k in ASSUMED}
    t0 = time.perf_counter()
    with pool_map(p.workers) as mapper:
        table, base, events = sensitivity.tornado(Headline(p, m, mp, ctx.seed), defaults, p.spans, p.metric,
                                                  mapper=mapper, progress=ctx.progress)
    metrics, tags = sensitivity.tornado_summary(table, base)
    metrics.update(simulation_speed(events, time.perf_counter() - t0, ctx.log, "adstile tornado"))
    return Result(metrics=metrics, tables={"tornado": table},
                  tags={**tags, "metric": p.metric, "curves_from": f"measured on {m.gpu} (inputs.curves)",
                        "interference": source})
