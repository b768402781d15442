"""AIDA's model by hand on a small layer, its parameter bookkeeping, and both experiments end to end."""

import dataclasses
import math

import pytest
import yaml

from conftest import REPO
from repro.experiment import Context
from repro.papers.aida import ap_model, experiment
from repro.papers.aida.ap_model import APParams, EIEParams, Layer
from repro.sim.params import ParamError


def test_in_place_add_takes_four_passes_a_bit():
    assert ap_model.in_place_add_passes() == 4  # of the full adder's 8 truth-table rows, 4 change (b, c)
    assert ap_model.add_cycles(16, APParams()) == 16 * 4 * 2
    assert ap_model.add_cycles(16, APParams(compare_cycles=2.0)) == 16 * 4 * 3


def test_every_parameter_is_cited_or_assumed_and_eie_config_gives_its_peak():
    names = {f"ap.{f.name}" for f in dataclasses.fields(APParams)} | {f"eie.{f.name}" for f in dataclasses.fields(EIEParams)}
    assert set(ap_model.SOURCES) | ap_model.ASSUMED == names
    assert not set(ap_model.SOURCES) & ap_model.ASSUMED
    eie = EIEParams()
    assert 2 * eie.pes * eie.clock_ghz == pytest.approx(eie.peak_gops, rel=0.01)  # 102.4 vs the abstract's 102


def test_layer_by_hand():
    ap, layer = APParams(rows=8.0, weight_bits=2.0, act_bits=4.0), Layer("t", n_in=8, n_out=4, weight_density=0.5)
    got = ap_model.ap_layer(layer, ap, act_density=0.5)
    assert got["ap_chunks"] == 2                      # 16 nonzero weights in 8 rows
    assert got["ap_broadcast_cycles"] == 2 * 4 * 2    # 4 nonzero activations, a compare and a write each
    assert got["ap_multiply_cycles"] == 2 * 2 * 4 * 8  # 2 weight bits x a 4-bit add (8 cycles a bit)
    # 4 products per output: 2 levels, partial sums of 7 and 8 bits, each moved then added
    assert got["ap_reduce_cycles"] == 2 * ((7 + 7 * 8) + (8 + 8 * 8))
    eie = ap_model.eie_layer(layer, EIEParams(pes=2.0, act_density=0.5, clock_ghz=1.0))
    assert eie["eie_macs"] == 8 and eie["eie_cycles"] == 4


def test_more_rows_never_slow_aida_and_denser_activations_favour_eie_less():
    small, _ = ap_model.evaluate(APParams(rows=2.0 ** 18), EIEParams())
    big, _ = ap_model.evaluate(APParams(rows=2.0 ** 22), EIEParams())
    assert all(b["ap_cycles"] <= s["ap_cycles"] for s, b in zip(small, big))
    assert any(b["ap_cycles"] < s["ap_cycles"] for s, b in zip(small, big))
    _, sparse = ap_model.evaluate(APParams(), EIEParams(act_density=0.2))
    _, dense = ap_model.evaluate(APParams(), EIEParams(act_density=0.5))
    assert dense["throughput_geomean"] > sparse["throughput_geomean"]  # EIE's work grows in proportion, AIDA's only in its broadcast


def test_model_experiment(tmp_path):
    result = experiment.model(experiment.ModelParams(), Context(out_dir=tmp_path))
    layers = result.tables["layers"]
    assert list(layers["layer"]) == [layer.name for layer in ap_model.EIE_LAYERS]
    assert result.metrics["throughput_geomean"] == pytest.approx(
        math.exp(layers["speedup"].map(math.log).mean()))
    assert result.metrics["peak_ratio"] == pytest.approx(result.metrics["ap_peak_gops"] / 102.0)
    with pytest.raises(ValueError, match="ap.rows must be a positive"):
        experiment.model(experiment.ModelParams(ap=APParams(rows=0.0)), Context(out_dir=tmp_path))
    with pytest.raises(ValueError, match="at most 1"):
        experiment.model(experiment.ModelParams(eie=EIEParams(act_density=1.5)), Context(out_dir=tmp_path))


def _spans(path):
    spec = yaml.safe_load(path.read_text())["params"]["spans"]
    return {k: experiment.sensitivity.Span(**v) for k, v in spec.items()}


def test_tornado_spans_cover_exactly_the_assumed_parameters_and_run(tmp_path):
    spans = _spans(REPO / "config/experiment/aida/tornado.yaml")
    assert set(spans) == ap_model.ASSUMED
    for metric in ("throughput_geomean", "peak_ratio"):
        result = experiment.tornado(experiment.TornadoParams(spans=spans, metric=metric), Context(out_dir=tmp_path))
        base = experiment.model(experiment.ModelParams(), Context(out_dir=tmp_path)).metrics[metric]
        assert result.metrics["assumed_base"] == pytest.approx(base)
        assert result.metrics["assumed_min"] <= base <= result.metrics["assumed_max"]
    missing = dict(spans)
    missing.pop("ap.rows")
    with pytest.raises(ParamError, match="no range for the assumed parameter"):
        experiment.tornado(experiment.TornadoParams(spans=missing), Context(out_dir=tmp_path))
    with pytest.raises(ValueError, match="unknown headline"):
        experiment.tornado(experiment.TornadoParams(spans=spans, metric="energy"), Context(out_dir=tmp_path))
