"""The tiled format, the tile-level symbolic phase and the CSR assembly against direct constructions
and SciPy: odd sizes, empty rows and columns, rectangular operands, an empty product."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from repro.papers.tsparse import spgemm
from repro.papers.tsparse.tiles import T, assemble, csr_tensors, symbolic, tile


def random_csr(m, n, density, seed, empty_rows=(), empty_cols=()):
    A = sp.random(m, n, density=density, format="lil", random_state=seed, data_rvs=lambda k: np.random.default_rng(seed).uniform(-1, 1, k))
    for r in empty_rows:
        A[r, :] = 0
    for c in empty_cols:
        A[:, c] = 0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    return A


def dense_tiles(A):
    """{(tile row, tile col): dense 8x8 block} of the non-empty tiles, by brute force."""
    D = np.zeros((-(-A.shape[0] // T) * T, -(-A.shape[1] // T) * T))
    D[:A.shape[0], :A.shape[1]] = A.toarray()
    P = np.zeros_like(D, dtype=bool)
    P[:A.shape[0], :A.shape[1]] = (A != 0).toarray()
    out = {}
    for i in range(D.shape[0] // T):
        for j in range(D.shape[1] // T):
            if P[i * T:(i + 1) * T, j * T:(j + 1) * T].any():
                out[(i, j)] = (D[i * T:(i + 1) * T, j * T:(j + 1) * T], P[i * T:(i + 1) * T, j * T:(j + 1) * T])
    return out


def unpack(bits):
    return ((bits.to(torch.int64)[:, :, None] >> torch.arange(T)) & 1).bool().numpy()


def test_tile_keeps_every_entry_its_bitmap_and_the_tile_order():
    A = random_csr(37, 21, 0.12, seed=1, empty_rows=[0, 9, 36], empty_cols=[20])
    t = tile(*csr_tensors(A, "cpu"), A.shape, torch.float16)
    want = dense_tiles(A)
    assert list(zip(t.row.tolist(), t.col.tolist())) == sorted(want)
    assert t.ptr.tolist() == [sum(1 for (i, _) in want if i < r) for r in range(t.tile_shape[0] + 1)]
    for k, key in enumerate(sorted(want)):
        vals, occ = want[key]
        np.testing.assert_array_equal(unpack(t.bits[k:k + 1])[0], occ)
        np.testing.assert_array_equal(t.vals[k].float().numpy(), vals.astype(np.float16).astype(np.float32))
    assert t.nnz == A.nnz and t.fill == pytest.approx(A.nnz / (len(want) * 64))


def test_symbolic_pairs_are_the_bitmap_filtered_tile_products_grouped_by_output_tile():
    A = random_csr(45, 30, 0.05, seed=2, empty_rows=[3, 4])
    B = random_csr(30, 53, 0.05, seed=3, empty_cols=[0, 52])
    ta, tb = (tile(*csr_tensors(X, "cpu"), X.shape) for X in (A, B))
    pairs = symbolic(ta, tb)
    da, db = dense_tiles(A), dense_tiles(B)
    keys_a, keys_b = sorted(da), sorted(db)
    want = {}
    candidates = 0
    for ia, (i, k) in enumerate(keys_a):
        for ib, (k2, j) in enumerate(keys_b):
            if k2 != k:
                continue
            candidates += 1
            if (da[(i, k)][1].any(axis=0) & db[(k, j)][1].any(axis=1)).any():  # A's columns meet B's rows
                want.setdefault((i, j), []).append((ia, ib))
    assert pairs.candidates == candidates and pairs.n_pairs < candidates  # the bitmap test dropped some
    got = {}
    gp = pairs.group_ptr.tolist()
    for o in range(pairs.n_out):
        key = (int(pairs.out_row[o]), int(pairs.out_col[o]))
        got[key] = sorted(zip(pairs.pair_a[gp[o]:gp[o + 1]].tolist(), pairs.pair_b[gp[o]:gp[o + 1]].tolist()))
    assert got == {k: sorted(v) for k, v in want.items()}
    assert [(int(r), int(c)) for r, c in zip(pairs.out_row, pairs.out_col)] == sorted(want)
    # each output tile's bitmap is the structural product's
    S = (abs(A).astype(bool).astype(float) @ abs(B).astype(bool).astype(float))
    ds = dense_tiles(S)
    for o, key in enumerate(sorted(want)):
        np.testing.assert_array_equal(unpack(pairs.out_bits[o:o + 1])[0], ds[key][1])


def test_assemble_writes_sorted_csr_with_every_structural_entry():
    A = random_csr(29, 29, 0.1, seed=4, empty_rows=[28])
    t = tile(*csr_tensors(A, "cpu"), A.shape)
    pairs = symbolic(t, t)
    vals = torch.arange(pairs.n_out * 64, dtype=torch.float32).view(-1, T, T)
    indptr, indices, data = assemble(pairs, vals)
    S = abs(A).astype(bool).astype(float) @ abs(A).astype(bool).astype(float)
    S.sort_indices()
    np.testing.assert_array_equal(indptr.numpy(), S.indptr)
    np.testing.assert_array_equal(indices.numpy(), S.indices)
    # the value of entry (r, c) is its slot in its output tile
    tiles = {(int(i), int(j)): o for o, (i, j) in enumerate(zip(pairs.out_row, pairs.out_col))}
    rows = np.repeat(np.arange(29), np.diff(S.indptr))
    want = [tiles[(r // T, c // T)] * 64 + (r % T) * T + c % T for r, c in zip(rows, S.indices)]
    np.testing.assert_array_equal(data.numpy(), want)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (8, 8, 8), (37, 29, 45), (70, 9, 3)])
def test_twin_product_matches_scipy(m, k, n, dtype, tol):
    A = random_csr(m, k, 0.3, seed=m + k, empty_rows=[0] if m > 1 else [])
    B = random_csr(k, n, 0.3, seed=n + 7)
    C = spgemm.multiply(A, B, dtype=dtype, how="twin").scipy()
    ref = A @ B
    assert C.shape == ref.shape and C.has_sorted_indices
    scale = max(abs(ref).max(), 1e-30)
    assert abs(C - ref).max() / scale <= tol


def test_half_inputs_are_exact_products_of_rounded_values():
    """fp16 inputs, fp32 accumulation: against the product of the fp16-rounded matrices in fp64, only
    fp32 accumulation error remains."""
    A = random_csr(50, 50, 0.2, seed=5)
    h = sp.csr_matrix((A.data.astype(np.float16).astype(np.float64), A.indices, A.indptr), shape=A.shape)
    C = spgemm.multiply(A, dtype=torch.float16, how="twin").scipy()
    assert abs(C - h @ h).max() <= 1e-6 * abs(h @ h).max()
    assert abs(C - A @ A).max() > 1e-6 * abs(A @ A).max()  # the rounding is there


def test_empty_product_and_mismatched_operands():
    A = sp.csr_matrix((16, 24))
    C = spgemm.multiply(A, sp.csr_matrix(np.eye(24)), how="twin").scipy()
    assert C.shape == (16, 24) and C.nnz == 0
    with pytest.raises(ValueError, match="inner dimensions differ"):
        spgemm.multiply(sp.csr_matrix(np.eye(3)), sp.csr_matrix(np.eye(4)), how="twin")
    with pytest.raises(ValueError, match="unknown implementation 'cusp'"):
        spgemm.multiply(sp.csr_matrix(np.eye(3)), how="cusp")
