"""Pairwise-complete moments of rows with missing values, as one client part and one server part.

The in-process engine holds every client's rows and evaluates the pooled sums of
:func:`._summaries.nan_moments` in one pass. A node of a real deployment
(``fedemstats.flower``) sends :func:`client_pair_moments` of its own rows instead, once, and
the server's :func:`combine_pair_moments` forms the same mean and pairwise covariance (equal
up to rounding): each node centres on its own column means, so no precision is lost to a
large offset, and the server moves every pair's sum to the global means exactly.
"""
from __future__ import annotations

import numpy as np

from ._patterns import rows_per_chunk

__all__ = ["PAIR_MOMENT_NAMES", "client_pair_moments", "combine_pair_moments"]

#: the arrays of one client's part, in the order :func:`client_pair_moments` returns them
PAIR_MOMENT_NAMES = ("counts", "mean", "pair_counts", "pair_sums", "scatter")


def client_pair_moments(X) -> dict:
    """One client's part of the pairwise-complete moments, from its own rows only.

    Parameters
    ----------
    X : ndarray of shape (m, d)
        NaN where missing.

    Returns
    -------
    dict of ndarray (keys :data:`PAIR_MOMENT_NAMES`)
        ``counts`` (d,): observed values per column; ``mean`` (d,): their mean (0 for a column
        with none); ``pair_counts`` (d, d): rows where columns j and l are both observed;
        ``pair_sums`` (d, d): entry (j, l) is the sum of ``x_j − mean_j`` over those rows (not
        symmetric); ``scatter`` (d, d): the sum of ``(x_j − mean_j)(x_l − mean_l)`` over them.
        All float64.
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    observed = ~np.isnan(X)
    counts = observed.sum(axis=0).astype(np.float64)
    mean = np.where(observed, X, 0.0).sum(axis=0) / np.maximum(counts, 1.0)
    pair_counts, pair_sums, scatter = np.zeros((d, d)), np.zeros((d, d)), np.zeros((d, d))
    step = rows_per_chunk(3 * d)
    for start in range(0, X.shape[0], step):
        Z = X[start:start + step] - mean
        obs = observed[start:start + step]
        Z[~obs] = 0.0
        weights = obs.astype(np.float64)
        pair_counts += weights.T @ weights
        pair_sums += Z.T @ weights
        scatter += Z.T @ Z
    return dict(zip(PAIR_MOMENT_NAMES, (counts, mean, pair_counts, pair_sums, scatter)))


def combine_pair_moments(counts, means, pair_counts, pair_sums, scatters):
    """Server part: the global mean of the observed values and the pairwise-complete covariance.

    With ``δ_i = mean_i − c`` (``c`` the global column means), the sum over client i's rows
    where j and l are both observed of ``(x_j − c_j)(x_l − c_l)`` is
    ``scatter_jl + δ_l pair_sums_jl + δ_j pair_sums_lj + δ_j δ_l pair_counts_jl``.

    Parameters
    ----------
    counts, means : ndarray of shape (n_clients, d)
    pair_counts, pair_sums, scatters : ndarray of shape (n_clients, d, d)
        The clients' :func:`client_pair_moments`, stacked.

    Returns
    -------
    mean : ndarray of shape (d,)
        0 for a column no client observed.
    cov : ndarray of shape (d, d)
        Symmetric, not necessarily positive definite (pairwise deletion); 0 for pairs never
        observed together. As :func:`._summaries.nan_moments` on the pooled rows.
    """
    counts, means = np.asarray(counts, dtype=np.float64), np.asarray(means, dtype=np.float64)
    total = counts.sum(axis=0)
    mean = (counts * means).sum(axis=0) / np.maximum(total, 1.0)
    dev = means - mean
    n_pairs = np.sum(pair_counts, axis=0)
    sums = (np.sum(scatters, axis=0) + np.einsum("ijl,il->jl", pair_sums, dev)
            + np.einsum("ilj,ij->jl", pair_sums, dev) + np.einsum("ijl,ij,il->jl", pair_counts, dev, dev))
    cov = np.where(n_pairs > 0, sums / np.maximum(n_pairs, 1.0), 0.0)
    return mean, 0.5 * (cov + cov.T)
