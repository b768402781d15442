"""The task kernels: NumPy twins against SciPy, the torch CPU run against the twins, the CUDA
source compiles (nvcc), and on a GPU the CUDA kernels against the twins and SciPy."""

import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from repro.papers.gpucache import edge_kernels, partition, schedule, taskgraph
from repro.papers.gpucache.taskgraph import InputSpec


def spmv_case(seed=0):
    rng = np.random.default_rng(seed)
    a = sp.random(300, 300, density=0.03, random_state=seed, dtype=np.float32) + sp.eye(300, dtype=np.float32)
    a = (a + sp.diags(rng.random(299), 1)).tocsr()  # a path keeps it connected; not symmetric
    g = taskgraph.from_matrix("rand", a)
    x = rng.standard_normal(300).astype(np.float32)
    return a, g, x


def test_spmv_twin_equals_scipy():
    a, g, x = spmv_case()
    y = edge_kernels.reference("spmv", g.u, g.v, g.w_uv, g.w_vu, x) + g.diag * x
    np.testing.assert_allclose(y, a @ x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["default", "edge", "random"])
def test_torch_run_equals_scipy_in_every_schedule(method):
    a, g, x = spmv_case(1)
    s = schedule.from_partition(g, partition.partition(g, method, 4))
    out = edge_kernels.TorchRun("spmv", s, x)().numpy()[s.new_id] + g.diag * x  # back to original labels
    np.testing.assert_allclose(out, a @ x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", [InputSpec("d", "delaunay2d", 2000, "flux"), InputSpec("n", "nbody", 2000, "pair")])
def test_torch_run_equals_twin(spec):
    g = taskgraph.build(spec)
    data = edge_kernels.vertex_data(spec.kernel, g, 0)
    s = schedule.from_partition(g, partition.partition(g, "edge", 8))
    ref = edge_kernels.schedule_reference(spec.kernel, s, data)
    out = edge_kernels.TorchRun(spec.kernel, s, data)().numpy()
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()


def test_flux_conserves_and_pair_forces_cancel():
    for spec in (InputSpec("d", "delaunay2d", 500, "flux"), InputSpec("n", "nbody", 500, "pair")):
        g = taskgraph.build(spec)
        out = edge_kernels.reference(spec.kernel, g.u, g.v, g.w_uv, g.w_vu, edge_kernels.vertex_data(spec.kernel, g, 0))
        np.testing.assert_allclose(out.sum(0), 0.0, atol=1e-6 * np.abs(out).sum())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_cuda_source_compiles(tmp_path):
    from repro.kernels.build import build, sources

    src = [s for s in sources() if s.stem == edge_kernels.CUBIN]
    manifest = build(tmp_path, srcs=src)
    assert manifest["status"] == "built"
    assert (tmp_path / f"{edge_kernels.CUBIN}.cubin").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [InputSpec("m", "mesh2d", 200), InputSpec("d", "delaunay2d", 20000, "flux"),
                                  InputSpec("n", "nbody", 20000, "pair")])
@pytest.mark.parametrize("method", ["default", "edge"])
def test_cuda_kernels_equal_twin(spec, method, tmp_path):
    from repro.kernels.build import build, sources

    build(tmp_path, srcs=[s for s in sources() if s.stem == edge_kernels.CUBIN])
    g = taskgraph.build(spec)
    data = edge_kernels.vertex_data(spec.kernel, g, 0)
    s = schedule.from_partition(g, partition.partition(g, method, max(1, g.m // 1024)))
    run = edge_kernels.CudaRun(spec.kernel, s, data, tmp_path)
    out = run.result()
    ref = edge_kernels.schedule_reference(spec.kernel, s, data)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()
    if spec.kernel == "spmv":
        import pyamg

        a = pyamg.gallery.poisson((200, 200), format="csr", dtype=np.float32)
        np.testing.assert_allclose(out[s.new_id] + g.diag * data, a @ data, rtol=1e-4, atol=1e-4)
    median, fastest = run.time(1, 3)
    assert 0 < fastest <= median


@pytest.mark.parametrize("width", [4, 8, 16])
def test_spmm_twin_equals_scipy_and_torch_run_equals_twin(width):
    a, g, _ = spmv_case(2)  # 300 vertices: not a multiple of the block or the float4 width
    x = edge_kernels.vertex_data("spmm", g, 3, width)
    assert x.shape == (300, width)
    y = edge_kernels.reference("spmm", g.u, g.v, g.w_uv, g.w_vu, x) + g.diag[:, None] * x
    np.testing.assert_allclose(y, a @ x, rtol=1e-5, atol=1e-5)
    s = schedule.from_partition(g, partition.partition(g, "edge", 7))
    ref = edge_kernels.schedule_reference("spmm", s, x)
    out = edge_kernels.TorchRun("spmm", s, x)().numpy()
    assert out.shape == (300, width)
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()
    # column j of spmm is spmv of column j: the wide kernel is F independent right-hand sides
    col = edge_kernels.reference("spmv", s.a, s.b, s.w_ab, s.w_ba, schedule.relabel(x[:, width - 1].copy(), s))
    np.testing.assert_allclose(ref[:, width - 1], col, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("width", [0, -4, 6, 17])
def test_spmm_bad_width_refused(width):
    spec = InputSpec("w", "mesh2d", 10, "spmm", width=width)
    with pytest.raises(ValueError, match="width"):
        taskgraph.check_spec(spec)
    g = taskgraph.build(InputSpec("m", "mesh2d", 10))
    with pytest.raises(ValueError, match="width"):
        edge_kernels.vertex_data("spmm", g, 0, width)


def test_width_only_for_spmm():
    with pytest.raises(ValueError, match="only kernel spmm has a width"):
        taskgraph.check_spec(InputSpec("w", "mesh2d", 10, "flux", width=16))
    assert taskgraph.vertex_bytes(InputSpec("w", "mesh2d", 10, "spmm", width=16)) == 128
    assert taskgraph.vertex_bytes(InputSpec("w", "mesh2d", 10, "flux")) == 32


@pytest.mark.gpu
@pytest.mark.parametrize("width", [4, 16])
@pytest.mark.parametrize("method", ["default", "edge"])
def test_cuda_spmm_equals_twin(width, method, tmp_path):
    from repro.kernels.build import build, sources

    build(tmp_path, srcs=[s for s in sources() if s.stem == edge_kernels.CUBIN])
    g = taskgraph.build(InputSpec("m", "mesh2d", 201, "spmm", width=width))
    data = edge_kernels.vertex_data("spmm", g, 0, width)
    s = schedule.from_partition(g, partition.partition(g, method, max(1, g.m // 1024)))
    run = edge_kernels.CudaRun("spmm", s, data, tmp_path)
    out = run.result()
    ref = edge_kernels.schedule_reference("spmm", s, data)
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()
    median, fastest = run.time(1, 3)
    assert 0 < fastest <= median
