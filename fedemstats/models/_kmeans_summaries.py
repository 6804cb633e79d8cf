"""Local k-means summaries and row samples: what a client sends for a k-means start.

Client ``i`` runs k-means on its own rows (or an evenly spread sample of them) and
sends only centroids of clusters averaging at least ``min_rows`` rows, with counts; the
server runs weighted k-means++ on them (:func:`init_kmeans_summaries`). Large clients
label a sample of their rows in the start's hard pass (:func:`client_row_sample`).
No raw row leaves a client (SPEC §3).
"""
from __future__ import annotations

import functools

import numpy as np
from threadpoolctl import ThreadpoolController

from .._validation import check_int, check_rng
from ..federation import Federation
from ._local_kmeans import local_kmeans_all, systematic_rows
from ._pair_moments import too_few
from ._patterns import segment_owner
from ._summaries import SUMMARY_MIN_ROWS, TooFewSummariesError

__all__ = ["LOCAL_LLOYD_ITER", "LOCAL_KMEANS_MAX_ROWS", "SERVER_N_INIT", "client_row_sample",
           "init_kmeans_summaries", "filled_kmeans_summaries"]

#: Lloyd iterations of each client's local k-means (a summary, not a final clustering).
LOCAL_LLOYD_ITER = 10
#: A client's local k-means runs on at most this many of its rows (an evenly spread
#: random sample): enough for K ~ 10 centroids, and the initialisation then costs less
#: than one E-step whatever the client sizes (issue 15 item 4, set-up cost).
LOCAL_KMEANS_MAX_ROWS = 1024
#: Restarts of the server's weighted k-means on the pooled centroids.
SERVER_N_INIT = 4


# ---------------------------------------------------------------------- row samples
def client_row_sample(federation, max_rows, rng):
    """Each client's evenly spread random sample of at most ``max_rows`` of its own rows.

    :func:`._local_kmeans.systematic_rows` with one uniform ``u_i`` per client. A client's
    mean statistic on its sample is unbiased for the one on all its rows, and the sample
    never leaves it.

    Parameters
    ----------
    federation : Federation
    max_rows : int
    rng : numpy.random.Generator
        Drawn from (one uniform per client) only when some client is larger than ``max_rows``.

    Returns
    -------
    Federation
        The samples, with ``federation``'s client weights (``federation`` itself if no
        client is larger than ``max_rows``).
    """
    if not np.any(federation.sizes > max_rows):
        return federation
    rows, offsets = systematic_rows(federation.offsets, max_rows, rng.random(federation.n_clients))
    return Federation(np.take(federation.X, rows, axis=0), offsets, federation.weights, allow_nan=True,
                      check_input=False)


# ---------------------------------------------------------------------- k-means summaries
def init_kmeans_summaries(federation, n_components, rng=None, min_rows=SUMMARY_MIN_ROWS, filled=None):
    """Initial centres from clients' local k-means summaries.

    Client ``i`` runs k-means with ``min(n_components, m_i // min_rows)`` clusters on its
    own rows (an evenly spread sample of :data:`LOCAL_KMEANS_MAX_ROWS` of them if it has
    more) and sends only the centroids and counts of clusters averaging at least
    ``min_rows`` rows (so no centroid is a single row), counts scaled to its ``m_i`` rows;
    the server runs weighted k-means++ (scikit-learn ``KMeans`` with ``sample_weight`` =
    counts) on them. All clients' k-means run in one parallel pass (:mod:`._local_kmeans`).

    Parameters
    ----------
    federation : Federation
    n_components : int
    rng : numpy.random.Generator or int, optional
    min_rows : int, default=5
        At least 2.
    filled : tuple (observed, fill), optional
        For rows whose missing cells the clients filled with the public ``fill`` (d,)
        (``observed``: bool (n, d), False at those cells): centroids are sent as the means of
        their observed values, ``fill`` where a column holds fewer than two
        (:func:`observed_centroids`).

    Returns
    -------
    means : ndarray of shape (n_components, n_features)

    Raises
    ------
    TooFewSummariesError
        If fewer than ``n_components`` centroids survive (clients too small for
        ``min_rows``); use ``method="random"`` or a smaller ``min_rows``.
    """
    n_components = check_int(n_components, "n_components")
    min_rows = check_int(min_rows, "min_rows", minimum=2)
    rng = check_rng(rng)
    ks = np.minimum(n_components, federation.sizes // min_rows)
    # every client's k-means on its own rows, all clients in one parallel pass
    centres, counts, used, rows, labels = local_kmeans_all(federation.X, federation.offsets, ks, rng,
                                                           LOCAL_LLOYD_ITER, LOCAL_KMEANS_MAX_ROWS)
    if filled is not None:
        centres = observed_centroids(centres.shape, federation.offsets, rows, labels, federation.X, *filled)
    keep = counts >= min_rows  # (n_clients, max k); unused slots have count 0
    # weights: the client's rows a centroid stands for (counts of a sample scaled up)
    weights = counts * (federation.sizes / used)[:, None]
    C, w = centres[keep], weights[keep].astype(np.float64)
    n_sent = C.shape[0]
    if n_sent < n_components:
        raise TooFewSummariesError(
            f"k-means init: clients sent {n_sent} centroid(s) of >= {min_rows} rows, fewer than "
            f"n_components={n_components}; use init_params='random' or a smaller min_rows.")
    from sklearn.cluster import KMeans  # lazy: node processes that never init stay light

    km = KMeans(n_clusters=n_components, n_init=SERVER_N_INIT,
                random_state=int(rng.integers(np.iinfo(np.int32).max)))
    # a few hundred weighted points: one thread. scikit-learn's OpenMP threads next to
    # numba's (another OpenMP runtime, its threads spinning after the clients' pass) made
    # this fit 50x slower on 2 cores (1.2 s instead of 0.02 s)
    with _thread_pools().limit(limits=1):
        return km.fit(C, sample_weight=w).cluster_centers_


@functools.cache
def _thread_pools() -> ThreadpoolController:
    """One ThreadpoolController per process: building one scans the loaded libraries
    (2.5 ms per fit). Built after scikit-learn's import, so its OpenMP runtime is in it."""
    return ThreadpoolController()


def observed_centroids(shape, offsets, rows, labels, X, observed, fill):
    """Centroids of filled rows as the means of their observed values: where a centroid's column
    holds fewer than :data:`._pair_moments.MIN_OBSERVED_ROWS` of them, the public ``fill``.

    The mean of a filled column mixes the observed values with copies of ``fill``, so with one
    observed value it would give that value away (and with more it is pulled toward ``fill``).

    Parameters
    ----------
    shape : tuple (n_clients, K, d)
        Of the local k-means' centroids (:func:`._local_kmeans.local_kmeans_all`).
    offsets : ndarray of int of shape (n_clients + 1,)
    rows, labels : ndarray of int of shape (n_used,)
        The rows the clients' k-means ran on, and their centroids (-1: none).
    X : ndarray of shape (n, d)
        The rows, observed where ``observed``.
    observed : ndarray of bool of shape (n, d)
    fill : ndarray of shape (d,)

    Returns
    -------
    ndarray of shape ``shape``
    """
    n_clients, K, d = shape
    assigned = rows[labels >= 0]
    centroid = segment_owner(offsets)[assigned] * K + labels[labels >= 0]
    # one bincount per quantity over (centroid, column) cells
    cells = (centroid[:, None] * d + np.arange(d)).ravel()
    seen = observed[assigned]
    counts = np.bincount(cells, weights=seen.ravel(), minlength=n_clients * K * d).reshape(shape)
    sums = np.bincount(cells, weights=np.where(seen, X[assigned], 0.0).ravel(),
                       minlength=n_clients * K * d).reshape(shape)
    shared = (counts > 0) & ~too_few(counts)
    return np.where(shared, sums / np.maximum(counts, 1.0), fill)


def filled_kmeans_summaries(federation, fill, n_components, rng, min_rows=SUMMARY_MIN_ROWS):
    """:func:`init_kmeans_summaries` on rows whose missing entries each client fills with
    the public ``fill`` (d,), centroids of their observed values (:func:`observed_centroids`);
    ``None`` when the clients are too small to send them."""
    observed = ~np.isnan(federation.X)
    filled = np.where(observed, federation.X, fill)
    try:
        return init_kmeans_summaries(Federation(filled, federation.offsets), n_components, rng, min_rows=min_rows,
                                     filled=(observed, fill))
    except TooFewSummariesError:
        return None  # the callers document a fallback to random draws
