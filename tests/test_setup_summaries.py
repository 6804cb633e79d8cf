"""Issue 15 item 4 (set-up): the round-1 summaries computed with BLAS products / one
compiled pass equal direct references, are computed once per fit, and the local
k-means summaries of large clients run on a sample but stand for all their rows."""
import numpy as np
import pytest

from fedemstats.federation import Federation
from fedemstats.models import _kmeans_summaries, _summaries
from fedemstats.models._patterns import BLAS_MIN_ROWS, segment_scatter
from fedemstats.models._kmeans_summaries import init_kmeans_summaries
from fedemstats.models._summaries import client_moments, global_mean, nan_moments


def mixed_sizes_federation(seed=0, d=4, nan_frac=0.0):
    rng = np.random.default_rng(seed)
    sizes = np.array([3, BLAS_MIN_ROWS + 7, 40, 2 * BLAS_MIN_ROWS, 9])  # both code paths
    X = rng.normal(size=(sizes.sum(), d)) * [1.0, 1e3, 1e-3, 5.0][:d] + 1e6
    X[rng.random(X.shape) < nan_frac] = np.nan
    return Federation(X, np.r_[0, np.cumsum(sizes)], allow_nan=nan_frac > 0)


def test_client_moments_are_each_clients_centred_scatter():
    fed = mixed_sizes_federation()
    sizes, means, scatters = client_moments(fed)
    for i in range(fed.n_clients):
        Xi = fed.client(i)
        np.testing.assert_allclose(means[i], Xi.mean(0), rtol=1e-14)
        Z = Xi - Xi.mean(0)
        np.testing.assert_allclose(scatters[i], Z.T @ Z, rtol=1e-9, atol=1e-9 * np.abs(Z.T @ Z).max())
    assert global_mean(fed) == pytest.approx(fed.X.mean(0), rel=1e-14)


def test_segment_scatter_counts_missing_values_as_zero_after_standardising():
    fed = mixed_sizes_federation(nan_frac=0.2)
    centre, scale = np.full(4, 1e6), np.array([1.0, 1e3, 1e-3, 5.0])
    sums, scatter = segment_scatter(fed.X, fed.offsets, centre, scale)
    for i in range(fed.n_clients):
        Z = np.nan_to_num((fed.client(i) - centre) / scale, nan=0.0)
        np.testing.assert_allclose(sums[i], Z.sum(0), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(scatter[i], Z.T @ Z, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("nan_frac", [0.0, 0.3])
def test_nan_moments_are_pairwise_complete_and_computed_once(monkeypatch, nan_frac):
    fed = mixed_sizes_federation(seed=1, nan_frac=nan_frac)
    mean, cov = nan_moments(fed)
    X = fed.X
    np.testing.assert_allclose(mean, np.nanmean(X, 0), rtol=1e-14)
    for j in range(4):
        for k in range(4):
            both = ~np.isnan(X[:, j]) & ~np.isnan(X[:, k])
            ref = np.mean((X[both, j] - mean[j]) * (X[both, k] - mean[k]))
            assert cov[j, k] == pytest.approx(ref, rel=1e-9, abs=1e-12 * np.sqrt(cov[j, j] * cov[k, k]))
    calls = []
    monkeypatch.setattr(_summaries, "pair_products", lambda *a: calls.append(1))
    again = nan_moments(fed)  # the centring and the initialisation both ask: one computation
    assert not calls
    np.testing.assert_array_equal(again[1], cov)
    again[1][0, 0] = -1.0  # callers get copies
    assert nan_moments(fed)[1][0, 0] == cov[0, 0]


def test_kmeans_summaries_of_large_clients_use_a_sample_and_weigh_all_rows(monkeypatch):
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])
    n = 3 * _kmeans_summaries.LOCAL_KMEANS_MAX_ROWS + 11
    X = centres[rng.integers(3, size=2 * n)] + rng.normal(size=(2 * n, 2))
    fed = Federation(X, [0, n, 2 * n])
    seen = {}
    from sklearn.cluster import KMeans
    real_fit = KMeans.fit
    monkeypatch.setattr(KMeans, "fit", lambda self, C, y=None, sample_weight=None: seen.update(w=sample_weight)
                        or real_fit(self, C, y, sample_weight=sample_weight))
    means = init_kmeans_summaries(fed, 3, np.random.default_rng(0))
    assert seen["w"].sum() == pytest.approx(2 * n)  # the counts stand for every row
    dist = np.linalg.norm(centres[:, None] - means[None], axis=-1)
    assert dist.min(axis=1).max() < 0.3


def test_each_local_centroid_is_the_mean_of_the_rows_labelled_with_it():
    """The labels local_kmeans_all returns are the centroids' own rows (what the filled
    summaries count observed values over), on a client larger than its sample too."""
    from fedemstats.models._local_kmeans import local_kmeans_all

    rng = np.random.default_rng(5)
    sizes = [7, 40, _kmeans_summaries.LOCAL_KMEANS_MAX_ROWS + 300]
    X = rng.normal(size=(sum(sizes), 3)) + 4.0 * rng.integers(3, size=(sum(sizes), 1))
    offsets = np.r_[0, np.cumsum(sizes)]
    ks = np.array([0, 3, 4])
    centres, counts, used, rows, labels = local_kmeans_all(X, offsets, ks, rng, 10,
                                                           _kmeans_summaries.LOCAL_KMEANS_MAX_ROWS)
    assert rows.size == used.sum() and np.all(labels[:sizes[0]] == -1)
    client = np.searchsorted(offsets, rows, side="right") - 1
    for i, k in enumerate(ks):
        for l in range(k):
            mine = rows[(client == i) & (labels == l)]
            assert mine.size == counts[i, l] > 0
            np.testing.assert_allclose(centres[i, l], X[mine].mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("value", [0.3, -2.0])
def test_a_filled_centroid_never_holds_one_observed_value(value):
    """Three blobs of 6 rows on one client; column 2 of the first blob observed in one row
    only. Its centroid sends the fill there (the mean of the filled rows, (value + 5 fill) / 6,
    would give the value away)."""
    from fedemstats.models._kmeans_summaries import filled_kmeans_summaries

    rng = np.random.default_rng(1)
    X = np.repeat([[0.0, 0.0, 0.0], [50.0, 0.0, 1.0], [0.0, 50.0, 2.0]], 6, axis=0) + 0.1 * rng.normal(size=(18, 3))
    X[:6, 2] = np.nan
    X[0, 2] = value
    fill = np.array([9.0, 9.0, 7.0])
    means = filled_kmeans_summaries(Federation(X, [0, 18], allow_nan=True), fill, 3, np.random.default_rng(0))
    first = means[np.argmin(np.linalg.norm(means[:, :2], axis=1))]
    assert first[2] == fill[2]
    # a column the blob observes twice is sent as the mean of its observed values
    X[1, 2] = value + 1.0
    means = filled_kmeans_summaries(Federation(X, [0, 18], allow_nan=True), fill, 3, np.random.default_rng(0))
    first = means[np.argmin(np.linalg.norm(means[:, :2], axis=1))]
    assert first[2] == pytest.approx(value + 0.5)
    np.testing.assert_allclose(np.sort(means[:, 2])[1:], [1.0, 2.0], atol=0.1)  # the complete blobs
