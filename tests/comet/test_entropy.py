"""The entropy-stage size model (repro.papers.comet.entropy): optimal code lengths, zero runs and
their digits, and sizes consistent with the codec's own stream."""

from __future__ import annotations

import numpy as np
import pytest

from repro.papers.comet import codec, entropy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_huffman_lengths_are_a_complete_optimal_prefix_code(seed):
    counts = np.random.default_rng(seed).integers(0, 1000, 40)
    counts[::7] = 0
    lengths = entropy.huffman_lengths(counts)
    used = counts > 0
    assert (lengths[~used] == 0).all() and (lengths[used] > 0).all()
    assert np.sum(2.0 ** -lengths[used]) == pytest.approx(1.0)  # Kraft: complete
    p = counts[used] / counts.sum()
    h = -(p * np.log2(p)).sum()
    avg = (p * lengths[used]).sum()
    assert h <= avg < h + 1  # within one bit of the entropy, never under it
    assert list(entropy.huffman_lengths(np.array([0, 5, 0]))) == [0, 1, 0]


def test_zero_runs_stay_inside_their_block_and_digits_are_bijective_base_2():
    z = np.array([[0, 0, 1, 0], [0, 1, 1, 0]], dtype=np.uint32)
    assert list(entropy.zero_runs(z)) == [2, 1, 1, 1]  # the run ending row 0 does not join row 1's
    # L = 1..7: A, B, AA, BA, AB, BB, AAA
    assert entropy.run_digits(np.arange(1, 8)) == (8, 5)
    assert entropy.run_digits(np.array([1024])) == (9, 1)  # 1025 = 0b10000000001


def test_sizes_follow_the_codes():
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal(50_000), 0).astype(np.float32)
    got = entropy.sizes(x, 0.1)
    assert got["codec_bytes"] == codec.compress(x, 0.1).nbytes
    assert got["huffman_bytes"] < got["codec_bytes"]  # skewed codes: fixed widths waste bits
    sparse = np.zeros(50_000, dtype=np.float32)
    sparse[::97] = 3.0  # long zero runs inside every block
    s = entropy.sizes(sparse, 0.1)
    assert s["huffman_runs_bytes"] < s["huffman_bytes"]
    flat = entropy.sizes(np.zeros(5000, dtype=np.float32), 0.1)  # every block elided: nothing coded
    assert flat["huffman_bytes"] == flat["huffman_runs_bytes"] == codec.HEADER_BYTES + codec.PER_BLOCK_BYTES * 5
    with pytest.raises(ValueError, match="non-finite"):
        entropy.sizes(np.array([1.0, np.nan], dtype=np.float32), 0.1)
