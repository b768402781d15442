"""nccl-tests' algbw / busbw (doc/PERFORMANCE.md of NVIDIA/nccl-tests): the correction factors as
published, and published all_reduce_perf output lines recomputed from their size and time."""

from __future__ import annotations

import pytest

from repro.papers.interconnect.busbw import COLLECTIVES, algbw, bus_factor, busbw


@pytest.mark.parametrize("op, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("reduce_scatter", 4, 0.75), ("all_gather", 8, 0.875), ("all_to_all", 2, 0.5),
    ("broadcast", 8, 1.0), ("reduce", 4, 1.0), ("all_reduce", 1, 0.0),
])
def test_published_factors(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_algbw_is_bytes_over_seconds_in_gb():
    assert algbw(1e9, 0.5) == 2.0
    assert busbw("all_reduce", 1 << 30, 0.01, 4) == pytest.approx((1 << 30) / 0.01 / 1e9 * 1.5)


# all_reduce_perf -b 8 -e 1G -f 2 -g 1 on p3dn.24xlarge nodes (8 V100 each) over EFA, as published
# in public gists: (size B, time us, ranks, algbw GB/s, busbw GB/s), the rank count = 8 x nodes.
PUBLISHED = [(16384, 174.9, 16, 0.09, 0.18), (16384, 336.5, 32, 0.05, 0.09), (16384, 644.3, 64, 0.03, 0.05)]


@pytest.mark.parametrize("size, time_us, n, alg, bus", PUBLISHED)
def test_published_all_reduce_lines(size, time_us, n, alg, bus):
    assert round(algbw(size, time_us * 1e-6), 2) == alg
    assert round(busbw("all_reduce", size, time_us * 1e-6, n), 2) == bus


def test_every_measured_collective_has_a_factor():
    assert all(bus_factor(op, 4) > 0 for op in COLLECTIVES)


@pytest.mark.parametrize("call, match", [(lambda: bus_factor("gather", 2), "unknown collective"),
                                         (lambda: bus_factor("all_reduce", 0), "positive integer"),
                                         (lambda: algbw(8, 0.0), "time must be positive")])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
