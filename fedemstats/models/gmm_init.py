"""Federated initialisations of the Gaussian mixture: no raw row leaves a client (SPEC §3).

What each client would send is computed from its own rows only and is an aggregate:
counts, means and centred scatter matrices (:func:`global_moments`), or local k-means
centroids of clusters holding at least ``min_rows`` rows (:func:`init_kmeans_summaries`),
or the model's own per-client statistics (:func:`init_params`).
"""
from __future__ import annotations

import numpy as np

from .._validation import check_int, check_rng
from .gmm import GaussianMixtureModel, GMMParams, make_params

__all__ = ["SUMMARY_MIN_ROWS", "TooFewSummariesError", "global_moments", "combine_moments",
           "init_random_from_moments", "shared_covariances",
           "init_kmeans_summaries", "init_params", "LOCAL_LLOYD_ITER"]

#: No client summary (local k-means centroid) is computed from fewer rows than this,
#: so that no centroid is close to a single raw row.
SUMMARY_MIN_ROWS = 5
#: Lloyd iterations of each client's local k-means (a summary, not a final clustering).
LOCAL_LLOYD_ITER = 10
#: Restarts of the server's weighted k-means on the pooled centroids.
SERVER_N_INIT = 4


def global_moments(federation):
    """Pooled mean and covariance from per-client counts, means and centred scatters.

    Each client sends ``m_i``, its mean ``xbar_i`` and ``M_i = sum (x - xbar_i)(x - xbar_i)^T``
    (centred locally, so no precision is lost to a large offset); the server combines
    them with Chan et al.'s parallel formula ``M = sum_i M_i + sum_i m_i (xbar_i - xbar)
    (xbar_i - xbar)^T``. Rows are pooled (sample weights), whatever the federation weights.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    cov : ndarray of shape (n_features, n_features)
        Maximum-likelihood (divide by N) covariance.
    """
    X, sizes = federation.X, federation.sizes
    client_means = np.add.reduceat(X, federation.offsets[:-1], axis=0) / sizes[:, None]
    centred = X - np.repeat(client_means, sizes, axis=0)
    within = centred.T @ centred  # = sum_i M_i: one product over the clients' own centred rows
    return combine_moments(sizes, client_means, within)


def combine_moments(sizes, client_means, within):
    """Chan et al.'s parallel combination of per-client moments (server side).

    Parameters
    ----------
    sizes : ndarray of shape (n_clients,)
    client_means : ndarray of shape (n_clients, n_features)
    within : ndarray of shape (n_features, n_features)
        Sum of the clients' centred scatter matrices, sum_i M_i.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    cov : ndarray of shape (n_features, n_features)
        ``(sum_i M_i + sum_i m_i (xbar_i - xbar)(xbar_i - xbar)^T) / N``.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    mean = sizes @ client_means / sizes.sum()
    dev = client_means - mean
    cov = (within + (dev * sizes[:, None]).T @ dev) / sizes.sum()
    return mean, 0.5 * (cov + cov.T)


def _local_kmeans(Xi, k, rng):
    """k-means++ seeding and a few Lloyd steps on one client's rows: (centroids, counts)."""
    centers = [Xi[rng.integers(Xi.shape[0])]]
    d2 = np.sum((Xi - centers[0]) ** 2, axis=1)
    for _ in range(1, k):
        p = d2 / d2.sum() if d2.sum() > 0 else None
        centers.append(Xi[rng.choice(Xi.shape[0], p=p)])
        d2 = np.minimum(d2, np.sum((Xi - centers[-1]) ** 2, axis=1))
    C = np.array(centers)
    sq_rows = np.sum(Xi ** 2, 1)[:, None]
    for _ in range(LOCAL_LLOYD_ITER):
        labels = np.argmin(sq_rows - 2 * Xi @ C.T + np.sum(C ** 2, 1), axis=1)
        onehot = (labels[:, None] == np.arange(k)).astype(np.float64)
        counts = onehot.sum(axis=0).astype(np.int64)
        sums = onehot.T @ Xi
        nonempty = counts > 0
        C[nonempty] = sums[nonempty] / counts[nonempty, None]
    return C, counts


class TooFewSummariesError(ValueError):
    """Clients are too small to send ``n_components`` centroids of ``min_rows`` rows.

    Callers that document a fallback (e.g. to global moments) catch exactly this,
    never a bare ValueError, so real input errors still surface.
    """


def init_kmeans_summaries(federation, n_components, rng=None, min_rows=SUMMARY_MIN_ROWS):
    """Initial means from clients' local k-means summaries.

    Client ``i`` runs k-means with ``min(n_components, m_i // min_rows)`` clusters on its
    own rows and sends only the centroids and counts of clusters with at least
    ``min_rows`` rows (so no centroid is a single row); the server runs weighted
    k-means++ (scikit-learn ``KMeans`` with ``sample_weight`` = counts) on them.

    Parameters
    ----------
    federation : Federation
    n_components : int
    rng : numpy.random.Generator or int, optional
    min_rows : int, default=5
        At least 2.

    Returns
    -------
    means : ndarray of shape (n_components, n_features)

    Raises
    ------
    ValueError
        If fewer than ``n_components`` centroids survive (clients too small for
        ``min_rows``); use ``method="random"`` or a smaller ``min_rows``.
    """
    n_components = check_int(n_components, "n_components")
    min_rows = check_int(min_rows, "min_rows", minimum=2)
    rng = check_rng(rng)
    cents, counts = [], []
    for i in range(federation.n_clients):
        k = min(n_components, int(federation.sizes[i]) // min_rows)
        if k == 0:
            continue
        C, cnt = _local_kmeans(federation.client(i), k, rng)
        keep = cnt >= min_rows
        cents.append(C[keep])
        counts.append(cnt[keep])
    n_sent = int(sum(c.shape[0] for c in cents))
    if n_sent < n_components:
        raise TooFewSummariesError(
            f"k-means init: clients sent {n_sent} centroid(s) of >= {min_rows} rows, fewer than "
            f"n_components={n_components}; use init_params='random' or a smaller min_rows.")
    C, w = np.vstack(cents), np.concatenate(counts).astype(np.float64)
    from sklearn.cluster import KMeans  # lazy: node processes that never init stay light

    km = KMeans(n_clusters=n_components, n_init=SERVER_N_INIT,
                random_state=int(rng.integers(np.iinfo(np.int32).max)))
    return km.fit(C, sample_weight=w).cluster_centers_


def shared_covariances(cov, ctype, K):
    if ctype == "full":
        return np.repeat(cov[None], K, axis=0)
    if ctype == "tied":
        return cov
    if ctype == "diag":
        return np.repeat(np.diag(cov)[None], K, axis=0)
    return np.full(K, np.mean(np.diag(cov)))


def init_random_from_moments(mean, cov, model: GaussianMixtureModel, rng) -> GMMParams:
    """θ_0 from global moments: means drawn from N(mean, cov + reg_covar I), every
    component with that covariance, uniform weights (``init_params="random"``)."""
    K, ctype = model.n_components, model.covariance_type
    cov = cov + model.reg_covar * np.eye(model.n_features)
    means = rng.multivariate_normal(mean, cov, size=K)
    return make_params(np.full(K, 1.0 / K), means, shared_covariances(cov, ctype, K), covariance_type=ctype)


def init_params(federation, model: GaussianMixtureModel, method="kmeans", rng=None,
                min_rows=SUMMARY_MIN_ROWS) -> GMMParams:
    """Initial parameters without moving raw rows.

    ``"kmeans"``: means from :func:`init_kmeans_summaries`; then one exact E/M pass from
    those means with hard (nearest-mean) responsibilities, computed by the clients as
    model statistics (``client_stats(hard=True)`` under identity covariances and equal
    weights), and the model's T-map — scikit-learn's ``init_params="kmeans"`` in federated form.
    ``"random"``: means drawn from N(global mean, global covariance), every component
    with the global covariance (+ ``reg_covar``), uniform weights.

    Parameters
    ----------
    federation : Federation
    model : GaussianMixtureModel
    method : {"kmeans", "random"}, default="kmeans"
    rng : numpy.random.Generator or int, optional
    min_rows : int, default=5
        Smallest local cluster a client may summarise (``"kmeans"`` only).

    Returns
    -------
    GMMParams
    """
    rng = check_rng(rng)
    K, d, ctype = model.n_components, model.n_features, model.covariance_type
    if federation.n_features != d:
        raise ValueError(f"federation has {federation.n_features} features; model has {d}.")
    weights = np.full(K, 1.0 / K)
    if method == "random":
        return init_random_from_moments(*global_moments(federation), model, rng)
    if method != "kmeans":
        raise ValueError(f"method must be 'kmeans' or 'random'; got {method!r}.")
    means = init_kmeans_summaries(federation, K, rng, min_rows=min_rows)
    eye = shared_covariances(np.eye(d), ctype, K)
    labels_theta = make_params(weights, means, eye, covariance_type=ctype)
    stats, _ = model.client_stats(federation, labels_theta, hard=True)
    return model.t_map(federation.weights @ stats)
