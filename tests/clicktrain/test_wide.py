"""The wide network's comparison: its points at both scales, the wide arms' configs against the
model, curve interpolation, and the collection step on synthetic records (pairing by seed, spread,
equal compression)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from repro import layout, records, sweep
from repro.experiment import Context
from repro.models import build_model
from repro.papers.clicktrain.experiment import ClickTrainParams, _pattern_setup
from repro.papers.clicktrain.sweep import WideParams, as_wide_params, curve_name, wide_run_points
from repro.papers.clicktrain.wide import curve_at, wide_compare

import pandas as pd

SWEEP = "clicktrain/wide_compare"


def read_config(scale: str) -> WideParams:
    return as_wide_params(sweep.params_at(layout.experiment_file(SWEEP), scale))


def test_points_at_both_scales():
    paper, smoke = read_config("paper"), read_config("smoke")
    names = [q.name for q in wide_run_points(paper)]
    for arm in ("clicktrain", "admm", "prunetrain"):  # three runs at each decisive point
        assert {arm, f"{arm}_s1", f"{arm}_s2"} <= set(names)
    assert "sparse24" in names and "sparse24_s1" not in names
    assert "prunetrain_lasso_ratio_0p8" in names and "clicktrain_ratio_scale_0p25" in names
    assert len(names) == len(set(names)) == 17
    smoke_points = wide_run_points(smoke)
    assert all(q.seed is None for q in smoke_points) and len(smoke_points) == 6  # smoke keeps one seed
    assert sweep.points(SWEEP, "smoke") == smoke_points  # what the workflow builds
    with pytest.raises(ValueError, match="not arms"):
        as_wide_params({"curves": {"lottery": {"x": [1]}}})
    with pytest.raises(ValueError, match="not arms"):
        as_wide_params({"seeded_arms": ["lottery"]})
    assert curve_name("prunetrain", "lasso_ratio", 0.35) == "prunetrain_lasso_ratio_0p35"


@pytest.mark.parametrize("scale", ["paper", "smoke"])
def test_wide_arms_fit_their_model(scale):
    """Each wide arm builds the artifact's network (or its smoke copy) and its block ratios name
    every residual block: the artifact's 55 / 65 / 75% by stage at paper scale."""
    for arm in ("clicktrain", "admm", "prunetrain", "sparse24"):
        params = sweep.params_at(layout.experiment_file(f"clicktrain/wide_{arm}"), scale)
        assert params["model"] == "clicktrain_resnet32"
        assert params["precision"] == ("bf16" if scale == "paper" else "fp32")
        if arm in ("clicktrain", "admm"):
            with __import__("torch").device("meta"):
                model = build_model(params["model"], **params.get("model_kw", {}))
            _, ratios = _pattern_setup(ClickTrainParams(block_ratios=params["block_ratios"]), model)
            expected = ([0.55] * 3 + [0.65] * 5 + [0.75] * 7 if scale == "paper" else [0.55, 0.65, 0.65, 0.75])
            assert list(ratios.values()) == [r for r in expected for _ in range(2)]  # both convs of a block


def test_curve_at_interpolates_in_log_compression_and_never_extrapolates():
    curve = pd.DataFrame(dict(compression=[2.0, 8.0], final_top1=[90.0, 84.0]))
    assert curve_at(curve, 4.0) == pytest.approx(87.0)  # log-midpoint
    assert curve_at(curve, 8.0) == pytest.approx(84.0)
    assert math.isnan(curve_at(curve, 9.0)) and math.isnan(curve_at(curve, 1.5))
    assert math.isnan(curve_at(curve.iloc[:0], 4.0))


def _record(root: Path, name: str, point, metrics: dict) -> Path:
    d = root / name
    d.mkdir(parents=True)
    records.write(d, dict(experiment=point.experiment, paper="clicktrain", scale="smoke", status="ok",
                          params=dict(point.params), seed=point.seed if point.seed is not None else 0,
                          metrics=metrics, provenance={}, started="2025-01-01T00:00:00+00:00"))
    return d / "record.json"


def _arm_metrics(arm: str, seed: int, compression: float | None = None, top1: float | None = None) -> dict:
    base = {"clicktrain": dict(final_top1=90.0 + seed, compression=8.0, schedule_s=100.0 + seed, epochs=40),
            "admm": dict(final_top1=90.5 + seed, compression=8.0, schedule_s=230.0 + 3 * seed, epochs=80),
            "prunetrain": dict(final_top1=92.0 + 2 * seed, compression=1.5, schedule_s=120.0, epochs=40),
            "sparse24": dict(final_top1=91.0, compression=2.0, schedule_s=100.0, epochs=40)}[arm]
    base.update(e2e_s=base["schedule_s"] * 0.9, epoch_s_mean=3.3, dense_epoch_s=3.0)
    if compression is not None:
        base.update(compression=compression, final_top1=top1)
    return base


def test_collect_pairs_by_seed_and_reads_curves_at_equal_compression(tmp_path):
    p = as_wide_params({"curves": {"prunetrain": {"lasso_ratio": [0.5, 0.8]}, "clicktrain": {"ratio_scale": [0.25]}}})
    curve_values = {"prunetrain_lasso_ratio_0p5": (4.0, 90.0), "prunetrain_lasso_ratio_0p8": (16.0, 86.0),
                    "clicktrain_ratio_scale_0p25": (2.0, 92.0)}
    inputs = {}
    for q in wide_run_points(p):
        seed = q.seed or 0
        metrics = _arm_metrics(q.labels["arm"], seed, *curve_values.get(q.name, (None, None)))
        inputs[q.name] = _record(tmp_path, q.name, q, metrics)
    result = wide_compare(p, Context(out_dir=tmp_path / "out", inputs=inputs))
    m = result.metrics
    ratios = [(230 + 3 * s) / (100 + s) for s in (0, 1, 2)]
    assert m["schedule_speedup"] == pytest.approx(sum(ratios) / 3) and m["schedule_speedup_n"] == 3
    assert m["schedule_speedup_sd"] == pytest.approx(pd.Series(ratios).std())
    assert m["epoch_ratio"] == pytest.approx(2.0) and m["epoch_ratio_sd"] == pytest.approx(0.0)
    assert m["top1_vs_admm"] == pytest.approx(-0.5) and m["top1_vs_admm_sd"] == pytest.approx(0.0)
    # PruneTrain's curve: its configured mean (1.5x, 94.0) and (4x, 90), (16x, 86); ClickTrain at 8x
    # (mean 91.0) meets it at log-midpoint of 4x and 16x: 88.0
    assert m["top1_vs_prunetrain_equal"] == pytest.approx(91.0 - 88.0)
    assert m["top1_vs_prunetrain_equal_sd"] == pytest.approx(math.hypot(1.0, 2.0))
    # ClickTrain's curve runs from 2x to 8x: PruneTrain's 1.5x is below it, no value
    assert math.isnan(m["top1_vs_prunetrain_at_pt"]) and "never extrapolated" in result.tags["top1_vs_prunetrain_equal"]
    assert list(result.tables["paired"].seed) == [0, 1, 2]
    # records from before schedule_s: the measured ratio has no value, the rest stands
    for name in ("admm", "admm_s1", "admm_s2"):
        rec = records.read(inputs[name])
        metrics = {k: v for k, v in rec["metrics"].items() if k != "schedule_s"}
        q = next(q for q in wide_run_points(p) if q.name == name)
        inputs[name] = _record(tmp_path / "old", name, q, metrics)
    m = wide_compare(p, Context(out_dir=tmp_path / "out2", inputs=inputs)).metrics
    assert math.isnan(m["schedule_speedup"]) and m["schedule_speedup_n"] == 0
    assert m["top1_vs_admm"] == pytest.approx(-0.5)
    (tmp_path / "clicktrain_ratio_scale_0p25" / "record.json").unlink()  # a point not yet run
    with pytest.raises(records.MissingRecord):
        wide_compare(p, Context(out_dir=tmp_path / "out3", inputs=inputs))
    p.partial = True  # collect what exists, name the rest
    result = wide_compare(p, Context(out_dir=tmp_path / "out4", inputs=inputs))
    assert result.metrics["points_missing"] == 1 and "clicktrain_ratio_scale_0p25" in result.tags["missing"]
    assert result.metrics["clicktrain_curve_min_compression"] == pytest.approx(8.0)  # only its configured runs left


def test_figure_renders_from_a_collected_run(tmp_path):
    from repro.papers.clicktrain import figures

    p = as_wide_params({"seeds": [], "curves": {"prunetrain": {"lasso_ratio": [0.5]}, "clicktrain": {"ratio_scale": []}}})
    inputs = {q.name: _record(tmp_path, q.name, q, _arm_metrics(q.labels["arm"], 0, *((4.0, 90.0) if "lasso" in q.name
                                                                                    else (None, None))))
              for q in wide_run_points(p)}
    result = wide_compare(p, Context(out_dir=tmp_path / "run", inputs=inputs))
    run = tmp_path / "run"
    run.mkdir()
    for name, table in result.tables.items():
        table.to_csv(run / f"{name}.csv", index=False)
    records.write(run, dict(experiment=SWEEP, paper="clicktrain", scale="smoke", status="ok", params={},
                            metrics=result.metrics, tags=result.tags, provenance={}, started="2025-01-01T00:00:00+00:00"))
    fig = figures.wide(run)
    assert "wide ResNet-32" in fig._suptitle.get_text()
