"""StatLayout, Federation, partitioners, participation samplers and the ledger."""
import numpy as np
import pytest

from fedemstats.federation import Federation, partition_dirichlet, partition_iid, partition_shards
from fedemstats.layout import StatLayout
from fedemstats.ledger import BitLedger
from fedemstats.participation import (BernoulliParticipation, FixedSizeParticipation, FullParticipation,
                                      make_participation)


def test_layout_roundtrip_and_offsets():
    lay = StatLayout([("w", (3,)), ("m", (3, 2)), ("c", (3, 2, 2))])
    assert lay.size == 3 + 6 + 12
    np.testing.assert_array_equal(lay.offsets, [0, 3, 9, 21])
    rng = np.random.default_rng(0)
    stacked = rng.normal(size=(4, lay.size))
    parts = lay.unpack(stacked)
    assert parts["c"].shape == (4, 3, 2, 2)
    np.testing.assert_array_equal(lay.pack(parts), stacked)
    with pytest.raises(ValueError, match="unique"):
        StatLayout([("a", (1,)), ("a", (2,))])
    with pytest.raises(ValueError, match="last axis"):
        lay.unpack(np.zeros(5))


def test_federation_weights_and_select():
    X = np.arange(20.0).reshape(10, 2)
    fed = Federation(X, [0, 3, 7, 10])
    np.testing.assert_allclose(fed.weights, [0.3, 0.4, 0.3])
    np.testing.assert_allclose(Federation(X, [0, 3, 7, 10], "uniform").weights, 1 / 3)
    rows, seg = fed.select([0, 2])
    np.testing.assert_array_equal(rows, np.vstack([X[0:3], X[7:10]]))
    np.testing.assert_array_equal(seg, [0, 3, 6])
    rows, seg = fed.select([1, 2])
    assert np.shares_memory(rows, fed.X)  # contiguous clients: a view, no copy


def test_federation_minibatch_rows_belong_to_their_client_and_are_reproducible():
    rng = np.random.default_rng(1)
    X = np.column_stack([np.repeat(np.arange(5), 8), np.arange(40)]).astype(float)
    fed = Federation(X, np.arange(0, 41, 8))
    rows, seg = fed.select([0, 3, 4], batch=3, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(seg, [0, 3, 6, 9])
    np.testing.assert_array_equal(rows[:, 0], np.repeat([0, 3, 4], 3))
    for j in range(3):
        assert len(set(rows[seg[j]:seg[j + 1], 1])) == 3  # without replacement
    again, _ = fed.select([0, 3, 4], batch=3, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(rows, again)
    big, seg = fed.select([1], batch=100, rng=rng)  # batch larger than the client: all its rows
    assert big.shape[0] == 8


def test_federation_from_groups_and_clients():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 2))
    groups = np.array(list("abcabcabcaaa"))
    fed, order, labels = Federation.from_groups(X, groups)
    np.testing.assert_array_equal(labels, ["a", "b", "c"])
    np.testing.assert_array_equal(fed.sizes, [6, 3, 3])
    np.testing.assert_array_equal(fed.X, X[order])
    assert (groups[order][:6] == "a").all()
    fed2 = Federation.from_clients([X[:5], X[5:]])
    np.testing.assert_array_equal(fed2.sizes, [5, 7])


@pytest.mark.parametrize("bad, match", [
    (dict(offsets=[0, 3, 3, 10]), "no rows"),
    (dict(offsets=[0, 5]), "end at n_rows"),
    (dict(weights="nope"), "weights"),
    (dict(weights=[1.0, -1.0, 1.0]), "non-negative"),
])
def test_federation_bad_input(bad, match):
    args = dict(X=np.zeros((10, 2)), offsets=[0, 3, 7, 10])
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        Federation(**args)


def test_federation_rejects_nan_inf_and_wrong_groups():
    X = np.zeros((4, 2))
    X[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Federation(X, [0, 4])
    X[1, 1] = np.inf
    with pytest.raises(ValueError, match="inf"):
        Federation(X, [0, 4])
    with pytest.raises(ValueError, match="one label per row"):
        Federation.from_groups(np.zeros((4, 2)), [0, 1])
    with pytest.raises(ValueError, match="same number of features"):
        Federation.from_clients([np.zeros((2, 2)), np.zeros((2, 3))])


def test_partitioners():
    labels = np.repeat(np.arange(4), 50)
    g = partition_iid(200, 10, 0)
    assert np.bincount(g).tolist() == [20] * 10
    g = partition_dirichlet(labels, 10, 0.1, 0)
    assert np.bincount(g, minlength=10).min() >= 1
    # heterogeneity: with alpha = 0.1 most clients are dominated by one label
    purity = [np.bincount(labels[g == c]).max() / (g == c).sum() for c in range(10)]
    assert np.median(purity) > 0.8
    assert np.median([np.bincount(labels[partition_dirichlet(labels, 10, 100.0, s) == 0]).max() / 20
                      for s in range(3)]) < 0.8
    g = partition_shards(labels, 10, 2, 0)
    assert all(len(np.unique(labels[g == c])) <= 2 for c in range(10))
    with pytest.raises(ValueError):
        partition_iid(5, 6)
    with pytest.raises(ValueError, match="alpha"):
        partition_dirichlet(labels, 10, 0.0)


def test_participation_samplers_inclusion_probabilities_by_monte_carlo():
    rng = np.random.default_rng(0)
    n, reps = 8, 4000
    for sampler, expected in [(BernoulliParticipation(0.3), 0.3), (FixedSizeParticipation(2), 0.25),
                              (BernoulliParticipation(np.linspace(0.1, 0.9, n)), np.linspace(0.1, 0.9, n))]:
        counts = np.zeros(n)
        for r in range(reps):
            active, pi = sampler.sample(r, n, rng)
            counts[active] += 1
            np.testing.assert_allclose(pi, sampler.inclusion(n)[active])
        se = np.sqrt(np.asarray(expected) * (1 - np.asarray(expected)) / reps)
        assert np.all(np.abs(counts / reps - expected) < 5 * se)
    active, pi = FullParticipation().sample(0, 5, rng)
    np.testing.assert_array_equal(active, np.arange(5))
    assert FixedSizeParticipation(3).sample(0, 10, rng)[0].size == 3


@pytest.mark.parametrize("spec, cls", [(1.0, FullParticipation), (0.5, BernoulliParticipation),
                                       (4, FixedSizeParticipation), ("full", FullParticipation)])
def test_make_participation(spec, cls):
    assert isinstance(make_participation(spec), cls)


@pytest.mark.parametrize("spec", [0.0, 1.5, -0.2, "half", True, 0])
def test_make_participation_rejects_bad_specs(spec):
    with pytest.raises(ValueError):
        make_participation(spec)


def test_fixed_size_larger_than_population_is_an_error():
    with pytest.raises(ValueError, match=r"k=5 clients per round but the federation has only 3"):
        FixedSizeParticipation(5).sample(0, 3, np.random.default_rng(0))


def test_ledger():
    led = BitLedger()
    led.record(0, 100, 50, 3)
    led.record(1, 10, 5, 1)
    assert led.total_uplink == 110 and led.total == 165
    np.testing.assert_array_equal(led.cumulative(), [150, 165])
    with pytest.raises(ValueError):
        led.record(2, -1, 0, 0)
