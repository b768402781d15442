"""The Triton tile-product kernel in Triton's interpreter against its NumPy twin and SciPy: groups
of 1 to 9 pairs (the four-pairs-per-MMA packing and its masked tail), fp16 and bf16, odd sizes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from repro.papers.tsparse import spgemm, tile_mma, twin
from repro.papers.tsparse.tiles import Pairs, T


def synthetic_pairs(group_sizes, n_a=7, n_b=5, seed=0):
    """Random tile values and a task list with the given pairs per output tile."""
    rng = np.random.default_rng(seed)
    P = sum(group_sizes)
    gp = np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int32)
    n_out = len(group_sizes)
    pairs = Pairs((n_out * T, T), torch.as_tensor(rng.integers(0, n_a, P), dtype=torch.int32),
                  torch.as_tensor(rng.integers(0, n_b, P), dtype=torch.int32), torch.as_tensor(gp),
                  torch.arange(n_out), torch.zeros(n_out, dtype=torch.int64), torch.zeros((n_out, T), dtype=torch.uint8), P)
    a = torch.as_tensor(rng.uniform(-1, 1, (n_a, T, T)), dtype=torch.float32)
    b = torch.as_tensor(rng.uniform(-1, 1, (n_b, T, T)), dtype=torch.float32)
    return a, b, pairs


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel_matches_the_twin_for_every_group_length(dtype):
    a, b, pairs = synthetic_pairs([1, 2, 3, 4, 5, 8, 9], seed=1)
    a, b = a.to(dtype), b.to(dtype)
    got = tile_mma.tile_products(a, b, pairs).numpy()
    want = twin.tile_products(a, b, pairs)
    # both are fp32 sums of exact products; only the order of the additions differs
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # and the twin is the plain per-pair sum
    a32, b32 = twin.as_f32(a), twin.as_f32(b)
    gp = pairs.group_ptr.tolist()
    for o in range(pairs.n_out):
        s = sum(a32[pa] @ b32[pb] for pa, pb in zip(pairs.pair_a[gp[o]:gp[o + 1]].tolist(),
                                                     pairs.pair_b[gp[o]:gp[o + 1]].tolist()))
        np.testing.assert_allclose(want[o], s, rtol=1e-5, atol=1e-5)


def test_kernel_product_matches_scipy_with_odd_sizes_and_empty_rows():
    A = sp.random(43, 27, density=0.15, format="lil", random_state=3)
    A[5, :] = 0
    A[42, :] = 0
    A = sp.csr_matrix(A)
    B = sp.random(27, 19, density=0.2, format="csr", random_state=4)
    for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)):
        prod = spgemm.multiply(A, B, dtype=dtype, how="triton")
        C = prod.scipy()
        ref = A @ B
        assert abs(C - ref).max() / abs(ref).max() <= tol
        np.testing.assert_allclose(spgemm.numeric(prod.A, prod.B, prod.pairs, "triton").numpy(),
                                   twin.tile_products(prod.A.vals, prod.B.vals, prod.pairs), rtol=1e-5, atol=1e-6)


def test_kernel_refuses_other_dtypes():
    a, b, pairs = synthetic_pairs([1])
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        tile_mma.tile_products(a, b, pairs)
