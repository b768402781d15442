"""Inputs for the codec property tests, shared by the CPU and GPU tests: random, structured and
adversarial float32 arrays, each with the error bounds to try."""

from __future__ import annotations

import numpy as np

from repro.papers.comet import codec


def boundary_values(eb: float, n: int, seed: int) -> np.ndarray:
    """Values at and one float32 step either side of quantisation half-points (k + 1/2) * step."""
    rng = np.random.default_rng(seed)
    step = codec.step_of(np.float32(eb))
    k = rng.integers(-8000, 8000, n // 3 + 1).astype(np.float32)
    mid = ((k + np.float32(0.5)) * step).astype(np.float32)
    return np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))])[:n]


def cases() -> list[tuple[str, np.ndarray, list[float]]]:
    rng = np.random.default_rng(0)
    n = 5 * codec.BLOCK + 37  # a partial last block, not a multiple of 4
    smooth = np.cumsum(rng.standard_normal(n) * 0.05).astype(np.float32)
    relu = np.maximum(np.convolve(rng.standard_normal(n + 15), np.ones(16) / 4, "valid"), 0).astype(np.float32)
    huge = rng.standard_normal(n).astype(np.float32)
    huge[::97] = 3e38
    huge[5::211] = -1e30
    huge[7::50] = 1e-30
    constant = np.full(n, 1.2345, dtype=np.float32)
    constant[2 * codec.BLOCK:3 * codec.BLOCK] = 0.0
    constant[3 * codec.BLOCK:] = -7.5
    denormal = (rng.standard_normal(n) * 1e-39).astype(np.float32)
    sparse = np.where(rng.random(n) < 0.9, 0.0, rng.standard_normal(n) * 100).astype(np.float32)
    sparse[: codec.BLOCK] = -0.0
    return [
        ("gaussian", rng.standard_normal(n).astype(np.float32), [1e-4, 1e-2, 0.5]),
        ("uniform_wide", rng.uniform(-1e4, 1e4, n).astype(np.float32), [1e-3, 1.0]),
        ("smooth", smooth, [1e-3, 0.05]),
        ("relu_sparse", relu, [0.01, 0.1]),
        ("huge_ranges", huge, [1e-3, 1.0]),
        ("constant_blocks", constant, [1e-6, 0.1]),
        ("denormals", denormal, [1e-42, 1e-40, 1e-3]),
        ("boundaries", boundary_values(0.01, n, 1), [0.01]),
        ("boundaries_small_eb", boundary_values(1e-6, n, 2), [1e-6]),
        ("sparse_large", sparse, [0.5]),
        ("single", np.array([0.3], dtype=np.float32), [0.1]),
        ("tiny_max_q", np.array([0.0, 8e6, -8e6, 9e6], dtype=np.float32), [0.5]),
    ]
