"""PIM-CapsNet's tornado (claim pimcaps): the headline (speedup_geomean over the characterisation's
points) at each assumed stack parameter's low and high end (``spans``: range and why), the others at
their defaults (tornado.csv, sorted by swing); metrics: the baseline, lowest and highest value
(repro.sim.sensitivity). A CPU step over the characterisation record, kept apart from experiment.py,
whose characterise step runs on the GPU machine (which has no SimPy: repro.sim's simulators need it).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.pimcaps import pim_model
from repro.papers.pimcaps.experiment import geomean, gpu_side, model_rows, read_points
from repro.sim import sensitivity


@dataclass
class TornadoParams:
    hw: pim_model.HMCParams = field(default_factory=pim_model.HMCParams)
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # hw.<assumed field> -> range and why
    target: float = math.nan  # the claim's target (config/claims/pimcaps.yaml), drawn on the chart


@dataclass
class Speedup:
    """The claim's headline, speedup_geomean over the characterisation's points, with stack
    parameters overridden (``hw.<field>``: a value); picklable."""

    points: pd.DataFrame
    hw: pim_model.HMCParams

    def __call__(self, overrides: dict) -> dict[str, float]:
        hw = dataclasses.replace(self.hw, **{k.removeprefix("hw."): float(v) for k, v in overrides.items()})
        return {"speedup_geomean": geomean(r["speedup"] for r in model_rows(self.points, hw))}


def assumed_keys(hw: pim_model.HMCParams) -> dict[str, float]:
    """Every assumed stack parameter (``hw.<field>``) -> its default."""
    return {f"hw.{k}": float(getattr(hw, k)) for k in sorted(pim_model.ASSUMED)}


@experiment(params=TornadoParams, needs_gpu=False)
def tornado(p: TornadoParams, ctx: Context) -> Result:
    """speedup_geomean at each assumed parameter's low and high end, sorted by swing."""
    table, base, _ = sensitivity.tornado(Speedup(read_points(ctx), p.hw), assumed_keys(p.hw), p.spans, "speedup_geomean",
                                      progress=ctx.progress)
    metrics, tags = sensitivity.tornado_summary(table, base)
    return Result(metrics=metrics, tables={"tornado": table}, tags={**tags, "gpu_side": gpu_side(ctx)})
