"""Partitions of a device's compute units, the same interface for the GPU and the CPU stand-in.

A partition object ``p`` has ``units`` (the device's total), ``granularity`` (sizes it can make are
multiples of it), ``disjoint`` (whether two partitions get different units), ``p(k, slot)``: a context
manager in which the calling thread's torch work runs on k units (``slot``: a partition of its own for
each concurrent user), and ``sync()``: wait for the work issued in the current partition. The measuring loop (measure.py)
sees only this, so the tests run it on the CPU.

- ``SmPartition`` (GPU): a CUDA green context of k SMs (``torch.cuda.green_contexts``, beta). With
  ``GreenContext.Stream()`` (torch >= 2.12) the work goes to the context's stream; without it (torch
  2.10-2.11) ``set_context()`` / ``pop_context()`` make the context current around the work (a green
  context is current to one thread at a time: hence a context per slot). torch splits every context
  from the whole device (``cuDevSmResourceSplitByCount`` on all SMs, one group) and has no way to name
  which SMs, so two contexts of a size get the same SMs: not ``disjoint``.
- ``ThreadPartition`` (CPU, smoke scale): k intra-op threads (``torch.set_num_threads``) stand in for
  k SMs; the OS places the threads, so not ``disjoint`` either.
"""

from __future__ import annotations

import contextlib
import os

import torch


class ThreadPartition:
    granularity = 1
    disjoint = False
    kind = "cpu threads (stand-in for SMs)"

    def __init__(self, units: int | None = None):
        self.units = units or len(os.sched_getaffinity(0))

    @contextlib.contextmanager
    def __call__(self, k: int, slot: int = 0):
        before = torch.get_num_threads()
        torch.set_num_threads(max(1, min(k, self.units)))
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def sync(self) -> None:
        pass


def green_contexts_available() -> str:
    """'' when green contexts can be made here, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        from torch.cuda import green_contexts
    except ImportError:
        return f"torch {torch.__version__} has no torch.cuda.green_contexts"
    if not getattr(green_contexts, "SUPPORTED", True):
        return f"torch {torch.__version__} was built without green context support"
    return ""


class SmPartition:
    disjoint = False
    kind = "SMs (CUDA green contexts)"

    def __init__(self, device_id: int = 0):
        why = green_contexts_available()
        if why:
            raise RuntimeError(f"SM partitions need CUDA green contexts: {why}")
        from torch.cuda.green_contexts import GreenContext

        self._create = GreenContext.create
        self.device_id = device_id
        props = torch.cuda.get_device_properties(device_id)
        self.units = props.multi_processor_count
        # cuDevSmResourceSplitByCount's group sizes: multiples of 8 SMs on compute capability 9.x,
        # 2 on 8.x (CUDA driver API, green contexts); other sizes are rounded up by the driver
        self.granularity = 8 if props.major >= 9 else 2
        self._contexts: dict[tuple[int, int], object] = {}

    def context(self, k: int, slot: int):
        if (k, slot) not in self._contexts:
            self._contexts[(k, slot)] = self._create(num_sms=k, device_id=self.device_id)
        return self._contexts[(k, slot)]

    @contextlib.contextmanager
    def __call__(self, k: int, slot: int = 0):
        if k >= self.units:  # the whole device: no green context, a stream of the thread's own (so that two
            with torch.cuda.stream(torch.cuda.Stream(self.device_id)):  # threads' work can run at once)
                yield
            return
        ctx = self.context(k, slot)
        if hasattr(ctx, "Stream"):
            with torch.cuda.stream(ctx.Stream()):
                yield
        else:
            ctx.set_context()
            try:
                yield
            finally:
                ctx.pop_context()

    def sync(self) -> None:
        torch.cuda.current_stream().synchronize()
