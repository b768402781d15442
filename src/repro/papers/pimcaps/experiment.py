"""PIM-CapsNet: the characterisation of CapsNet routing (``characterise``: the H200 at paper
scale, the CPU at smoke) and the PIM model set from that record (``pim_model``, a CPU step).

characterise  one row per (configuration, batch, variant) in points.csv (columns: see
              characterise.py); metrics: the routing share, u_hat size and launches of the eager
              routing, and the fused (torch.compile) routing's speedup.
pim_model     per (configuration, batch) of the characterisation's eager rows, the analytical model
              (pim_model.py): speedup and energy saving of PIM-CapsNet over GPU-only (model.csv),
              the same against the GPU with fused routing, and the sweep of the vaults' internal
              bandwidth (sweep.csv).
The tornado over the model's assumed parameters is repro.papers.pimcaps.tornado.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from repro import records
from repro.experiment import Context, Result, experiment
from repro.papers.pimcaps import pim_model
from repro.papers.pimcaps.capsnet import CONFIGS

PAPER_SPEEDUP = 2.44        # PIM-CapsNet over the GPU, average (paper, Sec. 1 and the evaluation)
PAPER_ENERGY_SAVING = 0.6491  # PIM-CapsNet's energy saving over the GPU, average (same)


@dataclass
class CharacteriseParams:
    configs: list[str] = field(default_factory=lambda: ["mnist", "cifar", "svhn"])
    batches: list[int] = field(default_factory=lambda: [1, 8, 32, 100, 256])
    repeats: int = 20             # timed calls per measurement (median)
    compiled: bool = True         # also the routing procedure fused by torch.compile
    power_batch: int = 100        # batch at which GPU power is sampled (0 = never)
    power_seconds: float = 2.0    # per sample (GPU only)


@experiment(params=CharacteriseParams, needs_gpu=False)
def characterise(p: CharacteriseParams, ctx: Context) -> Result:
    """Routing vs conv time, intermediate size, launches and syncs per batch, eager and fused."""
    for name in p.configs:
        if name not in CONFIGS:
            raise ValueError(f"configs: unknown configuration {name!r}; known: {', '.join(CONFIGS)}")
    if not p.batches or min(p.batches) < 1:
        raise ValueError(f"batches must be positive integers, got {p.batches}")
    from repro.papers.pimcaps.characterise import characterise as measure

    uuid = None
    if ctx.device == "cuda":
        from repro.machine import device_uuid

        uuid = device_uuid()
    rows = []
    grid = [(c, b) for c in p.configs for b in p.batches]
    for cfg_name, batch in ctx.progress(grid, desc="pimcaps characterise"):
        power_s = p.power_seconds if batch == p.power_batch else 0.0
        rows += measure(CONFIGS[cfg_name], batch, ctx.device, p.repeats, p.compiled, power_s, uuid, ctx.seed)
    df = pd.DataFrame(rows)
    eager = df[df["variant"] == "eager"]
    metrics = {"routing_share_mean": float(eager["routing_share"].mean()),
               "routing_share_max": float(eager["routing_share"].max()),
               "routing_share_min": float(eager["routing_share"].min()),
               "u_hat_bytes_max": float(eager["u_hat_bytes"].max())}
    for key in ("routing_kernels", "routing_launches", "routing_syncs", "routing_ops"):
        if key in eager:
            metrics[f"{key}_per_batch"] = float(eager[key].median())
    if p.compiled:
        both = eager.merge(df[df["variant"] == "compiled"], on=["config", "batch"], suffixes=("", "_c"))
        fused = (both["conv_s"] + both["routing_s"]) / (both["conv_s"] + both["routing_s_c"])
        metrics["fused_end_to_end_speedup_geomean"] = float(np.exp(np.log(fused).mean()))
        metrics["fused_routing_speedup_geomean"] = float(np.exp(np.log(both["routing_s"] / both["routing_s_c"]).mean()))
        metrics["fused_max_abs_diff"] = float(df["max_abs_diff_vs_eager"].max())
    return Result(metrics=metrics, tables={"points": df}, tags={"device": ctx.device})


@dataclass
class ModelParams:
    hw: pim_model.HMCParams = field(default_factory=pim_model.HMCParams)
    vault_gbps_sweep: list[float] = field(default_factory=lambda: [2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0])


def read_points(ctx: Context) -> pd.DataFrame:
    folder, _ = records.read_input(ctx.inputs, "characterise", "pimcaps/characterise")
    return pd.read_csv(folder / "points.csv")


def model_rows(df: pd.DataFrame, hw: pim_model.HMCParams) -> list[dict]:
    eager = df[df["variant"] == "eager"]
    compiled = df[df["variant"] == "compiled"].set_index(["config", "batch"])
    rows = []
    for _, r in eager.iterrows():
        w = pim_model.Workload(int(r["batch"]), int(r["low_capsules"]), int(r["classes"]), int(r["primary_dim"]),
                               int(r["class_dim"]), int(r["iterations"]))
        power = [float(r.get(k, math.nan)) for k in ("power_conv_w", "power_routing_w", "power_idle_w")]
        out = pim_model.evaluate(w, hw, float(r["conv_s"]), float(r["routing_s"]), *power)
        row = dict(config=r["config"], batch=int(r["batch"]), conv_s=r["conv_s"], routing_s=r["routing_s"],
                   routing_share=r["routing_share"], power_measured=not math.isnan(power[0]), **out)
        if (r["config"], r["batch"]) in compiled.index:
            fused_s = float(compiled.loc[(r["config"], r["batch"]), "routing_s"])
            row["fused_gpu_s"] = r["conv_s"] + fused_s
            row["fused_speedup"] = row["gpu_only_s"] / row["fused_gpu_s"]
            row["speedup_over_fused"] = row["fused_gpu_s"] / row["pim_system_s"]
        rows.append(row)
    return rows


def geomean(xs) -> float:
    xs = np.asarray(list(xs), float)
    return float(np.exp(np.log(xs).mean()))


@experiment(params=ModelParams, needs_gpu=False)
def model(p: ModelParams, ctx: Context) -> Result:
    """Speedup and energy of PIM-CapsNet over GPU-only, GPU side from the characterisation."""
    for f in dataclasses.fields(p.hw):
        if getattr(p.hw, f.name) <= 0:
            raise ValueError(f"hw.{f.name} must be positive, got {getattr(p.hw, f.name)}")
    points = read_points(ctx)
    df = pd.DataFrame(model_rows(points, p.hw))
    sweep = pd.DataFrame([dict(vault_gbps=bw, internal_gbps=bw * p.hw.vaults, **row)
                          for bw in p.vault_gbps_sweep
                          for row in model_rows(points, pim_model.with_internal_bandwidth(p.hw, bw))])
    metrics = {"speedup_geomean": geomean(df["speedup"]), "speedup_max": float(df["speedup"].max()),
               "speedup_min": float(df["speedup"].min()), "energy_saving_mean": float(df["energy_saving"].mean()),
               "routing_speedup_geomean": geomean(df["routing_speedup"]),
               "speedup_over_paper": geomean(df["speedup"]) / PAPER_SPEEDUP,
               "share_pim_bound": float((df["bound"] == "pim routing").mean()),
               "power_measured": float(df["power_measured"].all())}
    if "speedup_over_fused" in df:
        metrics["speedup_over_fused_geomean"] = geomean(df["speedup_over_fused"])
        metrics["fused_speedup_geomean"] = geomean(df["fused_speedup"])
    return Result(metrics=metrics, tables={"model": df, "sweep": sweep}, tags={"gpu_side": gpu_side(ctx), "kind": "model"})


def gpu_side(ctx: Context) -> str:
    gpu = records.read(Path(ctx.inputs["characterise"]).parent).get("provenance", {}).get("gpu_name") or "cpu"
    return f"measured on {gpu} (inputs.characterise)"
