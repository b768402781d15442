"""Codec v4 on the GPU: the format of :mod:`repro.papers.comet.codec_v4` on torch CUDA tensors.

    c = compress(t, eb)          # t: float32 CUDA tensor (any shape; flattened in memory order)
    flat = decompress(c)         # float32 CUDA tensor of c.n values, each within eb of t
    c, hists = encode(t, eb, book=book)  # coded with a cached codec_v4.Book; the histograms come back

Kernels (kernels/comet_huffman.cu, one thread per block of 1,024 values) run on torch's current
stream, loaded as v3's are (:func:`repro.kernels.function`: the pipeline's cubin, ``kernels_dir``,
else $REPRO_KERNELS_DIR, else results/build/kernels). Compress with the tensor's own book: the
histogram launch (both modes), one host sync (the histograms and the NaN/Inf count: refused with
ValueError), the code book built on the host (codec_v4.choose, the twin's function), the sizes
launch, a device scan (torch.cumsum) into the block offsets, one more host sync for the payload's
size, and the pack launch. With a cached book (a covering one, codec_v4.make_book, codes any
tensor): the histogram launch, the sizes launch with the book's device tensors (made once per
device, :func:`book_tensors`), the scan, ONE host sync (a single D2H copy of the histograms, the
NaN/Inf count and the payload's size together), the pack launch: no Huffman construction and no
host-to-device copy per tensor; the histograms still come back for the caller's drift check.
Decompress: one launch (the decode tables go with it: the stream's book's device tables when it
carries one, else built from its lengths). Flat input only (a channels-last tensor is copied into
NCHW order by the caller, hooks.dense_flat); there is no arena (sync-free) path yet.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from repro.papers.comet import codec_v4, gpu_codec
from repro.papers.comet.codec import nblocks
from repro.papers.comet.codec_v4 import CompressedV4

THREADS = 128  # comet_huffman.cu's V4_THREADS
_NAMES = ("comet_v4_histogram", "comet_v4_sizes", "comet_v4_pack", "comet_v4_decode")


def _functions(device: int, kernels_dir: Path | None) -> dict:
    return gpu_codec._functions(device, kernels_dir, "comet_huffman", _NAMES)


def _grid(nb: int) -> int:
    return max(1, -(-nb // THREADS))


def _tensor(a: np.ndarray, dtype, device):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)


def book_tensors(book: codec_v4.Book, device) -> dict:
    """The book's device tensors on ``device``, made on first use and kept in ``book.device``: lens
    (uint8, NSYM), codes (int32, NSYM), tables (int32: limit, first, base), symbols (int32, + 1 pad)."""
    import torch

    device = torch.device(device)
    key = (device.type, device.index)
    if key not in book.device:
        tables, symbols = _decode_tensors(book.tables, device)
        book.device[key] = dict(lens=_tensor(book.lengths.astype(np.uint8), torch.uint8, device),
                                codes=_tensor(book.codes.view(np.int32), torch.int32, device),
                                tables=tables, symbols=symbols)
    return book.device[key]


def _decode_tensors(t: codec_v4.DecodeTables, device) -> tuple:
    """The decode kernel's tables on ``device``: (limit, first, base as one int32 tensor, the symbols
    in code order as int32 with one pad)."""
    import torch

    return (_tensor(np.concatenate([t.limit, t.first, t.base]).astype(np.int32), torch.int32, device),
            _tensor(np.concatenate([t.symbols, [0]]).astype(np.int32), torch.int32, device))


def _refuse_non_finite(flat, flags: int) -> None:
    import torch

    if flags:
        count = int((~torch.isfinite(flat)).sum())
        raise ValueError(f"cannot compress non-finite values: {count} NaN/Inf in a tensor of {flat.numel()}")


def compress(t, eb: float, kernels_dir: Path | None = None, book: codec_v4.Book | None = None) -> CompressedV4:
    """The v4 stream of a float32 CUDA tensor (flattened in memory order; see gpu_codec.flat_input),
    with its own code book or with ``book``."""
    return encode(t, eb, kernels_dir, book)[0]


def encode(t, eb: float, kernels_dir: Path | None = None,
           book: codec_v4.Book | None = None) -> tuple[CompressedV4, np.ndarray]:
    """(compress's stream, both modes' symbol histograms (2, NSYM) int64 on the host). With ``book``
    the stream is coded with it (it must have a code for every symbol of the tensor: ValueError
    otherwise) after one host sync, and carries it (decompress reuses its device tables)."""
    import torch

    flat = gpu_codec.flat_input(t)
    eb32, step, inv = gpu_codec.quantizer(float(eb))
    n, device = flat.numel(), flat.device
    if n >= 2**31 - codec_v4.BLOCK:
        raise ValueError(f"codec v4 takes fewer than 2^31 - {codec_v4.BLOCK} values, got {n}")
    nb = nblocks(n)
    offsets = torch.zeros(nb + 1, dtype=torch.int64, device=device)
    nsym = codec_v4.NSYM
    if n == 0:
        mode, stored = (codec_v4.DELTA, np.zeros(0, np.uint8)) if book is None else (book.mode, book.stored)
        return CompressedV4(n, float(eb32), mode, stored, offsets.to(torch.int32),
                            torch.empty(0, dtype=torch.int32, device=device), book), np.zeros((2, nsym), np.int64)
    fns, dev = _functions(device.index, kernels_dir), device.index
    quant = (np.uint64(flat.data_ptr()), np.int64(n), np.float32(step), np.float32(inv), np.float32(eb32),
             np.int64(nb))
    info = torch.zeros(2 * nsym + 2, dtype=torch.int32, device=device)  # histograms, NaN/Inf blocks, payload words
    gpu_codec._launch(fns["comet_v4_histogram"], dev, _grid(nb),
                      (*quant, np.uint64(info.data_ptr()), np.uint64(info.data_ptr() + 8 * nsym)), THREADS)
    words = torch.empty(nb, dtype=torch.int32, device=device)

    def sizes(mode: int, lens) -> None:
        gpu_codec._launch(fns["comet_v4_sizes"], dev, _grid(nb),
                          (*quant, np.int32(mode), np.uint64(lens.data_ptr()), np.uint64(words.data_ptr())), THREADS)
        offsets[1:] = torch.cumsum(words, 0, dtype=torch.int64)  # the device scan

    if book is None:
        host = info.cpu().numpy().view(np.uint32).astype(np.int64)  # sync 1
        _refuse_non_finite(flat, host[2 * nsym])
        hists = host[:2 * nsym].reshape(2, nsym)
        mode, lengths = codec_v4.choose(hists)
        lens = _tensor(lengths.astype(np.uint8), torch.uint8, device)
        codes = _tensor(codec_v4.canonical_codes(lengths).view(np.int32), torch.int32, device)
        stored = codec_v4._stored(lengths)
        sizes(mode, lens)
        total = int(offsets[-1])  # sync 2
    else:
        dt = book_tensors(book, device)
        mode, lens, codes, stored = book.mode, dt["lens"], dt["codes"], book.stored
        sizes(mode, lens)
        info[-1:] = offsets[-1:]  # < 2^31 words: n < 2^31 - BLOCK
        host = info.cpu().numpy().view(np.uint32).astype(np.int64)  # the one sync
        _refuse_non_finite(flat, host[2 * nsym])
        hists = host[:2 * nsym].reshape(2, nsym)
        book.check_covers(hists[mode])
        total = int(host[-1])
    offsets = offsets.to(torch.int32)  # uint32 offsets (total < 2^31: n < 2^31 - BLOCK)
    payload = torch.empty(total, dtype=torch.int32, device=device)
    gpu_codec._launch(fns["comet_v4_pack"], dev, _grid(nb),
                      (*quant, np.int32(mode), np.uint64(codes.data_ptr()), np.uint64(lens.data_ptr()),
                       np.uint64(offsets.data_ptr()), np.uint64(payload.data_ptr())), THREADS)
    return CompressedV4(n, float(eb32), mode, stored, offsets, payload, book), hists


def decompress(c: CompressedV4, out=None, kernels_dir: Path | None = None):
    """The c.n float32 values of a v4 stream on the GPU (offsets/payload CUDA tensors, lengths NumPy):
    a new flat tensor, or written into ``out`` (contiguous float32 of c.n values). A stream that
    carries its book decodes with the book's device tables (its lengths must be the book's)."""
    import torch

    device = c.payload.device
    nb = nblocks(c.n)
    if c.offsets.numel() != nb + 1:
        raise ValueError(f"corrupt stream: {c.offsets.numel()} offsets for n = {c.n} ({nb} blocks)")
    if out is None:
        out = torch.empty(c.n, dtype=torch.float32, device=device)
    elif out.dtype != torch.float32 or not out.is_contiguous() or out.numel() != c.n:
        raise ValueError(f"out must be a contiguous float32 tensor of {c.n} values")
    if c.n == 0:
        return out
    t = codec_v4.stream_tables(c)
    if c.book is None:
        tables, symbols = _decode_tensors(t, device)
    else:
        dt = book_tensors(c.book, device)
        tables, symbols = dt["tables"], dt["symbols"]
    step = gpu_codec.quantizer(float(c.eb))[1]
    gpu_codec._launch(_functions(device.index, kernels_dir)["comet_v4_decode"], device.index, _grid(nb),
                      (np.uint64(c.payload.data_ptr()), np.uint64(c.offsets.data_ptr()), np.int64(nb), np.int64(c.n),
                       np.int32(c.mode), np.float32(step), np.uint64(tables.data_ptr()),
                       np.uint64(symbols.data_ptr()), np.int32(t.symbols.size), np.uint64(out.data_ptr())), THREADS)
    return out


def to_cpu(c: CompressedV4) -> CompressedV4:
    """The same stream with NumPy arrays (for codec_v4.decompress and stream comparisons)."""
    return CompressedV4(c.n, c.eb, c.mode, np.asarray(c.lengths), c.offsets.cpu().numpy().view(np.uint32),
                        c.payload.cpu().numpy().view(np.uint32), c.book)


def to_gpu(c: CompressedV4, device) -> CompressedV4:
    """A NumPy (twin) stream on the GPU, for the GPU decoder."""
    import torch

    return CompressedV4(c.n, c.eb, c.mode, np.asarray(c.lengths),
                        _tensor(np.asarray(c.offsets).view(np.int32), torch.int32, device),
                        _tensor(np.asarray(c.payload).view(np.int32), torch.int32, device), c.book)


__all__ = ["book_tensors", "compress", "decompress", "encode", "to_cpu", "to_gpu"]
