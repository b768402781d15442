"""Tiny experiments for the runner tests (not part of the product)."""

from dataclasses import dataclass

import pandas as pd

from repro.experiment import Context, Result, experiment


@dataclass
class EchoParams:
    value: float = 1.0
    rows: int = 3


@experiment(params=EchoParams)
def echo(p: EchoParams, ctx: Context) -> Result:
    table = pd.DataFrame({"i": range(p.rows), "v": [p.value * i for i in range(p.rows)]})
    return Result(metrics={"value": p.value, "scale_is_smoke": float(ctx.scale == "smoke")}, tables={"rows": table})


@experiment(params=EchoParams, needs_gpu=True)
def gpu_only(p: EchoParams, ctx: Context) -> Result:
    return Result(metrics={"value": p.value})


@experiment(params=EchoParams)
def broken(p: EchoParams, ctx: Context) -> Result:
    raise RuntimeError("experiment failed on purpose")
