"""The error-bound sweep of the COMET arms: its parameters and its points (:mod:`repro.sweep`).
Free of heavy imports (no torch): the workflow reads it at every start to build the DAG.

Each swept arm names its experiment, one parameter and the values to run it at (the adaptive arm's
grad_error_fraction, the fixed arm's eb), and optionally parameters that move with it (``scaled``:
parameter -> share of the value; the adaptive arm's bn_fraction, which alone bounds the BatchNorm
inputs). One point is one run of the arm's own experiment with those parameters set, named
``<arm>_<param><value>`` (the value written by :func:`value_tag`, e.g. ``fixed_eb_eb0p2``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import OmegaConf

from repro.sweep import Point


@dataclass
class SweptArm:
    experiment: str = ""  # the arm's experiment ("<paper>/<name>"), run once per value
    param: str = ""  # the parameter of that experiment the sweep sets
    values: list = field(default_factory=list)
    scaled: dict = field(default_factory=dict)  # parameter -> share of the value: set to value * share


@dataclass
class EbSweepParams:
    # arm name -> what is swept; ratios are against the uncompressed arm
    arms: dict[str, SweptArm] = field(default_factory=lambda: {
        "adaptive_eb": SweptArm("comet/comet_adaptive_eb", "grad_error_fraction", [0.1, 0.3, 1.0, 3.0],
                                {"bn_fraction": 0.5}),
        "fixed_eb": SweptArm("comet/comet_fixed_eb", "eb", [0.05, 0.1, 0.2, 0.5, 1.0])})
    target_reduction: float = 13.5  # comet.mem: activation memory uncompressed / ours at least this
    max_top1_loss: float = 0.5  # ... with final top-1 at most this many points under uncompressed


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


def arm_points(p: EbSweepParams) -> list[Point]:
    """Every point, arms in order, values ascending; labels: arm, param, value."""
    out: dict[str, Point] = {}
    for arm, swept in p.arms.items():
        if not swept.experiment or not swept.param or not swept.values:
            raise ValueError(f"arms.{arm}: needs experiment, param and values, got {swept}")
        for value in sorted(swept.values):
            name = point_name(arm, swept.param, value)
            if name in out:
                raise ValueError(f"arms.{arm}: values {value!r} and {out[name].params[swept.param]!r} share the "
                                 f"folder {name}; make them differ in their first 6 significant digits")
            out[name] = Point(name, swept.experiment, point_params(swept, value),
                              labels=dict(arm=arm, param=swept.param, value=value))
    return list(out.values())


def as_params(params: dict) -> EbSweepParams:
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EbSweepParams), params))


def points(params: dict) -> list[Point]:
    """The sweep's points from its experiment file's params (repro.sweep calls this)."""
    return arm_points(as_params(params))
