"""Codec v4: v3's quantiser and pointwise error-bound check, then a cuSZ-style entropy stage (canonical
Huffman with zero runs) over the quantisation codes; the NumPy twin of kernels/comet_huffman.cu.

Format (absolute error bound ``eb``; values in memory order, padded with zeros to whole blocks of
BLOCK = 1024; every block decodes alone):

1. Quantisation exactly as v3 (:func:`repro.papers.comet.codec.quantize`: sign-preserving, step
   ``float32(2 eb) * (1 - 2^-9)``, the bound checked per value). A block holding an unpredictable value
   is *raw* (its 1024 float32 words stored verbatim).
2. Per tensor one prediction ``mode``: DELTA (``d[0] = q[0]``, ``d[i] = q[i] - q[i-1]`` inside the
   block: no anchor) or DIRECT (``d[i] = q[i]``); codes ``z = zigzag(d)`` (uint32). The encoder takes
   the mode whose Huffman payload bits (from the histogram) are fewer; ties go to DELTA.
3. Symbols of a coded block, in value order: a maximal run of L zero codes is the bijective base-2
   digits of L, least significant first (bzip2's RUNA = digit 1 and RUNB = digit 2, weights 2^k:
   ``L = sum d_k 2^k``; what :mod:`repro.papers.comet.entropy` sizes); a code ``1 <= z < ESC``
   is symbol ``z + 1``; ``z >= ESC`` is the escape symbol ``ESC + 1`` followed by z in 32 raw bits.
   Alphabet NSYM = ESC + 2 = 4098. A block whose codes are all zero (q all 0) has no symbols.
4. Code book: one canonical Huffman code per tensor from the histogram of the coded blocks' symbols
   (optimal lengths from :func:`entropy.huffman_lengths`, then limited to LMAX = 16 bits by
   lengthening the rarest codes and shortening the commonest while the Kraft sum allows; one used
   symbol gets 1 bit). Canonical: symbols sorted by (length, symbol) take consecutive codes, the code
   shifted left when the length grows. Stored as ``lengths`` (uint8, one per symbol up to the largest
   used one).
5. Payload: each block's symbols' codes (and escape bits) MSB first into uint32 words (bit 31 first),
   the last word zero-padded; a coded block of >= 1024 words is stored raw instead. ``offsets``
   (uint32, nb + 1: the exclusive prefix sum of the blocks' word counts, offsets[nb] = payload words)
   says where each block starts and what it is: 0 words a zero block, 1024 raw, otherwise coded.
   A decoder runs one block per thread with no scan.
Size: 4 * payload words + 4 * (nb + 1) + len(lengths) + HEADER_BYTES. NaN/Inf input and a bad eb are
refused (ValueError), as in v3; eb = 0 is lossless (zero blocks elided, the others raw).

A stream may also be coded with a :class:`Book` kept from an earlier tensor (``compress(x, eb, book)``):
a *covering* book (:func:`make_book`) gives every symbol 0..NSYM-1 a code, so it codes any tensor, and
its ``lengths`` (all NSYM) are stored in the stream as usual, so the decoder is the same. What it costs
against the tensor's own book is the code space the unseen symbols hold (see :func:`covering_lengths`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repro.papers.comet import codec, entropy

BLOCK = codec.BLOCK
ESC = entropy.ESC
RUNA, RUNB = entropy.RUNA, entropy.RUNB
ESC_SYM = ESC + 1
NSYM = ESC + 2
LMAX = 16
RAW_WORDS = BLOCK  # a raw block's payload words
DELTA, DIRECT = 0, 1
MODES = (DELTA, DIRECT)
HEADER_BYTES = 24  # n (int64), eb (float32), mode, symbols in the book, block size (int32 each)


@dataclass
class CompressedV4:
    """One v4 stream. offsets/payload are NumPy arrays (twin) or torch tensors (GPU)."""

    n: int
    eb: float
    mode: int
    lengths: Any  # uint8 code length per symbol (0: unused), up to the largest used symbol
    offsets: Any  # uint32, nb + 1 word offsets
    payload: Any  # uint32 words (NumPy) / int32 (torch)
    book: Book | None = None  # the cached book it was coded with (its tables are reused to decode)

    @property
    def nbytes(self) -> int:
        return 4 * codec._size(self.payload) + 4 * codec._size(self.offsets) + codec._size(self.lengths) + HEADER_BYTES

    @property
    def ratio(self) -> float:
        return 4 * self.n / self.nbytes


def limit_lengths(lengths: np.ndarray, counts: np.ndarray, lmax: int = LMAX) -> np.ndarray:
    """Code lengths of at most ``lmax`` bits with Kraft sum <= 1: lengths over lmax are clamped, then
    the rarest codes (count ascending, symbol ascending) are lengthened until the sum fits, then the
    commonest (count descending) shortened while it still fits. Deterministic (the GPU host path and
    the twin call this)."""
    lengths = np.minimum(np.asarray(lengths, dtype=np.int64), lmax)
    used = np.flatnonzero(lengths)
    cap = 1 << lmax
    kraft = int((1 << (lmax - lengths[used])).sum())
    if kraft > cap:
        for s in used[np.lexsort((used, counts[used]))]:
            while kraft > cap and lengths[s] < lmax:
                lengths[s] += 1
                kraft -= 1 << (lmax - lengths[s])
            if kraft <= cap:
                break
        for s in used[np.lexsort((used, -counts[used]))]:
            while lengths[s] > 1 and kraft + (1 << (lmax - lengths[s])) <= cap:
                kraft += 1 << (lmax - lengths[s])
                lengths[s] -= 1
    return lengths


def book_lengths(counts: np.ndarray) -> np.ndarray:
    """Length-limited Huffman code lengths (int64, NSYM) of a symbol histogram."""
    counts = np.asarray(counts, dtype=np.int64)
    return limit_lengths(entropy.huffman_lengths(counts), counts)


def payload_bits(counts: np.ndarray, lengths: np.ndarray) -> int:
    return int((np.asarray(counts, dtype=np.int64) * lengths).sum()) + 32 * int(counts[ESC_SYM])


def bits_per_symbol(counts: np.ndarray, lengths: np.ndarray) -> float:
    """Payload bits per symbol of a histogram under ``lengths`` (0 for no symbols)."""
    total = int(np.asarray(counts).sum())
    return payload_bits(counts, lengths) / total if total else 0.0


def entropy_bits(counts: np.ndarray) -> float:
    """A histogram's order-0 entropy in bits plus its escapes' 32 raw bits each: the fewest payload
    bits any code book can spend on it."""
    c = np.asarray(counts, dtype=np.float64)
    used = c[c > 0]
    return float((used * np.log2(c.sum() / used)).sum() + 32 * c[ESC_SYM])


def covering_lengths(counts: np.ndarray, lmax: int = LMAX) -> np.ndarray:
    """Code lengths (int64, one per symbol of ``counts``) of 1..lmax bits for EVERY symbol, the fewest
    payload bits on ``counts`` among such codes: package-merge (Larmore and Hirschberg's optimal
    length-limited code) with the unseen symbols weighing 0, so they sink to the deepest lengths.
    Needs counts.size <= 2^lmax. Not :func:`book_lengths` of counts + 1: its heuristic limit takes
    the unseen symbols' code space from the common symbols (up to +40% payload over the tensor's own
    book on the CPU test cases, where this costs at most +3.6%)."""
    w = np.asarray(counts, dtype=np.int64)
    n = w.size
    if n > 1 << lmax:
        raise ValueError(f"{n} symbols cannot all have codes of at most {lmax} bits")
    if n == 1:
        return np.ones(1, dtype=np.int64)
    order = np.argsort(w, kind="stable")
    leaves = w[order]
    # lists[j]: which items of the merged list at depth lmax - j are leaves (packages: pairs one deeper)
    lists = [np.ones(n, dtype=bool)]
    items = leaves
    for _ in range(lmax - 1):
        pairs = items[:items.size // 2 * 2].reshape(-1, 2).sum(axis=1)
        merged = np.concatenate([leaves, pairs])
        at = np.argsort(merged, kind="stable")  # ties: leaves first, then by symbol
        items = merged[at]
        lists.append(at < n)
    sorted_lengths = np.zeros(n, dtype=np.int64)
    take = 2 * n - 2
    for is_leaf in reversed(lists):  # depth 1 first: the lightest ``take`` items of each list
        k = int(is_leaf[:take].sum())
        sorted_lengths[:k] += 1  # the leaves taken are the lightest k
        take = 2 * (take - k)
    lengths = np.empty(n, dtype=np.int64)
    lengths[order] = sorted_lengths
    return lengths


def _per_mode(hists: np.ndarray, lengths_of) -> tuple[int, list[np.ndarray], list[int]]:
    """(the mode whose code spends fewer payload bits (ties: DELTA), each mode's code lengths from
    ``lengths_of(histogram)``, each mode's payload bits) for the two modes' histograms (2, NSYM)."""
    books = [lengths_of(h) for h in hists]
    bits = [payload_bits(h, b) for h, b in zip(hists, books)]
    return (DIRECT if bits[DIRECT] < bits[DELTA] else DELTA), books, bits


def choose(hists: np.ndarray) -> tuple[int, np.ndarray]:
    """(mode, code lengths) from the two modes' histograms (2, NSYM): the fewer payload bits."""
    mode, books, _ = _per_mode(hists, book_lengths)
    return mode, books[mode]


def canonical_codes(lengths: np.ndarray) -> np.ndarray:
    """Canonical code (uint32, right-aligned) of every symbol with a length: the j-th symbol in
    (length, symbol) order, of length l, gets first[l] + j - base[l] (decode_tables' numbers)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    t = decode_tables(lengths)
    codes = np.zeros(lengths.size, dtype=np.uint32)
    sym_len = lengths[t.symbols]
    codes[t.symbols] = (t.first[sym_len] + np.arange(t.symbols.size) - t.base[sym_len]).astype(np.uint32)
    return codes


@dataclass(frozen=True)
class DecodeTables:
    """Canonical decode tables: ``limit[l]`` (l = 1..LMAX; index 0 unused) is the first LMAX-bit
    left-aligned window that is not a code of length <= l; a code of length l starting the window
    ``w`` is symbol ``symbols[base[l] + (w >> (LMAX - l)) - first[l]]``."""

    limit: np.ndarray  # int64 (LMAX + 1)
    first: np.ndarray  # int64 (LMAX + 1)
    base: np.ndarray  # int64 (LMAX + 1)
    symbols: np.ndarray  # int32, used symbols by (length, symbol)


def decode_tables(lengths: np.ndarray) -> DecodeTables:
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.max() > LMAX or lengths.min() < 0):
        raise ValueError(f"corrupt stream: code lengths must be 0..{LMAX}")
    count = np.bincount(lengths, minlength=LMAX + 1)[:LMAX + 1]
    count[0] = 0
    if int((count[1:] << (LMAX - np.arange(1, LMAX + 1))).sum()) > 1 << LMAX:
        raise ValueError("corrupt stream: the code lengths break the Kraft inequality")
    first = np.zeros(LMAX + 1, dtype=np.int64)
    base = np.zeros(LMAX + 1, dtype=np.int64)
    limit = np.zeros(LMAX + 1, dtype=np.int64)
    code = idx = 0
    for length in range(1, LMAX + 1):
        code <<= 1
        first[length], base[length] = code, idx
        code += int(count[length])
        idx += int(count[length])
        limit[length] = code << (LMAX - length)
    order = np.lexsort((np.arange(lengths.size), lengths))
    symbols = order[lengths[order] > 0].astype(np.int32)
    return DecodeTables(limit, first, base, symbols)


def _stored(lengths: np.ndarray) -> np.ndarray:
    """A stream's ``lengths``: uint8, up to the largest symbol with a code."""
    used = np.flatnonzero(lengths)
    return lengths[:int(used.max()) + 1 if used.size else 0].astype(np.uint8)


@dataclass(eq=False)
class Book:
    """A code book kept across tensors: its mode and code lengths (NSYM), what compress and
    decompress derive from them once (canonical codes, the stream's stored ``lengths``, decode
    tables), the payload bits per symbol it achieved on the histograms it was built from and each
    mode's redundancy there (that mode's covering code's payload bits per symbol over the entropy's:
    what :meth:`drift` adds to a later histogram's entropy), and its device tensors per device
    (filled by gpu_codec_v4.book_tensors)."""

    mode: int
    lengths: np.ndarray  # int64 (NSYM)
    bits_per_symbol: float = 0.0
    redundancy: tuple[float, float] = (0.0, 0.0)
    codes: np.ndarray = field(init=False)
    stored: np.ndarray = field(init=False)
    tables: DecodeTables = field(init=False)
    device: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"book mode must be one of {MODES}, got {self.mode!r}")
        lengths = np.asarray(self.lengths, dtype=np.int64)
        if lengths.shape != (NSYM,):
            raise ValueError(f"a book has one code length per symbol ({NSYM}), got shape {lengths.shape}")
        self.lengths = lengths
        self.tables = decode_tables(lengths)
        self.codes = canonical_codes(lengths)
        self.stored = _stored(lengths)

    def bits(self, hists: np.ndarray) -> float:
        """Payload bits per symbol this book spends on a tensor's histograms (2, NSYM): a dot product."""
        return bits_per_symbol(hists[self.mode], self.lengths)

    def drift(self, hists: np.ndarray) -> float:
        """This book's payload bits on a tensor's histograms (2, NSYM) over what a book made from them
        would spend, estimated per mode as the entropy plus the mode's redundancy at build, the
        better mode taken (1 on the histograms it was built from; tens of microseconds, no Huffman
        code)."""
        fresh = min(entropy_bits(h) + r * int(h.sum()) for h, r in zip(hists, self.redundancy))
        return payload_bits(hists[self.mode], self.lengths) / fresh if fresh > 0 else 1.0

    def check_covers(self, counts: np.ndarray) -> None:
        """ValueError if a symbol of ``counts`` has no code in this book."""
        missing = np.flatnonzero((np.asarray(counts) > 0) & (self.lengths == 0))
        if missing.size:
            raise ValueError(f"the code book has no code for {missing.size} symbols of the tensor (first: "
                             f"{int(missing[0])}); use a covering book (make_book)")


def make_book(hists: np.ndarray) -> Book:
    """The covering book (every symbol a code, :func:`covering_lengths`) of a tensor's two histograms
    (2, NSYM): the mode whose covering code spends fewer payload bits (ties: DELTA)."""
    hists = np.asarray(hists, dtype=np.int64)
    mode, books, bits = _per_mode(hists, covering_lengths)
    redundancy = tuple((b - entropy_bits(h)) / max(int(h.sum()), 1) for h, b in zip(hists, bits))
    return Book(mode, books[mode], bits_per_symbol(hists[mode], books[mode]), redundancy)


def _codes(blocks: np.ndarray, eb32: np.float32, mode: int) -> tuple[np.ndarray, np.ndarray]:
    """(z uint32 (nb, BLOCK), raw bool (nb)) of the format's steps 1-2."""
    q, ok = codec.quantize(blocks, eb32)
    raw = ~ok.all(axis=1)
    q[raw] = 0
    d = np.diff(q, axis=1, prepend=0).astype(np.int32) if mode == DELTA else q
    return codec.zigzag(d), raw


@dataclass
class Symbols:
    """Every coded block's symbols in stream order: block, symbol, and the escape's raw z (or 0)."""

    block: np.ndarray  # int64
    sym: np.ndarray  # int64
    extra: np.ndarray  # uint32 (the raw 32 bits after an escape)


def symbols(z: np.ndarray, coded: np.ndarray) -> Symbols:
    """The symbols (format step 3) of the rows of z where ``coded``."""
    rows = np.flatnonzero(coded)
    zc = z[rows]
    width = BLOCK + 1  # each row and a zero-run sentinel
    nz_b, nz_i = np.nonzero(zc)
    vals = zc[nz_b, nz_i]
    nz_sym = np.minimum(vals, ESC).astype(np.int64) + 1
    nz_extra = np.where(vals >= ESC, vals, 0).astype(np.uint32)
    lengths, starts = entropy.zero_runs(zc), _run_starts(zc)
    ndig = np.floor(np.log2(lengths + 1)).astype(np.int64)
    run_id = np.repeat(np.arange(lengths.size), ndig)
    k = np.arange(run_id.size) - np.repeat(np.cumsum(ndig) - ndig, ndig)
    digit_bit = ((lengths[run_id] + 1) >> k) & 1  # digit k: RUNB if bit k of L + 1 is set
    run_b, run_i = np.divmod(starts[run_id], width)
    key = np.concatenate([(nz_b * width + nz_i) * 64, (run_b * width + run_i) * 64 + k])
    order = np.argsort(key, kind="stable")
    block = np.concatenate([nz_b, run_b])[order]
    sym = np.concatenate([nz_sym, np.where(digit_bit == 1, RUNB, RUNA)])[order]
    extra = np.concatenate([nz_extra, np.zeros(run_id.size, dtype=np.uint32)])[order]
    return Symbols(rows[block], sym, extra)


def _run_starts(zc: np.ndarray) -> np.ndarray:
    """Flat index (row * (BLOCK + 1) + position) where each maximal zero run starts (entropy.zero_runs' order)."""
    zero = np.zeros((zc.shape[0], zc.shape[1] + 1), dtype=np.int8)
    zero[:, :-1] = zc == 0
    prev = np.zeros_like(zero)
    prev[:, 1:] = zero[:, :-1]
    return np.flatnonzero((zero == 1) & (prev == 0))


def histogram(s: Symbols) -> np.ndarray:
    return np.bincount(s.sym, minlength=NSYM).astype(np.int64)


def _prepare(x, eb: float):
    x = codec._as_float32(x)
    eb32 = codec.check_eb(eb)
    codec.check_finite(x)
    if x.size >= 2**31:
        raise ValueError(f"codec v4 takes fewer than 2^31 values, got {x.size}")
    return x, eb32, codec._blocks(x)


def compress(x, eb: float, book: Book | None = None) -> CompressedV4:
    """Compress float32 data (any shape, flattened in C order) with absolute error bound eb: with the
    tensor's own code book, or with ``book`` (its mode and lengths; it must have a code for every
    symbol the tensor has, as a covering book does)."""
    return encode(x, eb, book)[0]


def encode(x, eb: float, book: Book | None = None) -> tuple[CompressedV4, np.ndarray]:
    """(compress's stream, both modes' symbol histograms (2, NSYM) int64): what the GPU's
    histogram launch counts, for a book's drift check and for building the next book."""
    x, eb32, blocks = _prepare(x, eb)
    nb = blocks.shape[0]
    per_mode = []
    for mode in MODES:
        z, raw = _codes(blocks, eb32, mode)
        coded = ~raw & (z != 0).any(axis=1)
        per_mode.append((z, raw, coded, symbols(z, coded)))
    hists = np.stack([histogram(m[3]) for m in per_mode])
    if book is None:
        mode, lengths = choose(hists)
        codes, stored = canonical_codes(lengths), _stored(lengths)
    else:
        book.check_covers(hists[book.mode])
        mode, lengths, codes, stored = book.mode, book.lengths, book.codes, book.stored
    z, raw, coded, s = per_mode[mode]
    # every symbol's bits, then the escapes' raw 32 bits as their own items (right after their symbol)
    esc = s.sym == ESC_SYM
    item_block = np.concatenate([s.block, s.block[esc]])
    item_len = np.concatenate([lengths[s.sym], np.full(int(esc.sum()), 32, dtype=np.int64)])
    item_val = np.concatenate([codes[s.sym], s.extra[esc]]).astype(np.uint64)
    item_key = np.concatenate([np.arange(s.sym.size) * 2, np.flatnonzero(esc) * 2 + 1])
    order = np.argsort(item_key, kind="stable")
    item_block, item_len, item_val = item_block[order], item_len[order], item_val[order]
    bits = np.bincount(item_block, weights=item_len, minlength=nb).astype(np.int64)
    words = -(-bits // 32)
    too_big = words >= RAW_WORDS
    raw = raw | too_big
    words = np.where(raw, RAW_WORDS, words)
    offsets = np.concatenate([[0], np.cumsum(words)]).astype(np.int64)
    if offsets[-1] >= 2**32:
        raise ValueError("codec v4: the payload passes 2^32 words")
    payload = np.zeros(int(offsets[-1]), dtype=np.uint32)
    keep = ~too_big[item_block]
    item_block, item_len, item_val = item_block[keep], item_len[keep], item_val[keep]
    start = np.cumsum(item_len) - item_len  # bit position inside the block: subtract the block's first item's
    first_item = np.searchsorted(item_block, np.arange(nb))
    start -= np.concatenate([start, [0]])[first_item][item_block]
    pos = offsets[item_block] * 32 + start
    shift = (64 - item_len - (pos & 31)).astype(np.uint64)
    both = item_val << shift  # the item left-aligned in the 64 bits of words pos // 32 and the next
    word = pos >> 5
    acc = np.bincount(word, weights=(both >> np.uint64(32)).astype(np.float64), minlength=payload.size + 1)
    acc += np.bincount(word + 1, weights=(both & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=payload.size + 1)
    payload[:] = acc[:payload.size].astype(np.uint64).astype(np.uint32)  # fields are disjoint: sum = or (< 2^53)
    raw_idx = np.flatnonzero(raw)
    if raw_idx.size:
        payload[offsets[raw_idx][:, None] + np.arange(RAW_WORDS)] = blocks[raw_idx].view(np.uint32)
    return CompressedV4(n=x.size, eb=float(eb32), mode=mode, lengths=stored, offsets=offsets.astype(np.uint32),
                        payload=payload, book=book), hists


def check_stream(c: CompressedV4, payload_words: int) -> np.ndarray:
    """The stream's block word offsets (int64), or ValueError."""
    nb = codec.nblocks(c.n)
    offsets = np.asarray(c.offsets).view(np.uint32).astype(np.int64)
    if offsets.size != nb + 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any():
        raise ValueError(f"corrupt stream: {offsets.size} offsets for n = {c.n} ({nb} blocks), need {nb + 1} "
                         f"nondecreasing from 0")
    if offsets[-1] != payload_words:
        raise ValueError(f"corrupt stream: offsets need {int(offsets[-1])} payload words, got {payload_words}")
    if c.mode not in MODES:
        raise ValueError(f"corrupt stream: mode {c.mode}")
    if (np.diff(offsets) > RAW_WORDS).any():
        raise ValueError(f"corrupt stream: a block of more than {RAW_WORDS} words")
    return offsets


def stream_tables(c: CompressedV4) -> DecodeTables:
    """The decode tables of a stream's lengths: its book's when it carries one (whose lengths must be
    the stream's), else built from them."""
    if c.book is None:
        return decode_tables(np.asarray(c.lengths))
    if c.lengths is not c.book.stored and not np.array_equal(np.asarray(c.lengths), c.book.stored):
        raise ValueError("corrupt stream: its code lengths are not its book's")
    return c.book.tables


def decode_z(c: CompressedV4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z uint32 (nb, BLOCK), raw bool, offsets) of a stream: all coded blocks decoded in lockstep,
    one symbol per block per step."""
    payload = np.asarray(c.payload).view(np.uint32)
    offsets = check_stream(c, payload.size)
    nb = offsets.size - 1
    sizes = np.diff(offsets)
    raw = sizes == RAW_WORDS
    z = np.zeros((nb, BLOCK), dtype=np.uint32)
    active = np.flatnonzero((sizes > 0) & ~raw)
    if active.size == 0:
        return z, raw, offsets
    t = stream_tables(c)
    padded = np.concatenate([payload, np.zeros(2, dtype=np.uint32)]).astype(np.uint64)
    bitpos = offsets[active] * 32
    end = offsets[active + 1] * 32
    pos = np.zeros(active.size, dtype=np.int64)  # next value index in the block
    k = np.zeros(active.size, dtype=np.int64)  # digit index inside the current zero run
    mask = (1 << 64) - 1

    def peek(bp, nbits):
        w = bp >> 5
        both = (padded[w] << np.uint64(32)) | padded[w + 1]
        return ((both << (bp & 31).astype(np.uint64)) & np.uint64(mask)) >> np.uint64(64 - nbits)

    while active.size:
        window = peek(bitpos, LMAX).astype(np.int64)
        length = np.searchsorted(t.limit[1:], window, side="right") + 1
        if (length > LMAX).any():
            raise ValueError("corrupt stream: bits that are no code")
        sym = t.symbols[t.base[length] + (window >> (LMAX - length)) - t.first[length]].astype(np.int64)
        bitpos += length
        run = sym <= RUNB
        pos += np.where(run, (sym + 1) << k, 0)
        k = np.where(run, k + 1, 0)
        lit = ~run
        val = np.where(sym == ESC_SYM, 0, sym - 1).astype(np.uint32)
        is_esc = sym == ESC_SYM
        if is_esc.any():
            val[is_esc] = peek(bitpos[is_esc], 32).astype(np.uint32)
            bitpos[is_esc] += 32
        if (pos[lit] >= BLOCK).any() or (pos > BLOCK).any() or (bitpos > end).any():
            raise ValueError("corrupt stream: a block's symbols pass its values or its words")
        z[active[lit], pos[lit]] = val[lit]
        pos += lit
        done = pos == BLOCK
        if done.any():
            keep = ~done
            active, bitpos, end, pos, k = active[keep], bitpos[keep], end[keep], pos[keep], k[keep]
    return z, raw, offsets


def decompress(c: CompressedV4) -> np.ndarray:
    """The flat float32 values of a v4 stream (each within c.eb of the input)."""
    z, raw, offsets = decode_z(c)
    d = codec.unzigzag(z)
    q = np.cumsum(d, axis=1, dtype=np.int32) if c.mode == DELTA else d
    out = codec.dequantize(q, codec.step_of(np.float32(c.eb)))
    raw_idx = np.flatnonzero(raw)
    if raw_idx.size:
        payload = np.asarray(c.payload).view(np.uint32)
        out[raw_idx] = payload[offsets[raw_idx][:, None] + np.arange(RAW_WORDS)].view(np.float32)
    return out.reshape(-1)[:c.n]
