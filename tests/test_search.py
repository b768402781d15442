"""repro.search.largest_fit: the bounded search behind SuperNeurons' depth and COMET's max batch."""

from __future__ import annotations

import pytest

from repro.search import largest_fit


def _limit(limit, calls=None):
    def fits(n):
        if calls is not None:
            calls.append(n)
        return n <= limit
    return fits


@pytest.mark.parametrize("limit", [1, 5, 127, 128, 1000, 4095])
def test_finds_the_limit_exactly_with_unit_tolerance(limit):
    calls = []
    assert largest_fit(_limit(limit, calls), 128, 1, 8192) == (limit, "exact")
    assert len(calls) <= 2 * 14  # doubling/halving plus bisection: logarithmic


def test_tolerances_stop_early_but_never_overshoot():
    best, bound = largest_fit(_limit(1000), 16, 1, 100_000, rel_tol=0.05)
    assert bound == "exact" and 1000 / 1.05 <= best <= 1000
    best, _ = largest_fit(_limit(1000), 16, 1, 100_000, abs_tol=64)
    assert 1000 - 64 <= best <= 1000


def test_ceiling_nothing_fits_and_time_budget():
    assert largest_fit(_limit(10**9), 8, 1, 100) == (100, "ceiling")  # the limit itself is probed
    assert largest_fit(_limit(0), 8, 1, 100) == (None, "exact")
    assert largest_fit(_limit(3), 8, 4, 100) == (None, "exact")  # nothing in [lo, hi] fits
    best, bound = largest_fit(_limit(500), 16, 1, 2000, budget_s=-1)  # out of time after the first probe
    assert (best, bound) == (16, "time")


def test_bad_range_is_rejected():
    with pytest.raises(ValueError, match="1 <= lo <= hi"):
        largest_fit(_limit(5), 1, 0, 10)
