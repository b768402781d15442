"""The measuring loop: a DNN's latency in a partition of k units, alone or while another DNN runs in a
loop on a second thread (co-location). It takes the partition (partition.py) as an argument, so the
GPU run (SM partitions) and the CPU tests (thread partitions) execute the same code."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Callable

import torch


def latency(fn: Callable[[], object], partition, k: int, iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean wall time of ``iters`` calls of fn on k units (synchronised
    after each group, so that queued GPU work is counted)."""
    with partition(k), torch.no_grad():
        fn()
        partition.sync()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            partition.sync()
            samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def curve(fns: dict[str, Callable[[], object]], partition, units: list[int], iters: int, repeats: int,
          progress=lambda xs, **kw: xs) -> list[dict]:
    """One row per (DNN, k): its latency alone on k units."""
    grid = [(name, k) for name in fns for k in units]
    return [dict(dnn=name, units=k, latency_s=latency(fns[name], partition, k, iters, repeats))
            for name, k in progress(grid, desc="adstile curves")]


def corun(fn_a, fn_b, partition, k_a: int, k_b: int, iters: int, repeats: int) -> float:
    """A's latency on k_a units while B runs in a loop on k_b units from a second thread."""
    stop, started, errors = threading.Event(), threading.Event(), []

    def loop_b():
        try:
            with partition(k_b, slot=1), torch.no_grad():
                while not stop.is_set():
                    fn_b()
                    partition.sync()
                    started.set()
        except BaseException as e:  # surfaced in the caller
            errors.append(e)
            started.set()

    worker = threading.Thread(target=loop_b, daemon=True)
    worker.start()
    started.wait()
    try:
        return latency(fn_a, partition, k_a, iters, repeats)
    finally:
        stop.set()
        worker.join()
        if errors:
            raise errors[0]


def colocation(fns: dict[str, Callable[[], object]], partition, pairs: list[tuple[str, str]], alone: dict,
               iters: int, repeats: int) -> list[dict]:
    """Per (A, B): A alone on all units and on half, A sharing all units with B running at once, and A
    in half while B runs in the other half (``halves_disjoint``: whether the partition can make the two
    halves of different units; if not, they overlap); ``alone``: (dnn, units) -> latency from ``curve``."""
    total, g = partition.units, partition.granularity
    half = max(g, (total // 2) // g * g)
    rest = max(g, (total - half) // g * g)
    rows = []
    for a, b in pairs:
        full_s = alone.get((a, total)) or latency(fns[a], partition, total, iters, repeats)
        half_s = alone.get((a, half)) or latency(fns[a], partition, half, iters, repeats)
        shared_s = corun(fns[a], fns[b], partition, total, total, iters, repeats)
        split_s = corun(fns[a], fns[b], partition, half, rest, iters, repeats)
        rows.append(dict(a=a, b=b, units=total, half=half, rest=rest, halves_disjoint=partition.disjoint,
                         alone_full_s=full_s, shared_s=shared_s,
                         alone_half_s=half_s, partitioned_s=split_s, shared_slowdown=shared_s / full_s,
                         partition_slowdown=split_s / half_s))
    return rows
