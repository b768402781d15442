"""AIDA: the analytical model (``model``: per EIE benchmark layer, AIDA's and EIE's cycles and
AIDA's speedup; the peak ratio) and its tornado over the assumed parameters (``tornado``: one
headline, ``metric``, at each assumed parameter's low and high end). CPU steps; ap_model.py holds
the model and says where each parameter comes from."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pandas as pd

from repro.experiment import Context, Result, experiment
from repro.papers.aida import ap_model
from repro.sim import sensitivity

PAPER_PEAK = 14.5        # AIDA over EIE, peak performance (AIDA abstract)
PAPER_THROUGHPUT = 2.5   # AIDA over EIE, throughput (AIDA abstract)


@dataclass
class ModelParams:
    ap: ap_model.APParams = field(default_factory=ap_model.APParams)
    eie: ap_model.EIEParams = field(default_factory=ap_model.EIEParams)


def _check(ap: ap_model.APParams, eie: ap_model.EIEParams) -> None:
    for side, obj in (("ap", ap), ("eie", eie)):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{side}.{f.name} must be a positive finite number, got {value!r}")
    if eie.act_density > 1 or eie.load_balance > 1:
        raise ValueError("eie.act_density and eie.load_balance must be at most 1")


@experiment(params=ModelParams, needs_gpu=False)
def model(p: ModelParams, ctx: Context) -> Result:
    """AIDA against EIE per benchmark layer (layers.csv) and the two headlines."""
    _check(p.ap, p.eie)
    rows, head = ap_model.evaluate(p.ap, p.eie)
    df = pd.DataFrame(rows)
    metrics = {**head, "peak_over_paper": head["peak_ratio"] / PAPER_PEAK,
               "throughput_over_paper": head["throughput_geomean"] / PAPER_THROUGHPUT,
               "speedup_min": float(df["speedup"].min()), "speedup_max": float(df["speedup"].max()),
               "broadcast_share": float(df["ap_broadcast_cycles"].sum() / df["ap_cycles"].sum())}
    return Result(metrics=metrics, tables={"layers": df}, tags={"kind": "model"})


@dataclass
class TornadoParams:
    ap: ap_model.APParams = field(default_factory=ap_model.APParams)
    eie: ap_model.EIEParams = field(default_factory=ap_model.EIEParams)
    metric: str = "throughput_geomean"  # the headline screened: throughput_geomean or peak_ratio
    spans: dict[str, sensitivity.Span] = field(default_factory=dict)  # ap.<field> / eie.<field> -> range and why
    target: float = math.nan  # the claim's target (config/claims/aida.yaml), drawn on the chart


@dataclass
class Headline:
    """The model's headlines with parameters overridden (``ap.<field>`` / ``eie.<field>``: a value); picklable."""

    ap: ap_model.APParams
    eie: ap_model.EIEParams

    def __call__(self, overrides: dict) -> dict[str, float]:
        parts = {"ap": {}, "eie": {}}
        for key, value in overrides.items():
            side, name = key.split(".", 1)
            parts[side][name] = float(value)
        _, head = ap_model.evaluate(dataclasses.replace(self.ap, **parts["ap"]),
                                    dataclasses.replace(self.eie, **parts["eie"]))
        return head


def assumed_keys(ap: ap_model.APParams, eie: ap_model.EIEParams) -> dict[str, float]:
    """Every assumed parameter (``ap.<field>`` / ``eie.<field>``) -> its default."""
    obj = {"ap": ap, "eie": eie}
    return {k: float(getattr(obj[k.split(".")[0]], k.split(".", 1)[1])) for k in sorted(ap_model.ASSUMED)}


@experiment(params=TornadoParams, needs_gpu=False)
def tornado(p: TornadoParams, ctx: Context) -> Result:
    """The headline ``metric`` at each assumed parameter's low and high end, sorted by swing."""
    _check(p.ap, p.eie)
    if p.metric not in ("throughput_geomean", "peak_ratio"):
        raise ValueError(f"metric: unknown headline {p.metric!r}; known: throughput_geomean, peak_ratio")
    table, base, _ = sensitivity.tornado(Headline(p.ap, p.eie), assumed_keys(p.ap, p.eie), p.spans, p.metric,
                                         progress=ctx.progress)
    metrics, tags = sensitivity.tornado_summary(table, base)
    return Result(metrics=metrics, tables={"tornado": table}, tags={**tags, "metric": p.metric})
