"""Unified tensor pool: keeps as many of the tensors put into it resident on the GPU as a byte budget
allows (least recently used go first), offloads the rest to pinned host memory on a side CUDA
stream while forward goes on, and copies them back on the side stream ahead of their use in
backward (``prefetch``), so the copies overlap with compute.

Synchronisation. An offload waits (on the side stream) for an event recorded on the compute stream
after the tensor was produced, copies it into a pinned buffer, and ``record_stream``s the GPU
tensor on the side stream before the pool drops it, so the caching allocator cannot reuse its
memory before the copy has read it. Saved tensors keep their strides (``storable``): host buffers and
restored tensors are made with them. A prefetch allocates on the side stream and copies there;
``get`` makes the compute stream wait on the copy's event and ``record_stream``s the tensor on the
compute stream, so it is not reused while compute still reads it. Pinned buffers are recycled by
(shape, stride, dtype) and all host copies run on the one side stream, in order, so a buffer is
never overwritten before the copy that reads it has run. ``max_inflight_bytes`` bounds the GPU
memory held by offloads still copying (forward blocks on the oldest copy past it; the seconds it
blocks are counted in ``inflight_wait_s``). That memory is reserved, not allocated: the caching
allocator counts a block free (``memory_allocated``, and so the measured peak) as soon as its tensor
is dropped, and record_stream only delays the block's reuse until the side stream's event has
completed, which the allocator checks from the host when it next allocates; so the bound is a host
wait, which a GPU-side wait could not replace, and it matters under a memory cap, not for the
allocated peak. Prefetched tensors count against the budget from the moment their copy starts
(``prefetch(within_budget=True)`` declines one that would not fit; ``limit`` bounds the bytes being
prefetched, see SuperNeuronsModel._prefetch_before).

On the CPU the pool is a pass-through: tensors stay where they are, but the same bookkeeping (LRU
order, budget, what would be offloaded and prefetched) runs, so tests exercise it.

Handles release their entry when garbage-collected (autograd drops the handle with its graph node).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import torch

from repro.papers.superneurons.liveness import tensor_bytes

RESIDENT, HOST, PREFETCHING = "resident", "host", "prefetching"


def storable(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when its elements fill its storage span without gaps or overlaps (any order of
    dimensions: a transposed or channels-last tensor), else a dense copy in the same order of strides.
    The copy to the host and back keeps these strides, so backward sees the saved tensor in the layout
    it was saved in. Measured on the H200 (docs/gpu-notes.md, the pool_saved gradient fault): making the saved
    batch-first LSTM output (strides (256, 2048, 1)) or autocast's transposed bf16 weights contiguous
    gave gradients up to 0.45 off plain autograd, keeping their strides gave 0 difference; so some
    backward depends on the saved tensor's strides, not only on its values."""
    if _dense(t):
        return t
    return t.clone(memory_format=torch.preserve_format)  # dense, the dimensions in t's stride order


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: sorted by stride, each stride is the product of the smaller sizes."""
    expected = 1
    for size, stride in sorted(((sz, st) for sz, st in zip(t.shape, t.stride()) if sz != 1), key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


@dataclass
class PoolStats:
    puts: int = 0
    put_bytes: int = 0
    offloads: int = 0
    offloaded_bytes: int = 0
    prefetches: int = 0
    prefetched_bytes: int = 0
    late_fetches: int = 0  # get() of a tensor still on the host: its copy could not overlap
    inflight_wait_s: float = 0.0  # host seconds forward waited for offload copies (max_inflight_bytes)
    peak_resident_bytes: int = 0
    pinned_bytes: int = 0  # pinned host memory allocated (buffers are recycled)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Entry:
    tensor: torch.Tensor | None  # on the GPU (or the CPU tensor itself in pass-through mode)
    nbytes: int
    state: str = RESIDENT
    host: torch.Tensor | None = None
    event: object = None
    key: tuple = field(default_factory=tuple)


class Handle:
    """What the pool hands out for a tensor; releases the entry when dropped."""

    __slots__ = ("pool", "id", "__weakref__")

    def __init__(self, pool: "TensorPool", entry_id: int):
        self.pool, self.id = pool, entry_id

    def __del__(self):
        self.pool.release(self.id)


class TensorPool:
    def __init__(self, device: str | torch.device, budget_bytes: float = math.inf,
                 max_inflight_bytes: float = 2 * 2**30):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if budget_bytes < 0:
            raise ValueError(f"pool budget must be >= 0 bytes, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.max_inflight_bytes = max_inflight_bytes
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.entries: dict[int, _Entry] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # resident entries, least recently used first
        self.resident_bytes = 0
        self.prefetching_bytes = 0  # copies back to the device started and not yet taken by get()
        self.stats = PoolStats()
        self._next = 0
        self._free_host: dict[tuple, list[torch.Tensor]] = {}
        self._inflight: deque = deque()  # (event, nbytes) of offload copies not known to be done
        self._inflight_bytes = 0

    # ---- public API ------------------------------------------------------------------------
    def put(self, t: torch.Tensor) -> Handle:
        """Keep ``t`` for later; returns a handle for get()."""
        if self.cuda:
            t = storable(t)
        entry_id, self._next = self._next, self._next + 1
        n = tensor_bytes(t)
        self.entries[entry_id] = _Entry(t, n, key=(tuple(t.shape), tuple(t.stride()), t.dtype))
        self.lru[entry_id] = None
        self.resident_bytes += n
        self.stats.puts += 1
        self.stats.put_bytes += n
        self._evict_to_budget()
        self.stats.peak_resident_bytes = max(self.stats.peak_resident_bytes, self.resident_bytes)
        return Handle(self, entry_id)

    def get(self, handle: Handle) -> torch.Tensor:
        """The tensor back on its device (waits for its prefetch if one is in flight)."""
        e = self.entries[handle.id]
        if e.state == RESIDENT:
            self.lru.move_to_end(handle.id)
            return e.tensor
        if e.state == HOST:
            self.stats.late_fetches += 1
            self._prefetch(e)
        self.prefetching_bytes -= e.nbytes
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(e.event)
            e.tensor.record_stream(current)
            self._recycle(e)
        e.state = RESIDENT
        self.lru[handle.id] = None
        self.resident_bytes += e.nbytes
        self.stats.peak_resident_bytes = max(self.stats.peak_resident_bytes, self.resident_bytes)
        return e.tensor

    def prefetch(self, handle: Handle, within_budget: bool = False, limit: float = math.inf) -> bool:
        """Start copying an offloaded tensor back (no-op if it is resident or already on its way).
        ``within_budget``: only if resident and prefetching bytes stay within the budget; ``limit``:
        only if the prefetching bytes stay within it; returns False when it declined."""
        e = self.entries.get(handle.id)
        if e is None or e.state != HOST:
            return True
        if within_budget and self.resident_bytes + self.prefetching_bytes + e.nbytes > self.budget_bytes:
            return False
        if self.prefetching_bytes + e.nbytes > limit:
            return False
        self._prefetch(e)
        return True

    def is_resident(self, handle: Handle) -> bool:
        return self.entries[handle.id].state == RESIDENT

    def release(self, entry_id: int) -> None:
        e = self.entries.pop(entry_id, None)
        if e is None:
            return
        if e.state == RESIDENT:
            self.lru.pop(entry_id, None)
            self.resident_bytes -= e.nbytes
        elif e.state == PREFETCHING:
            self.prefetching_bytes -= e.nbytes
        self._recycle(e)
        e.tensor = None

    def __len__(self) -> int:
        return len(self.entries)

    def reset_stats(self) -> None:
        """Start counting anew (e.g. after warmup steps), so that stats / steps is per step; the pinned
        bytes already allocated stay counted."""
        self.stats = PoolStats(peak_resident_bytes=self.resident_bytes, pinned_bytes=self.stats.pinned_bytes)

    # ---- internals -------------------------------------------------------------------------
    def _evict_to_budget(self) -> None:
        while self.resident_bytes > self.budget_bytes and self.lru:
            entry_id, _ = self.lru.popitem(last=False)
            self._offload(self.entries[entry_id])

    def _offload(self, e: _Entry) -> None:
        self.resident_bytes -= e.nbytes
        self.stats.offloads += 1
        self.stats.offloaded_bytes += e.nbytes
        e.state = HOST
        if not self.cuda:
            return  # pass-through: the tensor stays where it is
        host = self._host_buffer(e.key)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            host.copy_(e.tensor, non_blocking=True)
            e.tensor.record_stream(self.stream)
            done = torch.cuda.Event()
            done.record(self.stream)
        e.tensor, e.host, e.event = None, host, done
        self._inflight.append((done, e.nbytes))
        self._inflight_bytes += e.nbytes
        self._bound_inflight()

    def _bound_inflight(self) -> None:
        while self._inflight and (self._inflight_bytes > self.max_inflight_bytes or self._inflight[0][0].query()):
            event, n = self._inflight.popleft()
            start = time.perf_counter()
            event.synchronize()
            self.stats.inflight_wait_s += time.perf_counter() - start
            self._inflight_bytes -= n

    def _prefetch(self, e: _Entry) -> None:
        self.stats.prefetches += 1
        self.stats.prefetched_bytes += e.nbytes
        self.prefetching_bytes += e.nbytes
        e.state = PREFETCHING
        if not self.cuda:
            return
        shape, stride, dtype = e.key
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(e.event)
            gpu = torch.empty_strided(shape, stride, dtype=dtype, device=self.device)
            gpu.copy_(e.host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        e.tensor, e.event = gpu, done

    def _host_buffer(self, key: tuple) -> torch.Tensor:
        free = self._free_host.get(key)
        if free:
            return free.pop()
        shape, stride, dtype = key
        buf = torch.empty_strided(shape, stride, dtype=dtype, device="cpu", pin_memory=True)
        self.stats.pinned_bytes += tensor_bytes(buf)
        return buf

    def _recycle(self, e: _Entry) -> None:
        # Safe without waiting: every later use of the buffer is a copy queued on the same side stream.
        if e.host is not None:
            self._free_host.setdefault(e.key, []).append(e.host)
            e.host = None
