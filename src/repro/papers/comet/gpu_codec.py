"""The GPU codec: the format of :mod:`repro.papers.comet.codec` on torch CUDA tensors, one pass each way.

    c = compress(t, eb)          # t: float32 CUDA tensor (any shape; flattened in memory order)
    flat = decompress(c)         # float32 CUDA tensor of c.n values, each within eb of t

Kernels (kernels/comet_codec.cu) run on torch's current stream, from the cubin that the
pipeline's kernel build makes (`kernels_dir` argument, else $REPRO_KERNELS_DIR, else
results/build/kernels). Two ways to compress:

- ``launch_compress(src, eb, slot)``: one launch into a caller's buffer (a step's payload arena,
  :mod:`repro.papers.comet.arena`): no host sync, no allocation, capturable in a CUDA graph. Sizes stay
  on the device; a payload that does not fit the buffer is flagged there, never written past it.
- ``compress(t, eb)`` / ``compress_source``: an exact-size stream, for callers that need the true
  size on the host (tests, the memory-exact training mode): a dry run of the same kernel with no
  payload capacity (it writes widths, anchors and the total size), one host sync that reads the
  size and the count of NaN/Inf blocks (refused with ValueError), the payload allocated at its
  size, and the real run. The input's memory is really freed once the caller drops it.

``decompress`` is one launch (and the output allocation); it reads the tile starts that compress
wrote (GPU streams hold them: 8 bytes per 8 blocks, counted in ``nbytes``) or, for a stream made
by the NumPy codec, computes them from the widths.

A ``Source`` says how the kernels read a tensor: a flat dense view, or a channels-last 4-D tensor
read in its logical NCHW order directly (``Source.nhwc``; decompressed straight into a
channels-last tensor), which saves the hooks' two copies per saved tensor.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from repro import kernels
from repro.papers.comet import buffers
from repro.papers.comet.codec import BLOCK, Compressed, check_eb, nblocks, recip_of, step_of

THREADS = 32 * buffers.TILE_BLOCKS
MIN_HW = 32  # comet_codec.cu's MIN_HW: the channels-last kernels' smallest H * W
INT32_LIMIT = 2**31
_NAMES = ("comet_compress", "comet_compress_nhwc", "comet_decompress", "comet_decompress_nhwc")


_FUNCTIONS: dict = {}


def _functions(device: int, kernels_dir: Path | None, stem: str = "comet_codec", names=_NAMES) -> dict:
    """The kernels ``names`` of ``<stem>.cubin`` on ``device`` by name (v4's: stem comet_huffman)."""
    key = (device, kernels_dir, stem)
    if key not in _FUNCTIONS:
        _FUNCTIONS[key] = {name: kernels.function(stem, name, device, kernels_dir) for name in names}
    return _FUNCTIONS[key]


def _launch(fn, device: int, grid: int, args, threads: int = THREADS) -> None:
    import cupy

    with cupy.cuda.Device(device), kernels.launch_stream(True, device):
        fn((grid, 1, 1), (threads, 1, 1), args)


@dataclass(frozen=True)
class Source:
    """The values the kernels compress: ``tensor`` read flat (``nhwc`` False: a dense, 16-byte
    aligned float32 view) or as a channels-last (N, C, H, W) tensor in NCHW order."""

    tensor: Any
    n: int
    nhwc: bool = False
    channels: int = 0
    hw: int = 0

    @staticmethod
    def flat(t) -> Source:
        flat = flat_input(t)
        return Source(flat, flat.numel())

    @staticmethod
    def nhwc_fits(t) -> bool:
        """Whether t is a channels-last 4-D CUDA float32 tensor the channels-last kernels take."""
        import torch

        return (isinstance(t, torch.Tensor) and t.device.type == "cuda" and t.dtype == torch.float32 and t.dim() == 4
                and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
                and t.shape[2] * t.shape[3] >= MIN_HW and 0 < t.numel() < INT32_LIMIT)

    @staticmethod
    def nhwc_of(t, checked: bool = False) -> Source:
        """``checked``: the caller has seen nhwc_fits(t) hold."""
        if not (checked or Source.nhwc_fits(t)):
            raise ValueError(f"the channels-last kernels take a channels-last (N, C, H, W) float32 CUDA tensor with "
                             f"H * W >= {MIN_HW} and < 2^31 values, got shape {tuple(t.shape)}, strides {t.stride()}, "
                             f"{t.dtype}")
        return Source(t, t.numel(), True, t.shape[1], t.shape[2] * t.shape[3])


class Slot(NamedTuple):
    """Device addresses of one compressed tensor's arrays (and its scratch) inside buffers that
    ``owner`` keeps alive."""

    n: int
    eb: float
    widths: int
    anchors: int
    starts: int
    payload: int
    capacity: int  # payload words of the buffer (shared by an arena's slots)
    bases: int  # int64 pair: [where this slot's payload starts, where the next one starts]
    flags: int
    counter: int
    status: int
    owner: Any


def flat_input(t):
    """t as a flat float32 CUDA tensor in memory order (a view when dense), or ValueError."""
    import torch

    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        raise ValueError(f"the GPU codec takes a torch CUDA tensor, got {type(t).__name__} on "
                         f"{getattr(t, 'device', 'host')}")
    if t.dtype != torch.float32:
        raise ValueError(f"the compressor takes float32 data, got {t.dtype}")
    flat = t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)
    if flat.data_ptr() % 16:
        flat = flat.clone()  # float4 loads need 16-byte alignment
    return flat


@functools.lru_cache(maxsize=4096)
def quantizer(eb: float) -> tuple[np.float32, np.float32, np.float32]:
    """(eb, step, 1 / step) as float32, as the kernels get them; ValueError for a bad eb."""
    eb32 = check_eb(eb)
    step = step_of(eb32)
    return eb32, step, recip_of(step)


def launch_compress(src: Source, eb: float, slot: Slot, max_words: int = 0, kernels_dir: Path | None = None) -> None:
    """Compress ``src`` into ``slot`` with one launch (no sync). The slot's scratch must be zeroed
    (bases[0]: where its payload starts). ``max_words``: address of an int64 the kernel raises to
    this payload's size (0: none)."""
    eb32, step, inv = quantizer(float(eb))
    device = src.tensor.device.index
    fn = _functions(device, kernels_dir)["comet_compress_nhwc" if src.nhwc else "comet_compress"]
    nb = nblocks(src.n)
    _launch(fn, device, buffers.ntiles(nb),
            (np.uint64(src.tensor.data_ptr()), np.int64(src.n), np.int32(src.channels), np.int32(src.hw),
             np.float32(step), np.float32(inv), np.float32(eb32), np.uint64(slot.widths), np.uint64(slot.anchors),
             np.uint64(slot.starts), np.uint64(slot.payload), np.int64(slot.capacity), np.uint64(slot.bases),
             np.uint64(slot.flags), np.uint64(slot.counter), np.uint64(slot.status), np.uint64(max_words),
             np.int64(nb)))


def launch_decompress(slot: Slot, out, nhwc: bool, kernels_dir: Path | None = None) -> None:
    """Decompress ``slot`` into ``out`` (flat, or channels-last in NCHW order when ``nhwc``), one launch."""
    device = out.device.index
    fn = _functions(device, kernels_dir)["comet_decompress_nhwc" if nhwc else "comet_decompress"]
    nb = nblocks(slot.n)
    channels, hw = (out.shape[1], out.shape[2] * out.shape[3]) if nhwc else (0, 0)
    _launch(fn, device, buffers.ntiles(nb),
            (np.uint64(slot.payload), np.int64(slot.capacity), np.uint64(slot.widths), np.uint64(slot.anchors),
             np.uint64(slot.starts), np.float32(step_of(np.float32(slot.eb))), np.uint64(out.data_ptr()),
             np.int64(slot.n), np.int32(channels), np.int32(hw), np.int64(nb)))


def _scratch(n: int, device):
    """A zeroed one-slot scratch buffer and its layout."""
    import torch

    lay = buffers.layout((n,), (0,))
    return torch.zeros(lay.scratch_bytes, dtype=torch.uint8, device=device), lay


def compress_source(src: Source, eb: float, kernels_dir: Path | None = None) -> Compressed:
    """The exact-size stream of ``src`` (see the module doc: two launches, one host sync)."""
    import torch

    eb32, _, _ = quantizer(float(eb))
    n, device = src.n, src.tensor.device
    nb = nblocks(n)
    widths = torch.empty(nb, dtype=torch.uint8, device=device)
    anchors = torch.empty(nb, dtype=torch.int32, device=device)
    starts = torch.empty(buffers.ntiles(nb), dtype=torch.int64, device=device)
    if n == 0:
        return Compressed(n=0, eb=float(eb32), widths=widths, anchors=anchors,
                          payload=torch.empty(0, dtype=torch.int32, device=device), tile_starts=starts)
    scratch, lay = _scratch(n, device)
    base = scratch.data_ptr()

    def slot(payload: int, capacity: int) -> Slot:
        return Slot(n, float(eb32), widths.data_ptr(), anchors.data_ptr(), starts.data_ptr(), payload, capacity,
                    base + lay.bases, base + lay.flags, base + lay.counters, base + lay.status[0], scratch)

    launch_compress(src, eb32, slot(0, 0), kernels_dir=kernels_dir)  # dry run: sizes only
    _, words, flags = scratch[:24].view(torch.int64).tolist()  # the one host sync: bases[0..1], flags
    if flags >> 32:
        count = int((~torch.isfinite(src.tensor)).sum())
        raise ValueError(f"cannot compress non-finite values: {count} NaN/Inf in a tensor of {n}")
    payload = torch.empty(words, dtype=torch.int32, device=device)
    scratch.zero_()
    launch_compress(src, eb32, slot(payload.data_ptr(), words), kernels_dir=kernels_dir)
    return Compressed(n=n, eb=float(eb32), widths=widths, anchors=anchors, payload=payload, tile_starts=starts)


def compress(t, eb: float, kernels_dir: Path | None = None) -> Compressed:
    """Compress a float32 CUDA tensor (flattened in memory order; see flat_input), exact size."""
    return compress_source(Source.flat(t), eb, kernels_dir)


def tile_starts(widths):
    """The payload word where each tile of TILE_BLOCKS blocks begins, from the block widths (int64)."""
    import torch

    nb = widths.numel()
    nt = buffers.ntiles(nb)
    words = torch.zeros(nt * buffers.TILE_BLOCKS, dtype=torch.int64, device=widths.device)
    words[:nb] = widths.to(torch.int64) * 32
    per_tile = words.view(nt, buffers.TILE_BLOCKS).sum(1)
    return torch.cumsum(per_tile, 0) - per_tile


def slot_of(c: Compressed) -> Slot:
    """The device addresses of a stream's arrays (decompression's view of it)."""
    starts = c.tile_starts if c.tile_starts is not None else tile_starts(c.widths)
    return Slot(c.n, c.eb, c.widths.data_ptr(), c.anchors.data_ptr(), starts.data_ptr(), c.payload.data_ptr(),
                c.payload.numel(), 0, 0, 0, 0, (c, starts))


def check_stream(c: Compressed) -> None:
    nb = nblocks(c.n)
    if c.widths.numel() != nb or c.anchors.numel() != nb:
        raise ValueError(f"corrupt stream: {c.widths.numel()} block widths and {c.anchors.numel()} anchors for "
                         f"n = {c.n} ({nb} blocks)")


def output_for(n: int, out, device):
    """(out, nhwc): a new flat tensor, or the caller's ``out`` (flat dense, or channels-last 4-D)."""
    import torch

    if out is None:
        return torch.empty(n, dtype=torch.float32, device=device), False
    if out.numel() == n and Source.nhwc_fits(out):
        return out, True
    if out.dtype != torch.float32 or not out.is_contiguous() or out.numel() != n or out.data_ptr() % 16:
        raise ValueError(f"out must be a contiguous, 16-byte aligned float32 tensor of {n} values, or a channels-last "
                         f"(N, C, H, W) one with H * W >= {MIN_HW}")
    return out, False


def decompress(c: Compressed | Slot, out=None, kernels_dir: Path | None = None):
    """The c.n float32 values: a new flat CUDA tensor, or written into ``out`` (flat, or a
    channels-last tensor that receives them in NCHW order; required for a Slot)."""
    if isinstance(c, Compressed):
        check_stream(c)
        device = c.widths.device
    elif out is None:
        raise ValueError("decompressing a buffer slot needs out (the slot does not know its device)")
    else:
        device = out.device
    out, nhwc = output_for(c.n, out, device)
    if c.n:
        launch_decompress(slot_of(c) if isinstance(c, Compressed) else c, out, nhwc, kernels_dir)
    return out


def to_cpu(c: Compressed) -> Compressed:
    """The same stream with NumPy arrays (for codec.decompress and stream comparisons)."""
    return Compressed(n=c.n, eb=c.eb, widths=c.widths.cpu().numpy(), anchors=c.anchors.cpu().numpy(),
                      payload=c.payload.cpu().numpy().view(np.uint32))


__all__ = ["BLOCK", "Slot", "Source", "compress", "compress_source", "decompress", "flat_input", "launch_compress",
           "launch_decompress", "to_cpu"]
