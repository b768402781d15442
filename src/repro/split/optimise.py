"""Which exit and which split point: the latency of every configuration and the searches over them.

A configuration is (exit ``e``, split ``s``) with ``0 <= s <= attach[e]``. The device runs layers
``0..s-1``; if ``s < attach[e]`` it sends the ``bytes[s]`` that cross split ``s`` (``8 bytes /
bandwidth + rtt``) and the edge runs layers ``s..attach[e]-1`` and head ``e``; if ``s == attach[e]``
the device runs head ``e`` too and nothing is sent (device only). The result (a class label) going
back is left out, as in Edgent's model.

:func:`best` is Edgent's search: the exits from the most accurate down, for each the split of least
latency, the first that meets the deadline. :func:`exhaustive` enumerates every configuration (the
oracle's search); they must agree on the same latencies (tests/split)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Profile:
    """One network on one device-edge pair: per-layer times (s) on each side, per-exit head times,
    the bytes crossing each split point (L + 1), each exit's attach point and accuracy."""

    device: np.ndarray
    edge: np.ndarray
    device_head: np.ndarray
    edge_head: np.ndarray
    bytes: np.ndarray
    attach: np.ndarray
    accuracy: np.ndarray

    def __post_init__(self):
        for name in ("device", "edge", "device_head", "edge_head", "bytes", "attach", "accuracy"):
            setattr(self, name, np.asarray(getattr(self, name), float if name != "attach" else int))
        n, e = len(self.device), len(self.attach)
        if len(self.edge) != n or len(self.bytes) != n + 1:
            raise ValueError(f"need {n} edge times and {n + 1} split sizes, got {len(self.edge)} and {len(self.bytes)}")
        if not (len(self.device_head) == len(self.edge_head) == len(self.accuracy) == e):
            raise ValueError("one head time on each side and one accuracy per exit")
        if self.attach.max() > n or self.attach.min() < 1:
            raise ValueError(f"attach points must lie in 1..{n}: {self.attach.tolist()}")

    def scaled(self, device_slowdown: float = 1.0, edge_slowdown: float = 1.0) -> "Profile":
        return Profile(self.device * device_slowdown, self.edge * edge_slowdown, self.device_head * device_slowdown,
                       self.edge_head * edge_slowdown, self.bytes, self.attach, self.accuracy)


def latency(p: Profile, bandwidth_bps: float, rtt_s: float = 0.0) -> np.ndarray:
    """(exits, L + 1) seconds; inf where the split lies past the exit."""
    n = len(p.device)
    dev = np.concatenate([[0.0], np.cumsum(p.device)])
    edge = np.concatenate([[0.0], np.cumsum(p.edge)])
    out = np.full((len(p.attach), n + 1), np.inf)
    for e, a in enumerate(p.attach):
        offload = dev[:a] + 8.0 * p.bytes[:a] / bandwidth_bps + rtt_s + (edge[a] - edge[:a]) + p.edge_head[e]
        out[e, :a] = offload
        out[e, a] = dev[a] + p.device_head[e]
    return out


@dataclass(frozen=True)
class Choice:
    exit: int  # -1: no configuration meets the deadline
    split: int

    @property
    def feasible(self) -> bool:
        return self.exit >= 0


NONE = Choice(-1, -1)


def best(table: np.ndarray, accuracy: np.ndarray, deadline_s: float) -> Choice:
    """Edgent's search on a latency table: exits by accuracy (highest first; on a tie the earlier,
    cheaper exit), for each the fastest split; the first whose fastest split meets the deadline."""
    for e in sorted(range(len(accuracy)), key=lambda k: (-accuracy[k], k)):
        s = int(np.argmin(table[e]))
        if table[e, s] <= deadline_s:
            return Choice(e, s)
    return NONE


def exhaustive(table: np.ndarray, accuracy: np.ndarray, deadline_s: float) -> Choice:
    """Every configuration: the most accurate one that meets the deadline, the fastest on a tie."""
    found, key = NONE, None
    for e in range(table.shape[0]):
        for s in range(table.shape[1]):
            if table[e, s] <= deadline_s and (key is None or (-accuracy[e], table[e, s]) < key):
                found, key = Choice(e, s), (-accuracy[e], table[e, s])
    return found


def outcome(choice: Choice, measured: np.ndarray, accuracy: np.ndarray, deadline_s: float) -> tuple[float, float, bool]:
    """(measured latency, accuracy delivered, deadline met) of a choice: a late answer delivers no
    accuracy; no choice delivers none and has no latency."""
    if not choice.feasible:
        return float("nan"), 0.0, False
    t = float(measured[choice.exit, choice.split])
    met = t <= deadline_s
    return t, float(accuracy[choice.exit]) if met else 0.0, met
