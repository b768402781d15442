"""The schedule-length sweep of the ClickTrain arms: which runs it needs and how each one is told
its budget. Free of heavy imports: the workflow reads it at every start to build the DAG.

A budget E is an arm's total schedule in the dense / ClickTrain sense (params.epochs); every phase
keeps its share of it (ClickTrain's and 2:4's warm-up shares, PruneTrain's masking interval are
fractions already; ADMM's two later phases are absolute epoch counts, so the sweep sets them to
round(E * share)). One sweep point is one run of the arm's own experiment with those parameters
overridden, in its own folder ``results/clicktrain/clicktrain_budget/<arm>_e<E>/``. A point whose
parameters equal the arm's configured run at this scale is that run: the sweep reads its record
(at paper scale the 40-epoch points are the arms' reference runs) instead of training it twice.
The mechanics every sweep shares (reading configs, the configured-run rule, overrides) live in
:mod:`repro.sweep_points`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from repro.sweep_points import arm_params, hydra_overrides, is_configured_run, needed_record, read_params

# the shared mechanics are re-exported: the workflow and the tests reach them through this module
__all__ = ["BudgetParams", "arm_params", "hydra_overrides", "is_configured_run", "point_dir", "point_name",
           "point_params", "point_record", "read_config", "sweep_records"]

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
    # collect the points that have records and list those that have none (a reference made piecewise
    # on lent GPU time: `experiment.params.partial=true`); the workflow needs every point, so never sets it
    partial: bool = False


def read_config(path: Path, scale: str) -> BudgetParams:
    """The sweep's own experiment file (config/experiment/clicktrain/clicktrain_budget.yaml)."""
    return read_params(path, scale, BudgetParams)


def point_params(p: BudgetParams, arm: str, epochs: int) -> dict:
    """The parameters that set arm ``arm`` to budget ``epochs``."""
    if arm not in p.arms:
        raise ValueError(f"unknown arm {arm!r}; the sweep's arms: {sorted(p.arms)}")
    return {"epochs": int(epochs),
            **{key: max(1, round(epochs * share)) for key, share in p.scaled.get(arm, {}).items()}}


def point_name(arm: str, epochs) -> str:
    """The folder name of one (arm, budget) point below the sweep's folder."""
    return f"{arm}_e{epochs}"


def point_dir(arm: str, epochs) -> str:
    return f"{SWEEP_DIR}/{point_name(arm, epochs)}"


def point_record(arm: str, epochs) -> str:
    return f"{point_dir(arm, epochs)}/record.json"


def sweep_records(p: BudgetParams, config_dir: Path, scale: str) -> list[str]:
    """The records the sweep reads, per arm and budget: the sweep point's own, or the arm's configured
    run's (results/<experiment>/record.json) where the point is that run."""
    paths = []
    for arm, experiment in p.arms.items():
        configured = arm_params(config_dir, experiment, scale)
        paths += [needed_record(point_params(p, arm, e), configured, experiment, point_dir(arm, e)) for e in p.budgets]
    return paths


