"""The compressed format of float32 activations, and its NumPy (CPU) reference codec.

The GPU codec (:mod:`repro.papers.comet.gpu_codec`, kernels/comet_codec.cu) writes the same streams bit
for bit; the GPU tests compare the two.

Format (SZ-style, absolute error bound ``eb``; the values in memory order, padded with zeros to
whole blocks):

1. Sign-preserving quantisation with step ``s = float32(2 eb) * float32(1 - 2^-9)`` and its
   float32 reciprocal ``r = float32(1 / s)``: ``q = 0`` if ``x == 0``, else
   ``q = sign(x) * (floor(|x| * r) + 1)`` (float32 product), reconstructed as
   ``x' = sign(q) * (|q| - 1/2) * s`` (float32): the interval [(m-1) s, m s) maps to its midpoint,
   so |x - x'| <= s / 2 < eb. Exact zeros stay exactly zero and no nonzero value becomes zero or
   changes sign, so a ReLU's backward mask (x > 0) survives compression exactly; a
   round-to-nearest grid would turn values under eb into zeros and drop their gradients. The step is
   0.2% under 2 eb so that float32 rounding of the product (an index off by one at an interval
   boundary) and of the reconstruction cannot push a value past eb (unless |x| is over ~2^14 eb).
   A value is *predictable* if ``x == 0`` or (|q| < 2^22 and float32 ``| |x| - |x'| | < eb``): the
   bound is checked, not assumed (strictly: if the exact error exceeded eb its rounded value would
   be >= eb). Unpredictable values (huge next to eb, NaN/Inf, or eb = 0 with x != 0) make their
   whole block raw (so does every nonzero block when eb is under ~3e-39, where 1 / s overflows
   float32). The quantiser is the encoder's choice only: decoding (step 5) reads q, so
   streams of earlier encoders (IEEE division, a float64 check) decode unchanged.
2. Blocks of BLOCK = 1024 values. Each block's first code is its anchor (int32, stored apart);
   Lorenzo (delta) prediction of q along memory order inside the block: ``d[0] = q[0] - anchor
   = 0``, ``d[i] = q[i] - q[i-1]``; zigzag ``z = (d << 1) ^ (d >> 31)`` (uint32).
3. Per-block bit width ``w``: 0 when every z is 0 (the block is elided: all of it within eb of
   its anchor value, e.g. post-ReLU zeros or a constant), the bit length of max(z) (at most 24),
   or RAW = 32 when any value is unpredictable (then the anchor is 0 and the block's 1024
   float32 words are stored verbatim).
4. Payload of a coded block: 32 * w uint32 words, bit planes of 32 values each. The block is 8
   chunks of 128 values; in chunk c, lane j (0..31) holds values 4j..4j+3, sub-value k (0..3).
   Word ``(c * 4 + k) * w + b`` has bit j = bit b of z[c * 128 + 4 j + k]. (On the GPU a warp
   makes the planes of 32 values with one 32x32 bit transpose: 5 shuffle rounds.)
5. The stream: ``widths`` (uint8, one per block), ``anchors`` (int32, one per block) and
   ``payload`` (uint32, the blocks' words back to back). Block offsets (words) are the exclusive
   prefix sum of 32 * w. Header: n, eb (and the shape, kept by the caller). Size: 4 * words + 5
   bytes per block + 16. GPU streams also hold ``tile_starts`` (int64, the offset of every 8th
   block: what the single-pass compressor's look-back found), so that decompression needs no scan;
   an index derivable from the widths, counted in ``nbytes`` where held.

Decompression: every value is within eb of the input (by the check in step 1; raw blocks and
zeros exactly). ``eb = 0`` is lossless: zero blocks elided, the others raw. NaN / Inf inputs and
a negative, NaN, infinite or huge eb are rejected with ValueError (the GPU's sync-free arena path
cannot refuse: it stores a block holding NaN/Inf raw, bit-exact, and counts it; repro.papers.comet.arena).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

BLOCK = 1024
CHUNK = 128
RAW = 32
QMAX = 2**22  # |q| below this: float32(|q| - 1/2) is exact
EB_MAX = 1e37  # 2 * eb stays finite in float32
STEP_SHRINK = np.float32(1 - 2**-9)
HEADER_BYTES = 16  # n (int64) + eb (float32) + block size (int32)
PER_BLOCK_BYTES = 5  # width (uint8) + anchor (int32)


@dataclass
class Compressed:
    """One compressed tensor. widths/payload are NumPy arrays (CPU codec) or torch tensors (GPU)."""

    n: int
    eb: float
    widths: Any  # uint8, one per block
    anchors: Any  # int32, one per block
    payload: Any  # uint32 (NumPy) / int32 (torch) words
    tile_starts: Any = None  # GPU streams: int64 payload word where each tile of 8 blocks begins

    @property
    def nbytes(self) -> int:
        """Bytes the compressed tensor occupies: payload, per-block widths and anchors, header (and
        the tile starts where the stream holds them)."""
        index = 0 if self.tile_starts is None else 8 * _size(self.tile_starts)
        return 4 * _size(self.payload) + PER_BLOCK_BYTES * _size(self.widths) + HEADER_BYTES + index

    @property
    def ratio(self) -> float:
        return 4 * self.n / self.nbytes


def _size(a) -> int:
    return int(a.numel() if hasattr(a, "numel") else a.size)


def check_eb(eb: float) -> np.float32:
    """eb as float32, or ValueError naming the problem."""
    e = float(eb)
    if not np.isfinite(e) or e < 0:
        raise ValueError(f"error bound eb must be finite and >= 0, got {eb!r}")
    if e > EB_MAX:
        raise ValueError(f"error bound eb = {eb!r} is too large (> {EB_MAX:g}): 2*eb would overflow float32")
    return np.float32(e)


def nblocks(n: int) -> int:
    return -(-n // BLOCK)


def step_of(eb: np.float32) -> np.float32:
    """The quantisation step of error bound eb (float32, as the GPU computes it)."""
    return np.float32(np.float32(2) * np.float32(eb)) * STEP_SHRINK


def recip_of(step: np.float32) -> np.float32:
    """float32(1 / step), the quantiser's multiplier (inf for a zero or tiny step), as the GPU gets it."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.float32(np.float32(1) / np.float32(step))


def quantize(x: np.ndarray, eb: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(q int32, predictable bool) of float32 values x, as defined in the module doc."""
    step = step_of(eb)
    inv = recip_of(step)
    ax = np.abs(x)
    with np.errstate(invalid="ignore", over="ignore"):
        m = (np.floor(ax * inv) + np.float32(1)).astype(np.float32)
        ok = m < QMAX
        m = np.where(ok, m, np.float32(1)).astype(np.float32)
        recon = ((m - np.float32(0.5)) * step).astype(np.float32)
        ok &= np.abs(ax - recon) < np.float32(eb)
    zero = x == 0
    ok |= zero
    q = np.where(ok & ~zero, np.copysign(m, x), 0).astype(np.int32)
    return q, ok


def dequantize(q: np.ndarray, step: np.float32) -> np.ndarray:
    """x' of int32 codes q: sign(q) * (|q| - 1/2) * step in float32 (0 for q = 0)."""
    mag = (np.abs(q).astype(np.float32) - np.float32(0.5)) * step
    return np.where(q == 0, np.float32(0), np.where(q < 0, -mag, mag)).astype(np.float32)


def zigzag(d: np.ndarray) -> np.ndarray:
    return ((d << 1) ^ (d >> 31)).astype(np.uint32)


def unzigzag(z: np.ndarray) -> np.ndarray:
    return ((z >> 1) ^ (np.uint32(0) - (z & 1))).astype(np.uint32).view(np.int32)


def bit_length(z: np.ndarray) -> np.ndarray:
    """Bit length of uint32 values (0 for 0)."""
    out = np.zeros(z.shape, dtype=np.uint8)
    v = z.astype(np.uint64)
    for shift in (16, 8, 4, 2, 1):
        big = v >= (np.uint64(1) << np.uint64(shift))
        out += np.where(big, shift, 0).astype(np.uint8)
        v = np.where(big, v >> np.uint64(shift), v)
    return out + (v > 0).astype(np.uint8)


def _as_float32(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise ValueError(f"the compressor takes float32 data, got {a.dtype}")
    return np.ascontiguousarray(a).reshape(-1)


def check_finite(x: np.ndarray) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"cannot compress non-finite values: {int(bad.sum())} NaN/Inf, first at flat index {i} "
                         f"({x[i]})")


def _blocks(x: np.ndarray) -> np.ndarray:
    nb = nblocks(x.size)
    padded = np.zeros(nb * BLOCK, dtype=np.float32)
    padded[:x.size] = x
    return padded.reshape(nb, BLOCK)


def _plane_order(z: np.ndarray) -> np.ndarray:
    """(k, 1024) block values -> (k, 8 chunks, 4 sub-values, 32 lanes) in word order."""
    return z.reshape(-1, BLOCK // CHUNK, 32, 4).transpose(0, 1, 3, 2)


def pack_planes(planes: np.ndarray, width: int) -> np.ndarray:
    """Bit planes of (..., 32 lanes) uint32 values: (..., width) words whose bit l is lane l's bit b
    (b = the word's index), as the kernel's ballots make them. np.packbits, little bit order, packs
    each plane's 32 lane bits into 4 bytes, read back as one little-endian uint32 (7 ms a 256k-value
    ReLU output against 10.7 for a multiply-and-sum per plane, CPU)."""
    bits = (planes[..., None, :] >> np.arange(width, dtype=np.uint32)[:, None]) & np.uint32(1)
    packed = np.packbits(bits.astype(np.uint8), axis=-1, bitorder="little")  # (..., width, 4)
    return np.ascontiguousarray(packed).view("<u4")[..., 0].astype(np.uint32, copy=False)


def block_codes(blocks: np.ndarray, eb32: np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps 1-3 of the format for (nb, BLOCK) float32 blocks: (anchors int32, codes z uint32 (nb,
    BLOCK), widths uint8: 0 elided, 1..24 coded, RAW)."""
    q, ok = quantize(blocks, eb32)
    raw = ~ok.all(axis=1)
    q[raw] = 0  # a raw block's codes are not used; its anchor is 0
    anchors = q[:, 0].copy()
    d = np.diff(q, axis=1, prepend=anchors[:, None]).astype(np.int32)
    z = zigzag(d)
    widths = bit_length(np.bitwise_or.reduce(z, axis=1)).astype(np.uint8)
    widths[raw] = RAW
    return anchors, z, widths


def compress(x, eb: float) -> Compressed:
    """Compress float32 data (any shape, flattened in C order) with absolute error bound eb."""
    x = _as_float32(x)
    eb32 = check_eb(eb)
    check_finite(x)
    blocks = _blocks(x)
    anchors, z, widths = block_codes(blocks, eb32)
    sizes = 32 * widths.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    payload = np.zeros(int(offsets[-1]), dtype=np.uint32)
    for w in np.unique(widths):
        if w == 0:
            continue
        idx = np.flatnonzero(widths == w)
        pos = offsets[idx][:, None] + np.arange(32 * int(w))
        if w == RAW:
            payload[pos] = blocks[idx].view(np.uint32)
            continue
        payload[pos] = pack_planes(_plane_order(z[idx]), int(w)).reshape(len(idx), -1)
    return Compressed(n=x.size, eb=float(eb32), widths=widths, anchors=anchors, payload=payload)


def decompress(c: Compressed) -> np.ndarray:
    """The flat float32 values of a CPU-compressed stream (each within c.eb of the input)."""
    widths = np.asarray(c.widths, dtype=np.uint8)
    anchors = np.asarray(c.anchors).view(np.int32)
    payload = np.asarray(c.payload).view(np.uint32)
    nb = nblocks(c.n)
    if widths.size != nb or anchors.size != nb:
        raise ValueError(f"corrupt stream: {widths.size} block widths and {anchors.size} anchors for n = {c.n} "
                         f"({nb} blocks)")
    bad = (widths > 24) & (widths != RAW)
    if bad.any():
        raise ValueError(f"corrupt stream: block width {int(widths[bad][0])} (valid: 0..24 and {RAW})")
    sizes = 32 * widths.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    if offsets[-1] != payload.size:
        raise ValueError(f"corrupt stream: widths need {int(offsets[-1])} payload words, got {payload.size}")
    step = step_of(np.float32(c.eb))
    out = np.zeros((nb, BLOCK), dtype=np.float32)
    for w in np.unique(widths):
        if w == 0:
            idx = np.flatnonzero(widths == 0)
            out[idx] = dequantize(anchors[idx], step)[:, None]
            continue
        idx = np.flatnonzero(widths == w)
        words = payload[offsets[idx][:, None] + np.arange(32 * int(w))]
        if w == RAW:
            out[idx] = words.view(np.float32)
            continue
        words = words.reshape(len(idx), BLOCK // CHUNK, 4, int(w))
        z = np.zeros((len(idx), BLOCK // CHUNK, 4, 32), dtype=np.uint32)
        for b in range(int(w)):  # (a loop over planes beats np.unpackbits here: 3.5 against 5 ms a 256k-value tensor)
            z |= ((words[..., b, None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)) << np.uint32(b)
        z = z.transpose(0, 1, 3, 2).reshape(len(idx), BLOCK)
        q = np.cumsum(unzigzag(z), axis=1, dtype=np.int32) + anchors[idx, None]
        out[idx] = dequantize(q, step)
    return out.reshape(-1)[:c.n]
