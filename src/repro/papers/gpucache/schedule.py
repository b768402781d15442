"""A partition as the schedule a kernel executes: thread block b runs part b's tasks.

The tasks are grouped by part (stable: in default order inside a part) and the data are
relabelled in first-touch order of that task sequence, so that the vertices of one part lie
together in memory: the task and data reorganisation of the graph model. The default schedule
keeps the input's own task order and data layout (what the program does unreordered).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.papers.gpucache import distinct
from repro.papers.gpucache.partition import Partition
from repro.papers.gpucache.taskgraph import TaskGraph


@dataclass
class Schedule:
    method: str
    a: np.ndarray           # first vertex of each task, new labels, executed order
    b: np.ndarray           # second vertex
    w_ab: np.ndarray        # weight scaling b's data into a's result
    w_ba: np.ndarray
    part_start: np.ndarray  # block b runs tasks part_start[b] .. part_start[b + 1] - 1 (k + 1 entries)
    new_id: np.ndarray      # new label of each original vertex
    n: int

    @property
    def k(self) -> int:
        return len(self.part_start) - 1

    def block_of_task(self) -> np.ndarray:
        return np.repeat(np.arange(self.k), np.diff(self.part_start))


def first_touch(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """New vertex labels in order of first touch by the task sequence (a[0], b[0], a[1], ...)."""
    seq = np.stack([a, b], axis=1).ravel()
    vertices, first = distinct.values_and_first(seq)
    new_id = np.empty(n, np.int64)
    new_id[vertices[np.argsort(first, kind="stable")]] = np.arange(len(vertices))
    return new_id


def from_partition(g: TaskGraph, p: Partition) -> Schedule:
    order = np.argsort(p.parts, kind="stable")
    counts = np.bincount(p.parts, minlength=p.k)
    part_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    u, v = g.u[order], g.v[order]
    new_id = np.arange(g.n, dtype=np.int64) if p.method == "default" else first_touch(u, v, g.n)
    return Schedule(p.method, new_id[u], new_id[v], g.w_uv[order], g.w_vu[order], part_start, new_id, g.n)


def relabel(values: np.ndarray, s: Schedule) -> np.ndarray:
    """Per-vertex data (first axis: original vertex) in the schedule's layout."""
    out = np.empty_like(values)
    out[s.new_id] = values
    return out
