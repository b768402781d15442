"""The schedule-length sweep of the ClickTrain arms: which runs it needs and how each one is told
its budget. Free of heavy imports: the workflow reads it at every start to build the DAG.

A budget E is an arm's total schedule in the dense / ClickTrain sense (params.epochs); every phase
keeps its share of it (ClickTrain's and 2:4's warm-up shares, PruneTrain's masking interval are
fractions already; ADMM's two later phases are absolute epoch counts, so the sweep sets them to
round(E * share)). One sweep point is one run of the arm's own experiment with those parameters
overridden, in its own folder ``results/clicktrain/clicktrain_budget/<arm>_e<E>/``. A point whose
parameters equal the arm's configured run at this scale is that run: the sweep reads its record
(at paper scale the 40-epoch points are the arms' reference runs) instead of training it twice.
A budget may also be run again with other seeds (``repeat_budgets`` x ``repeat_seeds``, each a run
of its own in ``<arm>_e<E>_s<seed>/``): the spread of one configuration's top-1, against which the
sweep's differences are read. The mechanics every sweep shares (reading configs, the configured-run
rule, overrides) live in :mod:`repro.sweep_points`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from repro.sweep_points import arm_params, hydra_overrides, is_configured_run, needed_record, read_params

# the shared mechanics are re-exported: the workflow and the tests reach them through this module
__all__ = ["BudgetParams", "arm_params", "hydra_overrides", "is_configured_run", "point_dir", "point_name",
           "point_params", "point_record", "points", "read_config", "sweep_records"]

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
    # with repeats: the tolerance is at least one run's spread (their pooled sd), so a difference that
    # a rerun of the same point could show is not read as still improving
    tolerance_from_spread: bool = True
    # budgets run again, every arm, with each of repeat_seeds (a point's first run uses the run's own
    # seed, 0 by default): their spread says which differences one seed per point can resolve
    repeat_budgets: list = field(default_factory=list)
    repeat_seeds: list = field(default_factory=list)
    # collect the points that have records and list those that have none (a reference made piecewise
    # on lent GPU time: `experiment.params.partial=true`); the workflow needs every point, so never sets it
    partial: bool = False


def read_config(path: Path, scale: str) -> BudgetParams:
    """The sweep's own experiment file (config/experiment/clicktrain/clicktrain_budget.yaml)."""
    p = read_params(path, scale, BudgetParams)
    unknown = sorted(set(p.repeat_budgets) - set(p.budgets))
    if unknown:
        raise ValueError(f"{path}: repeat_budgets {unknown} are not in budgets {sorted(p.budgets)}")
    if p.repeat_budgets and not p.repeat_seeds:
        raise ValueError(f"{path}: repeat_budgets {p.repeat_budgets} but no repeat_seeds")
    return p


def points(p: BudgetParams) -> list[tuple[str, int, int | None]]:
    """Every run of the sweep as (arm, budget, seed): seed None for a point's first run (the run's
    own seed), then ``repeat_seeds`` at each of ``repeat_budgets``."""
    return [(arm, e, seed) for arm in p.arms for e in sorted(p.budgets)
            for seed in [None, *(p.repeat_seeds if e in p.repeat_budgets else [])]]


def point_params(p: BudgetParams, arm: str, epochs: int) -> dict:
    """The parameters that set arm ``arm`` to budget ``epochs``."""
    if arm not in p.arms:
        raise ValueError(f"unknown arm {arm!r}; the sweep's arms: {sorted(p.arms)}")
    return {"epochs": int(epochs),
            **{key: max(1, round(epochs * share)) for key, share in p.scaled.get(arm, {}).items()}}


def point_name(arm: str, epochs, seed=None) -> str:
    """The folder name of one (arm, budget) point below the sweep's folder; a repeat adds its seed."""
    return f"{arm}_e{epochs}" + ("" if seed is None else f"_s{seed}")


def point_dir(arm: str, epochs, seed=None) -> str:
    return f"{SWEEP_DIR}/{point_name(arm, epochs, seed)}"


def point_record(arm: str, epochs, seed=None) -> str:
    return f"{point_dir(arm, epochs, seed)}/record.json"


def sweep_records(p: BudgetParams, config_dir: Path, scale: str) -> list[str]:
    """The records the sweep reads, per arm, budget and repeat: the sweep point's own, or the arm's
    configured run's (results/<experiment>/record.json) where the point is that run (a repeat, with
    another seed, never is)."""
    configured = {arm: arm_params(config_dir, experiment, scale) for arm, experiment in p.arms.items()}
    return [point_record(arm, e, seed) if seed is not None else
            needed_record(point_params(p, arm, e), configured[arm], p.arms[arm], point_dir(arm, e))
            for arm, e, seed in points(p)]


