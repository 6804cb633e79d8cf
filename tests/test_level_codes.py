"""The variable-length level codes (``compression/_codes.py``): Rice and Elias-gamma.

Round trips and exact lengths on levels Hypothesis draws (any magnitudes, all zeros,
one outlier far above the rest), the Rice parameter against a brute-force search, and
untrusted bytes: truncated or extended rows and levels above s are errors, never reads
past the array.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedemstats.compression import RandomDithering
from fedemstats.compression._codes import (RICE_K_BITS, elias_row_bits, pack_elias, pack_rice, rice_parameters,
                                           unpack_elias, unpack_rice)


def _rice_length(row, k):
    mags = np.abs(row.astype(np.int64))
    return RICE_K_BITS + int(np.sum((mags >> k) + 1 + k + (mags > 0)))


@st.composite
def level_matrices(draw):
    s = draw(st.sampled_from([1, 2, 4, 8, 1024, 2 ** 30]))
    rows, q = draw(st.integers(1, 4)), draw(st.integers(1, 70))
    levels = draw(hnp.arrays(np.int32, (rows, q), elements=st.integers(-s, s)))
    return s, levels


@settings(max_examples=200, deadline=None)
@given(level_matrices())
def test_rice_round_trips_with_the_shortest_parameter(case):
    s, levels = case
    ks, bits = rice_parameters(levels)
    for row, k, b in zip(levels, ks, bits):
        assert b == _rice_length(row, k)
        assert b == min(_rice_length(row, j) for j in range(2 ** RICE_K_BITS))
    packed = pack_rice(levels, ks, bits)
    assert packed.shape[1] == -(-int(bits.max()) // 8)
    out, used = unpack_rice(packed, levels.shape[1], s)
    np.testing.assert_array_equal(out, levels)
    np.testing.assert_array_equal(used, bits)


@settings(max_examples=100, deadline=None)
@given(level_matrices())
def test_elias_round_trips(case):
    _, levels = case
    bits = elias_row_bits(levels)
    out, used = unpack_elias(pack_elias(levels, bits), levels.shape[1])
    np.testing.assert_array_equal(out, levels)
    np.testing.assert_array_equal(used, bits)


def test_rice_parameter_follows_the_scale_of_the_levels():
    small = np.array([[0, 1, -1, 0, 0, 1, 0, -1]], dtype=np.int32)
    large = np.array([[300, -280, 310, -290, 305, -295, 299, 301]], dtype=np.int32)
    assert rice_parameters(small)[0][0] == 0
    k, bits = rice_parameters(large)
    # 7 to 9 tie (10 bits and a sign per level), far from the fixed code of s = 1024 (12)
    assert k[0] == 7 and bits[0] == RICE_K_BITS + 8 * 11
    outlier = np.zeros((1, 64), dtype=np.int32)
    outlier[0, 3] = 1000                      # one long unary run (> 32 bits at k = 0)
    ks, bits = rice_parameters(outlier)
    np.testing.assert_array_equal(unpack_rice(pack_rice(outlier, ks, bits), 64, 1000)[0], outlier)


@pytest.mark.parametrize("cut", ["truncate", "extend-zeros"])
def test_rice_rejects_a_row_of_the_wrong_length(cut):
    levels = np.array([[3, -4, 0, 1, 2, -2, 4, 0, 0, 1]], dtype=np.int32)
    ks, bits = rice_parameters(levels)
    packed = pack_rice(levels, ks, bits)
    if cut == "truncate":
        with pytest.raises(ValueError, match="length"):
            unpack_rice(packed[:, :-1], 10, 4)
    else:
        # extra zero bytes decode, but to a longer row than the code: the dithering check refuses it
        _, used = unpack_rice(np.hstack([packed, np.zeros((1, 2), np.uint8)]), 10, 4)
        assert -(-used[0] // 8) == packed.shape[1]


def test_rice_rejects_levels_above_s():
    levels = np.array([[5, 0, 1]], dtype=np.int32)
    ks, bits = rice_parameters(levels)
    with pytest.raises(ValueError, match="above s"):
        unpack_rice(pack_rice(levels, ks, bits), 3, 4)
    with pytest.raises(ValueError, match="above s"):
        unpack_rice(np.zeros((1, 64), np.uint8), 3, 4)   # k = 0 and an endless unary run


@pytest.mark.parametrize("s", [4, 1024])
def test_rice_and_fixed_carry_the_same_levels(s):
    """The coding changes the bits, never the decoded values."""
    x = np.random.default_rng(0).normal(size=(6, 200))
    rice, fixed = RandomDithering(s=s), RandomDithering(s=s, coding="fixed")
    m_rice, m_fixed = rice.compress(x, np.random.default_rng(1)), fixed.compress(x, np.random.default_rng(1))
    np.testing.assert_array_equal(rice.decompress(m_rice), fixed.decompress(m_fixed))
    np.testing.assert_array_equal(rice.decompress(rice.decode(rice.encode(m_rice), 200)), rice.decompress(m_rice))
    assert np.all(rice.row_bits(m_rice) < fixed.row_bits(m_fixed))


@pytest.mark.parametrize("comp", [RandomDithering(s=4), RandomDithering(s=4, coding="fixed"),
                                  RandomDithering(s=2, coding="elias"), RandomDithering(s=1024),
                                  RandomDithering(s=4, r=np.inf)], ids=repr)
def test_the_senders_decoding_is_the_receivers(comp):
    """compress_decoded takes the decoded rows and the noise estimate from the levels it drew;
    they equal what a receiver decodes from the message."""
    x = np.random.default_rng(2).normal(size=(5, 40)) * np.array([1e-3, 1.0, 1e3, 0.0, 5.0])[:, None]
    blocks = np.array([0, 1, 11, 40])
    message, decoded, (signal, noise) = comp.compress_decoded(x, np.random.default_rng(3), blocks)
    again = comp.compress(x, np.random.default_rng(3), blocks)
    assert comp.encode(message) == comp.encode(again)
    np.testing.assert_array_equal(decoded, comp.decompress(message))
    ref_signal, ref_noise = comp.noise_estimate(message)
    np.testing.assert_array_equal(signal, ref_signal)
    np.testing.assert_array_equal(noise, ref_noise)
    # the receiver's one-decoding path gives the same values and estimate
    values, (signal2, noise2) = comp.decompress_and_noise(message)
    np.testing.assert_array_equal(values, decoded)
    np.testing.assert_array_equal(signal2, signal)
    np.testing.assert_array_equal(noise2, noise)
