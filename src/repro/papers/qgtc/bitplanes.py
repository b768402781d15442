"""Bit-plane decomposition and the NumPy twin of the bit-decomposed GEMM (QGTC, Wang et al., PPoPP 2022).

An unsigned b-bit integer matrix Q is the weighted sum of b binary planes, Q = sum_i 2^i P_i. A product
of a p-bit A and a q-bit B is then

    A B = sum_{i < p, j < q} 2^(i+j) P_i(A) P_j(B),

and each plane product is a 1-bit GEMM: popcount(row AND column) over the packed words. That is what
the tensor cores' b1 MMA (`mma.sync ... .b1.b1.s32.and.popc`) computes, and what kernels/qgtc_bmma.cu
runs; this module is its NumPy twin, tile for tile:

- packing: plane i of an M x K matrix is M rows of ceil(K / 256) * 8 uint32 words, bit (k mod 32) of
  word k // 32 holding element k (rows padded with zeros to a multiple of 16, the MMA's M; B is
  packed the same way from its transpose, N padded to a multiple of 8);
- tiles: 16 rows x 256 k-bits of A (one m16n8k256 A fragment) against 8 columns of B;
- zero-tile jumping: a 16 x 256 tile of an A plane with no bit set contributes nothing and is skipped
  (no loads of B, no MMA); the twin skips the same tiles and counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TILE_M, TILE_N, TILE_K = 16, 8, 256  # the b1 MMA's shape (m16n8k256)
WORD = 32
WORDS_PER_K_TILE = TILE_K // WORD
MAX_BITS = 8


def _ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def check_bits(bits: int) -> int:
    if not (isinstance(bits, (int, np.integer)) and 1 <= bits <= MAX_BITS):
        raise ValueError(f"bit width must be an integer in 1..{MAX_BITS}, got {bits!r}")
    return int(bits)


@dataclass(frozen=True)
class Planes:
    """A matrix decomposed into bit planes: words[plane, row, word], rows padded, k padded to 256."""

    words: np.ndarray  # uint32 (bits, rows_padded, k_words)
    rows: int  # rows before padding
    k: int  # columns (the reduction dimension) before padding

    @property
    def bits(self) -> int:
        return self.words.shape[0]


def pack(q: np.ndarray, bits: int, row_multiple: int = TILE_M) -> Planes:
    """Decompose an unsigned integer matrix (rows x k, every value < 2^bits) into packed bit planes."""
    bits = check_bits(bits)
    q = np.asarray(q)
    if q.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {q.shape}")
    if q.size and (q.min() < 0 or q.max() >= 1 << bits):
        raise ValueError(f"values must lie in [0, 2^{bits}) for {bits} bits, got [{q.min()}, {q.max()}]")
    rows, k = q.shape
    rp, kp = _ceil_to(max(rows, 1), row_multiple), _ceil_to(max(k, 1), TILE_K)
    padded = np.zeros((rp, kp), np.uint32)
    padded[:rows, :k] = q
    weights = (np.uint64(1) << np.arange(WORD, dtype=np.uint64))  # bit b of a word <- element 32w + b
    planes = np.empty((bits, rp, kp // WORD), np.uint32)
    for i in range(bits):
        bit = ((padded >> np.uint32(i)) & np.uint32(1)).astype(np.uint64).reshape(rp, kp // WORD, WORD)
        planes[i] = (bit * weights).sum(axis=2).astype(np.uint32)
    return Planes(planes, rows, k)


def unpack(p: Planes) -> np.ndarray:
    """The integer matrix back from its planes (the inverse of pack)."""
    bits = (p.words[..., None] >> np.arange(WORD, dtype=np.uint32)) & np.uint32(1)  # plane, row, word, bit
    flat = bits.reshape(p.bits, p.words.shape[1], -1).astype(np.int64)
    q = sum(flat[i] << i for i in range(p.bits))
    return q[:p.rows, :p.k]


@dataclass(frozen=True)
class GemmStats:
    tiles: int  # A tiles (16 rows x 256 k-bits) over every A plane
    skipped: int  # of those, all-zero tiles that were jumped
    mmas: int  # b1 MMAs issued (m16n8k256), over every plane pair


def bitgemm(a: Planes, b: Planes, skip_zero_tiles: bool = True) -> tuple[np.ndarray, GemmStats]:
    """C = A B^T (int64, a.rows x b.rows) from the planes of A (M x K) and of B^T (N x K), the way the
    kernel computes it: per plane pair (i, j) and per A tile, AND + popcount against B's words, weighted
    2^(i+j); A tiles with no bit set are skipped."""
    if a.k != b.k or a.words.shape[2] != b.words.shape[2]:
        raise ValueError(f"inner dimensions differ: A has k = {a.k}, B has k = {b.k}")
    mp, kw = a.words.shape[1], a.words.shape[2]
    npad = b.words.shape[1]
    m_tiles, k_tiles, n_tiles = mp // TILE_M, kw // WORDS_PER_K_TILE, -(-npad // TILE_N)
    c = np.zeros((mp, npad), np.int64)
    # a tile's words per plane: (a_bits, m_tiles, 16, k_tiles, 8) -> which tiles of which plane hold any bit
    at = a.words.reshape(a.bits, m_tiles, TILE_M, k_tiles, WORDS_PER_K_TILE)
    nonzero = at.any(axis=(2, 4)) if skip_zero_tiles else np.ones((a.bits, m_tiles, k_tiles), bool)
    tiles, skipped = a.bits * m_tiles * k_tiles, int((~nonzero).sum())
    mmas = int(nonzero.sum()) * b.bits * n_tiles  # per non-empty A tile: every B plane, every n tile
    weights = np.left_shift(1, np.arange(a.bits)[:, None] + np.arange(b.bits)[None, :]).astype(np.int64)  # 2^(i+j)
    for kt in range(k_tiles):
        # row tiles with a bit in some plane; a plane's empty tile contributes zero, as the kernel's jump
        rows_t = np.flatnonzero(nonzero[:, :, kt].any(axis=0))
        if not len(rows_t):
            continue
        a_words = at[:, :, :, kt, :][:, rows_t] * nonzero[:, rows_t, kt][:, :, None, None]  # (a_bits, t, 16, 8)
        b_words = b.words[:, :, kt * WORDS_PER_K_TILE:(kt + 1) * WORDS_PER_K_TILE]  # (b_bits, N, 8)
        # popcount(A_i AND B_j) over the tile's 8 words (read as 4 uint64: the same bits, half the
        # elements), for every plane pair, weighted 2^(i+j)
        a64, b64 = a_words.view(np.uint64), np.ascontiguousarray(b_words).view(np.uint64)
        pop = np.bitwise_count(a64[:, :, :, None, None, :] & b64[None, None, None]).sum(axis=5, dtype=np.int64)
        weighted = np.einsum("itrjn,ij->trn", pop, weights)  # (t, 16, N)
        rows = (rows_t[:, None] * TILE_M + np.arange(TILE_M)).ravel()
        c[rows] += weighted.reshape(-1, npad)
    return c[:a.rows, :b.rows], GemmStats(tiles, skipped, mmas)


def int_matmul(qa: np.ndarray, a_bits: int, qb: np.ndarray, b_bits: int,
               skip_zero_tiles: bool = True) -> tuple[np.ndarray, GemmStats]:
    """qa (M x K, a_bits) @ qb (K x N, b_bits) as int64, through bit planes (the twin)."""
    return bitgemm(pack(qa, a_bits), pack(np.asarray(qb).T, b_bits, TILE_N), skip_zero_tiles)
