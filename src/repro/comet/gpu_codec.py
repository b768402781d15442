"""The GPU codec: the format of :mod:`repro.comet.codec`, on torch CUDA tensors, without copies.

    c = compress(t, eb)          # t: float32 CUDA tensor (any shape; flattened in memory order)
    flat = decompress(c)         # float32 CUDA tensor of c.n values, each within eb of t

(The training hooks hand it each activation flattened in logical NCHW order by default, a copy
for a channels-last tensor: hooks.dense_flat.)

Kernels (kernels/comet_codec.cu) run on torch's current stream, from the cubin that the
pipeline's kernel build makes (`kernels_dir` argument, else $REPRO_KERNELS_DIR, else
results/build/kernels). compress() makes three launches (widths, an in-place scan, pack) and one
host sync: it reads one number, the last scan key, which holds both the payload size and the
count of NaN/Inf blocks, so that the payload is allocated at its true size and the input's memory
is really freed once the caller drops it. That sync waits for the stream to drain, which matters
in training (one per saved activation). decompress() makes two launches (scan, unpack) and no
sync. Every torch call is a launch or an allocation that costs CPU time per saved tensor, so both
keep them to the minimum. Transient memory: 8 bytes per 1024-value block (scan keys) during a call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from repro import kernels
from repro.comet.codec import BLOCK, Compressed, check_eb, nblocks, step_of

WARPS_PER_CTA = 8
_END_BITS = 40  # comet_codec.cu's COMET_END_MASK: scan keys carry block ends below, NaN/Inf blocks above


def _functions(device: int, kernels_dir: Path | None) -> dict:
    return {name: kernels.function("comet_codec", name, device, kernels_dir)
            for name in ("comet_widths", "comet_pack", "comet_unpack")}


def _grid(nb: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    return (-(-nb // WARPS_PER_CTA), 1, 1), (32 * WARPS_PER_CTA, 1, 1)


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


def _launch(fn, device: int, grid, block, args) -> None:
    import cupy

    with cupy.cuda.Device(device), kernels.launch_stream(True, device):
        fn(grid, block, args)


def compress(t, eb: float, kernels_dir: Path | None = None) -> Compressed:
    """Compress a float32 CUDA tensor (flattened in memory order; see flat_input)."""
    import torch

    flat = flat_input(t)
    eb32 = check_eb(eb)
    n, device = flat.numel(), flat.device
    nb = nblocks(n)
    widths = torch.empty(nb, dtype=torch.uint8, device=device)
    anchors = torch.empty(nb, dtype=torch.int32, device=device)
    if n == 0:
        return Compressed(n=0, eb=float(eb32), widths=widths, anchors=anchors,
                          payload=torch.empty(0, dtype=torch.int32, device=device))
    fns = _functions(device.index, kernels_dir)
    keys = torch.empty(nb, dtype=torch.int64, device=device)
    grid, block = _grid(nb)
    step = step_of(eb32)
    _launch(fns["comet_widths"], device.index, grid, block,
            (np.uint64(flat.data_ptr()), np.int64(n), np.float32(step), np.float64(eb32),
             np.uint64(widths.data_ptr()), np.uint64(anchors.data_ptr()), np.uint64(keys.data_ptr()),
             np.int64(nb)))
    last = int(keys.cumsum_(0)[-1])  # the one host sync: block ends (low 40 bits), non-finite blocks (high)
    if last >> _END_BITS:
        count = int((~torch.isfinite(flat)).sum())
        raise ValueError(f"cannot compress non-finite values: {count} NaN/Inf in a tensor of {n}")
    payload = torch.empty(32 * last, dtype=torch.int32, device=device)
    _launch(fns["comet_pack"], device.index, grid, block,
            (np.uint64(flat.data_ptr()), np.int64(n), np.float32(step), np.float64(eb32),
             np.uint64(widths.data_ptr()), np.uint64(keys.data_ptr()), np.uint64(payload.data_ptr()), np.int64(nb)))
    return Compressed(n=n, eb=float(eb32), widths=widths, anchors=anchors, payload=payload)


def decompress(c: Compressed, out=None, kernels_dir: Path | None = None):
    """The c.n float32 values as a flat CUDA tensor (written into ``out`` if given)."""
    import torch

    device = c.widths.device
    nb = nblocks(c.n)
    if c.widths.numel() != nb or c.anchors.numel() != nb:
        raise ValueError(f"corrupt stream: {c.widths.numel()} block widths and {c.anchors.numel()} anchors for "
                         f"n = {c.n} ({nb} blocks)")
    if out is None:
        out = torch.empty(c.n, dtype=torch.float32, device=device)
    elif out.dtype != torch.float32 or not out.is_contiguous() or out.numel() != c.n or out.data_ptr() % 16:
        raise ValueError(f"out must be a contiguous, 16-byte aligned float32 tensor of {c.n} values")
    if c.n == 0:
        return out
    fns = _functions(device.index, kernels_dir)
    ends = torch.cumsum(c.widths, 0, dtype=torch.int64)
    grid, block = _grid(nb)
    _launch(fns["comet_unpack"], device.index, grid, block,
            (np.uint64(c.payload.data_ptr()), np.uint64(c.widths.data_ptr()), np.uint64(c.anchors.data_ptr()),
             np.uint64(ends.data_ptr()),
             np.float32(step_of(np.float32(c.eb))), np.uint64(out.data_ptr()), np.int64(c.n), np.int64(nb)))
    return out


def to_cpu(c: Compressed) -> Compressed:
    """The same stream with NumPy arrays (for codec.decompress and stream comparisons)."""
    return Compressed(n=c.n, eb=c.eb, widths=c.widths.cpu().numpy(), anchors=c.anchors.cpu().numpy(),
                      payload=c.payload.cpu().numpy().view(np.uint32))


__all__ = ["BLOCK", "compress", "decompress", "flat_input", "to_cpu"]
