"""The model and reorder experiments called directly on tiny inputs, and their figures."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from repro.experiment import Context

from conftest import entry_params, write_tables

TINY = [{"name": "mesh", "graph": "mesh2d", "size": 40}, {"name": "del", "graph": "delaunay2d", "size": 3000, "kernel": "flux"},
        {"name": "air", "graph": "pyamg:airfoil", "size": 0}]


def test_model_experiment_and_figure(tmp_path):
    from repro.papers.gpucache import figures

    spec, p = entry_params("repro.papers.gpucache.experiment:model", inputs=TINY, tasks_per_block=128,
                     timing_input={"name": "t", "graph": "mesh2d", "size": 60})
    result = spec(p, Context(out_dir=tmp_path))
    df = result.tables["partitions"]
    assert set(df["method"]) == {"default", "random", "vertex", "edge", "hypergraph"}
    assert result.metrics["same_seed_same_partition"] == 1.0
    assert result.metrics["rf_edge_over_default_geomean"] < 1.0
    assert result.metrics["timing_input_tasks"] == 2 * 60 * 59
    write_tables(tmp_path, result)
    assert figures.model(tmp_path).axes


def test_reorder_experiment_on_cpu_and_figure(tmp_path):
    from repro.papers.gpucache import figures

    wide = {"name": "wide", "graph": "mesh2d", "size": 30, "kernel": "spmm", "width": 8}  # 900 x 2 x 32 B
    spec, p = entry_params("repro.papers.gpucache.experiment:reorder", inputs=TINY + [wide], tasks_per_block=128, repeats=2,
                     partitioners=["default", "edge", "hypergraph"], hypergraph_max_tasks=5000, cache_bytes=50_000)
    result = spec(p, Context(out_dir=tmp_path, device="cpu"))
    df = result.tables["runs"]
    assert result.metrics["n_incorrect"] == 0
    assert df.set_index(["input", "method"]).loc[("del", "hypergraph"), "status"].startswith("skipped")
    large = df[df["larger_than_cache"] == True]  # noqa: E712 (a column of objects: skipped rows have NaN)
    # 3000 points x 32 bytes and 900 vertices x 64 bytes > 50 kB; the 40 x 40 mesh is 12.8 kB
    assert set(large["input"]) == {"del", "wide"}
    rows = df[(df["input"] == "wide") & (df["status"] == "ok")]
    assert (rows["data_bytes"] == 900 * 64).all()
    assert (rows["compulsory_lines"] == 900).all()  # one 32-byte array row of F = 8 floats per vertex
    assert "min_speedup_edge_vs_default_large" in result.metrics
    write_tables(tmp_path, result)
    assert figures.reorder(tmp_path).axes


def test_bad_parameters_fail_before_work(tmp_path):
    spec, p = entry_params("repro.papers.gpucache.experiment:reorder", inputs=TINY, partitioners=["default", "metis"])
    with pytest.raises(ValueError, match="partitioners: unknown 'metis'"):
        spec(p, Context(out_dir=tmp_path))
    spec, p = entry_params("repro.papers.gpucache.experiment:model", inputs=[TINY[0], TINY[0]])
    with pytest.raises(ValueError, match="names must be unique"):
        spec(p, Context(out_dir=tmp_path))


def test_paper_and_smoke_configs_are_valid_and_large_inputs_exceed_twice_the_l2():
    from repro.papers.gpucache import experiment, taskgraph

    raw = OmegaConf.load(Path(__file__).parents[2] / "config/experiment/gpucache/reorder.yaml")
    for scale in ("params", "smoke"):
        p = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(experiment.ReorderParams), raw[scale]))
        experiment.check_params(p)
        assert any(s.kernel == "spmm" for s in p.inputs)
    p = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(experiment.ReorderParams), raw["params"]))
    vertices = {"mesh2d": lambda s: s * s, "delaunay2d": lambda s: s, "nbody": lambda s: s}
    for s in p.inputs:
        if s.name != "bar":  # the control fits in cache
            assert 0.99 * vertices[s.graph](s.size) * taskgraph.vertex_bytes(s) >= 2 * 60e6, s.name


def test_bad_width_in_config_fails_before_work(tmp_path):
    spec, p = entry_params("repro.papers.gpucache.experiment:reorder",
                     inputs=[{"name": "w", "graph": "mesh2d", "size": 30, "kernel": "spmm", "width": 10}])
    with pytest.raises(ValueError, match=r"inputs\[w\].width: .*multiple of 4.*got 10"):
        spec(p, Context(out_dir=tmp_path))
