"""The PIM model by hand on a small workload, its limits, and the two experiments end to end."""

import dataclasses
import json
import math

import pandas as pd
import pytest
import yaml

from conftest import REPO
from repro.experiment import Context
from repro.papers.pimcaps import experiment, pim_model
from repro.papers.pimcaps import tornado as pim_tornado
from repro.papers.pimcaps.pim_model import HMCParams, Workload


def test_routing_steps_by_hand():
    w = Workload(batch=2, low=3, high=4, d_in=5, d_out=6, iterations=2)
    steps = pim_model.routing_steps(w)
    assert steps.names == ["predict", "softmax0", "weighted_sum0", "squash0", "agreement0",
                           "softmax1", "weighted_sum1", "squash1"]
    assert steps.flops[0] == 2 * 2 * 3 * 4 * 6 * 5
    uhat = 4 * 2 * 3 * 4 * 6
    assert steps.dram_bytes[0] == 4 * (2 * 3 * 5 + 3 * 4 * 6 * 5) + uhat
    assert steps.dram_bytes[2] == uhat + 4 * 2 * 3 * 4


def test_pim_time_is_bandwidth_bound_and_splits_the_largest_dimension():
    hw = HMCParams(barrier_us=0.0)
    w = Workload(batch=100, low=1152, high=10, d_in=8, d_out=16, iterations=3)
    dim, t = pim_model.best_split(w, hw)
    assert dim == "low"  # 1152 capsules spread over 32 vaults; 10 classes cannot fill them
    steps = pim_model.routing_steps(w)
    bytes_per_vault = sum(steps.dram_bytes) / 32
    assert t["E"] == pytest.approx(bytes_per_vault / 10e9, rel=0.05)  # the DRAM streams dominate


def test_pipeline_is_bounded_by_the_gpu_conv_and_by_the_routing_share():
    hw = HMCParams()
    w = Workload(batch=100, low=1152, high=10, d_in=8, d_out=16, iterations=3)
    fast = pim_model.evaluate(w, hw, conv_s=1.0, routing_s=3.0, power_conv_w=math.nan,
                              power_routing_w=math.nan, power_idle_w=math.nan)
    assert fast["bound"] == "gpu conv" and fast["speedup"] == pytest.approx(4.0)
    slow = pim_model.evaluate(w, dataclasses.replace(hw, vault_gbps=1e-3), conv_s=1e-4, routing_s=1e-4,
                              power_conv_w=300.0, power_routing_w=300.0, power_idle_w=50.0)
    assert slow["bound"] == "pim routing" and slow["speedup"] < 1.0


def write_characterisation(tmp_path, rows):
    out = tmp_path / "characterise"
    out.mkdir()
    pd.DataFrame(rows).to_csv(out / "points.csv", index=False)
    record = {"experiment": "characterise", "paper": "pimcaps", "scale": "smoke", "status": "ok", "params": {},
              "metrics": {}, "provenance": {"gpu_name": "test GPU"}, "started": "2026-01-01T00:00:00+00:00"}
    (out / "record.json").write_text(json.dumps(record))
    return out / "record.json"


def test_model_experiment_from_a_characterisation(tmp_path):
    base = dict(config="mnist", low_capsules=1152, classes=10, class_dim=16, primary_dim=8, iterations=3)
    rows = [dict(base, batch=b, variant=v, conv_s=1e-3 * b, routing_s=(3e-3 if v == "eager" else 1e-3) * b,
                 routing_share=0.75) for b in (8, 100) for v in ("eager", "compiled")]
    path = write_characterisation(tmp_path, rows)
    result = experiment.model(experiment.ModelParams(vault_gbps_sweep=[5.0, 10.0]),
                              Context(out_dir=tmp_path, inputs={"characterise": path}))
    assert result.metrics["speedup_geomean"] == pytest.approx(4.0)  # conv-bound: (1 + 3) / 1
    assert result.metrics["fused_speedup_geomean"] == pytest.approx(2.0)
    assert result.metrics["speedup_over_fused_geomean"] == pytest.approx(2.0)
    assert len(result.tables["sweep"]) == 4 and result.tags["gpu_side"].startswith("measured on test GPU")


def test_model_refuses_a_missing_input_or_bad_parameter(tmp_path):
    with pytest.raises(ValueError, match="inputs.characterise"):
        experiment.model(experiment.ModelParams(), Context(out_dir=tmp_path))
    with pytest.raises(ValueError, match="hw.vaults must be positive"):
        experiment.model(experiment.ModelParams(hw=HMCParams(vaults=0)), Context(out_dir=tmp_path))
    with pytest.raises(ValueError, match="configs: unknown configuration 'imagenet'"):
        experiment.characterise(experiment.CharacteriseParams(configs=["imagenet"]), Context(out_dir=tmp_path))


def test_characterise_and_model_on_cpu_with_figures(tmp_path):
    from repro.papers.pimcaps import figures

    result = experiment.characterise(experiment.CharacteriseParams(configs=["svhn"], batches=[1, 2], repeats=1,
                                                                   compiled=False), Context(out_dir=tmp_path))
    assert set(result.tables["points"]["batch"]) == {1, 2}
    rows = result.tables["points"].to_dict("records")
    path = write_characterisation(tmp_path, rows)
    assert figures.characterise(path.parent).axes
    out = tmp_path / "model"
    out.mkdir()
    model = experiment.model(experiment.ModelParams(), Context(out_dir=out, inputs={"characterise": path}))
    model.tables["sweep"].to_csv(out / "sweep.csv", index=False)
    assert model.metrics["speedup_geomean"] > 0
    assert figures.model(out).axes


def test_every_stack_parameter_is_cited_or_assumed_and_every_assumed_one_has_a_range():
    names = {f.name for f in dataclasses.fields(HMCParams)}
    assert set(pim_model.SOURCES) | pim_model.ASSUMED == names and not set(pim_model.SOURCES) & pim_model.ASSUMED
    cfg = yaml.safe_load((REPO / "config/experiment/pimcaps/tornado.yaml").read_text())
    assert set(cfg["params"]["spans"]) == {f"hw.{k}" for k in pim_model.ASSUMED}
    ledger = yaml.safe_load((REPO / "config/claims/pimcaps.yaml").read_text())["claims"][0]
    assert cfg["params"]["target"] == ledger["target"] and ledger["assumed"] == {"experiment": "pimcaps/tornado"}


def test_tornado_moves_the_headline_by_each_assumed_parameter(tmp_path):
    """Routing-bound points: the headline falls with the vaults' bandwidth and is untouched by the
    energy-only parameters; rows come sorted by swing."""
    base = dict(config="mnist", low_capsules=1152, classes=10, class_dim=16, primary_dim=8, iterations=3)
    rows = [dict(base, batch=b, variant="eager", conv_s=1e-6, routing_s=1e-2, routing_share=0.99) for b in (8, 100)]
    path = write_characterisation(tmp_path, rows)
    spans = {f"hw.{k}": pim_tornado.sensitivity.Span(getattr(HMCParams(), k) / 2, getattr(HMCParams(), k) * 2, "test")
             for k in pim_model.ASSUMED}
    result = pim_tornado.tornado(pim_tornado.TornadoParams(spans=spans, target=2.07),
                                Context(out_dir=tmp_path, inputs={"characterise": path}))
    table = result.tables["tornado"].set_index("key")
    assert table.loc["hw.vault_gbps", "value_low"] < table.loc["hw.vault_gbps", "base"] < table.loc["hw.vault_gbps", "value_high"]
    assert table.loc["hw.dram_pj_per_bit", "swing"] == 0.0
    assert list(result.tables["tornado"]["swing"]) == sorted(result.tables["tornado"]["swing"], reverse=True)
    plain = experiment.model(experiment.ModelParams(vault_gbps_sweep=[10.0]), Context(out_dir=tmp_path, inputs={"characterise": path}))
    assert result.metrics["assumed_base"] == pytest.approx(plain.metrics["speedup_geomean"])
