"""Sweeps: one experiment whose points are runs of other experiments with a few parameters changed
(ClickTrain's schedule lengths, COMET's error bounds, and the sparsity levels, matrix sizes and link
bandwidths to come). One mechanism serves them all:

- the sweep's experiment file names a function, ``sweep: repro.papers.<paper>.<module>:points``, that takes
  the sweep's params (a dict, at the run's scale) and returns its :class:`Point` s (in a module with
  no heavy imports: the workflow calls it at every start);
- each point runs its experiment in ``results/<paper>/<sweep>/<point>/`` through the spine's
  ``sweep_point`` rule, with :func:`hydra_overrides` setting its parameters (and seed);
- a point whose parameters equal its experiment's configured run at this scale is that run: the
  sweep reads ``results/<experiment>/record.json`` instead of training it twice (a repeat, with a
  seed of its own, never is);
- the runner hands the sweep's function every point's record path as ``ctx.inputs[<point name>]``;
  :func:`read_point` reads one and checks it ran the point.

Free of heavy imports (no torch, no Hydra).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from repro import layout, records


@dataclass(frozen=True)
class Point:
    name: str  # its folder below the sweep's; unique within the sweep
    experiment: str  # "<paper>/<name>" run at this point
    params: dict = field(default_factory=dict, hash=False)  # the parameters it sets
    seed: int | None = None  # a repeat's seed; None: the run's own (and it may be the configured run)
    labels: dict = field(default_factory=dict, hash=False, compare=False)  # what the summary groups by


def params_at(spec: dict, scale: str) -> dict:
    """An experiment file's params at ``scale``: ``params``, and at smoke scale its ``smoke`` section on top."""
    params = dict(spec.get("params") or {})
    if scale == "smoke":
        params = layout._merge(params, spec.get("smoke") or {})
    return params


def is_sweep(experiment: str, root: Path | None = None) -> bool:
    return bool(layout.experiment_file(experiment, root).get("sweep"))


def points(sweep: str, scale: str, root: Path | None = None) -> list[Point]:
    """Every point of sweep experiment '<paper>/<name>' at ``scale``, checked: names unique and
    folder-safe, experiments that exist."""
    spec = layout.experiment_file(sweep, root)
    entry = spec.get("sweep")
    if not entry or ":" not in str(entry):
        raise layout.LayoutError(f"{layout.experiment_path(sweep, root)}: sweep must name 'package.module:function'")
    module, _, name = str(entry).partition(":")
    found = getattr(importlib.import_module(module), name)(params_at(spec, scale))
    known = set(layout.experiment_names(root))
    seen: set[str] = set()
    for point in found:
        if point.name in seen or not point.name or "/" in point.name or point.name.startswith("."):
            raise layout.LayoutError(f"{sweep}: point name {point.name!r} is empty, repeated or not a folder name")
        if point.experiment not in known:
            raise layout.LayoutError(f"{sweep}: point {point.name} runs {point.experiment!r}, which is no experiment")
        seen.add(point.name)
    return found


def is_configured_run(point: dict, params: dict) -> bool:
    """The point's parameters equal those of a configured run (``params``: a config's or a record's)."""
    return all(params.get(key) == value for key, value in point.items())


def point_dir(sweep: str, point: Point, results: str = "results") -> str:
    return f"{results}/{sweep}/{point.name}"


def needed_record(sweep: str, point: Point, scale: str, results: str = "results",
                  root: Path | None = None) -> str:
    """The record the sweep reads for ``point``: its experiment's configured run's where the point
    is that run, else the point's own."""
    configured = params_at(layout.experiment_file(point.experiment, root), scale)
    if point.seed is None and is_configured_run(point.params, configured):
        return layout.record_path(point.experiment, results)
    return f"{point_dir(sweep, point, results)}/{records.RECORD_NAME}"


def needed_records(sweep: str, scale: str, results: str = "results", root: Path | None = None) -> dict[str, str]:
    """point name -> the record the sweep reads for it."""
    return {p.name: needed_record(sweep, p, scale, results, root) for p in points(sweep, scale, root)}


def own_points(sweep: str, scale: str, root: Path | None = None) -> dict[str, Point]:
    """The points that run in the sweep's own folder (not a configured run), by name."""
    return {p.name: p for p in points(sweep, scale, root)
            if needed_record(sweep, p, scale, root=root) != layout.record_path(p.experiment)}


def constraints(sweeps: dict[str, dict]) -> dict[str, str]:
    """Wildcard constraints (paper, sweep, point) of the sweep_point rule for ``sweeps``
    (sweep experiment -> its own points by name; only the names are read)."""
    return dict(paper=layout.alternatives(s.partition("/")[0] for s in sweeps),
                sweep=layout.alternatives(s.partition("/")[2] for s in sweeps),
                point=layout.alternatives(p for points in sweeps.values() for p in points))


def hydra_overrides(point: Point, scale: str) -> str:
    """Command-line overrides setting the point's parameters on the layer that wins at ``scale`` (the
    smoke section at smoke scale, where it would otherwise overrule params; ``++`` adds a key the file
    lacks), and its seed."""
    layer = "smoke" if scale == "smoke" else "params"
    out = "".join(f" ++experiment.{layer}.{key}={value}" for key, value in point.params.items())
    return out + ("" if point.seed is None else f" seed={int(point.seed)}")


def record_seed(rec: dict) -> int | None:
    """The seed a record ran with (records before the field: the seed its arm tagged, if any)."""
    seed = rec.get("seed", rec.get("tags", {}).get("seed"))
    return None if seed is None else int(seed)


def read_point(ctx, point: Point) -> tuple[dict, str]:
    """The record of one point (``ctx.inputs[point.name]``) and where it came from ("configured run",
    "sweep point" or "repeat"), checked to have run the point's parameters (and a repeat's seed).
    Raises records.MissingRecord where it has not run."""
    if point.name not in ctx.inputs:
        raise records.RecordError(f"inputs.{point.name} is missing: the runner passes every point's record")
    rec = records.read(ctx.inputs[point.name])
    if not is_configured_run(point.params, rec["params"]):
        ran = {k: rec["params"].get(k) for k in point.params}
        raise records.RecordError(f"{rec['_dir']}: ran {ran}, the sweep needs {point.params}: rerun that point")
    if point.seed is not None and record_seed(rec) != point.seed:
        raise records.RecordError(f"{rec['_dir']}: ran seed {record_seed(rec)}, the sweep needs seed {point.seed}: "
                                  "rerun that point")
    own = Path(rec["_dir"]).name == point.name
    return rec, ("repeat" if point.seed is not None else "sweep point") if own else "configured run"


def read_points(ctx, points: list[Point], partial: bool = False) -> tuple[list[tuple[Point, dict, str]], list[str]]:
    """(point, record, source) for every point that has run (:func:`read_point`), and the names of those
    that have not: with ``partial`` a collection of what exists (a reference made piecewise), else the
    first missing record raises records.MissingRecord."""
    found, missing = [], []
    for point in points:
        try:
            found.append((point, *read_point(ctx, point)))
        except records.MissingRecord:
            if not partial:
                raise
            missing.append(point.name)
    return found, missing
