"""The SpTRSV experiments on the CPU: the emulation end to end, the experiment files at both
scales, the multi-GPU partition helpers and GPU-count errors, and that the CUDA sources compile."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.sparse.linalg import spsolve_triangular

from repro import layout
from repro.kernels.build import build
from repro.experiment import Context, load_entry
from repro.data import matrices as M
from repro.papers.sptrsv import multi, schedule
from repro.papers.sptrsv.bench import geomean, summarize
from repro.papers.sptrsv.experiment import EmulationParams, MultiGPUParams, SingleGPUParams

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "config" / "experiment" / "sptrsv"
KERNELS = ROOT / "src" / "repro" / "papers" / "sptrsv" / "kernels"


def test_emulation_smoke(tmp_path):
    spec = load_entry("repro.papers.sptrsv.experiment:emulation")
    p = EmulationParams(matrices=[{"name": "p", "kind": "poisson", "shape": [12, 9]},
                                  {"name": "g", "kind": "gallery", "example": "knot"}], virtual_gpus=[2, 3])
    r = spec(p, Context(out_dir=tmp_path, seed=3))
    assert r.metrics["n_matrices"] == 2 and r.metrics["n_over_tol"] == 0 and r.metrics["max_rel_err"] <= 1e-10
    pts = r.tables["points"]
    assert list(pts["levels"]) == [20, schedule.analyse(M.gallery("knot")).levels]
    assert set(r.tables["multigpu"]["k"]) == {2, 3} and set(r.tables["multigpu"]["order"]) == {"natural", "levels"}
    assert r.metrics["max_err_v3_warp_rounds"] <= 1e-10 and (pts["v3_max_rounds"] >= 1).all()
    assert ((pts["v3_warp_fraction"] >= 0) & (pts["v3_warp_fraction"] <= 1)).all()


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_experiment_files_validate_at_both_scales(path):
    cfg = layout.experiment_file(f"sptrsv/{path.stem}")  # a variant with its base merged under it
    assert cfg["name"] == path.stem and cfg["paper"] == "sptrsv"
    spec = load_entry(cfg["entry"])
    for layer in ({}, cfg.get("smoke") or {}):
        params = spec.params(**{**cfg.get("params", {}), **layer})
        M.specs(params.matrices)
    assert isinstance(cfg["gpus"], int) and (cfg["gpus"] >= 1) == spec.needs_gpu


def test_multi_gpu_files_say_their_gpu_count():
    counts = {p.stem: yaml.safe_load(p.read_text())["gpus"] for p in CONFIGS.glob("multi_gpu*.yaml")}
    assert counts == {"multi_gpu": 2, "multi_gpu_4": 4}


def test_split_rebuilds_the_matrix():
    L = M.powerlaw(3000, seed=1, min_offset=10)
    b = np.arange(3000.0)
    bounds, parts = multi.split(L, b, 3)
    _, ordered = multi.split(L, b, 3, level_order=True)
    assert all(sorted(q.order.tolist()) == list(range(q.hi - q.lo)) for q in ordered) and parts[0].order is None
    cols = [np.repeat(np.arange(p.lo, p.hi), np.diff(p.colptr)) for p in parts]
    import scipy.sparse as sp

    rebuilt = sp.coo_matrix((np.concatenate([p.val for p in parts]),
                             (np.concatenate([p.rowidx for p in parts]), np.concatenate(cols))), shape=L.shape)
    assert abs(rebuilt.tocsr() - L).max() == 0
    assert np.array_equal(np.concatenate([p.b for p in parts]), b)
    assert np.array_equal(np.concatenate([p.need for p in parts]), np.diff(L.indptr) - 1)
    assert all(p.val[p.colptr[:-1]].tolist() == L.diagonal()[p.lo:p.hi].tolist() for p in parts)  # diagonal first
    x, trace = schedule.multigpu_solve(L, b, 3)
    assert multi.remote_fraction(L, bounds) == pytest.approx(trace.remote_fraction)
    assert multi.backward_error(L, x, b) < 1e-14


@pytest.mark.parametrize("k, visible, match", [(1, None, "at least 2 GPU"), (16, None, "at most 8"),
                                               (4, 2, "on 4 GPUs, but 2 are visible"), (2.0, None, "at least 2")])
def test_wrong_gpu_count(k, visible, match):
    with pytest.raises(ValueError, match=match):
        multi.check_gpus(k, visible)


def test_multi_gpu_refuses_one_gpu_before_work(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    spec = load_entry("repro.papers.sptrsv.experiment:multi_gpu")
    with pytest.raises(ValueError, match="at least 2 GPU"):
        spec(MultiGPUParams(), Context(out_dir=tmp_path, gpus=1))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match="scaling: GPU counts must be between 1 and the run's 2"):
        spec(MultiGPUParams(scaling=[4]), Context(out_dir=tmp_path, gpus=2))


def test_single_gpu_needs_cusparse(tmp_path):
    spec = load_entry("repro.papers.sptrsv.experiment:single_gpu")
    with pytest.raises(ValueError, match="must include cusparse"):
        spec(SingleGPUParams(methods=["levelset"]), Context(out_dir=tmp_path))


def test_summary_of_a_points_table():
    df = pd.DataFrame({"family": ["poisson", "gallery"], "ok": [True, False],
                       "cusparse_analysis_ms": [4.0, 1.0], "cusparse_solve_ms": [2.0, 1.0],
                       "speedup_syncfree_warp": [1.5, 0.5], "total_speedup_syncfree_warp": [3.0, 1.0],
                       "speedup_syncfree_thread": [4.0, 1.0], "total_speedup_syncfree_thread": [6.0, 2.0],
                       "speedup_syncfree_levels": [3.0, 9.0], "total_speedup_syncfree_levels": [1.0, 1.0]})
    m = summarize(df)
    assert m["n_incorrect"] == 1 and m["geomean_speedup_syncfree_warp"] == pytest.approx(geomean([1.5, 0.5]))
    assert m["geomean_speedup_syncfree_warp_deep"] == 1.5 and m["geomean_speedup_best_syncfree_deep"] == 4.0
    assert m["median_cusparse_analysis_over_solve"] == pytest.approx(1.5)
    assert "geomean_ceiling_speedup_deep" not in m  # no hop measured, no ceiling


def test_summary_of_the_v2_pick():
    """syncfree_v2 is the rule's arm; v2_rule_right_deep counts the deep matrices where it was the faster."""
    df = pd.DataFrame({"family": ["poisson", "powerlaw", "gallery"], "ok": [True] * 3,
                       "v2_variant": ["pull", "push", "pull"],
                       "speedup_syncfree_push": [1.0, 3.0, 1.0], "speedup_syncfree_pull": [2.0, 4.0, 0.5],
                       "total_speedup_syncfree_push": [1.0] * 3, "total_speedup_syncfree_pull": [1.0] * 3,
                       "speedup_syncfree_v2": [2.0, 3.0, 0.5], "total_speedup_syncfree_v2": [1.0] * 3})
    m = summarize(df)
    assert m["geomean_speedup_syncfree_v2_deep"] == pytest.approx(geomean([2.0, 3.0]))
    assert m["v2_rule_right_deep"] == 1 and m["geomean_speedup_best_syncfree_deep"] == pytest.approx(geomean([2.0, 4.0]))


def test_summary_puts_v3_beside_v2():
    """syncfree_v3 gets its own geomean over the deep matrices and counts among the sync-free arms."""
    df = pd.DataFrame({"family": ["poisson", "powerlaw", "gallery"], "ok": [True] * 3,
                       "v2_variant": ["pull", "push", "pull"],
                       "speedup_syncfree_push": [1.0, 3.0, 1.0], "speedup_syncfree_pull": [2.0, 4.0, 0.5],
                       "total_speedup_syncfree_push": [1.0] * 3, "total_speedup_syncfree_pull": [1.0] * 3,
                       "speedup_syncfree_v2": [2.0, 3.0, 0.5], "total_speedup_syncfree_v2": [1.0] * 3,
                       "speedup_syncfree_v3": [8.0, 2.0, 1.0], "total_speedup_syncfree_v3": [1.0] * 3})
    m = summarize(df)
    assert m["geomean_speedup_syncfree_v3_deep"] == pytest.approx(4.0)
    assert m["geomean_speedup_syncfree_v2_deep"] == pytest.approx(geomean([2.0, 3.0]))
    assert m["geomean_speedup_best_syncfree_deep"] == pytest.approx(geomean([8.0, 4.0]))


def test_summary_names_the_ceiling():
    """levels x hop as a speedup over cuSPARSE, over the deep-chain matrices, and the best sync-free
    solve's fraction of it."""
    df = pd.DataFrame({"family": ["poisson", "powerlaw", "gallery"], "ok": [True] * 3, "levels": [100, 400, 10],
                       "hop_us": [1.0] * 3, "cusparse_solve_ms": [0.4, 0.8, 0.1],
                       "speedup_syncfree_thread": [1.0, 2.0, 1.0], "total_speedup_syncfree_thread": [1.0] * 3})
    df["ceiling_ms"] = df["levels"] * df["hop_us"] / 1e3
    df["ceiling_speedup"] = df["cusparse_solve_ms"] / df["ceiling_ms"]
    m = summarize(df)
    assert m["hop_us"] == 1.0 and m["geomean_ceiling_speedup_deep"] == pytest.approx(geomean([4.0, 2.0]))
    assert m["geomean_ceiling_speedup"] == pytest.approx(geomean([4.0, 2.0, 10.0]))
    assert m["geomean_best_syncfree_of_ceiling_deep"] == pytest.approx(geomean([1.0, 2.0]) / geomean([4.0, 2.0]))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_sources_compile(tmp_path):
    manifest = build(tmp_path, srcs=sorted(KERNELS.glob("*.cu")))
    assert manifest["status"] == "built"
    assert manifest["kernels"]["sptrsv"]["entries"] == 10 and manifest["kernels"]["sptrsv_multi"]["entries"] == 1
    assert not any(k["spilling_entries"] for k in manifest["kernels"].values())


def _points(tmp_path, name, df):
    d = tmp_path / name
    d.mkdir()
    df.to_csv(d / "points.csv", index=False)
    return d


def test_figures_draw(tmp_path):
    from repro.papers.sptrsv import figures

    spec = load_entry("repro.papers.sptrsv.experiment:emulation")
    r = spec(EmulationParams(matrices=[{"name": "p", "kind": "poisson", "shape": [6, 5]}], virtual_gpus=[2]),
             Context(out_dir=tmp_path))
    assert figures.emulation(_points(tmp_path, "em", r.tables["points"])).axes
    single = pd.DataFrame({"matrix": ["a", "b"], **{f"{s}_{t}_ms": [1.0, 2.0] for s in figures.SOLVERS
                                                     for t in ("solve", "analysis")},
                           **{f"speedup_{s}": [1.0, 1.5] for s in figures.SOLVERS}})
    assert len(figures.single_gpu(_points(tmp_path, "single", single)).axes) == 3
    multi_df = pd.DataFrame({"matrix": ["a"], "speedup": [2.0], "remote_fraction": [0.1], "gpus": [2]})
    assert len(figures.multi_gpu(_points(tmp_path, "multi", multi_df)).axes) == 2


def test_multi_gpu_metrics_from_both_designs(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(multi, "zero_copy", lambda specs, seeds, k, **kw: [
        {"solve_s": 0.001, "x": spsolve_triangular(s.build(), np.random.default_rng(seed).standard_normal(
            s.build().shape[0]), lower=True)} for s, seed in zip(specs, seeds)])
    monkeypatch.setattr(multi, "unified_memory", lambda L, b, k, **kw: {"solve_s": 0.004 if L.shape[0] > 200 else 0.002,
                                                                       "backward": 1e-16})
    import repro.papers.sptrsv.experiment as ex

    monkeypatch.setattr(ex, "_gpu_name", lambda: "fake")
    p = MultiGPUParams(scaling=[2], matrices=[{"name": "p", "kind": "poisson", "shape": [20, 20]},
                                 {"name": "k", "kind": "gallery", "example": "knot"}])
    r = ex.multi_gpu.fn(p, Context(out_dir=tmp_path, gpus=4))
    assert r.metrics["gpus"] == 4 and r.metrics["n_incorrect"] == 0
    assert r.metrics["geomean_speedup"] == pytest.approx(geomean([4.0, 4.0 if M.gallery("knot").shape[0] > 200 else 2.0]))
    pts = r.tables["points"]
    assert set(pts["gpus"]) == {2, 4} and "geomean_speedup_2gpu" in r.metrics
    assert (pts["remote_fraction"] > 0).all() and (pts["zc_backward"] < 1e-12).all()


def test_summary_keeps_the_rcm_variants_out_of_the_claims_set():
    """The deep-chain metrics read the natural orders only (the claim's matrices); the RCM variants get
    their own best sync-free and ceiling geomeans and the median ratio of their levels to their base's."""
    df = pd.DataFrame({"matrix": ["banded", "banded_rcm", "powerlaw", "powerlaw_rcm"],
                       "family": ["banded", "banded", "powerlaw", "powerlaw"],
                       "order": ["natural", "rcm", "natural", "rcm"], "ok": [True] * 4, "levels": [1000, 500, 300, 42],
                       "hop_us": [1.0] * 4, "cusparse_solve_ms": [2.0, 2.0, 1.0, 1.0],
                       "speedup_syncfree_thread": [1.0, 3.0, 2.0, 8.0], "total_speedup_syncfree_thread": [1.0] * 4})
    df["ceiling_ms"] = df["levels"] * df["hop_us"] / 1e3
    df["ceiling_speedup"] = df["cusparse_solve_ms"] / df["ceiling_ms"]
    m = summarize(df)
    assert m["geomean_speedup_syncfree_thread_deep"] == pytest.approx(geomean([1.0, 2.0]))
    assert m["geomean_ceiling_speedup_deep"] == pytest.approx(geomean([2.0, 1000 / 300]))
    assert m["n_rcm"] == 2 and m["geomean_speedup_best_syncfree_rcm"] == pytest.approx(geomean([3.0, 8.0]))
    assert m["geomean_ceiling_speedup_rcm"] == pytest.approx(geomean([4.0, 1000 / 42]))
    assert m["median_levels_rcm_over_natural"] == pytest.approx(np.median([0.5, 42 / 300]))
