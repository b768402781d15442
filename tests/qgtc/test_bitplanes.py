"""The NumPy twin of QGTC's bit-decomposed GEMM against integer matmul: every bit width 1..8 on both
sides, odd sizes, zero-tile jumping (same result, the empty tiles counted), and the packing."""

from __future__ import annotations

import numpy as np
import pytest

from repro.papers.qgtc import bitplanes as bp


@pytest.mark.parametrize("a_bits", range(1, 9))
@pytest.mark.parametrize("b_bits", [1, 2, 3, 5, 8])
def test_twin_equals_integer_matmul(a_bits, b_bits):
    rng = np.random.default_rng(a_bits * 16 + b_bits)
    m, k, n = 37, 301, 11  # none a multiple of 16, 256 or 8
    qa = rng.integers(0, 1 << a_bits, (m, k))
    qb = rng.integers(0, 1 << b_bits, (k, n))
    c, stats = bp.int_matmul(qa, a_bits, qb, b_bits)
    assert c.dtype == np.int64 and c.shape == (m, n)
    np.testing.assert_array_equal(c, qa @ qb)
    assert stats.tiles == a_bits * 3 * 2  # 48 padded rows / 16, 512 padded k / 256, per plane


@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 256, 8), (17, 257, 9), (5, 700, 70)])
def test_odd_and_exact_tile_sizes(shape):
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    qa, qb = rng.integers(0, 4, (m, k)), rng.integers(0, 8, (k, n))
    np.testing.assert_array_equal(bp.int_matmul(qa, 2, qb, 3)[0], qa @ qb)


def test_extreme_values_do_not_overflow():
    """All-ones at 8 bits: every plane pair contributes, the largest weight 2^14."""
    qa, qb = np.full((20, 1000), 255), np.full((1000, 3), 255)
    np.testing.assert_array_equal(bp.int_matmul(qa, 8, qb, 8)[0], qa @ qb)


def test_zero_tiles_are_jumped_and_change_nothing():
    """A block-diagonal adjacency (batched graphs): tiles off the diagonal blocks are empty."""
    rng = np.random.default_rng(0)
    adj = np.zeros((96, 768), np.int64)
    for blk in range(3):  # three 32 x 256 blocks on the diagonal
        adj[32 * blk:32 * (blk + 1), 256 * blk:256 * (blk + 1)] = rng.integers(0, 2, (32, 256))
    x = rng.integers(0, 4, (768, 16))
    c_skip, s_skip = bp.int_matmul(adj, 1, x, 2)
    c_all, s_all = bp.int_matmul(adj, 1, x, 2, skip_zero_tiles=False)
    np.testing.assert_array_equal(c_skip, adj @ x)
    np.testing.assert_array_equal(c_all, c_skip)
    assert s_skip.tiles == s_all.tiles == 6 * 3
    assert s_skip.skipped == 6 * 3 - 6 and s_all.skipped == 0  # only the 6 diagonal tiles hold bits
    assert s_skip.mmas == 6 * 2 * 2 < s_all.mmas  # 6 tiles x 2 B planes x 2 n tiles


def test_packing_layout_and_round_trip():
    q = np.zeros((2, 300), np.int64)
    q[0, 0], q[0, 33], q[1, 299] = 1, 3, 2
    p = bp.pack(q, 2)
    assert p.words.shape == (2, 16, 16) and p.words.dtype == np.uint32  # rows to 16, k to 512 bits
    assert p.words[0, 0, 0] == 1 and p.words[0, 0, 1] == 2 and p.words[1, 0, 1] == 2  # element 33: bit 1 of word 1
    assert p.words[1, 1, 299 // 32] == 1 << (299 % 32) and p.words[0, 1].sum() == 0
    rng = np.random.default_rng(1)
    for bits in range(1, 9):
        q = rng.integers(0, 1 << bits, (19, 77))
        np.testing.assert_array_equal(bp.unpack(bp.pack(q, bits)), q)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="bit width"):
        bp.pack(np.zeros((2, 2), int), 9)
    with pytest.raises(ValueError, match=r"\[0, 2\^2\)"):
        bp.pack(np.full((2, 2), 4), 2)
    with pytest.raises(ValueError, match="inner dimensions"):
        bp.bitgemm(bp.pack(np.zeros((2, 3), int), 1), bp.pack(np.zeros((2, 4), int), 1, 8))
