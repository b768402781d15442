"""The error-bound sweep of the COMET arms: which runs it needs and how each one is told its bound.
Free of heavy imports (no torch): the workflow reads it at every start to build the DAG.

Each swept arm names its experiment, one parameter and the values to run it at (the adaptive arm's
grad_error_fraction, the fixed arm's eb), and optionally parameters that move with it (``scaled``:
parameter -> share of the value; the adaptive arm's bn_fraction, which alone bounds the BatchNorm
inputs). One sweep point is one run of the arm's own experiment with those parameters overridden,
in its own folder
``results/comet/comet_eb_sweep/<arm>_<param><value>/`` (the value written by :func:`value_tag`,
e.g. ``fixed_eb_eb0p2``). A point whose value equals the arm's configured run at this scale is that
run: the sweep reads its record instead of training it twice. The shared mechanics:
:mod:`repro.sweep_points`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from repro.sweep_points import arm_params, hydra_overrides, needed_record, read_params

# the shared mechanics are re-exported: the workflow and the tests reach them through this module
__all__ = ["EbSweepParams", "SweptArm", "arm_params", "hydra_overrides", "point_dir", "point_name", "point_params",
           "point_record", "points", "read_config", "sweep_records", "value_tag"]

SWEEP_DIR = "results/comet/comet_eb_sweep"


@dataclass
class SweptArm:
    experiment: str = ""  # the arm's experiment ("<paper>/<name>"), run once per value
    param: str = ""  # the parameter of that experiment the sweep sets
    values: list = field(default_factory=list)
    scaled: dict = field(default_factory=dict)  # parameter -> share of the value: set to value * share


@dataclass
class EbSweepParams:
    # arm name (as comet_compare's inputs) -> what is swept; ratios are against the uncompressed arm
    arms: dict[str, SweptArm] = field(default_factory=lambda: {
        "adaptive_eb": SweptArm("comet/comet_adaptive_eb", "grad_error_fraction", [0.1, 0.3, 1.0, 3.0],
                                {"bn_fraction": 0.5}),
        "fixed_eb": SweptArm("comet/comet_fixed_eb", "eb", [0.05, 0.1, 0.2, 0.5, 1.0])})
    target_reduction: float = 13.5  # comet.mem: activation memory uncompressed / ours at least this
    max_top1_loss: float = 0.5  # ... with final top-1 at most this many points under uncompressed


def read_config(path: Path, scale: str) -> EbSweepParams:
    """The sweep's own experiment file (config/experiment/comet/comet_eb_sweep.yaml)."""
    return read_params(path, scale, EbSweepParams)


def value_tag(value) -> str:
    """A value as a folder-name part: ``%g`` with the point as ``p`` and a minus as ``m`` (0.05 -> 0p05,
    3.0 -> 3, 1e-05 -> 1em05), so that no folder looks like a file with a suffix."""
    return format(float(value), "g").replace("+", "").replace("-", "m").replace(".", "p")


def point_name(arm: str, param: str, value) -> str:
    """The folder name of one (arm, value) point below the sweep's folder."""
    return f"{arm}_{param}{value_tag(value)}"  # the scaled parameters follow from the value


def point_params(swept: SweptArm, value) -> dict:
    """The parameters that set the arm to ``value``: the swept one and those scaled with it (to 12
    significant digits, so that e.g. 0.3 * 0.5 is written and compared as 0.15)."""
    return {swept.param: value, **{key: float(f"{value * share:.12g}") for key, share in swept.scaled.items()}}


def points(p: EbSweepParams) -> dict[str, tuple[str, dict]]:
    """Every point of the sweep: folder name -> (arm, {parameter: value}), arms in order, values ascending."""
    out = {}
    for arm, swept in p.arms.items():
        if not swept.experiment or not swept.param or not swept.values:
            raise ValueError(f"arms.{arm}: needs experiment, param and values, got {swept}")
        for value in sorted(swept.values):
            name = point_name(arm, swept.param, value)
            if name in out:
                raise ValueError(f"arms.{arm}: values {value!r} and {out[name][1][swept.param]!r} share the "
                                 f"folder {name}; make them differ in their first 6 significant digits")
            out[name] = (arm, point_params(swept, value))
    return out


def point_dir(name: str) -> str:
    return f"{SWEEP_DIR}/{name}"


def point_record(name: str) -> str:
    return f"{point_dir(name)}/record.json"


def sweep_records(p: EbSweepParams, config_dir: Path, scale: str) -> list[str]:
    """The records the sweep reads, per point: the point's own, or the arm's configured run's
    (results/<experiment>/record.json) where the point is that run."""
    configured = {arm: arm_params(config_dir, swept.experiment, scale) for arm, swept in p.arms.items()}
    return [needed_record(point, configured[arm], p.arms[arm].experiment, point_dir(name))
            for name, (arm, point) in points(p).items()]
