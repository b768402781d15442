"""Where COMET's time goes on a GPU (a diagnostic, not a pipeline step; prints, writes nothing).

    python tools/debug/comet_profile.py [--kernels results/build/kernels] [--steps 40]

1. Kernel times of compress/decompress on 1 GiB of post-ReLU-like data (eb 0.05), from the
   torch profiler (CUPTI), against a device-to-device copy of the same bytes.
2. Eager ResNet-32 training steps (batch 128, CIFAR-sized random data): ms per step of the plain
   step and with each arm's hooks, and the host time spent inside encode/decode per step.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn

from repro.comet import gpu_codec
from repro.comet.experiment import synthetic_activation
from repro.comet.hooks import make_hooks
from repro.models import build_model


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
    for name, fn in (("compress", lambda: gpu_codec.compress(x, 0.05, kernels)),
                     ("decompress", lambda: gpu_codec.decompress(c, kernels_dir=kernels)),
                     ("copy", lambda: scratch.copy_(x))):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(10):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        print(f"{name}: median {times[5]:.3f} ms = {4 * x.numel() / times[5] / 1e6:.0f} GB/s")


def step_profile(kernels: str | None, steps: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(128, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (128,), device="cuda")
    for method in ("none", "fixed", "adaptive", "actnn"):
        model = build_model("resnet32").cuda().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
        hooks = make_hooks(method, eb=0.05, kernels_dir=kernels)
        host = [0.0]
        if hooks is not None:
            hooks.wrap_model(model)
            enc, dec = hooks.encode, hooks.decode

            def timed_enc(t, layer, enc=enc):
                t0 = time.perf_counter()
                out = enc(t, layer)
                host[0] += time.perf_counter() - t0
                return out

            def timed_dec(p, dec=dec):
                t0 = time.perf_counter()
                out = dec(p)
                host[0] += time.perf_counter() - t0
                return out
            hooks.encode, hooks.decode = timed_enc, timed_dec

        def step():
            ctx = hooks.saved_tensors_hooks() if hooks is not None else torch.autograd.graph.saved_tensors_hooks(
                lambda t: t, lambda t: t)
            with ctx:
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if hooks is not None:
                hooks.after_backward(model)
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        host[0] = 0.0
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / steps
        print(f"{method:9s}: {1e3 * dt:6.2f} ms/step ({128 / dt:7.0f} img/s), host time in encode/decode "
              f"{1e3 * host[0] / steps:5.2f} ms/step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=None, help="folder with comet_codec.cubin (default: the pipeline's)")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    print(torch.cuda.get_device_name())
    kernel_profile(args.kernels)
    step_profile(args.kernels, args.steps)


if __name__ == "__main__":
    main()
