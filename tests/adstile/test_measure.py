"""The measuring loop on CPU thread partitions (the GPU path runs the same code on SM partitions),
the curves experiment end to end at tiny sizes, and the model experiments on its record."""

import contextlib
import json
import math

import pandas as pd
import pytest
import torch

from conftest import entry_params, write_tables
from repro.experiment import Context
from repro.papers.adstile import measure, networks
from repro.papers.adstile.partition import SmPartition, ThreadPartition, green_contexts_available


class FakePartition:
    """Records the unit count and slot each thread's work ran on."""
    units, granularity, disjoint = 4, 2, True

    def __init__(self):
        self.entered = []

    @contextlib.contextmanager
    def __call__(self, k, slot=0):
        self.entered.append((k, slot))
        yield

    def sync(self):
        pass


def test_latency_and_colocation_use_the_partition():
    part, calls = FakePartition(), {"a": 0, "b": 0}

    def fn(name):
        def run():
            calls[name] += 1
        return run

    fns = {"a": fn("a"), "b": fn("b")}
    rows = measure.curve(fns, part, [2, 4], iters=3, repeats=2)
    assert [(r["dnn"], r["units"]) for r in rows] == [("a", 2), ("a", 4), ("b", 2), ("b", 4)]
    assert calls["a"] == 2 * (1 + 3 * 2)
    alone = {(r["dnn"], r["units"]): r["latency_s"] for r in rows}
    co = measure.colocation(fns, part, [("a", "b")], alone, iters=2, repeats=1)
    assert co[0]["half"] == 2 and co[0]["rest"] == 2 and calls["b"] > 8   # B ran during A's co-runs
    assert sorted(part.entered[-4:]) == [(2, 0), (2, 1), (4, 0), (4, 1)]   # B in a partition of its own
    assert co[0]["halves_disjoint"]


def test_thread_partition_sets_and_restores_threads():
    part = ThreadPartition(units=2)
    before = torch.get_num_threads()
    with part(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("name", networks.DNNS)
def test_networks_run_and_report_sizes(name):
    model, x = networks.build(name, width=2, image=16, batch=1, tokens=4, device="cpu")
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()
    weights, features = networks.sizes(model, x)
    assert weights > 0 and features >= x.numel() * 4


def fake_record(out, units_total=8, slowdown=1.1, disjoint=True):
    rec = {"experiment": "curves", "paper": "adstile", "scale": "smoke", "status": "ok", "params": {},
           "metrics": {"units_total": units_total, "partition_slowdown_mean": slowdown},
           "provenance": {"gpu_name": "test GPU"}, "started": "2026-01-01T00:00:00+00:00",
           "tags": {"partitions_disjoint": str(disjoint).lower()}}
    (out / "record.json").write_text(json.dumps(rec))
    return out / "record.json"


def test_curves_experiment_on_the_cpu(tmp_path):
    spec, p = entry_params("repro.papers.adstile.experiment:curves", width=2, image=16, batch=1, tokens=4,
                           units=[1], iters=1, repeats=1, pairs=[["detection", "tracking"]])
    result = spec.fn(p, Context(out_dir=tmp_path))
    assert set(result.tables["curves"]["dnn"]) == set(networks.DNNS)
    assert result.tags["partition"].startswith("cpu threads")
    assert len(result.tables["colocation"]) == 1 and result.metrics["units_total"] >= 1
    with pytest.raises(ValueError, match="pairs: detection, lidar"):
        spec.fn(entry_params("repro.papers.adstile.experiment:curves", pairs=[["detection", "lidar"]])[1], Context(out_dir=tmp_path))


@pytest.fixture
def curves_record(tmp_path):
    out = tmp_path / "curves"
    out.mkdir()
    rows = [dict(dnn=d, units=k, latency_s=w / k) for d, w in
            [("detection", 40e-3), ("segmentation", 60e-3), ("tracking", 4e-3), ("planning", 8e-3)] for k in (1, 2, 4, 8)]
    pd.DataFrame(rows).to_csv(out / "curves.csv", index=False)
    pd.DataFrame([dict(dnn=d, weight_bytes=4e6, feature_bytes=1e6) for d in networks.DNNS]).to_csv(out / "sizes.csv", index=False)
    return fake_record(out)


def test_schedule_experiment_from_a_curves_record(tmp_path, curves_record):
    spec, p = entry_params("repro.papers.adstile.schedule:schedule", slack=[2.0, 10.0], model={"horizon_s": 0.2})
    result = spec.fn(p, Context(out_dir=tmp_path, inputs={"curves": curves_record}))
    df = result.tables["points"]
    assert len(df) == 2 * 5 and result.metrics["interference"] == pytest.approx(1.1)
    assert result.metrics["ads_tile_misses"] == 0 and result.metrics["tiles_limit"] == 8
    assert (df.dropna(subset=["tiles"])["misses"] == 0).all()
    assert result.tags["curves_from"].startswith("measured on test GPU")
    write_tables(tmp_path / "run", result)
    from repro.papers.adstile import figures

    figures.schedule(tmp_path / "run")


def test_interference_is_measured_only_from_disjoint_halves(tmp_path, curves_record):
    fake_record(curves_record.parent, disjoint=False)
    spec, p = entry_params("repro.papers.adstile.schedule:schedule", slack=[10.0], model={"horizon_s": 0.1})
    result = spec.fn(p, Context(out_dir=tmp_path, inputs={"curves": curves_record}))
    assert result.metrics["interference"] == 1.0 and result.tags["interference"].startswith("assumed 1")


def test_tornado_moves_the_headline_over_the_spans(tmp_path, curves_record):
    spec, p = entry_params("repro.papers.adstile.schedule:tornado", slack=[10.0], model={"horizon_s": 0.1}, tiles_limit=32,
                           spans={"model.restart_us": {"low": 10.0, "high": 500.0, "why": "test"},
                                  "model.migrate_gbps": {"low": 200.0, "high": 3000.0, "why": "test"},
                                  "model.variation_shape": {"low": 2.0, "high": 8.0, "why": "test"},
                                  "model.quantile": {"low": 0.5, "high": 0.99, "why": "test"},
                                  "model.interference": {"low": 1.0, "high": 1.5, "why": "test"}},
                           metric="work_conserving_waste_max_pct")
    result = spec.fn(p, Context(out_dir=tmp_path, inputs={"curves": curves_record}))
    table = result.tables["tornado"]
    assert len(table) == 5 and result.metrics["assumed_parameters"] == 5
    row = table.set_index("key").loc["model.restart_us"]
    assert row["value_high"] > row["value_low"]     # a slower restart wastes more


def test_schedule_refuses_bad_parameters(tmp_path):
    spec, p = entry_params("repro.papers.adstile.schedule:schedule", policies=["edf"])
    with pytest.raises(ValueError, match="policies: the headlines need work_conserving"):
        spec.fn(p, Context(out_dir=tmp_path))
    spec, p = entry_params("repro.papers.adstile.schedule:schedule", model={"quantile": 1.5})
    with pytest.raises(ValueError, match="model.quantile"):
        spec.fn(p, Context(out_dir=tmp_path))
    spec, p = entry_params("repro.papers.adstile.schedule:schedule")
    with pytest.raises(ValueError, match="inputs.curves"):
        spec.fn(p, Context(out_dir=tmp_path))


@pytest.mark.gpu
def test_sm_partition_slows_a_large_matmul():
    if green_contexts_available():
        pytest.skip(green_contexts_available())
    part = SmPartition(0)
    a = torch.randn(8192, 8192, device="cuda")
    fn = lambda: a @ a  # noqa: E731
    few = measure.latency(fn, part, part.granularity * 2, iters=3, repeats=3)
    full = measure.latency(fn, part, part.units, iters=3, repeats=3)
    assert few > 2 * full     # 16 of 132 SMs: several times slower
    co = measure.colocation({"a": fn, "b": fn}, part, [("a", "b")], {}, iters=2, repeats=2)[0]
    assert co["shared_slowdown"] > 1.2 and math.isfinite(co["partition_slowdown"])
