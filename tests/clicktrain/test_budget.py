"""The schedule-length sweep: which runs it needs at each scale, that its overrides reach the arms'
validated parameters through the runner's composition, and the collection step on synthetic records."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from repro import layout, records, sweep
from repro.papers.clicktrain import figures
from repro.papers.clicktrain.budget import budget, converged_budgets
from repro.papers.clicktrain.sweep import BudgetParams, as_params, budget_points, point_params
from repro.experiment import Context, load_entry
from repro.pipeline.run import experiment_params

from conftest import REPO

SWEEP = "clicktrain/clicktrain_budget"


def read_config(scale: str) -> BudgetParams:
    return as_params(sweep.params_at(layout.experiment_file(SWEEP), scale))


def test_config_at_both_scales():
    paper, smoke = read_config("paper"), read_config("smoke")
    assert paper.budgets == [10, 20, 40, 80] and smoke.budgets == [3, 4]
    assert set(paper.arms) == {"dense", "clicktrain", "admm", "prunetrain", "sparse24"} and paper.arms == smoke.arms
    assert paper.tolerance == 0.3
    assert (paper.repeat_budgets, paper.repeat_seeds) == ([40], [1, 2]) and smoke.repeat_budgets == [4]
    for experiment in paper.arms.values():
        assert (REPO / "config" / "experiment" / f"{experiment}.yaml").exists()


def test_point_params_scale_admm_phases():
    p = BudgetParams()
    assert point_params(p, "admm", 40) == {"epochs": 40, "admm_epochs": 20, "retrain_epochs": 20}
    assert point_params(p, "admm", 3) == {"epochs": 3, "admm_epochs": 2, "retrain_epochs": 2}
    assert point_params(p, "admm", 1) == {"epochs": 1, "admm_epochs": 1, "retrain_epochs": 1}  # at least one each
    assert point_params(p, "clicktrain", 10) == {"epochs": 10}
    with pytest.raises(ValueError, match="unknown arm"):
        point_params(p, "lottery", 10)


def test_arm_params_set_every_point_of_their_arm():
    """At smoke scale the dense arm's points keep the pruning arms' size, though the baseline's own
    smoke run (the dense arm's experiment) trains on 2,560 images to show learning."""
    smoke = read_config("smoke")
    dense = [q for q in budget_points(smoke) if q.labels["arm"] == "dense"]
    assert dense and all(q.params["n_train"] == 256 and q.params["n_test"] == 256 for q in dense)
    assert all("n_train" not in q.params for q in budget_points(smoke) if q.labels["arm"] != "dense")
    assert "++experiment.smoke.n_train=256" in sweep.hydra_overrides(dense[0], "smoke")
    assert all("n_train" not in q.params for q in budget_points(read_config("paper")))
    with pytest.raises(ValueError, match="arm_params names \\['lottery'\\]"):
        as_params({"arm_params": {"lottery": {"n_train": 1}}})


@pytest.mark.parametrize("scale", ["paper", "smoke"])
def test_sweep_reuses_only_the_configured_runs(scale):
    p = read_config(scale)
    paths = list(sweep.needed_records(SWEEP, scale).values())
    assert len(paths) == len(p.arms) * (len(p.budgets) + len(p.repeat_budgets) * len(p.repeat_seeds))
    configured = sorted(path for path in paths if "clicktrain_budget" not in path)
    repeats = [path for path in paths if "_s" in Path(path).parent.name]
    assert len(repeats) == len(set(repeats)) == len(p.arms) * len(p.repeat_budgets) * len(p.repeat_seeds)
    seed = p.repeat_seeds[0]  # a repeat never reuses the configured run
    assert f"results/{SWEEP}/admm_e{p.repeat_budgets[0]}_s{seed}/record.json" in repeats
    if scale == "paper":  # every arm's configured run is its 40-epoch point
        assert configured == sorted(f"results/{e}/record.json" for e in p.arms.values())
    else:  # only ClickTrain's smoke run (3 epochs) is a point of (3, 4)
        assert configured == ["results/clicktrain/clicktrain/record.json"]
    assert f"results/{SWEEP}/admm_e10/record.json" in sweep.needed_records(SWEEP, "paper").values()


@pytest.mark.parametrize("scale", ["paper", "smoke"])
@pytest.mark.parametrize("arm", ["admm", "dense", "clicktrain"])
def test_overrides_reach_the_validated_params(compose, scale, arm):
    """What the rule puts on the command line is what the arm runs with, at either scale (at smoke,
    the smoke section would otherwise overrule params), a repeat's seed included."""
    point = next(q for q in sweep.points(SWEEP, scale) if q.labels["arm"] == arm and q.seed is not None)
    cfg = compose([f"experiment={point.experiment}", f"scale={scale}", *sweep.hydra_overrides(point, scale).split()])
    params = experiment_params(load_entry(cfg.experiment.entry), cfg.experiment, scale)
    assert sweep.is_configured_run(point.params, vars(params)) and cfg.seed == point.seed


def _record(d: Path, experiment: str, params: dict, metrics: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return records.write(d, dict(experiment=experiment, paper="clicktrain", scale="smoke", status="ok", params=params,
                                 metrics=metrics, provenance={}, started="2025-01-01T00:00:00+00:00"))


TOP1 = {  # arm -> top-1 at budgets 10, 20, 40: dense and admm still improving, the others flat within 0.3
    "dense": [85.0, 87.0, 88.3], "clicktrain": [80.0, 83.9, 84.0], "admm": [82.0, 84.0, 86.0],
    "prunetrain": [86.0, 88.4, 88.3], "sparse24": [85.0, 87.9, 87.96]}


def point_inputs(p: BudgetParams, root: Path) -> dict[str, Path]:
    """What the runner hands the sweep: every point's record path, the 40-epoch first runs being the
    arms' configured runs (as at paper scale), the rest in the sweep's folder (``root / "sweep"``)."""
    return {q.name: root / q.labels["arm"] / "record.json" if q.labels["budget"] == 40 and q.seed is None
            else root / "sweep" / q.name / "record.json" for q in budget_points(p)}


@pytest.fixture
def sweep_inputs(tmp_path) -> dict[str, Path]:
    """Configured runs at 40 epochs (as at paper scale), sweep points at 10 and 20 (and the sweep's
    folder under "sweep", where the tests write more points)."""
    p = BudgetParams()
    inputs = {"sweep": tmp_path / "sweep", **point_inputs(p, tmp_path)}
    for arm, top1 in TOP1.items():
        for epochs, value in zip(p.budgets, top1):
            point = point_params(p, arm, epochs)
            metrics = dict(final_top1=value, best_top1=value + 0.1, epochs=sum(point.values()))
            if arm == "dense":  # the baseline reports no e2e_s and no compression
                metrics.update(total_train_s=1.5 * epochs)
            else:
                metrics.update(e2e_s=1.6 * sum(point.values()), compression=8.9 if arm in ("clicktrain", "admm") else 1.5)
            _record(inputs[f"{arm}_e{epochs}"].parent, arm, point, metrics)
    return inputs


def test_budget_collects_the_sweep(sweep_inputs, tmp_path):
    result = budget(BudgetParams(), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
    points, table, m = result.tables["points"], result.tables["converged"], result.metrics
    assert len(points) == 15 and list(points.source.value_counts().sort_index()) == [5, 10]
    assert points[points.arm == "admm"].epochs_trained.tolist() == [20, 40, 80]
    assert points[points.arm == "dense"].compression.eq(1.0).all()
    assert points[points.arm == "dense"].e2e_s.tolist() == [15.0, 30.0, 60.0]  # total_train_s
    shortest = dict(zip(table.arm, table.shortest_budget))
    assert shortest == {"dense": 40, "clicktrain": 20, "admm": 40, "prunetrain": 20, "sparse24": 20}
    assert m["converged_clicktrain"] == 1 and m["converged_admm"] == 0 and m["arms_converged"] == 3
    assert m["best_top1_prunetrain"] == 88.4 and m["top1_at_shortest_sparse24"] == 87.9
    vs = result.tables["vs_admm"]
    assert vs.budget.tolist() == [10, 20, 40] and vs.top1_vs_admm.tolist() == pytest.approx([-2.0, -0.1, -2.0])
    assert m["e2e_speedup_e20"] == pytest.approx(1.6 * 40 / (1.6 * 20))  # ADMM trains 2E, e2e 1.6 s per epoch
    run = tmp_path / "out"
    run.mkdir(exist_ok=True)
    for name, frame in result.tables.items():
        frame.to_csv(run / f"{name}.csv", index=False)
    assert len(figures.budget(run).axes) == 3


def test_budget_refuses_a_stale_point(sweep_inputs, tmp_path):
    p = BudgetParams()
    _record(sweep_inputs["sweep"] / "admm_e10", "admm", {"epochs": 10, "admm_epochs": 20, "retrain_epochs": 20},
            dict(final_top1=1.0, best_top1=1.0, epochs=50, e2e_s=1.0))
    with pytest.raises(records.RecordError, match="admm_e10: ran .* rerun that point"):
        budget(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs))


def test_budget_names_a_missing_input(sweep_inputs, tmp_path):
    del sweep_inputs["dense_e40"]
    with pytest.raises(records.RecordError, match="inputs.dense_e40 is missing"):
        budget(BudgetParams(), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))


def test_partial_collection_lists_missing_points(sweep_inputs, tmp_path):
    p = BudgetParams(budgets=[10, 20, 40, 80])
    sweep_inputs.update(point_inputs(p, tmp_path))
    _record(sweep_inputs["sweep"] / "dense_e80", "dense", {"epochs": 80},
            dict(final_top1=88.5, best_top1=88.6, epochs=80, total_train_s=120.0))
    with pytest.raises(records.RecordError, match="clicktrain_e80.*no run record here"):
        budget(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs))  # the DAG's default: every point
    p.partial = True
    result = budget(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
    table, m = result.tables["converged"].set_index("arm"), result.metrics
    assert m["points_missing"] == 4 and len(result.tables["points"]) == 16
    assert result.tags["missing"].endswith("clicktrain_e80, admm_e80, prunetrain_e80, sparse24_e80")
    assert table.loc["dense", "largest_budget"] == 80 and table.loc["dense", "shortest_budget"] == 40
    assert table.loc["dense", "converged"] and table.loc["admm", "largest_budget"] == 40
    assert result.tables["vs_admm"].budget.tolist() == [10, 20, 40]  # ADMM has no 80-epoch point
    (tmp_path / "admm" / "record.json").unlink()  # a configured run not made yet is a missing point too
    assert "admm_e40" in budget(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs)).tags["missing"]


def test_converged_budgets_with_one_budget():
    points = pd.DataFrame(dict(arm=["a"], budget=[3], final_top1=[50.0], e2e_s=[1.0], compression=[1.0]))
    row = converged_budgets(points, 0.3).iloc[0]
    assert row.shortest_budget == 3 and not row.converged  # one point: convergence not shown


def test_config_refuses_repeats_of_an_unswept_budget():
    with pytest.raises(ValueError, match=r"repeat_budgets \[30\] are not in budgets"):
        as_params({"budgets": [10, 40], "repeat_budgets": [30], "repeat_seeds": [1]})


def test_points_list_first_runs_then_repeats():
    p = BudgetParams(arms={"dense": "baseline/resnet32"}, budgets=[20, 10], repeat_budgets=[20], repeat_seeds=[1, 2])
    assert [(q.name, q.seed) for q in budget_points(p)] == [("dense_e10", None), ("dense_e20", None),
                                                            ("dense_e20_s1", 1), ("dense_e20_s2", 2)]


def _add_repeats(inputs: dict, seeds_top1: dict[str, list[float]], epochs: int = 20, seed_field: bool = True):
    """Repeat records of every arm at ``epochs``, one per seed 1, 2, ... with the given top-1."""
    p = BudgetParams()
    for arm, values in seeds_top1.items():
        point = point_params(p, arm, epochs)
        for seed, value in enumerate(values, start=1):
            metrics = dict(final_top1=value, best_top1=value, epochs=sum(point.values()), e2e_s=2.0 * sum(point.values()),
                           total_train_s=2.0 * epochs, compression=1.0)
            path = _record(inputs["sweep"] / f"{arm}_e{epochs}_s{seed}", arm, point, metrics)
            inputs[f"{arm}_e{epochs}_s{seed}"] = path
            if seed_field:
                rec = records.read(path)
                rec.update(seed=seed)
                records.write(path.parent, {k: v for k, v in rec.items() if not k.startswith("_")})


def test_repeats_count_by_their_mean(sweep_inputs, tmp_path):
    p = BudgetParams(repeat_budgets=[20], repeat_seeds=[1, 2])
    # ClickTrain's 20-epoch point was 83.9 (flat to 84.0 at 40: converged at 20); its repeats pull the mean
    # to 83.0, so 20 is no longer within 0.3 of the best; ADMM's 84.0 becomes (84 + 85 + 86) / 3 = 85.0
    _add_repeats(sweep_inputs, {arm: [82.6, 82.5] if arm == "clicktrain" else [85.0, 86.0] if arm == "admm"
                                else [TOP1[arm][1]] * 2 for arm in TOP1})
    result = budget(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
    runs, spread, table, m = (result.tables["points"], result.tables["spread"], result.tables["converged"],
                              result.metrics)
    assert len(runs) == 15 + 10 and set(runs[runs.budget == 20].seed.dropna()) == {1, 2}
    assert runs.source.value_counts()["repeat"] == 10
    ct = spread.set_index("arm").loc["clicktrain"]
    assert ct.runs == 3 and ct.top1_mean == pytest.approx(83.0) and ct.top1_sd == pytest.approx(0.7810, abs=1e-4)
    assert dict(zip(table.arm, table.shortest_budget))["clicktrain"] == 40  # the mean, not the first run
    assert result.tables["vs_admm"].set_index("budget").top1_vs_admm[20] == pytest.approx(83.0 - 85.0)
    assert m["top1_sd_max"] == pytest.approx(1.0) and "seeds [1, 2]" in result.tags["repeats"]
    # pooled over the five repeated points (2 degrees of freedom each): clicktrain 0.61, admm 1.0, the rest 0
    assert m["top1_sd_pooled"] == pytest.approx(((2 * 0.61 + 2 * 1.0) / 10) ** 0.5)
    assert m["tolerance"] == pytest.approx(m["top1_sd_pooled"]) and "pooled sd" in result.tags["converged"]
    fixed = budget(BudgetParams(repeat_budgets=[20], repeat_seeds=[1, 2], tolerance_from_spread=False),
                   Context(out_dir=tmp_path / "fixed", inputs=sweep_inputs))
    assert fixed.metrics["tolerance"] == 0.3 and "pooled sd" not in fixed.tags["converged"]
    run = tmp_path / "out"
    run.mkdir(exist_ok=True)
    for name, frame in result.tables.items():
        frame.to_csv(run / f"{name}.csv", index=False)
    fig = figures.budget(run)
    assert "±1 sd" in fig.axes[0].get_title()


def test_a_repeat_must_have_run_its_seed(sweep_inputs, tmp_path):
    _add_repeats(sweep_inputs, {arm: [80.0] for arm in TOP1}, seed_field=False)  # records of seed 0
    with pytest.raises(records.RecordError, match=r"dense_e20_s1: ran seed None, the sweep needs seed 1"):
        budget(BudgetParams(repeat_budgets=[20], repeat_seeds=[1]), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
