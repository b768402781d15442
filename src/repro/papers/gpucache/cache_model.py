"""The graph model's outputs for a partition or a schedule.

- replication factor: the number of parts each vertex is copied into, averaged over vertices
  (sum over parts of the vertices their tasks touch / n); 1 is no sharing between blocks;
- block loads: the cache lines of per-vertex data each block brings into its SM's cache, summed
  over blocks (each block loads each line it touches once, its data fitting in L1): the paper's
  predicted cache loads;
- wave loads: the same for groups of ``wave`` consecutive blocks (those resident on the GPU at
  once, sharing L2): lines loaded from DRAM when nothing survives in L2 from one wave to the next.

Loads count lines of one per-vertex array of ``elem_bytes`` per vertex (the kernel's real width:
spmm 4F, flux/pair 16, spmv 4); a kernel reading one array and updating another moves twice that.
"""

from __future__ import annotations

import numpy as np

from repro.papers.gpucache import distinct
from repro.papers.gpucache.schedule import Schedule


def replication_factor(u: np.ndarray, v: np.ndarray, parts: np.ndarray, n: int) -> float:
    """sum_p |V(tasks of p)| / n."""
    keys = np.concatenate([parts * n + u, parts * n + v])
    return distinct.count(keys) / n


def distinct_lines(group: np.ndarray, a: np.ndarray, b: np.ndarray, elem_bytes: int, line_bytes: int) -> int:
    """Distinct (group, cache line) pairs touched by tasks (a, b) labelled with their group.

    Vertex v's data is bytes [v * elem_bytes, (v + 1) * elem_bytes) of its array, so it covers one
    line or part of one when elem_bytes <= line_bytes, and ceil(elem_bytes / line_bytes) lines (or
    one more, when straddling) when wider: an spmm row of F = 16 floats is two 32-byte sectors.
    """
    if elem_bytes < 1 or line_bytes < 1:
        raise ValueError(f"elem_bytes and line_bytes must be >= 1, got {elem_bytes}, {line_bytes}")
    n = int(max(a.max(), b.max())) + 1
    if line_bytes % elem_bytes == 0:  # whole vertices per line (spmv, flux, pair; spmm F <= 8)
        per_line = line_bytes // elem_bytes
        lines_per_group = (n - 1) // per_line + 1
        return distinct.count(np.concatenate([group * lines_per_group + a // per_line,
                                              group * lines_per_group + b // per_line]))
    pairs = distinct.values(np.concatenate([group * n + a, group * n + b]))  # distinct (group, vertex)
    if elem_bytes % line_bytes == 0:  # whole lines per vertex, no two vertices share one
        return len(pairs) * (elem_bytes // line_bytes)
    g, v = pairs // n, pairs % n
    first = v * elem_bytes // line_bytes
    count = ((v + 1) * elem_bytes - 1) // line_bytes - first + 1
    lines_per_group = (n * elem_bytes - 1) // line_bytes + 1
    rep = np.repeat(np.arange(len(pairs)), count)
    offset = np.arange(len(rep)) - np.repeat(np.cumsum(count) - count, count)
    return distinct.count(g[rep] * lines_per_group + first[rep] + offset)


def predicted_loads(s: Schedule, elem_bytes: int, line_bytes: int, wave: int) -> dict[str, float]:
    """Block loads, wave loads and the compulsory lines of one per-vertex array."""
    block = s.block_of_task()
    compulsory = -(-s.n * elem_bytes // line_bytes)
    return {
        "block_loads": float(distinct_lines(block, s.a, s.b, elem_bytes, line_bytes)),
        "wave_loads": float(distinct_lines(block // max(1, wave), s.a, s.b, elem_bytes, line_bytes)),
        "compulsory_lines": float(compulsory),
    }


def block_balance(s: Schedule) -> float:
    """Largest block's task count over the mean (1 = perfectly balanced)."""
    sizes = np.diff(s.part_start)
    return float(sizes.max() / sizes.mean())
