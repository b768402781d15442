"""The pipelined TSM2R kernel's indexing on the CPU, through its NumPy twin (pipelined_twin.py):
every variant's work split, copy ring, zero fill and reduction give A @ B with each element of C
written once, on odd shapes, partial blocks, padded leading dimensions and both B layouts."""

from __future__ import annotations

import numpy as np
import pytest

from repro.papers.tsm2x import tsm2
from repro.papers.tsm2x.pipelined_twin import run

PIPELINED = [v.name for v in tsm2.TSM2R_VARIANTS if v.stages]


def operands(m, k, n, lda=None, ldc=None, b_row_major=False, seed=0):
    """Flat column-major A (padding rows NaN), B with either layout, C poisoned with NaN."""
    rng = np.random.default_rng(seed)
    lda, ldc = lda or m, ldc or m
    a2 = np.full((k, lda), np.nan)
    a2[:, :m] = rng.standard_normal((k, m))
    bm = rng.standard_normal((k, n))
    b, ldb_k, ldb_n = (bm.ravel(), n, 1) if b_row_major else (bm.T.ravel(), 1, k)
    return a2.ravel(), lda, b, ldb_k, ldb_n, np.full(ldc * n, np.nan), ldc, a2[:, :m].T @ bm


def check(name, m, k, n, **layout):
    a, lda, b, ldb_k, ldb_n, c, ldc, ref = operands(m, k, n, **layout)
    res = run(tsm2.VARIANTS[name], m, n, k, a, lda, b, ldb_k, ldb_n, c, ldc)
    C = res.c.reshape(n, ldc).T
    writes = res.writes.reshape(n, ldc).T
    assert (writes[:m] == 1).all(), f"{name}: elements of C written {sorted(set(writes[:m].ravel()))} times"
    assert (writes[m:] == 0).all(), f"{name}: the padding of C was written"
    np.testing.assert_allclose(C[:m], ref, rtol=0, atol=1e-12 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("name", PIPELINED)
def test_every_pipelined_variant_computes_the_product(name):
    n = tsm2.VARIANTS[name].n
    # m: two blocks and a partial third; k: not a multiple of the 8-column tile; n: below N where it can be
    check(name, 2 * tsm2.VARIANTS[name].rows_per_block + 37, 203, max(1, n - 1), lda=None, ldc=None)


SHAPES = [
    (1037, 333, 16, dict(lda=1040, ldc=1041)),           # padded leading dimensions, m % 4 != 0
    (4096, 517, 9, dict(b_row_major=True)),              # aligned rows, row-major B, n well below N
    (5, 1, 3, {}),                                       # fewer rows than one lane's, k = 1
    (700, 5, 2, dict(ldc=703)),                          # k < the parts of a slab: most warps get nothing
    (300, 0, 4, {}),                                     # k = 0: zeros
    (2600, 1000, 16, dict(lda=2611)),                    # many tiles per warp: the ring wraps
]
CASES = [(name, *shape) for name in ("tsm2r_f32_n16_t128_v4_s8_w4_p8x3", "tsm2r_f32_n16_t128_v4_s1_w1_p8x3",
                                     "tsm2r_f32_n8_t128_v4_s2_w2_p8x3", "tsm2r_f32_n4_t128_v4_s4_w1_p8x3")
         for shape in SHAPES if shape[2] <= tsm2.VARIANTS[name].n]


@pytest.mark.parametrize("name,m,k,n,layout", CASES)
def test_pipelined_twin_on_odd_shapes(name, m, k, n, layout):
    check(name, m, k, n, **layout)


def test_reading_padding_would_show():
    # the NaN padding is what makes the shape tests able to catch an out-of-range read of A
    v = tsm2.VARIANTS["tsm2r_f32_n4_t128_v4_s2_w2_p8x3"]
    a, lda, b, ldb_k, ldb_n, c, ldc, _ = operands(100, 20, 4, lda=104, ldc=104)
    res = run(v, 104, 4, 20, a, lda, b, ldb_k, ldb_n, c, ldc)  # m past the real rows: reads the padding
    assert np.isnan(res.c.reshape(4, ldc).T[100:104]).all() and np.isfinite(res.c.reshape(4, ldc).T[:100]).all()


def test_twin_refuses_the_register_kernel():
    with pytest.raises(ValueError, match="not a pipelined"):
        run(tsm2.VARIANTS["tsm2r_f32_n4_t128_v4_s2"], 10, 2, 3, np.zeros(30), 10, np.zeros(6), 1, 3, np.zeros(20), 10)
