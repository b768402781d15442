"""A per-device buffer cache: LRU over named buffers, each resident with some number of bytes.

A read of ``nbytes`` of a buffer misses by what is not yet resident; the resident part grows to
what was read. Capacity 0 disables it. This is a footprint model (which buffers a device touched
recently), not a set-associative cache."""

from __future__ import annotations

from collections import OrderedDict

from repro.sim.params import non_negative


class BufferCache:
    def __init__(self, capacity: float, name: str = "cache"):
        self.capacity = non_negative(f"{name}.capacity", capacity)
        self.resident: OrderedDict[object, float] = OrderedDict()
        self.used = 0.0
        self.hits = 0.0  # bytes served from the cache
        self.misses = 0.0

    def read(self, key, nbytes: float) -> float:
        """Bytes of this read that must come from memory (0 when all resident)."""
        have = self.resident.pop(key, 0.0)
        miss = max(0.0, nbytes - have)
        self.hits += nbytes - miss
        self.misses += miss
        keep = max(have, nbytes)
        if keep <= self.capacity:
            self.resident[key] = keep
            self.used += keep - have
            while self.used > self.capacity:
                _, size = self.resident.popitem(last=False)
                self.used -= size
        else:
            self.used -= have
        return miss
