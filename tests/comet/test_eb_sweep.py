"""The COMET error-bound sweep: its points and folders at each scale, that its overrides reach the
arms' validated parameters through the runner's composition, and the collection step (with
comet_compare's definitions) and its figure on fabricated records."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from conftest import REPO
from repro import layout, records, sweep
from repro.papers.comet import figures
from repro.papers.comet.eb_sweep import eb_sweep
from repro.papers.comet.arms import ArmParams
from repro.papers.comet.compare import CompareParams, compare
from repro.papers.comet.sweep import EbSweepParams, SweptArm, arm_points, as_params, point_name, point_params, value_tag
from repro.experiment import Context, load_entry
from repro.pipeline.run import experiment_params

SWEEP = "comet/comet_eb_sweep"


def read_config(scale: str) -> EbSweepParams:
    return as_params(sweep.params_at(layout.experiment_file(SWEEP), scale))


def points(p: EbSweepParams) -> dict:
    """name -> (arm, parameters), as the tests read them."""
    return {q.name: (q.labels["arm"], q.params) for q in arm_points(p)}


def test_value_tags_are_folder_safe():
    assert [value_tag(v) for v in (0.05, 0.1, 1.0, 3, 1e-5, 2e6, -0.5)] == ["0p05", "0p1", "1", "3", "1em05", "2e06",
                                                                           "m0p5"]
    assert point_name("fixed_eb", "eb", 0.2) == "fixed_eb_eb0p2"


def test_config_at_both_scales():
    paper, smoke = read_config("paper"), read_config("smoke")
    assert paper.arms["adaptive_eb"].values == [0.1, 0.3, 1.0, 3.0]
    assert paper.arms["fixed_eb"].values == [0.05, 0.2, 0.5, 1.0]
    assert smoke.arms["adaptive_eb"].values == [0.1, 3.0] and smoke.arms["fixed_eb"].values == [0.05, 0.5]
    for p in (paper, smoke):  # the smoke section changes only the values
        assert p.arms["adaptive_eb"].scaled == {"bn_fraction": 0.5} and p.arms["fixed_eb"].scaled == {}
        assert (p.target_reduction, p.max_top1_loss) == (13.5, 0.5)
    fields = {f.name for f in dataclasses.fields(ArmParams)}
    for swept in paper.arms.values():
        assert (REPO / "config" / "experiment" / f"{swept.experiment}.yaml").exists()
        assert {swept.param, *swept.scaled} <= fields


def test_points_scale_their_companions():
    p = EbSweepParams()
    pts = points(p)
    assert len(pts) == 9 and list(pts)[0] == "adaptive_eb_grad_error_fraction0p1"
    assert pts["adaptive_eb_grad_error_fraction0p3"] == ("adaptive_eb", {"grad_error_fraction": 0.3, "bn_fraction": 0.15})
    assert pts["fixed_eb_eb1"] == ("fixed_eb", {"eb": 1.0})
    # the configured adaptive run's bn_fraction is 0.05: the 0.1 point must equal it exactly
    assert point_params(p.arms["adaptive_eb"], 0.1) == {"grad_error_fraction": 0.1, "bn_fraction": 0.05}
    clash = EbSweepParams(arms={"fixed_eb": SweptArm("comet/comet_fixed_eb", "eb", [0.1, 0.1000000001])})
    with pytest.raises(ValueError, match="share the folder fixed_eb_eb0p1"):
        points(clash)
    with pytest.raises(ValueError, match="needs experiment, param and values"):
        points(EbSweepParams(arms={"fixed_eb": SweptArm("comet/comet_fixed_eb", "eb", [])}))


@pytest.mark.parametrize("scale", ["paper", "smoke"])
def test_only_the_configured_runs_are_read_not_rerun(scale):
    """At either scale the 0.1 / 0.05 points are the arms' own runs; every other point has its folder."""
    needed = list(sweep.needed_records(SWEEP, scale).values())
    own = [path for path in needed if path.startswith(f"results/{SWEEP}/")]
    assert sorted(set(needed) - set(own)) == [f"results/comet/comet_{arm}/record.json" for arm in ("adaptive_eb", "fixed_eb")]
    assert len(own) == (6 if scale == "paper" else 2) and f"results/{SWEEP}/fixed_eb_eb0p5/record.json" in own


@pytest.mark.parametrize("scale", ["paper", "smoke"])
@pytest.mark.parametrize("name", ["adaptive_eb_grad_error_fraction3", "fixed_eb_eb0p5"])
def test_overrides_reach_the_validated_params(compose, scale, name):
    """What the rule puts on the command line is what the arm runs with, at either scale (at smoke,
    the smoke section would otherwise overrule params)."""
    point = next(q for q in sweep.points(SWEEP, scale) if q.name == name)
    cfg = compose([f"experiment={point.experiment}", f"scale={scale}", *sweep.hydra_overrides(point, scale).split()])
    params = experiment_params(load_entry(cfg.experiment.entry), cfg.experiment, scale)
    assert sweep.is_configured_run(point.params, vars(params))
    assert params.epochs == (2 if scale == "smoke" else 10)  # the rest is the arm's own schedule


# ---- the collection step on fabricated records ---------------------------------------------------

SCHEDULE = dict(model="resnet32", model_kw={}, epochs=10, batch_size=128, n_train=0, n_test=0)
BASE = dict(final_top1=83.4, best_top1=83.5, act_mem_bytes=300e6, images_per_s=10000.0, act_ratio=1.0,
            peak_mem_bytes=1e9)
# point -> (final top-1, activation bytes): the adaptive arm reaches 15x within 0.5 points at 1.0
POINTS = {"adaptive_eb_grad_error_fraction0p1": (83.7, 60e6), "adaptive_eb_grad_error_fraction0p3": (83.5, 40e6),
          "adaptive_eb_grad_error_fraction1": (83.0, 20e6), "adaptive_eb_grad_error_fraction3": (80.0, 12e6),
          "fixed_eb_eb0p05": (83.6, 62e6), "fixed_eb_eb0p1": (83.3, 45e6), "fixed_eb_eb0p2": (82.5, 30e6),
          "fixed_eb_eb0p5": (79.0, 20e6), "fixed_eb_eb1": (70.0, 15e6)}


def _record(d: Path, experiment: str, params: dict, metrics: dict, scale: str = "paper") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return records.write(d, dict(experiment=experiment, paper="comet", scale=scale, status="ok", params=params,
                                 metrics=metrics, provenance={}, started="2025-01-01T00:00:00+00:00"))


def _metrics(top1: float, act: float, **extra) -> dict:
    return dict(BASE, final_top1=top1, best_top1=top1 + 0.1, act_mem_bytes=act, act_ratio=300e6 / act,
                images_per_s=1500.0, **extra)


@pytest.fixture
def sweep_inputs(tmp_path) -> dict[str, Path]:
    """The arms' configured runs (adaptive 0.1, fixed 0.05) and the other points in the sweep folder,
    each under its point's name as the runner passes them."""
    p = EbSweepParams()
    inputs = {"sweep": tmp_path / "sweep", "uncompressed": _record(tmp_path / "uncompressed", "comet_uncompressed",
                                                                    dict(SCHEDULE, method="none"), BASE),
              "actnn2bit": _record(tmp_path / "actnn", "comet_actnn2bit", dict(SCHEDULE, method="actnn"),
                                   _metrics(74.3, 21e6))}
    configured = dict(grad_error_fraction=0.1, bn_fraction=0.05, eb=0.05)  # both arms' (as their configs)
    for name, (arm, point) in points(p).items():
        top1, act = POINTS[name]
        extra = {"eb_final_median": 0.08 * point.get("grad_error_fraction", 0) * 10} if arm == "adaptive_eb" else {}
        params = {**SCHEDULE, **configured, **point}
        if sweep.is_configured_run(point, configured):
            inputs[name] = inputs[arm] = _record(tmp_path / arm, f"comet_{arm}", params, _metrics(top1, act, **extra))
        else:
            inputs[name] = _record(tmp_path / "sweep" / name, f"comet_{arm}", params, _metrics(top1, act, **extra))
    return inputs


def test_eb_sweep_collects_the_points(sweep_inputs, tmp_path):
    p = EbSweepParams()
    result = eb_sweep(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
    table, m = result.tables["points"], result.metrics
    assert list(table.point) == list(POINTS) and table.source.value_counts()["configured run"] == 2
    row = table.set_index("point").loc["adaptive_eb_grad_error_fraction1"]
    assert (row.arm, row.parameter, row.value) == ("adaptive_eb", "grad_error_fraction", 1.0)
    assert row.mem_reduction == pytest.approx(15.0) and row.top1_loss == pytest.approx(0.4)
    assert row.eb_median == pytest.approx(0.8) and math.isnan(table.set_index("point").loc["fixed_eb_eb0p2"].eb_median)
    assert m["mem_reduction_fixed_eb_eb0p2"] == pytest.approx(10.0) and m["top1_loss_fixed_eb_eb0p2"] == pytest.approx(0.9)
    assert m["best_mem_reduction_within_acc"] == pytest.approx(15.0) and m["target_reached"] == 1
    assert result.tags["best_point"] == "adaptive_eb_grad_error_fraction1"
    assert m["best_mem_reduction_within_acc_fixed_eb"] == pytest.approx(300 / 45)  # 0.1: loss 0.1; 0.2: 0.9
    assert m["max_mem_reduction"] == pytest.approx(25.0)
    # at >= 13.5x: adaptive 1.0 (15x, 0.4 lost), adaptive 3.0, fixed 0.5 and 1.0 (3.4, 4.4, 13.4 lost)
    assert m["top1_loss_at_target_reduction"] == pytest.approx(0.4) and m["n_points_at_target_reduction"] == 4
    assert m["actnn_mem_reduction"] == pytest.approx(300 / 21) and m["actnn_top1_loss"] == pytest.approx(9.1)
    run = tmp_path / "out"
    run.mkdir(exist_ok=True)
    for name, frame in result.tables.items():
        frame.to_csv(run / f"{name}.csv", index=False)
    _record(run, "comet_eb_sweep", dataclasses.asdict(p), {k: float(v) for k, v in m.items()})
    assert len(figures.eb_sweep(run).axes) == 1


def test_eb_sweep_agrees_with_compare(sweep_inputs, tmp_path):
    """The configured runs' points carry comet_compare's numbers."""
    m = eb_sweep(EbSweepParams(), Context(out_dir=tmp_path / "out", inputs=sweep_inputs)).metrics
    c = compare(CompareParams(), Context(out_dir=tmp_path / "cmp", inputs=sweep_inputs)).metrics
    assert m["mem_reduction_adaptive_eb_grad_error_fraction0p1"] == c["mem_reduction_adaptive_eb"]
    assert m["top1_loss_fixed_eb_eb0p05"] == c["top1_loss_fixed_eb"]
    assert m["actnn_mem_reduction"] == c["actnn_mem_reduction"]


def test_eb_sweep_without_a_point_within_accuracy(sweep_inputs, tmp_path):
    p = EbSweepParams(max_top1_loss=-1.0)  # nothing beats the uncompressed run by a full point
    del sweep_inputs["actnn2bit"]  # optional
    result = eb_sweep(p, Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
    m = result.metrics
    assert math.isnan(m["best_mem_reduction_within_acc"]) and m["target_reached"] == 0
    assert result.tags["best_point"] == "none" and "actnn_mem_reduction" not in m
    assert math.isnan(m["best_mem_reduction_within_acc_fixed_eb"])


def test_eb_sweep_says_when_no_point_reaches_the_target_reduction(sweep_inputs, tmp_path):
    result = eb_sweep(EbSweepParams(target_reduction=30.0), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
    m = result.metrics
    assert math.isnan(m["top1_loss_at_target_reduction"]) and m["n_points_at_target_reduction"] == 0
    assert "NaN: no point reaches it" in result.tags["top1_loss_at_target_reduction"]


def test_eb_sweep_refuses_a_stale_point(sweep_inputs, tmp_path):
    _record(sweep_inputs["sweep"] / "fixed_eb_eb0p2", "comet_fixed_eb", dict(SCHEDULE, eb=0.3), _metrics(80.0, 1e6))
    with pytest.raises(records.RecordError, match="fixed_eb_eb0p2: ran .* rerun that point"):
        eb_sweep(EbSweepParams(), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))


def test_eb_sweep_refuses_another_schedule(sweep_inputs, tmp_path):
    _record(sweep_inputs["sweep"] / "fixed_eb_eb0p2", "comet_fixed_eb", dict(SCHEDULE, eb=0.2, epochs=2),
            _metrics(80.0, 1e6))
    with pytest.raises(records.RecordError, match="not the uncompressed arm's schedule .*epochs 2 vs 10"):
        eb_sweep(EbSweepParams(), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))


@pytest.mark.parametrize("missing", ["uncompressed", "fixed_eb_eb0p05", "fixed_eb_eb0p2"])
def test_eb_sweep_names_a_missing_input(sweep_inputs, tmp_path, missing):
    del sweep_inputs[missing]
    with pytest.raises(records.RecordError, match=f"inputs.{missing} is missing"):
        eb_sweep(EbSweepParams(), Context(out_dir=tmp_path / "out", inputs=sweep_inputs))
