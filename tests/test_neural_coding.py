"""Entropy coder of binary masks (fedemstats.neural.coding)."""
import numpy as np
import pytest

from fedemstats.neural.coding import (binary_entropy, coded_bits, decode_mask, empirical_entropy_bits,
                                      encode_mask)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 100_000])
@pytest.mark.parametrize("p", [0.0, 0.01, 0.5, 0.99, 1.0])
def test_round_trip_is_exact(n, p):
    rng = np.random.default_rng(n + int(100 * p))
    mask = rng.random(n) < p
    code = encode_mask(mask)
    assert isinstance(code, bytes)
    np.testing.assert_array_equal(decode_mask(code, n), mask)


def test_round_trip_of_structured_masks():
    n = 50_000
    patterns = [np.arange(n) % 2 == 0,                      # alternating: the adaptive model sees p = 1/2
                np.repeat([True, False], n // 2),            # two long runs: a changing source
                np.arange(n) % 997 == 0]                     # periodic and sparse
    for mask in patterns:
        np.testing.assert_array_equal(decode_mask(encode_mask(mask), n), mask)


def test_int_and_bool_masks_give_the_same_code():
    mask = np.random.default_rng(1).random(5000) < 0.2
    assert encode_mask(mask) == encode_mask(mask.astype(np.int64))


@pytest.mark.parametrize("p", [0.01, 0.1, 0.5, 0.9, 0.99])
def test_code_length_is_close_to_the_empirical_entropy(p):
    n = 100_000
    mask = np.random.default_rng(7).random(n) < p
    ideal = n * empirical_entropy_bits(mask)
    bits = coded_bits(mask)
    # KT regret (1/2) log2 n + 2-bit flush + byte rounding, plus the integer
    # coder's truncation loss (< 2^-14 nats per symbol, i.e. < 1e-4 bits).
    bound = ideal + 0.5 * np.log2(n) + 1e-4 * n + 16
    assert bits <= bound, (bits, ideal)
    assert bits >= ideal - 16  # no code beats the entropy by more than rounding


def test_degenerate_masks_cost_a_few_bytes():
    for mask in (np.zeros(200_000, bool), np.ones(200_000, bool)):
        assert coded_bits(mask) <= 64


def test_sparse_masks_compress_well_below_one_bit():
    mask = np.random.default_rng(3).random(100_000) < 0.01
    assert coded_bits(mask) / mask.size < 0.1  # H(0.01) = 0.081


def test_binary_entropy_values():
    np.testing.assert_allclose(binary_entropy([0.0, 0.5, 1.0, 0.11]), [0.0, 1.0, 0.0, 0.4999], atol=1e-4)
    assert empirical_entropy_bits(np.array([1, 0, 0, 0])) == pytest.approx(binary_entropy(0.25))
    assert empirical_entropy_bits(np.array([], dtype=bool)) == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="1-D"):
        encode_mask(np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match="0/1"):
        encode_mask(np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="bytes"):
        decode_mask([1, 2, 3], 3)
    with pytest.raises(ValueError, match="mask length"):
        decode_mask(b"", -1)
