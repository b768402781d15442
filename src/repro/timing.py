"""Timing that means something: CUDA events on the GPU, a monotonic clock on the CPU; warm-up
first, then the median of many repeats (and the spread, so noise is visible)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    max_s: float
    repeats: int


def _summary(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples))


def time_cuda(fn: Callable[[], object], warmup: int = 3, repeats: int = 20, min_time_s: float = 0.0) -> Timing:
    """Median of `repeats` CUDA-event timings of fn() (at least until min_time_s has passed)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    start_wall = time.monotonic()
    while len(samples) < repeats or time.monotonic() - start_wall < min_time_s:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
        if len(samples) >= 10 * max(repeats, 1):
            break
    return _summary(samples)


def time_cpu(fn: Callable[[], object], warmup: int = 1, repeats: int = 5) -> Timing:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return _summary(samples)


def cuda_graph(fn: Callable[[], object], warmup: int = 3) -> tuple[Callable[[], None], object]:
    """fn() captured as a CUDA graph, after `warmup` calls on a side stream (what lazy initialisation,
    cuBLAS workspaces and the allocator need before a capture): (replay, fn's output in the graph's
    memory, which each replay rewrites). A replay costs one launch of host time, so a timing of it
    is the device's time for fn's kernels. Raises what the capture raises (a library that cannot be
    captured); the caller decides whether to time eagerly instead."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out
