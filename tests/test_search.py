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


def test_a_smaller_growth_brackets_a_near_start_in_fewer_probes():
    """From a start 15% under the answer, x1.25 steps bracket it within 25% at the second probe
    (doubling: 100%) and finish in 4 probes instead of 6; it still goes down by /1.25 and stops at
    the ceiling, and 2 is the default."""
    calls = []
    assert largest_fit(_limit(1000, calls), 850, 1, 4096, rel_tol=0.1, growth=1.25) == (956, "exact")
    assert calls == [850, 1062, 956, 1009]
    doubling = []
    assert largest_fit(_limit(1000, doubling), 850, 1, 4096, rel_tol=0.1) == (956, "exact")
    assert doubling == [850, 1700, 1275, 1062, 956, 1009]
    assert largest_fit(_limit(100, calls), 850, 1, 4096, growth=1.25) == (100, "exact")  # down by /1.25
    assert largest_fit(_limit(10**6), 3, 1, 5, growth=1.1) == (5, "ceiling")  # steps of at least one
    with pytest.raises(ValueError, match="growth must be > 1"):
        largest_fit(_limit(5), 1, 1, 10, growth=1.0)


def test_a_start_far_above_the_limit_steps_down_faster_each_failure():
    """Session 7's AlexNet: a start 2.4x too high with growth 1.25 spent its whole budget failing;
    each further failure now steps down by the next power of the factor."""
    calls = []
    best, bound = largest_fit(_limit(400, calls), 1536, 1, 4096, rel_tol=0.1, growth=1.25)
    fails = [n for n in calls if n > 400]
    assert bound == "exact" and 400 / 1.1 <= best <= 400
    assert fails[:4] == [1536, 1228, 785, 401] and len(calls) <= 8, calls
