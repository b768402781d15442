"""Edgent's two experiment files run at smoke scale on the CPU (nets on synthetic CIFAR-shaped splits,
configure on its record), their figures draw, and the configurators keep their invariants: the oracle
delivers at least what every method delivers, Edgent's search fed the measured latencies is the
oracle, the fixed baselines choose what they say, and change points are found."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_smoke import REPO, chain  # noqa: E402

from conftest import prepared_splits  # noqa: E402

from repro.papers.edgent import configure as cfgmod  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edgent")
    (tmp / "data").mkdir()
    return chain(tmp, "edgent/nets", "edgent/configure", inputs=prepared_splits(tmp / "data", 256, 128))


def test_nets_measures_every_exit_and_both_processors(runs):
    result, fig = runs["nets"]
    acc, layers = result.tables["exits"], result.tables["layers"]
    assert sorted(acc.groupby("net").size().items()) == [("alexnet", 5), ("resnet", 3)]
    assert ((acc["accuracy"] >= 0) & (acc["accuracy"] <= 1)).all()
    assert set(layers["role"]) == {"device", "edge"} and set(layers["variant"]) == {"trained", "fit0", "fit1"}
    assert (layers["time_s"] > 0).all()
    assert "stand-in" in result.tags["edge"] and "not a Pi" in result.tags["device_1"]
    assert fig is not None


def test_configure_headlines_and_invariants(runs):
    result, fig = runs["configure"]
    m, points = result.metrics, result.tables["points"]
    assert 0 <= m["oracle_match"] <= 1 and 0 < m["predictor_error_median"] < 10
    assert m["oracle_match_measured_profile"] == 1.0  # the search is exact on the latencies it is given
    wide = points.pivot_table(index=["net", "threads", "bandwidth_mbps", "deadline_ms"], columns="method",
                              values="accuracy")
    for method in cfgmod.METHODS:
        assert (wide["oracle"] >= wide[method] - 1e-12).all(), method
    final = {"alexnet": 4, "resnet": 2}
    for method in ("device_only", "edge_only", "neurosurgeon"):
        got = points[points["method"] == method]
        assert (got["exit"] == got["net"].map(final)).all(), method
    assert (points.loc[points["method"] == "edge_only", "split"] == 0).all()
    assert {"assumed_base", "assumed_min", "assumed_max"} <= set(m) and m["assumed_min"] <= m["oracle_match"] <= m["assumed_max"]
    dyn = result.tables["dynamic"]
    assert (dyn["oracle_accuracy"] >= dyn[["edgent_dynamic_accuracy", "fixed_accuracy", "last_sample_accuracy"]].max(axis=1)
            - 1e-12).all()
    assert 0 <= m["dynamic_true_changes_found"] <= m["dynamic_true_changes"]
    assert fig is not None


def test_change_point_found_at_a_level_shift():
    rng = np.random.default_rng(0)
    window = np.concatenate([np.full(20, 10e6), np.full(15, 1e6)]) * np.exp(rng.normal(0, 0.05, 35))
    assert abs(cfgmod.last_change(window, pen=2 * 0.05 ** 2 * np.log(35) * 10, min_size=3) - 20) <= 1
    assert cfgmod.last_change(np.full(30, 5e6) * np.exp(rng.normal(0, 0.05, 30)), pen=1.0, min_size=3) == 0


def test_change_points_count_distinct_detections_not_sliding_windows():
    # a window's last segment reported at 60 for many steps as windows slide, jittering to 61, and
    # windows holding no change (-1) in between: one found point; a second at 90; true changes at
    # 60 and 120 (levels per step from step 40), so one of two is found
    change_at = np.array([-1] * 5 + [60] * 10 + [61] * 5 + [-1] * 20 + [90] * 5)
    levels = np.repeat([1.0, 2.0, 3.0], [20, 60, 20])
    found, true = cfgmod.change_point_counts(change_at, levels, first_step=40, tolerance=3)
    assert found.tolist() == [60, 90] and true.tolist() == [60, 120]
    dyn = np.array([-1, 45, 46, 47, 48])  # a point that moves one step a step: still one, not four
    assert cfgmod.change_point_counts(dyn, np.ones(5), 0, 3)[0].size == 1


def test_claims_read_metrics_configure_writes(runs):
    claims = yaml.safe_load((REPO / "config" / "claims" / "edgent.yaml").read_text())["claims"]
    assert [c["id"] for c in claims] == ["edgent.oracle"] and claims[0]["kind"] == "model"
    c = claims[0]
    for cond in [c["metric"], *c["also"], c["ceiling"]]:
        assert cond["experiment"] == "edgent/configure" and cond["key"] in runs["configure"][0].metrics
    assert c["assumed"]["experiment"] == "edgent/configure"
