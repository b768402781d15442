"""What an entropy stage would make of the codec's quantisation codes: exact sizes computed from the
codes' histogram, no stream written (issue 44's design question, before codec v4 is built).

The codec (repro.papers.comet.codec) quantises, predicts along each block of 1,024 values and
zigzags the deltas into codes z, then stores each coded block as fixed-width bit planes. Two entropy
stages are sized here over the same z of the same blocks (elided and raw blocks as the codec keeps
them):

huffman       one canonical Huffman code per tensor over the symbols min(z, ESC): z >= ESC costs the
              escape's code and 32 raw bits;
huffman_runs  the same with zero runs: inside a block, a run of L zero codes becomes the bijective
              base-2 digits of L (bzip2's RUNA / RUNB symbols, floor(log2(L + 1)) of them), the
              non-zero codes stay symbols.
Each coded block also keeps its flag and anchor (5 bytes, as the codec) and a 4-byte bit offset
(what a parallel decoder needs); the code book is one byte per symbol up to the largest used one,
plus a 16-byte header per tensor. Sizes are what those streams would occupy, exactly; no stream is
written, so no decoder is exercised: the result is a size model, labelled so wherever it is shown.
"""

from __future__ import annotations

import heapq

import numpy as np

from repro.papers.comet import codec

ESC = 1 << 12  # codes at or above this are escaped (escape symbol + 32 raw bits)
RUNA, RUNB = 0, 1  # huffman_runs' run digits; its code symbols are 2 + min(z, ESC) - 1 for z >= 1
OFFSET_BYTES = 4  # per coded block: its bit offset in the stream (for a parallel decoder)
HEADER = 16  # an entropy stage's own header per tensor (symbol count, escape width, code-book size)


def huffman_lengths(counts: np.ndarray) -> np.ndarray:
    """Code lengths (bits) of an optimal prefix code for symbol ``counts`` (0 for unused symbols;
    a lone used symbol gets 1 bit)."""
    counts = np.asarray(counts, dtype=np.int64)
    lengths = np.zeros(counts.size, dtype=np.int64)
    used = np.flatnonzero(counts)
    if used.size == 0:
        return lengths
    if used.size == 1:
        lengths[used] = 1
        return lengths
    # leaves 0..m-1 (used symbols in order), internal nodes m, m+1, ... as they are made; ties go to
    # the smaller id: the tree, so the lengths, is fixed by the counts alone
    m = used.size
    heap = [(int(c), i) for i, c in enumerate(counts[used])]
    heapq.heapify(heap)
    parent = [0] * (2 * m - 1)
    node = m
    while len(heap) > 1:
        c1, a = heapq.heappop(heap)
        c2, b = heapq.heappop(heap)
        parent[a] = parent[b] = node
        heapq.heappush(heap, (c1 + c2, node))
        node += 1
    depth = [0] * (2 * m - 1)
    for i in range(2 * m - 3, -1, -1):  # the root (2m - 2) has depth 0; parents come after children
        depth[i] = depth[parent[i]] + 1
    lengths[used] = depth[:m]
    return lengths


def _coded_bits(counts: np.ndarray, escapes: int) -> tuple[int, int]:
    """(payload bits, code-book bytes) of a canonical Huffman code over ``counts``."""
    lengths = huffman_lengths(counts)
    used = np.flatnonzero(counts)
    book = int(used.max()) + 1 if used.size else 0
    return int((lengths * counts).sum()) + 32 * escapes, book


def zero_runs(z: np.ndarray) -> np.ndarray:
    """Lengths of the maximal runs of zeros along each row of ``z`` (k, BLOCK), all rows together."""
    zero = np.zeros((z.shape[0], z.shape[1] + 2), dtype=np.int8)
    zero[:, 1:-1] = z == 0
    edges = np.diff(zero, axis=1)  # +1 where a run starts, -1 one past where it ends
    starts = np.flatnonzero(edges.reshape(-1) == 1)
    ends = np.flatnonzero(edges.reshape(-1) == -1)
    return ends - starts


def run_digits(lengths: np.ndarray) -> tuple[int, int]:
    """(RUNA count, RUNB count) of the bijective base-2 digits of every run length: L + 1 in binary
    is a leading 1 then bits b_i, and digit i is RUNA for b_i = 0, RUNB for b_i = 1."""
    v = np.asarray(lengths, dtype=np.int64) + 1
    ndigits = np.floor(np.log2(v)).astype(np.int64)
    ones = np.zeros_like(v)
    w = v.copy()
    while (w > 0).any():
        ones += w & 1
        w >>= 1
    runb = int((ones - 1).sum())
    return int(ndigits.sum()) - runb, runb


def sizes(x, eb: float) -> dict[str, int]:
    """Bytes of the codec's own stream and of the two entropy stages over the same codes."""
    x = codec._as_float32(x)
    eb32 = codec.check_eb(eb)
    codec.check_finite(x)
    blocks = codec._blocks(x)
    _, z, widths = codec.block_codes(blocks, eb32)
    nb = widths.size
    coded = (widths > 0) & (widths != codec.RAW)
    fixed = codec.HEADER_BYTES + codec.PER_BLOCK_BYTES * nb
    # the codec's own stream: 32 w words per block (codec.compress's nbytes, from the same widths)
    out = {"codec_bytes": fixed + 4 * 32 * int(widths.astype(np.int64).sum())}
    fixed += int((widths == codec.RAW).sum()) * codec.BLOCK * 4  # raw blocks stay raw in both stages
    zc = z[coded]
    if zc.size == 0:
        out.update(huffman_bytes=fixed, huffman_runs_bytes=fixed)
        return out
    fixed += OFFSET_BYTES * int(coded.sum()) + HEADER  # a coded block's bit offset, the stage's header
    sym = np.minimum(zc, ESC).astype(np.int64).reshape(-1)
    escapes = int((zc >= ESC).sum())
    bits, book = _coded_bits(np.bincount(sym, minlength=ESC + 1), escapes)
    out["huffman_bytes"] = fixed + book + -(-bits // 8)
    nonzero = sym[sym > 0]
    counts = np.bincount(nonzero + 1, minlength=ESC + 2)  # symbol z + 1 for z >= 1 (2.. ESC + 1)
    counts[RUNA], counts[RUNB] = run_digits(zero_runs(zc))
    bits, book = _coded_bits(counts, escapes)
    out["huffman_runs_bytes"] = fixed + book + -(-bits // 8)
    return out
