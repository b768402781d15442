"""The compressed format on the CPU (NumPy reference codec): the error bound on random,
structured and adversarial inputs, the stream layout, degenerate settings, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from cases import cases
from repro.papers.comet import codec

CASES = cases()


def max_error(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.abs(x.astype(np.float64).reshape(-1) - y.astype(np.float64)).max(initial=0.0))


@pytest.mark.parametrize("name,x,ebs", CASES, ids=[c[0] for c in CASES])
def test_bound_holds(name, x, ebs):
    for eb in ebs:
        c = codec.compress(x, eb)
        y = codec.decompress(c)
        assert y.dtype == np.float32 and y.shape == (x.size,)
        assert max_error(x, y) <= np.float32(eb), (name, eb)
        assert c.widths.size == codec.nblocks(x.size)
        assert c.payload.size == 32 * c.widths.astype(int).sum()


def test_boundary_values_do_not_fall_back_to_raw():
    """Half-points of the step are where float32 rounding could break the bound; the shrunken step
    keeps them predictable, so no block is stored raw."""
    from cases import boundary_values

    v = boundary_values(0.01, 4 * codec.BLOCK, 3)
    c = codec.compress(v, 0.01)
    assert (c.widths != codec.RAW).all()
    assert max_error(v, codec.decompress(c)) <= np.float32(0.01)


def test_unpredictable_values_make_their_block_raw_and_exact():
    x = np.zeros(3 * codec.BLOCK, dtype=np.float32)
    x[codec.BLOCK + 5] = 3e38  # |q| would be far over 2^23
    x[codec.BLOCK + 6] = 0.25
    c = codec.compress(x, 1e-3)
    assert list(c.widths) == [0, codec.RAW, 0]
    y = codec.decompress(c)
    assert y[codec.BLOCK + 5] == np.float32(3e38) and y[codec.BLOCK + 6] == np.float32(0.25)


def test_zero_blocks_are_elided():
    x = np.zeros(4 * codec.BLOCK, dtype=np.float32)
    x[codec.BLOCK:2 * codec.BLOCK] = 0.004  # constant: q = 1 everywhere, the anchor
    x[3 * codec.BLOCK] = -0.0
    c = codec.compress(x, 0.01)
    assert (c.widths == 0).all() and c.payload.size == 0 and list(c.anchors) == [0, 1, 0, 0]
    assert c.nbytes == 4 * codec.PER_BLOCK_BYTES + codec.HEADER_BYTES
    assert not np.signbit(codec.decompress(c)).any()


def test_constant_blocks_are_elided_with_their_anchor():
    x = np.full(2 * codec.BLOCK, 1.2345, dtype=np.float32)
    x[codec.BLOCK:] = -7.5
    c = codec.compress(x, 1e-3)
    assert (c.widths == 0).all() and c.payload.size == 0
    step = codec.step_of(np.float32(1e-3))
    expected = np.copysign(np.floor(np.array([1.2345, 7.5], dtype=np.float32) / step) + 1, [1, -1])
    np.testing.assert_array_equal(c.anchors, expected)
    assert max_error(x, codec.decompress(c)) <= np.float32(1e-3)


def test_stream_layout_by_hand():
    """Block 0: q = [1, 3, 0, 0, ...], anchor 1 -> d = [0, 2, -3, 0, ...] -> z = [0, 4, 5, 0, ...];
    width 3. Word (c*4 + k)*3 + b has bit j = bit b of z[c*128 + 4j + k]: z[1] = 4 -> word (k=1,
    b=2) bit 0; z[2] = 5 -> words (k=2, b=0) and (k=2, b=2) bit 0."""
    eb = np.float32(0.5)
    step = codec.step_of(eb)
    x = np.zeros(codec.BLOCK, dtype=np.float32)
    x[0], x[1] = 0.5 * step, 2.5 * step  # interval midpoints: q = floor(|x| / step) + 1 = 1 and 3
    c = codec.compress(x, eb)
    assert list(c.widths) == [3] and list(c.anchors) == [1] and c.payload.size == 96
    words = c.payload.reshape(8, 4, 3)  # chunk, k, bit plane
    expected = np.zeros((8, 4, 3), dtype=np.uint32)
    expected[0, 1, 2] = 1
    expected[0, 2, 0] = expected[0, 2, 2] = 1
    np.testing.assert_array_equal(words, expected)


def test_lorenzo_prediction_makes_smooth_data_cheap():
    ramp = (np.arange(8 * codec.BLOCK, dtype=np.float32) * 0.001).astype(np.float32)
    c = codec.compress(ramp, 0.01)  # q rises by 0 or 1 per value: residual width 2 (zigzag of 0/1)
    assert c.widths.max() <= 2 and c.ratio > 14


def test_eb_zero_is_lossless():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(3000).astype(np.float32)
    x[:1500] = 0
    c = codec.compress(x, 0.0)
    y = codec.decompress(c)
    np.testing.assert_array_equal(x, y)
    assert c.widths[0] == 0 and (c.widths[2:] == codec.RAW).all()


def test_empty_input():
    c = codec.compress(np.zeros(0, dtype=np.float32), 0.1)
    assert c.n == 0 and c.payload.size == 0 and codec.decompress(c).size == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected(bad):
    x = np.ones(2000, dtype=np.float32)
    x[1234] = bad
    with pytest.raises(ValueError, match=r"non-finite values: 1 NaN/Inf, first at flat index 1234"):
        codec.compress(x, 0.1)


@pytest.mark.parametrize("eb", [-1e-3, float("nan"), float("inf"), 1e38])
def test_bad_error_bounds_are_rejected(eb):
    with pytest.raises(ValueError, match="error bound eb"):
        codec.compress(np.ones(10, dtype=np.float32), eb)


def test_wrong_dtype_is_rejected():
    with pytest.raises(ValueError, match="float32 data, got float64"):
        codec.compress(np.ones(10), 0.1)


def test_corrupt_streams_are_detected():
    x = np.random.default_rng(0).standard_normal(3000).astype(np.float32)
    c = codec.compress(x, 0.01)
    with pytest.raises(ValueError, match="payload words"):
        codec.decompress(codec.Compressed(c.n, c.eb, c.widths, c.anchors, c.payload[:-1]))
    with pytest.raises(ValueError, match="block widths"):
        codec.decompress(codec.Compressed(c.n + codec.BLOCK, c.eb, c.widths, c.anchors, c.payload))
    bad = c.widths.copy()
    bad[0] = 30
    with pytest.raises(ValueError, match="block width 30"):
        codec.decompress(codec.Compressed(c.n, c.eb, bad, c.anchors, c.payload))


def test_zigzag_and_bit_length():
    d = np.array([0, -1, 1, -2, 2, 2**24, -(2**24)], dtype=np.int32)
    z = codec.zigzag(d)
    np.testing.assert_array_equal(z, [0, 1, 2, 3, 4, 2**25, 2**25 - 1])
    np.testing.assert_array_equal(codec.unzigzag(z), d)
    np.testing.assert_array_equal(codec.bit_length(np.array([0, 1, 2, 3, 255, 256, 2**31], dtype=np.uint32)),
                                  [0, 1, 2, 2, 8, 9, 32])


def test_signs_and_zeros_survive_exactly():
    """No nonzero value becomes zero or flips sign (a ReLU's backward mask stays exact)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(20_000) * rng.choice([1e-6, 1e-3, 1.0], 20_000)).astype(np.float32)
    x[::3] = 0
    for eb in (1e-4, 0.05, 1.0):
        y = codec.decompress(codec.compress(x, eb))
        np.testing.assert_array_equal(np.sign(y), np.sign(x))


def test_multidimensional_input_flattens_in_c_order():
    x = np.random.default_rng(1).standard_normal((4, 3, 17, 19)).astype(np.float32)
    y = codec.decompress(codec.compress(x, 0.01))
    assert max_error(x, y) <= np.float32(0.01)


def _division_quantize(x: np.ndarray, eb: np.float32):
    """The v1/v2 encoder's quantiser: IEEE float32 division, the bound checked in float64."""
    step = codec.step_of(eb)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m = (np.floor(np.abs(x) / step) + np.float32(1)).astype(np.float32)
        ok = m < codec.QMAX
        m = np.where(ok, m, np.float32(1)).astype(np.float32)
        recon = np.copysign((m - np.float32(0.5)) * step, x).astype(np.float32)
        ok &= np.abs(x.astype(np.float64) - recon.astype(np.float64)) <= np.float64(eb)
    zero = x == 0
    ok |= zero
    return np.where(ok & ~zero, np.copysign(m, x), 0).astype(np.int32), ok


@pytest.mark.parametrize("name,x,ebs", CASES, ids=[c[0] for c in CASES])
def test_streams_of_the_division_encoder_still_decode(name, x, ebs, monkeypatch):
    """The quantiser is the encoder's choice: streams written with the earlier (division) quantiser
    decode with today's decoder within the bound, and mostly hold the same codes."""
    ours = [codec.compress(x, eb) for eb in ebs]
    monkeypatch.setattr(codec, "quantize", _division_quantize)
    for eb, new in zip(ebs, ours):
        old = codec.compress(x, eb)
        assert max_error(x, codec.decompress(old)) <= np.float32(eb), (name, eb)
        if np.isfinite(codec.recip_of(codec.step_of(np.float32(eb)))):
            assert abs(old.nbytes - new.nbytes) <= 0.01 * new.nbytes + 4 * codec.BLOCK, (name, eb)
        else:  # a denormal eb whose 1 / s overflows: the reciprocal encoder stores nonzero blocks raw
            assert new.nbytes >= old.nbytes and (new.widths[new.widths > 0] == codec.RAW).all()


@pytest.mark.parametrize("width", [1, 2, 7, 17, 24])
def test_plane_words_hold_lane_l_bit_b_at_word_b_bit_l(width):
    """pack_planes by its definition: word b of a group of 32 lanes has lane l's bit b at bit l."""
    planes = np.random.default_rng(width).integers(0, 1 << width, (3, 8, 4, 32), dtype=np.uint32)
    words = codec.pack_planes(planes, width)
    assert words.shape == (3, 8, 4, width) and words.dtype == np.uint32
    lanes = np.uint64(1) << np.arange(32, dtype=np.uint64)
    for b in range(width):
        want = (((planes.astype(np.uint64) >> np.uint64(b)) & np.uint64(1)) * lanes).sum(axis=-1)
        np.testing.assert_array_equal(words[..., b], want.astype(np.uint32))
