"""Collective latency and bandwidth through torch.distributed (Li et al., TPDS 2020, Sec. 3.3; the
sweep of NVIDIA's nccl-tests): all_reduce, all_gather, broadcast, reduce and reduce_scatter, one
process per GPU (repro.multigpu) with NCCL, or CPU processes with gloo (the CPU stand-in).

Sizes S are nccl-tests' (busbw.py): the whole array, float32, its element count rounded up to a
multiple of the rank count. Per size every rank runs ``iters`` operations back to back (iters =
clamp(iters_bytes / S, min_iters, max_iters), the same on every rank) after ``warmup``, timed by
CUDA events on the current stream (NCCL) or the wall clock between barriers (gloo); the reported
time is the slowest rank's mean. After timing, each operation runs once on rank-dependent values
and its output is compared with the exact result (``wrong`` counts the elements that differ).
"""

from __future__ import annotations

import math
import time

from repro.papers.interconnect.busbw import COLLECTIVES, algbw, busbw


def iterations(nbytes: int, p) -> int:
    return int(max(p.min_iters, min(p.max_iters, p.iters_bytes // max(nbytes, 1))))


def _op(name: str, n: int, count: int, device):
    """(call, check) for collective ``name`` on ``count`` float32 elements of the whole array."""
    import torch
    import torch.distributed as dist

    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    rank = dist.get_rank()
    shard = count // n
    full = torch.empty(count, dtype=torch.float32, device=device)
    part = torch.empty(shard, dtype=torch.float32, device=device)
    calls = {"all_reduce": lambda: dist.all_reduce(full), "broadcast": lambda: dist.broadcast(full, 0),
             "reduce": lambda: dist.reduce(full, 0), "all_gather": lambda: gather(full, part),
             "reduce_scatter": lambda: scatter(part, full)}

    def check() -> int:
        """Elements wrong after one call on inputs full[i] = rank + 1 + i % 7 (exact in float32)."""
        pattern = torch.arange(count, device=device) % 7
        full.copy_(pattern + rank + 1)
        part.copy_(pattern[:shard] + rank + 1)
        calls[name]()
        ranks_sum = n * (n + 1) / 2
        if name == "all_reduce" or (name == "reduce" and rank == 0):
            want, got = pattern * n + ranks_sum, full
        elif name == "broadcast":
            want, got = pattern + 1, full
        elif name == "all_gather":
            want = torch.cat([pattern[:shard] + r + 1 for r in range(n)])
            got = full[:shard * n]
        elif name == "reduce_scatter":
            want, got = pattern[rank * shard:(rank + 1) * shard] * n + ranks_sum, part
        else:
            return 0
        return int((got != want.to(got.dtype)).sum().item())

    return calls[name], check


def worker(rank: int, n: int, ops: list[str], sizes: list[int], p) -> list[dict]:
    """One rank's timings and checks (run by repro.multigpu.launch)."""
    import torch
    import torch.distributed as dist

    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    rows = []
    for name in ops:
        for nbytes in sizes:
            count = math.ceil(math.ceil(nbytes / 4) / n) * n
            call, check = _op(name, n, count, device)
            iters = iterations(count * 4, p)
            for _ in range(p.warmup):
                call()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                dist.barrier()
                start.record()
                for _ in range(iters):
                    call()
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                seconds = time.perf_counter() - t0
            rows.append({"op": name, "bytes": count * 4, "iters": iters, "time_s": seconds / iters, "rank": rank,
                         "wrong": check()})
    return rows


def run(n: int, backend: str, ops: list[str], sizes: list[int], p) -> list[dict]:
    """Every rank's rows reduced to one per (op, size): the slowest rank's time, algbw, busbw."""
    from repro import multigpu

    unknown = [o for o in ops if o not in COLLECTIVES]
    if unknown:
        raise ValueError(f"unknown collective(s) {unknown}; choose from {', '.join(COLLECTIVES)}")
    per_rank = multigpu.launch(worker, n, backend=backend, args=(ops, sizes, p), timeout_s=p.timeout_s)
    rows = []
    for k, row in enumerate(per_rank[0]):
        t = max(r[k]["time_s"] for r in per_rank)
        rows.append({"op": row["op"], "bytes": row["bytes"], "ranks": n, "backend": backend, "iters": row["iters"],
                     "time_us": t * 1e6, "algbw_gbps": algbw(row["bytes"], t),
                     "busbw_gbps": busbw(row["op"], row["bytes"], t, n), "wrong": sum(r[k]["wrong"] for r in per_rank)})
    return rows
