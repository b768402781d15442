"""tsparse/spgemm on the CPU end to end (the twin timed, the kernel in the interpreter, SciPy and
GraphBLAS beside it), its summary, the experiment file at both scales, and the figure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repro import layout
from repro.data import matrices as M
from repro.experiment import Context, load_entry
from repro.papers.tsparse.experiment import SpgemmParams, summarize

TINY = [{"name": "bd", "kind": "block_diagonal", "n": 61, "block": 8, "density": 0.7},
        {"name": "lap", "kind": "laplacian", "shape": [9, 7]},
        {"name": "rm", "kind": "rmat", "scale": 6, "edge_factor": 2}]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    spec = load_entry("repro.papers.tsparse.experiment:spgemm_bench")
    out = tmp_path_factory.mktemp("spgemm")
    p = SpgemmParams(matrices=TINY, cpu_repeats=1, cpu_threads=1, interpret_max_out_tiles=10)
    return spec(p, Context(out_dir=out, seed=0)), out


def test_cpu_run_checks_the_product_and_the_kernel(run):
    r, _ = run
    m, df = r.metrics, r.tables["matrices"]
    assert m["n_matrices"] == 3 and m["n_pattern_mismatch"] == 0
    assert 0 < m["max_rel_err_float16"] <= 2e-3 and 0 < m["max_rel_err_bfloat16"] <= 1.6e-2
    # the interpreter ran the kernel on the one matrix small enough (8 output tiles)
    checked = df["kernel_vs_twin_float16"].notna()
    assert list(df.loc[checked, "matrix"]) == ["bd"] and m["max_kernel_vs_twin_float16"] <= 1e-5
    assert (df["pairs"] <= df["candidates"]).all() and (df["t_ours"] > 0).all()
    np.testing.assert_allclose(df["t_ours"], df["t_symbolic"] + df["t_numeric"] + df["t_assemble"])
    assert df.loc[df["matrix"] == "lap", "err_float16"].item() == 0.0  # 4 and -1 are exact in fp16
    assert m["geomean_speedup_scipy"] > 0 and m["geomean_speedup_graphblas"] > 0
    # GPU quantities are NaN with a tag saying why
    for key in ("geomean_speedup_cusparse_fp32", "geomean_ceiling_speedup", "tc_tflops"):
        assert math.isnan(m[key]) and "no GPU" in r.tags[key]
    assert math.isnan(m["geomean_speedup_cusparse_fp32_mma"]) and "GPU only" in r.tags["geomean_speedup_cusparse_fp32_mma"]


def test_fill_orders_the_families(run):
    df = run[0].tables["matrices"].set_index("matrix")
    assert df.at["bd", "fill"] > 0.25 > df.at["lap", "fill"] > df.at["rm", "fill"]


def test_summary_geomeans_and_the_fill_subset():
    df = pd.DataFrame({"fill": [0.1, 0.3, 0.5], "pattern_ok_float16": [True, True, False],
                       "err_float16": [1e-4, 3e-4, 2e-4], "kernel_vs_twin_float16": [np.nan, 0.0, 1e-7],
                       "err_mma_float16": [np.nan] * 3, "mma_vs_twin_float16": [np.nan] * 3,
                       "speedup_cusparse_fp32_mma": [2.0, 2.0, 2.0],
                       "t_numeric": [1.0, 1.0, 1.0], "t_ours": [2.0, 2.0, 4.0], "ceiling_s": [0.5, 0.5, 0.5],
                       "ceiling_speedup": [4.0, 8.0, 2.0],
                       **{f"speedup_{b}": [1.0, 2.0, 8.0] for b in ("scipy", "graphblas", "cusparse_fp32",
                                                                    "cusparse_fp64", "torch_csr")}})
    m = summarize(df, SpgemmParams(dtypes=["float16"]))
    assert m["geomean_speedup_cusparse_fp32"] == pytest.approx(16 ** (1 / 3))
    assert m["geomean_speedup_cusparse_fp32_fill25"] == pytest.approx(4.0)
    assert m["n_fill_ge_threshold"] == 2 and m["n_pattern_mismatch"] == 1 and m["max_rel_err"] == 3e-4
    assert m["min_speedup_cusparse_fp32"] == 1.0 and m["geomean_ceiling_speedup_fill25"] == pytest.approx(4.0)
    assert m["geomean_speedup_cusparse_fp32_mma_fill25"] == pytest.approx(2.0) and math.isnan(m["max_mma_vs_twin_float16"])


def test_experiment_file_validates_at_both_scales():
    cfg = layout.experiment_file("tsparse/spgemm")
    spec = load_entry(cfg["entry"])
    assert cfg["gpus"] == 1 and not spec.needs_gpu  # a CPU path at smoke scale
    for layer in ({}, cfg.get("smoke") or {}):
        params = spec.params(**{**cfg.get("params", {}), **layer})
        names = [s.name for s in M.specs(params.matrices)]
        assert len(names) >= 4


def test_bad_dtype_is_refused(tmp_path):
    spec = load_entry("repro.papers.tsparse.experiment:spgemm_bench")
    with pytest.raises(ValueError, match="dtypes must be"):
        spec(SpgemmParams(matrices=TINY[:1], dtypes=["float8"]), Context(out_dir=tmp_path))


def test_figure_draws_from_the_table(run, tmp_path):
    from repro.papers.tsparse import figures

    r, _ = run
    r.tables["matrices"].to_csv(tmp_path / "matrices.csv", index=False)
    (tmp_path / "record.json").write_text('{"experiment": "tsparse/spgemm", "scale": "smoke", "machine": {}}')
    fig = figures.spgemm(Path(tmp_path))
    assert len(fig.axes) == 2


def test_summary_keeps_the_rcm_variants_apart():
    cols = {"fill": [0.1, 0.4, 0.3], "pattern_ok_float16": [True] * 3, "err_float16": [1e-4] * 3,
            "kernel_vs_twin_float16": [0.0] * 3, "err_mma_float16": [np.nan] * 3, "mma_vs_twin_float16": [np.nan] * 3,
            "speedup_cusparse_fp32_mma": [1.0] * 3, "t_numeric": [1.0] * 3, "t_ours": [2.0] * 3,
            "ceiling_s": [0.5] * 3, "ceiling_speedup": [4.0] * 3,
            **{f"speedup_{b}": [1.0, 3.0, 2.0] for b in ("scipy", "graphblas", "cusparse_fp32", "cusparse_fp64",
                                                         "torch_csr")}}
    df = pd.DataFrame({"matrix": ["rm", "rm_rcm", "lap"], "order": ["natural", "rcm", "natural"], **cols})
    m = summarize(df, SpgemmParams(dtypes=["float16"]))
    assert m["n_matrices"] == 2 and m["geomean_speedup_cusparse_fp32"] == pytest.approx(2 ** 0.5)  # rm and lap
    assert m["n_rcm"] == 1 and m["geomean_speedup_cusparse_fp32_rcm"] == pytest.approx(3.0) and m["mean_fill_rcm"] == 0.4
    assert m["median_fill_rcm_over_natural"] == pytest.approx(4.0)
