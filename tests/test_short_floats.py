"""Short floats (``fedemstats.compression.short_floats``): float32 cut to k mantissa bits, 9 + k bits
each on the wire, in which the quantised start sends θ_0 (issue 12, round 0).

Checked against float32 itself and NumPy's own rounding: rounding is to the nearest short float
(error at most half a unit of the k-th bit), the round trip through the bytes is exact, a value
carries its width, and malformed input is refused."""
import numpy as np
import pytest
from _hypothesis_profiles import profile
from hypothesis import given
from hypothesis import strategies as st

from fedemstats.compression.short_floats import (FLOAT32_MANTISSA_BITS, decode_short_floats, encode_short_floats,
                                                 mantissa_bits, round_mantissa, short_float_bits)

PROFILE = profile("short-floats", 100, 1000)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@PROFILE
@given(values=st.lists(st.floats(-2.0 ** 100, 2.0 ** 100, allow_nan=False, width=32), min_size=1, max_size=40),
       bits=st.integers(0, FLOAT32_MANTISSA_BITS))
def test_rounding_is_to_the_nearest_short_float_and_the_bytes_round_trip(values, bits):
    x = np.array(values, dtype=np.float32)
    r = round_mantissa(x, bits)
    assert r.dtype == np.float32 and mantissa_bits(r) <= bits
    assert np.array_equal(np.signbit(r[r != 0]), np.signbit(x[r != 0]))
    # half a unit of the k-th mantissa bit, relative to the value's binade (float32's normal range)
    normal = np.abs(x) >= np.finfo(np.float32).tiny
    binade = 2.0 ** np.floor(np.log2(np.abs(x[normal]).astype(np.float64)))
    err = np.abs(r[normal].astype(np.float64) - x[normal].astype(np.float64))
    assert np.all(err <= binade * 2.0 ** -(bits + 1))
    # no other short float of that width is nearer: the neighbour one unit away on either side
    unit = binade * 2.0 ** -bits
    assert np.all(err <= np.abs(r[normal] + unit - x[normal]) + 1e-300)
    assert np.all(err <= np.abs(r[normal] - unit - x[normal]) + 1e-300)
    payload = encode_short_floats(r, bits)
    assert len(payload) == -(-short_float_bits(r.size, bits) // 8)
    assert np.array_equal(decode_short_floats(payload, r.size, bits).view(np.uint32), r.view(np.uint32))


def test_full_width_is_float32_and_a_value_carries_its_width():
    x = np.array([1.0, 0.1, -3.5e-20, 7.0e20], dtype=np.float32)
    assert np.array_equal(round_mantissa(x, FLOAT32_MANTISSA_BITS), x)
    assert mantissa_bits(x) == FLOAT32_MANTISSA_BITS  # 0.1 needs them all
    assert mantissa_bits(np.array([1.0, -2.0, 0.0, 4.0], dtype=np.float32)) == 0  # powers of two
    assert mantissa_bits(np.array([1.5, 1.25], dtype=np.float32)) == 2
    assert np.array_equal(round_mantissa(np.array([1.3, 1.2, -1.8], dtype=np.float32), 1), [1.5, 1.0, -2.0])
    assert short_float_bits(10, 12) == 10 * 21


def test_rounding_past_the_largest_float_gives_inf():
    # callers (the quantised start) reject a message that is not finite
    assert np.isinf(round_mantissa(np.array([_FLOAT32_MAX], dtype=np.float32), 4))[0]


@pytest.mark.parametrize("bits", [-1, FLOAT32_MANTISSA_BITS + 1])
def test_a_width_outside_float32s_mantissa_is_refused(bits):
    with pytest.raises(ValueError, match="0 to 23 mantissa bits"):
        round_mantissa(np.ones(3, dtype=np.float32), bits)
    with pytest.raises(ValueError, match="0 to 23 mantissa bits"):
        short_float_bits(3, bits)


def test_values_wider_than_the_width_and_payloads_of_the_wrong_length_are_refused():
    x = np.array([0.1, 0.2], dtype=np.float32)
    with pytest.raises(ValueError, match="round them first"):
        encode_short_floats(x, 8)
    payload = encode_short_floats(round_mantissa(x, 8), 8)
    with pytest.raises(ValueError, match="take 5 bytes, got 4"):
        decode_short_floats(payload[:-1], 2, 8)
    with pytest.raises(ValueError, match="take 5 bytes, got 6"):
        decode_short_floats(payload + b"\0", 2, 8)
