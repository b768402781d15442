"""Caramel's experiments: the gradient timelines (``timelines``, on the GPU at paper scale) and the
all-reduce model fed by them (``model``, claim ``caramel.model``). The gloo validation is ``gloo.py``."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.caramel import model as sim
from repro.papers.caramel import timeline
from repro.papers.caramel.links import LinkSpec, ring_allreduce_s
from repro.papers.caramel.plan import CaramelParams
from repro.papers.caramel.workloads import Workload
from repro.sim.engine import simulation_speed
from repro.sim.params import ParamError, choices, count


def _paper_workloads() -> list[Workload]:
    return [Workload("resnet50", "resnet50"), Workload("vgg16", "vgg16"),
            Workload("bert_base", "bert_base", batch=8), Workload("vit_b16", "vit_b16")]


@dataclass
class TimelineParams:
    workloads: list[Workload] = field(default_factory=_paper_workloads)
    warmup: int = 3  # untimed steps first (cuDNN autotuning, allocator)
    repeats: int = 10  # timed steps; each stamp is their median


@experiment(params=TimelineParams, needs_gpu=False)
def timelines(p: TimelineParams, ctx: Context) -> Result:
    """Each workload's per-parameter gradient-ready times and sizes in one training step."""
    import torch

    count("repeats", p.repeats)
    device = torch.device(ctx.device)
    torch.manual_seed(ctx.seed)
    tables, metrics = [], {}
    for w in ctx.progress(p.workloads, desc="timelines"):
        model = w.build().to(device)
        inputs, loss_fn = w.batch_fn(model, device, ctx.seed)
        tl = timeline.record(model, inputs, loss_fn, device, p.warmup, p.repeats, label=w.name)
        tables.append(tl)
        metrics.update({f"{w.name}_backward_ms": float(tl["backward_s"].iloc[0] * 1e3),
                        f"{w.name}_forward_ms": float(tl["forward_s"].iloc[0] * 1e3),
                        f"{w.name}_mib": float(tl["bytes"].sum() / 2**20), f"{w.name}_tensors": float(len(tl))})
        del model, inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    return Result(metrics=metrics, tables={"timelines": pd.concat(tables, ignore_index=True)},
                  tags={"device": device_name, "workloads": ",".join(w.name for w in p.workloads),
                        "clock": "cuda events" if device.type == "cuda" else "perf_counter"})


def _links() -> list[LinkSpec]:
    return [LinkSpec("eth10", 10.0, 25.0), LinkSpec("eth25", 25.0, 25.0), LinkSpec("eth100", 100.0, 25.0)]


@dataclass
class ModelParams:
    world: int = 4  # assumed: data-parallel workers in the ring
    links: list[LinkSpec] = field(default_factory=_links)
    headline_link: str = "eth10"  # the claim's link (10 Gb/s)
    arms: list[str] = field(default_factory=lambda: list(sim.ARMS))
    caramel: CaramelParams = field(default_factory=CaramelParams)
    fusion_mb: float = 64.0  # Horovod's HOROVOD_FUSION_THRESHOLD before v0.21 (the paper's era)
    cycle_ms: float = 5.0  # Horovod's HOROVOD_CYCLE_TIME before v0.21
    iterations: int = 4  # simulated iterations; the first is left out of the steady state


def read_timelines(ctx: Context) -> pd.DataFrame:
    return pd.read_csv(Path(ctx.inputs["timelines"]).parent / "timelines.csv")


def _check(p: ModelParams) -> None:
    count("world", p.world, minimum=2)
    choices("arms", p.arms, sim.ARMS)
    for link in p.links:
        link.check()
    if p.headline_link not in {link.name for link in p.links}:
        raise ParamError(f"headline_link: {p.headline_link!r} is none of links ({', '.join(l.name for l in p.links)})")
    if not 0 < p.caramel.efficiency < 1:
        raise ParamError(f"caramel.efficiency: must be in (0, 1), got {p.caramel.efficiency!r}")


def simulate_arms(tl: pd.DataFrame, p: ModelParams, progress=lambda x, **k: x) -> pd.DataFrame:
    rows = []
    points = [(m, link, arm) for m in tl["model"].unique() for link in p.links for arm in p.arms]
    for name, link, arm in progress(points, desc="model"):
        got = sim.run_arm(arm, tl[tl["model"] == name], p.world, link, p.caramel, p.fusion_mb, p.cycle_ms,
                          p.iterations)
        # no schedule beats compute alone, nor one ring all-reduce of every gradient byte
        bound = max(got["compute_s"], ring_allreduce_s(got["bytes"], p.world, link))
        rows.append({"model": name, "link": link.name, "gbps": link.gbps, "alpha_us": link.alpha_us, "arm": arm,
                     **got, "bound_s": bound})
    return pd.DataFrame(rows)


def headline(arms: pd.DataFrame, link: str) -> tuple[dict[str, float], pd.DataFrame]:
    """Per model and link, each arm's iteration time over Caramel's; the claim's maxima at ``link``."""
    wide = arms.pivot_table(index=["model", "link"], columns="arm", values="iteration_s").reset_index()
    first = arms.groupby(["model", "link"])[["compute_s", "bound_s"]].first().reset_index(drop=True)
    wide["compute_s"], wide["bound_s"] = first["compute_s"].to_numpy(), first["bound_s"].to_numpy()
    for arm in ("ddp", "no_overlap", "horovod", "caramel_ddp"):
        if arm in wide and "caramel" in wide:
            wide[f"{arm}_over_caramel"] = wide[arm] / wide["caramel"]
    if "ddp" in wide:
        wide["ddp_over_bound"] = wide["ddp"] / wide["bound_s"]
        if "caramel_ddp" in wide:
            wide["ddp_over_caramel_ddp"] = wide["ddp"] / wide["caramel_ddp"]
    at = wide[wide["link"] == link]
    nan = math.nan
    metrics = {"speedup": float(at["ddp_over_caramel"].max()) if "ddp_over_caramel" in at else nan,
               "speedup_model": str(at.loc[at["ddp_over_caramel"].idxmax(), "model"]) if "ddp_over_caramel" in at else "",
               "speedup_vs_no_overlap": float(at["no_overlap_over_caramel"].max()) if "no_overlap_over_caramel" in at else nan,
               "speedup_vs_horovod": float(at["horovod_over_caramel"].max()) if "horovod_over_caramel" in at else nan,
               "speedup_ddp_hook": float(at["ddp_over_caramel_ddp"].max()) if "ddp_over_caramel_ddp" in at else nan,
               "ceiling_speedup": float(at["ddp_over_bound"].max()) if "ddp_over_bound" in at else nan}
    for _, r in at.iterrows():
        if "ddp_over_caramel" in r:
            metrics[f"speedup_{r['model']}"] = float(r["ddp_over_caramel"])
    return metrics, wide


@experiment(params=ModelParams, needs_gpu=False)
def model(p: ModelParams, ctx: Context) -> Result:
    """Every arm on every timeline and link: steady-state iteration time; the claim's ratios at 10 Gb/s."""
    _check(p)
    tl = read_timelines(ctx)
    t0 = time.perf_counter()
    arms = simulate_arms(tl, p, ctx.progress)
    metrics, ratios = headline(arms, p.headline_link)
    best = metrics.pop("speedup_model")
    metrics.update(simulation_speed(float(arms["events"].sum()), time.perf_counter() - t0, ctx.log, "caramel"))
    fed_by = json.loads(Path(ctx.inputs["timelines"]).read_text()).get("tags", {}).get("device", "unknown")
    return Result(metrics=metrics, tables={"arms": arms, "ratios": ratios},
                  tags={"kind": "model", "speedup_model": best, "timelines_device": fed_by})
