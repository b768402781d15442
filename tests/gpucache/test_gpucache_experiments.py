"""The model and reorder experiments called directly on tiny inputs, and their figures."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from repro.experiment import Context, load_entry

TINY = [{"name": "mesh", "graph": "mesh2d", "size": 40}, {"name": "del", "graph": "delaunay2d", "size": 3000, "kernel": "flux"},
        {"name": "air", "graph": "pyamg:airfoil", "size": 0}]


def params(entry, **over):
    spec = load_entry(entry)
    return spec, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(spec.params), over))


def write_tables(out: Path, result):
    """The tables, as the runner writes them beside the record (the figures read them)."""
    out.mkdir(parents=True, exist_ok=True)
    for key, table in result.tables.items():
        table.to_csv(out / f"{key}.csv", index=False)


def test_model_experiment_and_figure(tmp_path):
    from repro.gpucache import figures

    spec, p = params("repro.gpucache.experiment:model", inputs=TINY, tasks_per_block=128,
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
    from repro.gpucache import figures

    spec, p = params("repro.gpucache.experiment:reorder", inputs=TINY, tasks_per_block=128, repeats=2,
                     partitioners=["default", "edge", "hypergraph"], hypergraph_max_tasks=5000, cache_bytes=50_000)
    result = spec(p, Context(out_dir=tmp_path, device="cpu"))
    df = result.tables["runs"]
    assert result.metrics["n_incorrect"] == 0
    assert df.set_index(["input", "method"]).loc[("del", "hypergraph"), "status"].startswith("skipped")
    large = df[df["larger_than_cache"] == True]  # noqa: E712 (a column of objects: skipped rows have NaN)
    assert set(large["input"]) == {"del"}  # 3000 points x 32 bytes > 50 kB; the 40 x 40 mesh is 12.8 kB
    assert "min_speedup_edge_vs_default_large" in result.metrics
    write_tables(tmp_path, result)
    assert figures.reorder(tmp_path).axes


def test_bad_parameters_fail_before_work(tmp_path):
    spec, p = params("repro.gpucache.experiment:reorder", inputs=TINY, partitioners=["default", "metis"])
    with pytest.raises(ValueError, match="partitioners: unknown 'metis'"):
        spec(p, Context(out_dir=tmp_path))
    spec, p = params("repro.gpucache.experiment:model", inputs=[TINY[0], TINY[0]])
    with pytest.raises(ValueError, match="names must be unique"):
        spec(p, Context(out_dir=tmp_path))
