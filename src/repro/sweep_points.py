"""What the workflow's parameter sweeps share (the ClickTrain schedule-length sweep, the COMET
error-bound sweep): a sweep point is one run of an arm's own experiment with a few parameters
overridden, in its own folder below the sweep's; a point whose parameters equal the arm's
configured run at this scale is that run, so the sweep reads its record instead of training it
twice. Free of heavy imports: the workflow reads the sweeps at every start to build the DAG.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from repro import records
from repro.scale import param_layers


def _layers(path: Path, scale: str) -> list:
    """An experiment file's parameter layers at ``scale``, as repro.run merges them."""
    return param_layers(OmegaConf.load(path), scale)


def read_params(path: Path, scale: str, params_cls: type):
    """A sweep's own experiment file, its params (smoke section on top at smoke scale) as ``params_cls``."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(params_cls), *_layers(path, scale)))


def arm_params(config_dir: Path, experiment: str, scale: str) -> dict:
    """An arm's configured parameters at ``scale`` (from config/experiment/<experiment>.yaml)."""
    path = Path(config_dir) / "experiment" / f"{experiment}.yaml"
    return OmegaConf.to_container(OmegaConf.merge(*_layers(path, scale)))


def is_configured_run(point: dict, params: dict) -> bool:
    """The point's parameters equal those of a configured run (``params``: a config's or a record's)."""
    return all(params.get(key) == value for key, value in point.items())


def needed_record(point: dict, configured: dict, experiment: str, point_dir: str) -> str:
    """The record a sweep reads for one point: the arm's configured run's (results/<experiment>/)
    where the point is that run (``configured``: the arm's parameters), else the point's own."""
    folder = f"results/{experiment}" if is_configured_run(point, configured) else point_dir
    return f"{folder}/{records.RECORD_NAME}"


def hydra_overrides(point: dict, scale: str) -> str:
    """Command-line overrides setting ``point`` on the layer that wins at ``scale`` (the smoke section
    at smoke scale, where it would otherwise overrule params); ``++`` adds a key the file lacks."""
    layer = "smoke" if scale == "smoke" else "params"
    return "".join(f" ++experiment.{layer}.{key}={value}" for key, value in point.items())


def record_seed(rec: dict) -> int | None:
    """The seed a record ran with (records before the field: the seed its arm tagged, if any)."""
    seed = rec.get("seed", rec.get("tags", {}).get("seed"))
    return None if seed is None else int(seed)


def read_point(inputs: dict, arm: str, experiment: str, point: dict, folder: str,
               seed: int | None = None) -> tuple[dict, str]:
    """The record of one point and where it came from: the arm's configured run (``inputs[arm]``)
    where the point is that run, else ``inputs["sweep"]/<folder>``, checked to have run the point
    (and, for a repeat, ``seed``: never the configured run's)."""
    if arm not in inputs:
        raise records.RecordError(f"inputs.{arm} is missing: pass the record of the {arm} arm's configured run "
                                  f"({experiment})")
    configured = records.read(inputs[arm])
    if seed is None and is_configured_run(point, configured["params"]):
        return configured, "configured run"
    if "sweep" not in inputs:
        raise records.RecordError("inputs.sweep is missing: pass the folder of the sweep's runs")
    rec = records.read(Path(inputs["sweep"]) / folder)
    if not is_configured_run(point, rec["params"]):
        ran = {k: rec["params"].get(k) for k in point}
        raise records.RecordError(f"{rec['_dir']}: ran {ran}, the sweep needs {point}: rerun that point")
    if seed is not None and record_seed(rec) != seed:
        raise records.RecordError(f"{rec['_dir']}: ran seed {record_seed(rec)}, the sweep needs seed {seed}: "
                                  "rerun that point")
    return rec, "sweep point" if seed is None else "repeat"
