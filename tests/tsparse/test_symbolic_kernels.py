"""The output-bitmap kernel in Triton's interpreter against the torch path and a brute-force boolean
product: empty and single-pair groups, full and empty rows, more output tiles than one program
holds; and symbolic's two paths on whole matrices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.papers.tsparse import symbolic_kernels
from repro.papers.tsparse.tiles import T, _torch_out_bits, csr_tensors, symbolic, tile
from test_tiles import random_csr, unpack


def synthetic(group_sizes, n_a=11, n_b=9, seed=0):
    """Random bitmaps (with an all-ones tile, an empty one and full and empty rows) and a task list
    with the given pairs per output tile."""
    rng = np.random.default_rng(seed)
    a = torch.as_tensor(rng.integers(0, 256, (n_a, T)), dtype=torch.uint8)
    b = torch.as_tensor(rng.integers(0, 256, (n_b, T)), dtype=torch.uint8)
    a[0], b[0] = 255, 255
    a[1], b[1] = 0, 0
    a[2, ::2], b[2, 1::2] = 255, 0
    counts = torch.as_tensor(group_sizes, dtype=torch.int64)
    gp = torch.nn.functional.pad(torch.cumsum(counts, 0, dtype=torch.int32), (1, 0))
    P = int(counts.sum())
    pa = torch.as_tensor(rng.integers(0, n_a, P), dtype=torch.int32)
    pb = torch.as_tensor(rng.integers(0, n_b, P), dtype=torch.int32)
    return a, b, pa, pb, gp, counts


@pytest.mark.parametrize("group_sizes", [[1, 2, 0, 3, 1, 9, 0, 4], [0], [1],
                                         list(np.random.default_rng(3).integers(0, 5, 300))])
def test_kernel_bitmaps_equal_the_torch_path_and_the_boolean_product(group_sizes):
    a, b, pa, pb, gp, counts = synthetic(group_sizes)
    got = symbolic_kernels.out_bits(a, b, pa, pb, gp)
    torch.testing.assert_close(got, _torch_out_bits(a[pa.long()], b[pb.long()], counts), rtol=0, atol=0)
    ua, ub = unpack(a).astype(np.int64), unpack(b).astype(np.int64)
    g = gp.tolist()
    for o in range(len(group_sizes)):
        want = np.zeros((T, T), dtype=bool)
        for i, j in zip(pa[g[o]:g[o + 1]].tolist(), pb[g[o]:g[o + 1]].tolist()):
            want |= (ua[i] @ ub[j]) > 0
        np.testing.assert_array_equal(unpack(got[o:o + 1])[0], want)


@pytest.mark.parametrize("m, k, n, density", [(45, 30, 53, 0.05), (70, 64, 33, 0.3), (16, 8, 8, 1.0)])
def test_symbolic_paths_agree(m, k, n, density):
    A = random_csr(m, k, density, seed=m, empty_rows=[3])
    B = random_csr(k, n, density, seed=n, empty_cols=[0])
    ta, tb = (tile(*csr_tensors(X, "cpu"), X.shape) for X in (A, B))
    want = symbolic(ta, tb)
    assert want.n_out > 0
    got = symbolic(ta, tb, bitmaps="triton")
    for field in ("pair_a", "pair_b", "group_ptr", "out_row", "out_col", "out_bits"):
        torch.testing.assert_close(getattr(got, field), getattr(want, field), rtol=0, atol=0)
    assert got.candidates == want.candidates


def test_symbolic_refuses_unknown_bitmaps():
    t = tile(*csr_tensors(random_csr(8, 8, 0.5, seed=1), "cpu"), (8, 8))
    with pytest.raises(ValueError, match="unknown bitmaps 'numpy'"):
        symbolic(t, t, bitmaps="numpy")
