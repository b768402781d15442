"""nccl-tests' bandwidth definitions (doc/PERFORMANCE.md of NVIDIA/nccl-tests), so our collective
numbers read on the same scale as theirs.

S is the size in bytes of the whole array, as nccl-tests counts it: an all_reduce's, broadcast's
or reduce's buffer; an all_gather's output (n inputs of S / n); a reduce_scatter's input (n
outputs of S / n). t is the time of one operation.

- algbw = S / t
- busbw = algbw * factor(n): all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all
  (n-1)/n; broadcast and reduce 1. busbw is what each rank's link must carry, so it compares
  with the hardware's peak whatever n is.
"""

from __future__ import annotations

COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for collective ``op`` on ``n`` ranks."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"rank count must be a positive integer, got {n!r}")
    factors = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
               "all_to_all": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}
    if op not in factors:
        raise ValueError(f"unknown collective {op!r}; choose from {', '.join(factors)}")
    return factors[op]


def algbw(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s)."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, got {time_s}")
    return size_bytes / time_s / 1e9


def busbw(op: str, size_bytes: float, time_s: float, n: int) -> float:
    """Bus bandwidth in GB/s."""
    return algbw(size_bytes, time_s) * bus_factor(op, n)
