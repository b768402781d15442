"""Host-device bandwidth per GPU (Li et al., TPDS 2020, Sec. 3.1): cudaMemcpyAsync host-to-device
and device-to-host from pinned (cudaHostAlloc) and pageable (NumPy) host memory, 8 B to 1 GiB,
median over trials of timed batches of back-to-back copies (as p2p.py). Pinned batches are timed by
CUDA events; pageable ones by the host clock up to the stream's end, because the driver stages a
pageable copy through a pinned buffer on the host thread, outside the stream's timeline."""

from __future__ import annotations

import statistics
import time

import numpy as np

H2D, D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost


def measure(device: int, p, log) -> list[dict]:
    import cupy

    top = max(p.sizes_bytes)
    rows = []
    with cupy.cuda.Device(device):
        dev = cupy.zeros(top, dtype=np.uint8)
        pinned_mem = cupy.cuda.alloc_pinned_memory(top)
        hosts = {"pinned": np.frombuffer(pinned_mem, dtype=np.uint8, count=top),
                 "pageable": np.ones(top, dtype=np.uint8)}
        stream = cupy.cuda.Stream(non_blocking=True)

        def timed(kind: int, host: np.ndarray, nbytes: int, reps: int) -> float:
            pinned = host is hosts["pinned"]
            stream.synchronize()
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            t0 = time.perf_counter()
            for _ in range(reps):
                if kind == H2D:
                    cupy.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, nbytes, H2D, stream.ptr)
                else:
                    cupy.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, nbytes, D2H, stream.ptr)
            end.record(stream)
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) / 1e3 if pinned else time.perf_counter() - t0

        for memory, host in hosts.items():
            for kind, name in ((H2D, "h2d"), (D2H, "d2h")):
                for nbytes in p.sizes_bytes:
                    timed(kind, host, nbytes, 1)
                    one = timed(kind, host, nbytes, 1)
                    reps = int(max(1, min(p.max_reps, p.target_s / max(one, 1e-7))))
                    t = statistics.median(timed(kind, host, nbytes, reps) / reps for _ in range(p.trials))
                    rows.append({"device": device, "memory": memory, "direction": name, "bytes": nbytes,
                                 "reps": reps, "time_us": t * 1e6, "gbps": nbytes / t / 1e9})
            log.info("host-device %s on GPU %d done", memory, device)
    return rows
