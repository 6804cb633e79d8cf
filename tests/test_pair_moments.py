"""The pairwise-complete moments a deployment's nodes send (``_pair_moments``): merging the
clients' parts equals the pooled computation (river-style), and both equal a brute-force
reference pair by pair, on rows with missing values, large offsets and column scales from
1e-3 to 1e3, clients that never observe a column, and clients of two rows."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _hypothesis_profiles import profile
from fedemstats.federation import Federation
from fedemstats.models._pair_moments import PAIR_MOMENT_NAMES, client_pair_moments, combine_pair_moments
from fedemstats.models._summaries import nan_moments

PROFILE = profile("pair-moments", 60, 600)


def _combined(parts):
    pieces = [client_pair_moments(p) for p in parts]
    return combine_pair_moments(*(np.array([piece[name] for piece in pieces]) for name in PAIR_MOMENT_NAMES))


def _brute_force(parts):
    """Column means of the values clients share, and for every pair the mean of the centred
    products over the rows where both are shared (0 where none): loops, no algebra. A client
    shares a column only if it observes it in two rows or more, and a pair only if it observes
    both in two rows or more."""
    d = parts[0].shape[1]
    shared = []
    for X in parts:
        X = X.copy()
        for j in range(d):
            if np.sum(~np.isnan(X[:, j])) == 1:
                X[:, j] = np.nan
        shared.append(X)
    values = [np.concatenate([X[~np.isnan(X[:, j]), j] for X in shared]) for j in range(d)]
    mean = np.array([v.mean() if v.size else 0.0 for v in values])
    cov = np.zeros((d, d))
    for j in range(d):
        for k in range(d):
            products = []
            for X in shared:
                both = ~np.isnan(X[:, j]) & ~np.isnan(X[:, k])
                if both.sum() >= 2:
                    products.extend((X[both, j] - mean[j]) * (X[both, k] - mean[k]))
            if products:
                cov[j, k] = np.mean(products)
    return mean, cov


def _ugly_parts(seed, n_clients, d, nan_frac):
    rng = np.random.default_rng(seed)
    scales = np.logspace(-3, 3, d)
    mixing = rng.normal(size=(d, d)) + 3.0 * np.eye(d)  # correlated columns
    parts = []
    for i in range(n_clients):
        m = int(rng.integers(2, 40))
        X = (rng.normal(size=(m, d)) @ mixing + i) * scales + 1e5
        X[rng.random(X.shape) < nan_frac] = np.nan
        X[np.isnan(X).all(axis=1), 0] = 1e5  # every row keeps a value
        parts.append(X)
    return parts


#: rounding steps of the pairwise sums a comparison allows, in units of eps (there are two
#: evaluations: the merged one and the pooled or brute-force one)
ROUNDING_STEPS = 16


def _assert_close(got, want):
    """Equal to the precision the data carry: a value is known to eps |x| only, so a column of
    spread sd_j about an offset mean_j is known to eps |mean_j| / sd_j relative (1e5 / 1e-3 here)."""
    mean, cov = got
    np.testing.assert_allclose(mean, want[0], rtol=1e-12)
    sd = np.sqrt(np.diag(want[1]))
    rel = 1e-10 + ROUNDING_STEPS * np.finfo(float).eps * np.abs(want[0]) / np.maximum(sd, 1e-300)
    tol = (rel[:, None] + rel[None, :]) * np.outer(sd, sd)
    assert np.all(np.abs(cov - want[1]) <= tol), np.max(np.abs(cov - want[1]) / tol)


@PROFILE
@given(seed=st.integers(0, 2 ** 32 - 1), n_clients=st.integers(1, 6), d=st.integers(1, 5),
       nan_frac=st.sampled_from([0.0, 0.2, 0.5]))
def test_merged_client_parts_equal_the_pooled_moments_and_the_brute_force_reference(seed, n_clients, d, nan_frac):
    parts = _ugly_parts(seed, n_clients, d, nan_frac)
    X = np.vstack(parts)
    if (~np.isnan(X)).sum(axis=0).min() == 0:
        return  # a column nobody observed: the estimators refuse it before any moment
    federation = Federation.from_clients(parts, allow_nan=True)
    if not all(max(np.sum(~np.isnan(p[:, j])) for p in parts) >= 2 for j in range(d)):
        with pytest.raises(ValueError, match=r"observed in fewer than 2 rows of every client"):
            nan_moments(federation)
        return
    reference = _brute_force(parts)
    _assert_close(_combined(parts), reference)
    _assert_close(nan_moments(federation), reference)


def test_a_client_that_never_observes_a_column_adds_nothing_to_it():
    parts = _ugly_parts(3, 4, 4, 0.2)
    parts[1][:, 2] = np.nan
    parts[1][np.isnan(parts[1]).all(axis=1), 0] = 1e5
    piece = client_pair_moments(parts[1])
    assert piece["pair_counts"][2, 2] == 0 and piece["mean"][2] == 0.0
    assert not piece["pair_counts"][2].any() and not piece["pair_sums"][:, 2].any()
    _assert_close(_combined(parts), _brute_force(parts))


def test_the_client_part_is_sums_over_the_clients_rows():
    X = np.array([[1.0, np.nan], [3.0, 4.0], [np.nan, 8.0], [5.0, 9.0]])
    piece = client_pair_moments(X)
    np.testing.assert_array_equal(piece["mean"], [3.0, 7.0])
    np.testing.assert_array_equal(piece["pair_counts"], [[3, 2], [2, 3]])
    # (j, l): sum of x_j − mean_j over the rows where l is observed too
    np.testing.assert_array_equal(piece["pair_sums"], [[0.0, 2.0], [-1.0, 0.0]])
    np.testing.assert_array_equal(piece["scatter"], [[8.0, 4.0], [4.0, 14.0]])


def test_a_pair_observed_together_in_one_row_is_left_out():
    """Its pair_sums would be that row's values less the public column means."""
    X = np.array([[1.0, np.nan], [3.0, 4.0], [np.nan, 8.0]])
    piece = client_pair_moments(X)
    np.testing.assert_array_equal(piece["mean"], [2.0, 6.0])
    np.testing.assert_array_equal(piece["pair_counts"], [[2, 0], [0, 2]])
    np.testing.assert_array_equal(piece["pair_sums"], np.zeros((2, 2)))
    np.testing.assert_array_equal(piece["scatter"], [[2.0, 0.0], [0.0, 8.0]])


@pytest.mark.parametrize("value", [2.0, 777.0])
def test_a_value_its_client_alone_observes_in_its_column_never_leaves_it(value):
    """A client's column observed in one row: the node's description and the in-process
    moments are those of the same rows without it, whatever the value."""
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(6, 3)), rng.normal(size=(5, 3))]
    parts[0][1:, 2] = np.nan
    parts[0][0, 2] = value
    without = [parts[0].copy(), parts[1]]
    without[0][0, 2] = np.nan
    piece, reference = client_pair_moments(parts[0]), client_pair_moments(without[0])
    for name in PAIR_MOMENT_NAMES:
        np.testing.assert_array_equal(piece[name], reference[name])
    got = nan_moments(Federation.from_clients(parts, allow_nan=True))
    want = nan_moments(Federation.from_clients(without, allow_nan=True))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    # a value observed twice is shared: the mean moves with it
    parts[0][1, 2] = 0.5
    assert nan_moments(Federation.from_clients(parts, allow_nan=True))[0][2] != want[0][2]


def test_a_column_no_client_observes_twice_is_refused_with_what_to_do():
    parts = [np.array([[1.0, 2.0], [3.0, np.nan], [4.0, np.nan]]), np.array([[5.0, np.nan], [6.0, 7.0]])]
    with pytest.raises(ValueError, match=r"column\(s\) \[1\] are observed in fewer than 2 rows of every client.*"
                                         r"Drop these columns, or group the rows into larger clients"):
        nan_moments(Federation.from_clients(parts, allow_nan=True))


@pytest.mark.parametrize("rows", [9, 5000])
def test_chunked_sums_match_one_block(rows, monkeypatch):
    """Chunks of 7 rows (the chunk budget made small), some with no missing value (the BLAS
    shortcut that counts whole chunks), over three clients with different offsets (so that their
    ``pair_sums`` enter the combination), must give the brute-force sums."""
    from fedemstats.models import _patterns

    monkeypatch.setattr(_patterns, "CHUNK_FLOATS", 42)
    rng = np.random.default_rng(rows)
    X = rng.normal(size=(rows, 3)) * [1e-3, 1.0, 1e3]
    X[rng.random(X.shape) < 0.3] = np.nan
    X[: rows // 2] = np.nan_to_num(X[: rows // 2], nan=0.25)  # complete chunks in the first half
    X[np.isnan(X).all(axis=1), 1] = 0.5
    parts = [part + shift for part, shift in zip(np.array_split(X, 3), ([0.0, 0.0, 0.0], [1e-3, 2.0, -5e2],
                                                                       [-2e-3, -1.0, 3e3]))]
    assert _patterns.rows_per_chunk(6) == 7
    reference = _brute_force(parts)
    _assert_close(_combined(parts), reference)
    _assert_close(nan_moments(Federation.from_clients(parts, allow_nan=True)), reference)
