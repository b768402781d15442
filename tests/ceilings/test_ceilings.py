"""The machine ceilings: the CPU run at a tiny scale (its table, metrics and figure), and the GPU
run's metric names, which the other papers' claims and figures read as denominators."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from omegaconf import OmegaConf

from repro import records
from repro.pipeline.run import execute


def _run(compose, out, device="cpu", **params):
    cfg = compose(["experiment=ceilings/ceilings", "scale=smoke", f"out={out}", f"device={device}"])
    OmegaConf.set_struct(cfg, False)
    cfg.experiment.smoke.update(params)
    return records.read(execute(cfg))


def test_the_cpu_run_measures_the_host_copy_and_gemm_rates(compose, tmp_path):
    rec = _run(compose, tmp_path, copy_bytes=1 << 20, host_copy_bytes=1 << 20, gemm_size=64,
               gemm_dtypes=["fp64", "fp32", "tf32"], repeats=2)
    assert rec["status"] == "ok" and rec["tags"]["device"] == "cpu"
    table = pd.read_csv(tmp_path / "ceilings.csv")
    assert set(table.name) == {"host_copy", "gemm_fp64", "gemm_fp32"}  # tf32 is a GPU mode: left out on a CPU
    assert (table.value > 0).all() and table.value.map(math.isfinite).all()
    assert set(rec["metrics"]) == {"host_copy_GBps", "gemm_fp64_TFLOPs", "gemm_fp32_TFLOPs"}
    assert rec["metrics"]["host_copy_GBps"] == pytest.approx(table.set_index("name").value["host_copy"])


def test_the_figure_draws_from_the_record(compose, tmp_path):
    from repro.papers.ceilings import figures

    _run(compose, tmp_path, host_copy_bytes=1 << 20, gemm_size=32, gemm_dtypes=["fp32"], repeats=2)
    fig = figures.ceilings(tmp_path)
    assert len(fig.axes) == 2  # bandwidth and compute panels


@pytest.mark.gpu
def test_the_gpu_run_names_the_metrics_the_claims_read(compose, tmp_path):
    rec = _run(compose, tmp_path, device="cuda", copy_bytes=1 << 24, host_copy_bytes=1 << 24, gemm_size=256,
               gemm_dtypes=["fp32", "bf16"], repeats=3)
    assert {"d2d_copy_GBps", "gemm_bf16_TFLOPs", "launch_us"} <= set(rec["metrics"]), sorted(rec["metrics"])
