"""Per-client counter-based streams (issue 15 item 3): known answers, reproducibility, statistics.

The generator must be Random123's Philox4x64-10 (published known-answer vectors and
NumPy's ``Philox``), each client's row must depend on (entropy, round, client) alone
(the Flower node's single-row call equals its row of the in-process batch, bit for
bit, through every compressor), and the streams must look independent and uniform.
Statistical thresholds are 4.5 standard errors (or p > 1e-4), with fixed seeds.
"""
import math

import numpy as np
import pytest
from scipy import stats

from fedemstats.compression import ClientStreams, make_compressor
from fedemstats.compression.base import seed_rows, uniform_rows
from fedemstats.compression.streams import numpy_philox, philox4x64, stream_keys

from test_compression import COMPRESSORS, _x, assert_unbiased

U64 = 2 ** 64
# Random123 kat_vectors, philox4x64 10: counter (4 words), key (2 words) -> 4 words
KAT = [
    ((0, 0, 0, 0), (0, 0),
     (0x16554d9eca36314c, 0xdb20fe9d672d0fdc, 0xd7e772cee186176b, 0x7e68b68aec7ba23b)),
    ((U64 - 1,) * 4, (U64 - 1,) * 2,
     (0x87b092c3013fe90b, 0x438c3c67be8d0224, 0x9cc7d7c69cd777b6, 0xa09caebf594f0ba0)),
    ((0x243f6a8885a308d3, 0x13198a2e03707344, 0xa4093822299f31d0, 0x082efa98ec4e6c89),
     (0x452821e638d01377, 0xbe5466cf34e90c6c),
     (0xa528f45403e61d95, 0x38c72dbd566e9788, 0xa5a1610e72fd18b5, 0x57bd43b5e52b7fe6)),
]
N_SE = 4.5
P_MIN = 1e-4
ENTROPY, ROUND = 123456789, 17
SPECS = ["dither:s=4", "dither:s=3,r=inf,coding=elias", "blockp:p=2", "blockp:p=inf",
         "randk:k=5", "randk:k=5,dtype=float32", "identity"]
BLOCKS = np.array([0, 7, 20, 30], dtype=np.int64)


@pytest.mark.parametrize("counter, key, expected", KAT)
def test_philox_matches_published_known_answers(counter, key, expected):
    words = philox4x64(*[np.uint64(c) for c in counter], *[np.uint64(k) for k in key])
    assert [int(w) for w in words] == list(expected)


def test_rows_equal_numpys_philox_generator():
    """Row j of the t-th draw is NumPy's Generator(Philox(key_j)) at counter (0, t, 0, 0):
    doubles bit for bit, uint64 words equal to random_raw, widths not multiples of 4."""
    streams = ClientStreams(ENTROPY, ROUND, [0, 5, 2 ** 32 - 1])
    draws = [streams.uniform(10), streams.uint64(), streams.uniform(3), streams.uniform(0)]
    for j, key in enumerate(streams.keys):
        np.testing.assert_array_equal(draws[0][j], np.random.Generator(numpy_philox(key, 0)).random(10))
        assert draws[1][j] == numpy_philox(key, 1).random_raw()
        np.testing.assert_array_equal(draws[2][j], np.random.Generator(numpy_philox(key, 2)).random(3))
    assert draws[3].shape == (3, 0) and streams.draws == 4


def test_same_inputs_same_draws_and_single_row_equals_its_batch_row():
    clients = np.array([3, 99, 7, 0, 12])
    batch, again = ClientStreams(ENTROPY, ROUND, clients), ClientStreams(ENTROPY, ROUND, clients)
    a = [batch.uniform(9), batch.uint64(), batch.uniform(4)]
    np.testing.assert_array_equal(a[0], again.uniform(9))
    for j, c in enumerate(clients):  # the Flower node: its own client id alone
        alone = ClientStreams(ENTROPY, ROUND, [c])
        np.testing.assert_array_equal(alone.uniform(9)[0], a[0][j])
        assert alone.uint64()[0] == a[1][j]
        np.testing.assert_array_equal(alone.uniform(4)[0], a[2][j])
    # a permuted batch and a sub-batch from rows() give each client the same row
    perm = ClientStreams(ENTROPY, ROUND, clients[::-1]).uniform(9)
    np.testing.assert_array_equal(perm[::-1], a[0])
    sub = ClientStreams(ENTROPY, ROUND, clients)
    sub.uniform(9)
    np.testing.assert_array_equal(sub.rows([1, 3]).uint64(), a[1][[1, 3]])


@pytest.mark.parametrize("other", [(ENTROPY + 1, ROUND, 5), (ENTROPY, ROUND + 1, 5), (ENTROPY, ROUND, 6)],
                         ids=["entropy", "round", "client"])
def test_different_entropy_round_or_client_draw_differently(other):
    u = ClientStreams(ENTROPY, ROUND, [5]).uniform(64)
    v = ClientStreams(other[0], other[1], [other[2]]).uniform(64)
    assert not np.any(u == v)


def test_keys_are_distinct_over_rounds_and_clients():
    keys = np.vstack([stream_keys(ENTROPY, k, np.arange(50_000)) for k in range(4)])
    assert np.unique(keys, axis=0).shape[0] == keys.shape[0]


def test_uniform_draws_are_uniform():
    u = ClientStreams(ENTROPY, ROUND, np.arange(1000)).uniform(1000).ravel()  # 1e6 draws
    assert stats.kstest(u, "uniform").pvalue > P_MIN
    counts = np.bincount((u * 100).astype(np.int64), minlength=100)
    assert stats.chisquare(counts).pvalue > P_MIN
    assert u.min() >= 0.0 and u.max() < 1.0


def test_uint64_bits_are_fair():
    words = ClientStreams(ENTROPY, ROUND, np.arange(100_000)).uint64()
    bits = (words[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    freq = bits.mean(axis=0)
    assert np.all(np.abs(freq - 0.5) < N_SE * 0.5 / math.sqrt(words.size)), freq


def _assert_uncorrelated(a, b):
    r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
    assert abs(r) < N_SE / math.sqrt(a.size), r


@pytest.mark.parametrize("pair", ["neighbour clients", "next round", "next draw", "next position"])
def test_streams_are_uncorrelated(pair):
    """1e6 pairs; correlation within 4.5 standard errors (1/sqrt(n)) of 0."""
    clients = np.arange(2000)
    s = ClientStreams(ENTROPY, ROUND, clients)
    u = s.uniform(500)
    if pair == "neighbour clients":
        _assert_uncorrelated(u[0::2], u[1::2])
    elif pair == "next round":
        _assert_uncorrelated(u, ClientStreams(ENTROPY, ROUND + 1, clients).uniform(500))
    elif pair == "next draw":
        _assert_uncorrelated(u, s.uniform(500))
    else:
        _assert_uncorrelated(u[:, :-1], u[:, 1:])


@pytest.mark.parametrize("spec", SPECS)
def test_compressors_single_client_equals_its_row_of_the_batch(spec):
    """The contract with Flower: a node compressing its row alone sends the bytes of
    its row of the in-process batch, and both decode to the same floats."""
    comp = make_compressor(spec)
    x = np.random.default_rng(0).normal(size=(6, 30)) * np.repeat([5.0, 0.1, 1.0], [7, 13, 10])
    clients = np.array([4, 8, 15, 16, 23, 42])
    batch = comp.compress(x, ClientStreams(ENTROPY, ROUND, clients), BLOCKS)
    for j, c in enumerate(clients):
        alone = comp.compress(x[j:j + 1], ClientStreams(ENTROPY, ROUND, [c]), BLOCKS)
        assert comp.encode(alone) == comp.encode(batch.rows(j))
        np.testing.assert_array_equal(comp.decompress(alone)[0], comp.decompress(batch)[j])


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_compressors_stay_unbiased_with_client_streams(name):
    """20,000 clients compress the same x, each with its own stream."""
    comp, x = COMPRESSORS[name], _x()
    rows = np.broadcast_to(x, (20_000, x.size))
    blocks = np.array([0, 3, 10, 18]) if "block" in name else None
    assert_unbiased(comp.decompress(comp.compress(rows, ClientStreams(ENTROPY, ROUND, np.arange(20_000)),
                                                  blocks)), x)


def test_streams_draw_like_a_generator_in_helpers():
    s = ClientStreams(ENTROPY, ROUND, np.arange(3))
    np.testing.assert_array_equal(uniform_rows(s, 3, 5), ClientStreams(ENTROPY, ROUND, np.arange(3)).uniform(5))
    assert seed_rows(s, 3, U64).dtype == np.uint64 and s.draws == 2


@pytest.mark.parametrize("call, match", [
    (lambda: ClientStreams(-1, 0, [0]), "entropy"),
    (lambda: ClientStreams(2 ** 64, 0, [0]), "entropy"),
    (lambda: ClientStreams(0, 2 ** 32, [0]), "round"),
    (lambda: ClientStreams(0, 0, [2 ** 32]), "client ids"),
    (lambda: ClientStreams(0, 0, [-1]), "client ids"),
    (lambda: ClientStreams(0, 0, [[1, 2]]), "1-D"),
    (lambda: ClientStreams(0, 0, [0.5]), "integer"),
    (lambda: make_compressor("dither:s=4").compress(np.ones((3, 4)), ClientStreams(0, 0, [0, 1])), "2 rows"),
    (lambda: seed_rows(ClientStreams(0, 0, [0]), 1, 10), "2\\*\\*64"),
])
def test_bad_stream_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("spec", ["dither:s=4", "blockp:p=2"])
def test_draws_do_not_depend_on_the_number_of_threads(spec):
    """The stream kernels run rows in parallel; each row is its own stream, so one
    thread and all threads give the same bytes."""
    import numba

    comp = make_compressor(spec)
    x = np.random.default_rng(2).normal(size=(20_000, 120))  # wide rows: a shared buffer would race
    blocks = np.array([0, 7, 20, 120])
    default = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = comp.encode(comp.compress(x, ClientStreams(ENTROPY, ROUND, np.arange(20_000)), blocks))
        u_one = ClientStreams(ENTROPY, ROUND, np.arange(20_000)).uniform(120)
    finally:
        numba.set_num_threads(default)
    assert comp.encode(comp.compress(x, ClientStreams(ENTROPY, ROUND, np.arange(20_000)), blocks)) == one
    np.testing.assert_array_equal(ClientStreams(ENTROPY, ROUND, np.arange(20_000)).uniform(120), u_one)
