"""What comet_bench times on a GPU, for one tensor: compress into a preallocated buffer with room
for every block raw (the training path: a scratch memset and one launch, sizes on the device, no
sync), the exact-size path (two launches and one host sync), and decompress into a preallocated
output (one launch).

Layouts: ``flat`` (the values in memory order) and ``channels_last`` (the same values as a
channels-last (N, 64, 32, 32) tensor, which the kernels read and write in NCHW order: its stream
equals the flat one's).
"""

from __future__ import annotations

from pathlib import Path

import torch

from repro.papers.comet import arena, gpu_codec

LAYOUTS = ("flat", "channels_last")
CHW = (64, 32, 32)  # the channels-last case's feature maps (CIFAR-sized)


def as_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The flat values x (logical order) as the tensor the layout's case compresses."""
    if layout == "flat":
        return x
    if layout != "channels_last":
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    per = CHW[0] * CHW[1] * CHW[2]
    if x.numel() % per:
        raise ValueError(f"the channels-last case needs a multiple of {per} values (N x {CHW}), got {x.numel()}")
    return x.view(-1, *CHW).contiguous(memory_format=torch.channels_last)


class Ops:
    def __init__(self, x: torch.Tensor, kernels_dir: Path | None = None):
        self.x, self.kernels_dir = x, kernels_dir
        self.src = gpu_codec.Source.nhwc_of(x) if x.dim() == 4 else gpu_codec.Source.flat(x)
        self.buffer = arena.Buffer.worst_case([self.src.n], x.device)
        self.out = torch.empty_like(x)

    def compress(self, eb: float) -> gpu_codec.Slot:
        self.buffer.reset()
        return self.buffer.compress(0, self.src, eb, kernels_dir=self.kernels_dir)

    def compress_exact(self, eb: float):
        return gpu_codec.compress_source(self.src, eb, self.kernels_dir)

    def decompress(self, slot: gpu_codec.Slot) -> torch.Tensor:
        return gpu_codec.decompress(slot, self.out, self.kernels_dir)

    def stream(self, eb: float):
        """The last compress call's stream (views into the buffer; one sync)."""
        return self.buffer.stream(0, eb)

    def memory_order(self, t: torch.Tensor) -> torch.Tensor:
        """t (shaped as x) flat in memory order: x and its decompression compare element by element."""
        return t.permute(0, 2, 3, 1).reshape(-1) if t.dim() == 4 else t
