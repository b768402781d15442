"""Peer-to-peer bandwidth and latency between every ordered pair of this process's GPUs (Li et al.,
TPDS 2020, Sec. 3.1; the tests of NVIDIA's nvbandwidth): one process drives all GPUs, as
nvbandwidth does.

For each pair (src, dst) and size (bytes per direction):
- ``ce``: copy-engine copies, cudaMemcpyPeerAsync on a stream of src; ``sm``: our copy kernel
  (gpuic_copy.cu) on dst pulling from src's memory through the link (P2P on only).
- ``uni``: src -> dst alone; ``bi``: src -> dst and dst -> src at once (bandwidth counts both).
- P2P ``on``: peer access enabled between the pair; ``off``: disabled, so the driver stages copies
  through host memory.
Each point is the median over ``trials`` of the CUDA-event time of ``reps`` back-to-back copies
(reps sized so a trial takes about ``target_s``), divided by reps. Latency: one thread chasing a
random ring of 8-byte slots in src's memory from dst (remote) or in its own (local), per load.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro import kernels

STEM = "gpuic_copy"
THREADS = 256
PEER_ALREADY = (704, 705)  # cudaErrorPeerAccessAlreadyEnabled, cudaErrorPeerAccessNotEnabled


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min_bytes, min_bytes * factor, ... up to max_bytes, which is always included."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"sizes need 1 <= min_bytes <= max_bytes and factor >= 2; "
                         f"got {min_bytes}, {max_bytes}, {factor}")
    out, s = [], min_bytes
    while s < max_bytes:
        out.append(s)
        s *= factor
    return out + [max_bytes]


def set_peer_access(devices: list[int], on: bool) -> None:
    """Enable (or disable) peer access between every ordered pair of ``devices``."""
    import cupy
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    for i, j in itertools.permutations(devices, 2):
        if on and not cupy.cuda.runtime.deviceCanAccessPeer(i, j):
            raise RuntimeError(f"GPU {i} cannot access GPU {j} peer to peer")
        with cupy.cuda.Device(i):
            try:
                (cupy.cuda.runtime.deviceEnablePeerAccess if on else cupy.cuda.runtime.deviceDisablePeerAccess)(j)
            except CUDARuntimeError as exc:
                if exc.status not in PEER_ALREADY:
                    raise


@dataclass
class Rig:
    """Per GPU: a source and a destination buffer of max_bytes, a stream, the copy kernels."""

    devices: list[int]
    max_bytes: int
    kernels_dir: Path | None

    def __post_init__(self):
        import cupy

        self.src, self.dst, self.streams, self.copy, self.chase = {}, {}, {}, {}, {}
        for d in self.devices:
            with cupy.cuda.Device(d):
                self.src[d] = cupy.ones(self.max_bytes, dtype=np.uint8)
                self.dst[d] = cupy.zeros(self.max_bytes, dtype=np.uint8)
                self.streams[d] = cupy.cuda.Stream(non_blocking=True)
                self.copy[d] = kernels.function(STEM, "sm_copy", d, self.kernels_dir)
                self.chase[d] = kernels.function(STEM, "chase", d, self.kernels_dir)

    def enqueue(self, method: str, src: int, dst: int, nbytes: int) -> int:
        """Queue one src -> dst copy; returns the device whose stream carries it."""
        import cupy

        if method == "ce":
            with cupy.cuda.Device(src):
                cupy.cuda.runtime.memcpyPeerAsync(self.dst[dst].data.ptr, dst, self.src[src].data.ptr, src, nbytes,
                                                  self.streams[src].ptr)
            return src
        blocks = max(1, min(kernels.sm_count(dst) * 8, -(-nbytes // (16 * THREADS))))
        with cupy.cuda.Device(dst):
            self.copy[dst]((blocks, 1, 1), (THREADS, 1, 1),
                           (self.src[src], self.dst[dst], np.uint64(nbytes)), stream=self.streams[dst])
        return dst

    def timed(self, copies: list[tuple[str, int, int]], nbytes: int, reps: int) -> float:
        """Seconds for ``reps`` rounds of the given concurrent copies, by CUDA events."""
        import cupy

        first = self.devices[0]
        with cupy.cuda.Device(first):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(self.streams[first])
        used = sorted({src if m == "ce" else dst for m, src, dst in copies})
        for d in used:
            with cupy.cuda.Device(d):
                self.streams[d].wait_event(start)
        for _ in range(reps):
            for method, src, dst in copies:
                self.enqueue(method, src, dst, nbytes)
        with cupy.cuda.Device(first):
            for d in used:
                if d != first:
                    with cupy.cuda.Device(d):
                        ev = cupy.cuda.Event()
                        ev.record(self.streams[d])
                    self.streams[first].wait_event(ev)
            end.record(self.streams[first])
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) / 1e3

    def point(self, copies: list[tuple[str, int, int]], nbytes: int, p) -> tuple[float, int]:
        """(seconds per round, reps): median of p.trials trials, reps sized by a first round."""
        self.timed(copies, nbytes, 1)  # warm-up
        one = self.timed(copies, nbytes, 1)
        reps = int(max(1, min(p.max_reps, p.target_s / max(one, 1e-7))))
        return statistics.median(self.timed(copies, nbytes, reps) / reps for _ in range(p.trials)), reps

    def latency(self, reader: int, holder: int, slots: int, steps: int, seed: int) -> float:
        """Seconds per dependent 8-byte load by GPU ``reader`` from a random ring in ``holder``'s memory."""
        import cupy

        order = np.random.default_rng(seed).permutation(slots)
        ring = np.empty(slots, dtype=np.uint64)
        ring[order] = np.roll(order, -1)  # one cycle through every slot
        with cupy.cuda.Device(holder):
            ring_dev = cupy.asarray(ring)
        with cupy.cuda.Device(reader):
            out = cupy.zeros(1, dtype=np.uint64)
            stream = self.streams[reader]

            def run(n: int) -> float:
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                self.chase[reader]((1, 1, 1), (1, 1, 1), (ring_dev, np.int64(n), out), stream=stream)
                end.record(stream)
                end.synchronize()
                return cupy.cuda.get_elapsed_time(start, end) / 1e3

            run(steps // 10)
            # the difference of two chase lengths cancels the launch
            return (run(2 * steps) - run(steps)) / steps


def measure(devices: list[int], p, kernels_dir: Path | None, log) -> tuple[list[dict], list[dict]]:
    """The bandwidth points and the latency rows for every ordered pair of ``devices``."""
    rig = Rig(devices, max(p.sizes_bytes), kernels_dir)
    points, lat = [], []
    for p2p in ("on", "off"):
        set_peer_access(devices, p2p == "on")
        methods = ("ce", "sm") if p2p == "on" else ("ce",)
        for src, dst in itertools.permutations(devices, 2):
            for method, direction in itertools.product(methods, ("uni", "bi")):
                copies = [(method, src, dst)] + ([(method, dst, src)] if direction == "bi" else [])
                for nbytes in p.sizes_bytes:
                    t, reps = rig.point(copies, nbytes, p)
                    points.append({"src": src, "dst": dst, "method": method, "direction": direction, "p2p": p2p,
                                   "bytes": nbytes, "reps": reps, "time_us": t * 1e6,
                                   "gbps": len(copies) * nbytes / t / 1e9})
            log.info("P2P %s %d->%d done", p2p, src, dst)
    set_peer_access(devices, True)
    for src, dst in itertools.permutations(devices, 2):
        lat.append({"src": src, "dst": dst,
                    "latency_us": rig.latency(dst, src, p.chase_slots, p.chase_steps, p.seed) * 1e6,
                    "local_latency_us": rig.latency(dst, dst, p.chase_slots, p.chase_steps, p.seed) * 1e6})
    return points, lat
