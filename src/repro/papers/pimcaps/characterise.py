"""The characterisation of CapsNet inference: one row per (configuration, batch, routing variant).

- ``conv_s`` / ``routing_s``: median time of the conv part and of the routing procedure
  (repro.timing: CUDA events on the GPU, perf_counter on the CPU); ``routing_share`` =
  routing / (conv + routing);
- ``u_hat_bytes``: the prediction vectors' size (B x L x H x D x 4), the intermediate that no
  on-chip memory holds; ``routing_peak_bytes``: the GPU's peak allocation during routing;
- ``routing_kernels`` / ``routing_launches`` / ``routing_syncs`` (GPU): device kernels, launch
  calls and host synchronisations the profiler records in one routing procedure (every kernel
  boundary is a grid-wide barrier); on the CPU ``routing_ops``, the top-level operators instead;
- ``power_conv_w`` / ``power_routing_w`` / ``power_idle_w`` (GPU): mean board power while each
  part runs in a loop, and idle, sampled by nvidia-smi.

The variants: ``eager`` (PyTorch ops) and ``compiled`` (torch.compile of the routing procedure:
today's software answer, fusing its elementwise and reduction steps).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from repro.papers.pimcaps.capsnet import CapsConfig, CapsNet, routing_procedure
from repro.timing import time_cpu, time_cuda

LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaStreamWaitEvent")


def timer(device: str, repeats: int) -> Callable[[Callable[[], object]], float]:
    if device == "cuda":
        return lambda fn: time_cuda(fn, warmup=3, repeats=repeats).median_s
    return lambda fn: time_cpu(fn, warmup=1, repeats=repeats).median_s


def profile_counts(fn: Callable[[], object], device: str) -> dict[str, int]:
    """Kernels, launches and syncs (GPU) or top-level operators (CPU) of one call of fn."""
    fn()  # compiled code and caches warm
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        with record_function("routing_procedure"):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    if device != "cuda":
        return {"routing_ops": sum(1 for e in events if e.cpu_parent is not None
                                   and e.cpu_parent.name == "routing_procedure")}
    kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"routing_kernels": kernels,
            "routing_launches": sum(1 for e in events if e.name in LAUNCH_CALLS),
            "routing_syncs": sum(1 for e in events if any(e.name.startswith(s) for s in SYNC_CALLS))}


def sample_power(fn: Callable[[], object] | None, seconds: float, gpu_uuid: str) -> float:
    """Mean board power (W) reported by nvidia-smi while fn runs in a loop (None: idle); ``gpu_uuid``
    as repro.machine gives it (lower case, without nvidia-smi's GPU- prefix)."""
    cmd = ["nvidia-smi", f"--id=GPU-{gpu_uuid}", "--query-gpu=power.draw", "--format=csv,noheader,nounits",
           "--loop-ms=50"]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return float("nan")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if fn is None:
            time.sleep(0.05)
        else:
            fn()
            torch.cuda.synchronize()
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    values = [float(x) for x in out.split() if x.replace(".", "", 1).isdigit()]
    return statistics.fmean(values) if values else float("nan")


def characterise(cfg: CapsConfig, batch: int, device: str, repeats: int, compiled: bool,
                 power_seconds: float, gpu_uuid: str | None, seed: int) -> list[dict]:
    """The rows of one (configuration, batch): eager, and compiled when asked."""
    torch.manual_seed(seed)
    model = CapsNet(cfg).to(device).eval()
    x = torch.randn(batch, cfg.in_channels, cfg.image, cfg.image, device=device)
    measure = timer(device, repeats)
    rows = []
    with torch.no_grad():
        u = model.conv_part(x)
        conv = lambda: model.conv_part(x)  # noqa: E731
        conv_s = measure(conv)
        variants = {"eager": lambda: routing_procedure(u, model.weight, cfg.iterations)}
        if compiled:
            fused = torch.compile(routing_procedure, dynamic=False)
            variants["compiled"] = lambda: fused(u, model.weight, cfg.iterations)
        reference = variants["eager"]()
        for name, fn in variants.items():
            err = float((fn() - reference).abs().max())
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                fn()
                peak = torch.cuda.max_memory_allocated() - base
            else:
                peak = float("nan")
            routing_s = measure(fn)
            row = dict(config=cfg.name, batch=batch, variant=name, low_capsules=cfg.low_capsules,
                       classes=cfg.classes, class_dim=cfg.class_dim, primary_dim=cfg.primary_dim,
                       iterations=cfg.iterations, conv_s=conv_s, routing_s=routing_s,
                       routing_share=routing_s / (conv_s + routing_s),
                       u_hat_bytes=batch * cfg.low_capsules * cfg.classes * cfg.class_dim * 4,
                       routing_peak_bytes=peak, max_abs_diff_vs_eager=err, **profile_counts(fn, device))
            if device == "cuda" and gpu_uuid and power_seconds > 0:
                row["power_routing_w"] = sample_power(fn, power_seconds, gpu_uuid)
                row["power_conv_w"] = sample_power(conv, power_seconds, gpu_uuid)
                row["power_idle_w"] = sample_power(None, power_seconds / 2, gpu_uuid)
            rows.append(row)
    return rows
