"""Every Caramel experiment file runs at smoke scale on the CPU, feeds the next, and its figure draws;
the claims file reads metrics the experiments write."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_smoke import REPO, run  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("caramel")
    t, m = tmp / "timelines", tmp / "model"
    t.mkdir()
    m.mkdir()
    out = {"timelines": run("caramel/timelines", t)}
    (t / "record.json").write_text(json.dumps({"tags": out["timelines"][0].tags}))
    out["model"] = run("caramel/model", m, inputs={"timelines": t / "record.json"})
    return out


def test_timelines_smoke(runs):
    result, fig = runs["timelines"]
    tl = result.tables["timelines"]
    assert set(tl["model"]) == {"tiny_resnet", "tiny_bert"}
    assert (tl["bytes"] > 0).all() and (tl["ready_s"] >= 0).all()
    assert result.metrics["tiny_resnet_backward_ms"] > 0
    assert fig.axes


def test_model_smoke(runs):
    result, fig = runs["model"]
    for k in ("speedup", "speedup_vs_no_overlap", "speedup_ddp_hook", "ceiling_speedup", "events_per_s"):
        assert k in result.metrics and not math.isnan(result.metrics[k]), k
    assert result.metrics["speedup"] <= result.metrics["ceiling_speedup"] + 1e-9
    assert result.tags["timelines_device"] == "cpu"
    assert fig.axes


@pytest.mark.slow
def test_gloo_smoke(tmp_path):
    result, fig = run("caramel/gloo", tmp_path)
    assert result.metrics["fitted_gbps"] > 0
    assert set(result.tables["arms"]["arm"]) == {"no_overlap", "ddp", "caramel_ddp"}
    assert not math.isnan(result.metrics["model_error_max"])


def test_claims_read_metrics_the_model_writes(runs):
    claims = yaml.safe_load((REPO / "config" / "claims" / "caramel.yaml").read_text())["claims"]
    model = {c["id"]: c for c in claims}["caramel.model"]
    assert model["kind"] == "model" and model["metric"]["experiment"] == "caramel/model"
    for cond in [model["metric"], *model.get("also", []), model["ceiling"]]:
        assert cond["key"] in runs["model"][0].metrics, cond["key"]
    assert {c["id"]: c for c in claims}["caramel.speedup"]["needs"] == "gpu2"
