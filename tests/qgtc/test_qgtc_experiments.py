"""The gemm and gnn experiments called on the CPU on tiny inputs (the NumPy twin), and their figures."""

from __future__ import annotations

import pytest

from repro.experiment import Context

from conftest import entry_params, write_tables


def test_gemm_on_the_cpu_runs_the_twin_and_draws(tmp_path):
    from repro.papers.qgtc import figures

    spec, p = entry_params("repro.papers.qgtc.gemm:gemm", m=40, k=300, n=9, bits=[[1, 1], [3, 2], [8, 8]], cpu_repeats=1)
    result = spec(p, Context(out_dir=tmp_path, device="cpu"))
    df = result.tables["points"]
    assert result.metrics["n_incorrect"] == 0 and list(df["device"].unique()) == ["cpu"]
    assert list(df["mmas"]) == [3 * 2 * 2 * 1, 3 * 2 * 2 * 6, 3 * 2 * 2 * 64]  # row tiles x k tiles x n tiles x planes
    assert "speedup_vs_int8" not in result.metrics  # no GPU, no comparison
    write_tables(tmp_path, result)
    assert figures.gemm(tmp_path).axes


def test_gnn_on_the_cpu_trains_every_bit_width_and_draws(tmp_path):
    from repro.papers.qgtc import figures

    spec, p = entry_params("repro.papers.qgtc.gnn:gnn", graphs=["proteins"], claim_graphs=["proteins"],
                     accuracy_graphs=["proteins"], graph_scale=0.006, parts=4, clusters_per_batch=2, train_epochs=4,
                     accuracy_bits=[2, 8], lr=0.05)
    result = spec(p, Context(out_dir=tmp_path, device="cpu"))
    acc = result.tables["accuracy"]
    assert list(acc["bits"]) == ["fp32", "2", "8"] and list(acc["backend"]) == ["float", "twin", "twin"]
    m = result.metrics
    assert m["acc_fp32_proteins"] > 0.6  # two planted classes, features and structure both informative
    assert abs(m["acc_b8_proteins"] - m["acc_fp32_proteins"]) < 0.15
    assert set(m) >= {"acc_drop_b2_max", "acc_drop_b8_max"} and "speedup_vs_cusparse_geomean" not in m
    write_tables(tmp_path, result)
    assert figures.gnn(tmp_path).axes


@pytest.mark.parametrize("name", ["gemm", "gnn"])
def test_experiment_files_name_their_kernel_and_figure(name):
    from repro import layout

    cfg = layout.experiment_file(f"qgtc/{name}")
    assert cfg["kernels"] == ["qgtc_bmma"] and cfg["gpus"] == 1 and cfg["figure"].endswith(f"figures:{name}")
