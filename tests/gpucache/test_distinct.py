"""The sort-based distinct values (repro.papers.gpucache.distinct) give np.unique's results."""

import numpy as np
import pytest

from repro.papers.gpucache import distinct


@pytest.mark.parametrize("n, high", [(0, 5), (1, 5), (7, 3), (1000, 50), (20_000, 10**9)])
def test_values_counts_and_first_indices_equal_np_unique(n, high):
    keys = np.random.default_rng(n).integers(0, high, n)
    assert distinct.count(keys) == len(np.unique(keys))
    np.testing.assert_array_equal(distinct.values(keys), np.unique(keys))
    got, first = distinct.values_and_first(keys)
    want, want_first = np.unique(keys, return_index=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(first, want_first)


@pytest.mark.parametrize("n, high", [(0, 4), (1, 4), (500, 6), (5000, 300)])
def test_rows_equal_np_unique_on_axis_0(n, high):
    pairs = np.random.default_rng(n).integers(0, high, (n, 2))
    rows, first = distinct.rows_and_first(pairs)
    want, want_first = np.unique(pairs, axis=0, return_index=True)
    np.testing.assert_array_equal(rows, want.reshape(-1, 2))
    np.testing.assert_array_equal(first, want_first)


def test_negative_pairs_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        distinct.rows_and_first(np.array([[0, -1]]))
