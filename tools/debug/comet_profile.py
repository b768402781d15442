"""Where COMET's time goes on a GPU (a diagnostic, not a pipeline step; prints, writes nothing).

    python tools/debug/comet_profile.py [--kernels results/build/kernels]

Kernel times of compress/decompress on 1 GiB of post-ReLU-like data (eb 0.05), from the torch
profiler (CUPTI), against a device-to-device copy of the same bytes. End-to-end GB/s of each
direction is the pipeline's comet/comet_bench; the training-step view (every arm side by side,
host time in the codec) is comet/comet_step_bench.
"""

from __future__ import annotations

import argparse

import torch

from repro.papers.comet import gpu_codec
from repro.papers.comet.compressor_bench import synthetic_activation


def kernel_profile(kernels: str | None) -> None:
    x = synthetic_activation("relu_smooth", 2**28, "cuda")
    c = gpu_codec.compress(x, 0.05, kernels)
    gpu_codec.decompress(c, kernels_dir=kernels)
    scratch = torch.empty_like(x)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            c = gpu_codec.compress(x, 0.05, kernels)
            gpu_codec.decompress(c, kernels_dir=kernels)
            scratch.copy_(x)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=None, help="folder with comet_codec.cubin (default: the pipeline's)")
    args = parser.parse_args()
    print(torch.cuda.get_device_name())
    kernel_profile(args.kernels)


if __name__ == "__main__":
    main()
