"""The schedule-length sweep of the ClickTrain arms: which runs it needs and how each one is told
its budget. Free of heavy imports: the workflow reads it at every start to build the DAG.

A budget E is an arm's total schedule in the dense / ClickTrain sense (params.epochs); every phase
keeps its share of it (ClickTrain's and 2:4's warm-up shares, PruneTrain's masking interval are
fractions already; ADMM's two later phases are absolute epoch counts, so the sweep sets them to
round(E * share)). One sweep point is one run of the arm's own experiment with those parameters
overridden, in its own folder ``results/clicktrain/clicktrain_budget/<arm>_e<E>/``. A point whose
parameters equal the arm's configured run at this scale is that run: the sweep reads its record
(at paper scale the 40-epoch points are the arms' reference runs) instead of training it twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from repro.scale import param_layers

SWEEP_DIR = "results/clicktrain/clicktrain_budget"


@dataclass
class BudgetParams:
    # arm name -> the experiment ("<paper>/<name>") that trains it; "dense" is the baseline network
    arms: dict = field(default_factory=lambda: {
        "dense": "baseline/resnet32", "clicktrain": "clicktrain/clicktrain", "admm": "clicktrain/admm",
        "prunetrain": "clicktrain/prunetrain", "sparse24": "clicktrain/sparse24"})
    budgets: list = field(default_factory=lambda: [10, 20, 40])  # total epochs E of each point
    # arm -> {parameter: share of E}: absolute phase lengths that must scale with the budget
    scaled: dict = field(default_factory=lambda: {"admm": {"admm_epochs": 0.5, "retrain_epochs": 0.5}})
    tolerance: float = 0.3  # top-1 points under an arm's best that still count as converged


def _layers(path: Path, scale: str) -> list:
    """An experiment file's parameter layers at ``scale``, as repro.run merges them."""
    return param_layers(OmegaConf.load(path), scale)


def read_config(path: Path, scale: str) -> BudgetParams:
    """The sweep's own experiment file (config/experiment/clicktrain/clicktrain_budget.yaml)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(BudgetParams), *_layers(path, scale)))


def arm_params(config_dir: Path, experiment: str, scale: str) -> dict:
    """An arm's configured parameters at ``scale`` (from config/experiment/<experiment>.yaml)."""
    path = Path(config_dir) / "experiment" / f"{experiment}.yaml"
    return OmegaConf.to_container(OmegaConf.merge(*_layers(path, scale)))


def point_params(p: BudgetParams, arm: str, epochs: int) -> dict:
    """The parameters that set arm ``arm`` to budget ``epochs``."""
    if arm not in p.arms:
        raise ValueError(f"unknown arm {arm!r}; the sweep's arms: {sorted(p.arms)}")
    return {"epochs": int(epochs),
            **{key: max(1, round(epochs * share)) for key, share in p.scaled.get(arm, {}).items()}}


def is_configured_run(point: dict, params: dict) -> bool:
    """The point's parameters equal those of a configured run (``params``: a config's or a record's)."""
    return all(params.get(key) == value for key, value in point.items())


def point_dir(arm: str, epochs) -> str:
    return f"{SWEEP_DIR}/{arm}_e{epochs}"


def point_record(arm: str, epochs) -> str:
    return f"{point_dir(arm, epochs)}/record.json"


def sweep_records(p: BudgetParams, config_dir: Path, scale: str) -> list[str]:
    """The records the sweep reads, per arm and budget: the sweep point's own, or the arm's configured
    run's (results/<experiment>/record.json) where the point is that run."""
    paths = []
    for arm, experiment in p.arms.items():
        configured = arm_params(config_dir, experiment, scale)
        paths += [f"results/{experiment}/record.json" if is_configured_run(point_params(p, arm, e), configured)
                  else point_record(arm, e) for e in p.budgets]
    return paths


def hydra_overrides(point: dict, scale: str) -> str:
    """Command-line overrides setting ``point`` on the layer that wins at ``scale`` (the smoke section
    at smoke scale, where it would otherwise overrule params); ``++`` adds a key the file lacks."""
    layer = "smoke" if scale == "smoke" else "params"
    return "".join(f" ++experiment.{layer}.{key}={value}" for key, value in point.items())
