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


@dataclass
class StagedParams:
    parts: int = 3
    value: float = 1.0


@experiment(params=StagedParams)
def staged(p: StagedParams, ctx: Context) -> Result:
    """Each part a Context.stage; the computed ones are counted in a file beside the record. A file
    kill_after (a number) beside it stops the run after that many parts, as a time limit would."""
    counter, kill = ctx.out_dir / "computed.txt", ctx.out_dir / "kill_after"
    fail_at = int(kill.read_text()) if kill.exists() else -1
    done = []
    for i in range(p.parts):
        def compute(i=i):
            with open(counter, "a") as fh:
                fh.write(f"{i}\n")
            return p.value * i
        done.append(ctx.stage(f"part{i}", compute))
        if i + 1 == fail_at:
            raise RuntimeError(f"killed after part {i}")
    return Result(metrics={"total": sum(done)})
