"""tSparse on a GPU: the compiled Triton kernel and the mma.sync kernel against the NumPy twin for
every group length and both dtypes, the output-bitmap kernel against the torch path, the product
against SciPy, and tsparse/spgemm end to end at a tiny size with cuSPARSE and torch beside it.
Kernels come from $REPRO_KERNELS_DIR or are compiled here with nvcc."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")

from repro.data import matrices as M  # noqa: E402
from repro.experiment import Context  # noqa: E402
from repro.papers.tsparse import mma, spgemm, tile_mma, twin  # noqa: E402
from repro.papers.tsparse.experiment import SpgemmParams, spgemm_bench  # noqa: E402
from repro.papers.tsparse.tiles import csr_tensors, symbolic, tile  # noqa: E402
from conftest import built_kernels  # noqa: E402
from test_tile_mma import synthetic_pairs  # noqa: E402

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).resolve().parents[2] / "src" / "repro" / "papers" / "tsparse" / "kernels"


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, sorted(KERNELS.glob("*.cu")))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_both_kernels_match_the_twin(dtype, kernels_dir):
    a, b, pairs = synthetic_pairs([1, 2, 3, 4, 5, 8, 9, 33], seed=5)
    a, b = a.to(dtype), b.to(dtype)
    want = twin.tile_products(a, b, pairs)
    gpu = [x.cuda() for x in (pairs.pair_a, pairs.pair_b, pairs.group_ptr)]
    pairs_gpu = type(pairs)(pairs.shape, *gpu, pairs.out_row, pairs.out_col, pairs.out_bits, pairs.candidates)
    for got in (tile_mma.tile_products(a.cuda(), b.cuda(), pairs_gpu),
                mma.tile_products(a.cuda(), b.cuda(), pairs_gpu, kernels_dir)):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


def test_symbolic_bitmap_kernel_matches_the_torch_path():
    A = M.rmat(10, edge_factor=4, seed=2)  # skewed groups: lanes of one program end far apart
    t = tile(*csr_tensors(A, "cuda"), A.shape)
    got, want = symbolic(t, t), symbolic(t, t, bitmaps="torch")
    assert got.n_out == want.n_out and torch.equal(got.group_ptr, want.group_ptr)
    assert torch.equal(got.out_bits, want.out_bits)


@pytest.mark.parametrize("how", ["triton", "mma"])
def test_product_matches_scipy(how, kernels_dir):
    A = M.rmat(10, edge_factor=4, seed=2)
    C = spgemm.multiply(A, dtype=torch.float16, how=how, device="cuda", kernels_dir=kernels_dir).scipy()
    ref = A @ A
    assert abs(C - ref).max() / abs(ref).max() <= 2e-3


def test_spgemm_end_to_end(tmp_path, kernels_dir):
    p = SpgemmParams(matrices=[{"name": "fem", "kind": "fem", "nodes": 400, "dofs": 4, "reach": 1},
                               {"name": "rm", "kind": "rmat", "scale": 10, "edge_factor": 4}],
                     warmup=1, repeats=3, cpu_repeats=1, tc_gemm_n=2048)
    r = spgemm_bench(p, Context(out_dir=tmp_path, device="cuda", gpus=1, inputs={"kernels": kernels_dir}))
    m = r.metrics
    assert m["n_pattern_mismatch"] == 0 and m["max_rel_err_float16"] <= 2e-3
    assert m["max_kernel_vs_twin_float16"] <= 1e-5 and m["max_mma_vs_twin_float16"] <= 1e-5
    for key in ("geomean_speedup_cusparse_fp32", "geomean_speedup_cusparse_fp32_mma", "geomean_speedup_torch_csr",
                "geomean_ceiling_speedup", "tc_tflops"):
        assert math.isfinite(m[key]) and m[key] > 0, key
