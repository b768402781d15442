"""The schedule-length sweep of the ClickTrain arms: its parameters and its points
(:mod:`repro.sweep`). Free of heavy imports: the workflow reads it at every start to build the DAG.

A budget E is an arm's total schedule in the dense / ClickTrain sense (params.epochs); every phase
keeps its share of it (ClickTrain's and 2:4's warm-up shares, PruneTrain's masking interval are
fractions already; ADMM's two later phases are absolute epoch counts, so the sweep sets them to
round(E * share)). One point is one run of the arm's own experiment at that budget, named
``<arm>_e<E>``; at paper scale the 40-epoch points are the arms' reference runs. A budget may also
be run again with other seeds (``repeat_budgets`` x ``repeat_seeds``, ``<arm>_e<E>_s<seed>``): the
spread of one configuration's top-1, against which the sweep's differences are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import OmegaConf

from repro.sweep import Point


@dataclass
class BudgetParams:
    # arm name -> the experiment ("<paper>/<name>") that trains it; "dense" is the baseline network
    arms: dict = field(default_factory=lambda: {
        "dense": "baseline/resnet32", "clicktrain": "clicktrain/clicktrain", "admm": "clicktrain/admm",
        "prunetrain": "clicktrain/prunetrain", "sparse24": "clicktrain/sparse24"})
    budgets: list = field(default_factory=lambda: [10, 20, 40])  # total epochs E of each point
    # arm -> {parameter: share of E}: absolute phase lengths that must scale with the budget
    scaled: dict = field(default_factory=lambda: {"admm": {"admm_epochs": 0.5, "retrain_epochs": 0.5}})
    # arm -> {parameter: value} set on every point of that arm: at smoke scale the dense arm's
    # experiment (baseline/resnet32) trains on more images than the pruning arms (so that its smoke
    # run shows learning); its sweep points keep the arms' tiny size
    arm_params: dict = field(default_factory=dict)
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


def as_params(params: dict) -> BudgetParams:
    p = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(BudgetParams), params))
    unknown = sorted(set(p.repeat_budgets) - set(p.budgets))
    if unknown:
        raise ValueError(f"repeat_budgets {unknown} are not in budgets {sorted(p.budgets)}")
    stray = sorted(set(p.arm_params) - set(p.arms))
    if stray:
        raise ValueError(f"arm_params names {stray}, not arms of the sweep ({sorted(p.arms)})")
    if p.repeat_budgets and not p.repeat_seeds:
        raise ValueError(f"repeat_budgets {p.repeat_budgets} but no repeat_seeds")
    return p


def point_params(p: BudgetParams, arm: str, epochs: int) -> dict:
    """The parameters that set arm ``arm`` to budget ``epochs``."""
    if arm not in p.arms:
        raise ValueError(f"unknown arm {arm!r}; the sweep's arms: {sorted(p.arms)}")
    return {"epochs": int(epochs), **p.arm_params.get(arm, {}),
            **{key: max(1, round(epochs * share)) for key, share in p.scaled.get(arm, {}).items()}}


def point_name(arm: str, epochs, seed=None) -> str:
    """The folder name of one (arm, budget) point below the sweep's folder; a repeat adds its seed."""
    return f"{arm}_e{epochs}" + ("" if seed is None else f"_s{seed}")


def budget_points(p: BudgetParams) -> list[Point]:
    """Every run of the sweep: per arm and budget its first run (the run's own seed), then
    ``repeat_seeds`` at each of ``repeat_budgets``; labels: arm, budget."""
    return [Point(point_name(arm, e, seed), experiment, point_params(p, arm, e), seed, labels=dict(arm=arm, budget=e))
            for arm, experiment in p.arms.items() for e in sorted(p.budgets)
            for seed in [None, *(p.repeat_seeds if e in p.repeat_budgets else [])]]


def points(params: dict) -> list[Point]:
    """The sweep's points from its experiment file's params (repro.sweep calls this)."""
    return budget_points(as_params(params))


# The wide network's comparison (clicktrain/wide_compare): every arm's configured run on the
# ClickTrain artifact's ResNet-32, repeated with more seeds (the decisive points), and two
# compression curves: PruneTrain pushed up towards ClickTrain's compression, ClickTrain pulled down
# towards PruneTrain's, so that ct.vs_during reads the two at equal compression.

@dataclass
class WideParams:
    # arm name -> the experiment that trains it (a config adds arms; clicktrain, admm, prunetrain stay)
    arms: dict = field(default_factory=lambda: {
        "clicktrain": "clicktrain/wide_clicktrain", "admm": "clicktrain/wide_admm",
        "prunetrain": "clicktrain/wide_prunetrain", "sparse24": "clicktrain/wide_sparse24"})
    seeds: list = field(default_factory=lambda: [1, 2])  # each arm's configured run again with these seeds
    seeded_arms: list = field(default_factory=lambda: ["clicktrain", "admm", "prunetrain"])  # which arms repeat
    # arm -> {parameter: [values]}: one run per value (the configured seed), the arm's compression curve
    curves: dict = field(default_factory=lambda: {"prunetrain": {"lasso_ratio": [0.35, 0.5, 0.65, 0.8]},
                                                  "clicktrain": {"ratio_scale": [0.25, 0.5, 0.75]}})
    partial: bool = False  # collect the points that have records and name the missing ones


def as_wide_params(params: dict) -> WideParams:
    p = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(WideParams), params))
    stray = sorted((set(p.curves) | set(p.seeded_arms)) - set(p.arms))
    if stray:
        raise ValueError(f"curves / seeded_arms name {stray}, not arms ({sorted(p.arms)})")
    return p


def curve_name(arm: str, key: str, value) -> str:
    """A curve point's folder name: ``prunetrain_lasso_ratio_0p5``."""
    return f"{arm}_{key}_{str(value).replace('.', 'p').replace('-', 'm')}"


def wide_points(params: dict) -> list[Point]:
    """The wide comparison's points from its experiment file's params (repro.sweep calls this)."""
    return wide_run_points(as_wide_params(params))


def wide_run_points(p: WideParams) -> list[Point]:
    """Each arm's configured run (named for the arm; the configured run itself), its seed repeats
    (``<arm>_s<seed>``), and the curves' points; labels: arm, kind (configured / curve)."""
    out = []
    for arm, experiment in p.arms.items():
        out.append(Point(arm, experiment, {}, None, labels=dict(arm=arm, kind="configured")))
        if arm in p.seeded_arms:
            out += [Point(f"{arm}_s{int(s)}", experiment, {}, int(s),
                          labels=dict(arm=arm, kind="configured")) for s in p.seeds]
        for key, values in p.curves.get(arm, {}).items():
            out += [Point(curve_name(arm, key, v), experiment, {key: v}, None, labels=dict(arm=arm, kind="curve"))
                    for v in values]
    return out
