"""Issue 15, set-up cost: the fast paths of a fit's set-up give what the slow ones gave.

* grouping rows by label by counting and scattering = ``np.unique`` + stable ``argsort`` + gather;
* the one-pass column ranges = ``np.nanmin`` / ``np.nanmax``;
* the pooled variances = the diagonal of the pooled covariance;
* a client's row sample is its own rows, evenly spread, and unbiased for its mean;
* exact EM skips the mean-field pass (its memories cancel), noisy runs and VR-FedEM keep it.
"""
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedemstats import _grouping as grouping
from fedemstats._grouping import group_rows, label_codes
from fedemstats import _ranges as ranges
from fedemstats._ranges import column_ranges
from fedemstats.algorithms import FedEM, VRFedEM
from fedemstats.federation import Federation
from fedemstats.models import _local_kmeans, gmm_init
from fedemstats.models._kmeans_summaries import client_row_sample
from fedemstats.models._summaries import global_moments, global_variances
from fedemstats.models.gmm import GaussianMixtureModel
from fedemstats.models.gmm_init import hard_pass_rows, init_params

LABEL_DTYPES = [np.int64, np.int32, np.uint8, np.uint64, np.int16, np.bool_]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(LABEL_DTYPES), data=st.data())
def test_label_codes_and_order_match_unique_and_stable_argsort(dtype, data):
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    lo = 0 if info is None else max(int(info.min), -10 ** 6)
    hi = 1 if info is None else min(int(info.max), 10 ** 6)
    # narrow spans take the counting path, wide ones np.unique's
    span = data.draw(st.sampled_from([3, 50, hi - lo]))
    base = data.draw(st.integers(lo, max(lo, hi - span)))
    groups = data.draw(hnp.arrays(dtype, st.integers(1, 300),
                                  elements=st.integers(base, min(hi, base + span)).map(dtype)))
    labels, inverse, counts = label_codes(groups)
    ref_labels, ref_inverse = np.unique(groups, return_inverse=True)
    np.testing.assert_array_equal(labels, ref_labels)
    assert labels.dtype == ref_labels.dtype
    np.testing.assert_array_equal(inverse, ref_inverse)
    np.testing.assert_array_equal(counts, np.bincount(ref_inverse))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    X = np.arange(3 * groups.size, dtype=np.float64).reshape(-1, 3)
    rows, order = group_rows(X, inverse, offsets)
    np.testing.assert_array_equal(order, np.argsort(ref_inverse, kind="stable"))
    np.testing.assert_array_equal(rows, X[order])


@pytest.mark.parametrize("n_clients", [1, 7, 5000])
def test_group_rows_in_parallel_blocks_is_the_stable_client_order(monkeypatch, n_clients):
    # several blocks write each client's slot in turn: the rows of a client keep their order
    monkeypatch.setattr(grouping, "SCATTER_MIN_ROWS", 0)
    rng = np.random.default_rng(n_clients)
    inverse = rng.integers(n_clients, size=20_000)
    counts = np.bincount(inverse, minlength=n_clients)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    X = rng.normal(size=(inverse.size, 4))
    rows, order = group_rows(X, inverse, offsets)
    np.testing.assert_array_equal(order, np.argsort(inverse, kind="stable"))
    np.testing.assert_array_equal(rows, X[order])


def test_huge_unsigned_labels_fall_back_to_unique():
    groups = np.array([2 ** 64 - 1, 2 ** 63 + 3, 2 ** 64 - 1], dtype=np.uint64)
    labels, inverse, counts = label_codes(groups)
    np.testing.assert_array_equal(labels, [2 ** 63 + 3, 2 ** 64 - 1])
    np.testing.assert_array_equal(inverse, [1, 0, 1])
    np.testing.assert_array_equal(counts, [1, 2])


@pytest.mark.parametrize("groups", [["b", "a", "b", "c"], [2.5, -1.0, 2.5, 7.0]])
def test_from_groups_with_text_and_float_labels(groups):
    X = np.arange(8.0).reshape(4, 2)
    fed, order, labels = Federation.from_groups(X, groups)
    ref_labels, inverse = np.unique(groups, return_inverse=True)
    np.testing.assert_array_equal(labels, ref_labels)
    np.testing.assert_array_equal(order, np.argsort(inverse, kind="stable"))
    np.testing.assert_array_equal(fed.X, X[order])


def test_sorted_groups_keep_the_array_without_a_copy():
    X = np.random.default_rng(0).normal(size=(50, 3))
    fed, order, _ = Federation.from_groups(X, np.repeat([3, 5, 9], [10, 30, 10]))
    assert fed.X is X
    np.testing.assert_array_equal(order, np.arange(50))
    np.testing.assert_array_equal(fed.offsets, [0, 10, 40, 50])


def test_from_groups_still_rejects_bad_data_by_default():
    X = np.array([[1.0, np.inf], [0.0, 1.0]])
    with pytest.raises(ValueError, match="inf"):
        Federation.from_groups(X, [0, 1])


@settings(max_examples=60, deadline=None)
@given(X=hnp.arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 5)),
                    elements=st.one_of(st.floats(-1e300, 1e300), st.just(np.nan))))
def test_column_ranges_match_nanmin_nanmax(X):
    lo, hi = column_ranges(X)
    for j in range(X.shape[1]):
        col = X[:, j][~np.isnan(X[:, j])]
        if col.size:
            assert lo[j] == col.min() and hi[j] == col.max()
        else:
            assert lo[j] == np.inf and hi[j] == -np.inf


def test_column_ranges_in_parallel_blocks_match_nanmin_nanmax(monkeypatch):
    monkeypatch.setattr(ranges, "RANGE_MIN_ROWS", 0)  # 8 blocks on a small table
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1001, 4)) * [1.0, 1e6, 1e-6, 1.0]
    X[rng.random(X.shape) < 0.2] = np.nan
    X[:, 3] = np.nan  # a column without a value
    X[1000, 0] = 50.0  # the extreme value in the last block
    lo, hi = column_ranges(X)
    np.testing.assert_array_equal(lo[:3], np.nanmin(X[:, :3], axis=0))
    np.testing.assert_array_equal(hi[:3], np.nanmax(X[:, :3], axis=0))
    assert hi[0] == 50.0 and lo[3] == np.inf and hi[3] == -np.inf


def test_global_variances_are_the_diagonal_of_the_pooled_covariance():
    rng = np.random.default_rng(3)
    # large offsets and scales: the clients centre on their own means
    X = rng.normal(size=(700, 4)) * [1e-3, 1.0, 1e4, 5.0] + [1e6, -3.0, 0.0, 42.0]
    fed = Federation(X, [0, 3, 250, 251 + 200, 700])
    np.testing.assert_allclose(global_variances(fed), np.diag(global_moments(fed)[1]), rtol=1e-12)
    # statistics.pvariance sums exactly (fractions). A float64 client mean is off by about
    # eps · |offset|, which moves a variance by about eps · |offset| / sd relative: 1e-7 for
    # the column whose offset is 1e9 of its spread, 1e-15 for the others
    exact = np.array([statistics.pvariance(X[:, j].tolist()) for j in range(4)])
    bound = 1e-13 + 4 * np.finfo(float).eps * np.abs(X.mean(0)) / X.std(0)
    assert np.all(np.abs(global_variances(fed) / exact - 1) <= bound)


def test_client_row_sample_is_own_rows_evenly_spread_and_unbiased():
    rng = np.random.default_rng(0)
    X = np.arange(3000.0)[:, None] * [1.0, -2.0]
    fed = Federation(X, [0, 10, 1010, 3000], weights=[0.2, 0.3, 0.5])
    sample = client_row_sample(fed, 100, rng)
    np.testing.assert_array_equal(sample.sizes, [10, 100, 100])
    np.testing.assert_allclose(sample.weights, fed.weights)
    np.testing.assert_array_equal(sample.client(0), fed.client(0))  # small clients keep every row
    for i in (1, 2):
        rows = sample.client(i)[:, 0]
        own = fed.client(i)[:, 0]
        assert np.isin(rows, own).all() and np.all(np.diff(rows) > 0)
        gaps = np.diff(rows)
        assert gaps.max() - gaps.min() <= 1.0  # one row per stretch of m_i / max_rows rows
    # systematic sampling: unbiased for the client's mean over the uniform offset
    means = [client_row_sample(fed, 100, np.random.default_rng(s)).client(2)[:, 0].mean() for s in range(400)]
    assert abs(np.mean(means) - fed.client(2)[:, 0].mean()) < 3 * np.std(means) / np.sqrt(400) + 1e-9
    assert client_row_sample(fed, 5000, rng) is fed


def test_kmeans_start_from_the_hard_pass_sample_matches_the_full_pass(monkeypatch):
    rng = np.random.default_rng(5)
    K, d = 3, 4
    centres = rng.normal(scale=6, size=(K, d))
    X = centres[rng.integers(K, size=60_000)] + rng.normal(size=(60_000, d))
    fed = Federation(X, [0, 30_000, 60_000])
    model = GaussianMixtureModel(K, d, shift=X.mean(0))
    theta = init_params(fed, model, "kmeans", np.random.default_rng(1))
    assert hard_pass_rows(fed, model, theta) < 30_000  # the sample is used here
    # the same start from every row: the clients' sample moves θ_0 by sampling error only
    monkeypatch.setattr(gmm_init, "HARD_PASS_ROWS_PER_PARAMETER", 10 ** 9)
    full = init_params(fed, model, "kmeans", np.random.default_rng(1))
    order = np.argsort(theta.means[:, 0])
    ref = np.argsort(full.means[:, 0])
    np.testing.assert_allclose(theta.weights[order], full.weights[ref], atol=0.03)
    np.testing.assert_allclose(theta.means[order], full.means[ref], atol=0.1)
    np.testing.assert_allclose(theta.covariances[order], full.covariances[ref], atol=0.15)


def _small_fit(**kwargs):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 2)) + np.repeat([[0, 0], [5, 5]], 200, axis=0)
    fed = Federation(X, [0, 100, 250, 400])
    model = GaussianMixtureModel(2, 2, shift=X.mean(0))
    theta0 = init_params(fed, model, "kmeans", np.random.default_rng(0))
    return fed, model, theta0


class _AlwaysMeanField(FedEM):
    """FedEM as it was: the mean-field pass whatever the run."""

    def mean_field_pass(self, n_clients):
        return self.v_init == "mean-field"


def test_exact_em_skips_the_mean_field_pass_and_gets_the_same_fit():
    fed, model, theta0 = _small_fit()
    exact = FedEM(model).run(fed, theta0, 15, random_state=0)
    with_pass = _AlwaysMeanField(model).run(fed, theta0, 15, random_state=0)
    assert exact.history["n_cond_exp"].iloc[0] == fed.n_rows  # one pass at round 0, not two
    assert with_pass.history["n_cond_exp"].iloc[0] == 2 * fed.n_rows
    assert exact.ledger.total_uplink < with_pass.ledger.total_uplink
    # the memories cancel: the same iterates up to round-off
    np.testing.assert_allclose(exact.state.s_hat, with_pass.state.s_hat, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(exact.history["loglik"], with_pass.history["loglik"], rtol=1e-12)


@pytest.mark.parametrize("algorithm", [
    lambda m: FedEM(m, compressor="dither:s=4"),
    lambda m: FedEM(m, participation=0.5),
    lambda m: VRFedEM(m, batch_size="full"),
])
def test_noisy_runs_and_vr_fedem_keep_the_mean_field_pass(algorithm):
    fed, model, theta0 = _small_fit()
    result = algorithm(model).run(fed, theta0, 2, random_state=0)
    assert result.history["n_cond_exp"].iloc[0] == 2 * fed.n_rows


def _lloyd_reference(X, C, n_iter):
    """Plain NumPy Lloyd steps, all ``n_iter`` of them, no early stop."""
    C = C.copy()
    for _ in range(n_iter):
        labels = np.argmin(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
        counts = np.bincount(labels, minlength=C.shape[0])
        for j in np.flatnonzero(counts):
            C[j] = X[labels == j].sum(0) / counts[j]
    return C, counts


@pytest.mark.parametrize("n_iter", [1, 2, 10, 40])
def test_local_kmeans_stopping_at_a_repeated_assignment_equals_every_lloyd_step(n_iter):
    rng = np.random.default_rng(n_iter)
    X = rng.normal(scale=2, size=(4, 3))[rng.integers(4, size=300)] + rng.normal(size=(300, 3))
    C0 = X[:4].copy()
    C, counts = C0.copy(), np.zeros(4, dtype=np.int64)
    _local_kmeans._lloyd(np.ascontiguousarray(X.T), 300, 4, n_iter, C, counts, np.empty((4, 3)),
                         np.empty(300, dtype=np.int64), np.empty((4, 300)))
    ref_C, ref_counts = _lloyd_reference(X, C0, n_iter)
    np.testing.assert_allclose(C, ref_C, rtol=1e-13)
    np.testing.assert_array_equal(counts, ref_counts)
