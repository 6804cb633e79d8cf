"""Pairwise-complete moments of rows with missing values: the products both halves use.

:func:`pair_products` is the one pass over rows: for every pair of columns (j, l), over the
rows where both are observed, their count and the sums of ``(x_j − c_j)(x_l − c_l)`` (and of
``x_j − c_j``) about a centre ``c``. The in-process engine, which holds every client's rows,
evaluates it once on all of them about the global means (:func:`._summaries.nan_moments`). A
node of a real deployment (``fedemstats.flower``) evaluates it on its own rows about its own
column means and sends :func:`client_pair_moments`, once; the server's
:func:`combine_pair_moments` moves every pair's sums to the global means exactly and gets the
same mean and covariance (equal up to rounding), with no precision lost to a large offset.
"""
from __future__ import annotations

import numpy as np

from ._patterns import rows_per_chunk

__all__ = ["PAIR_MOMENT_NAMES", "observed_means", "pair_products", "pairwise_covariance", "client_pair_moments",
           "combine_pair_moments"]

#: the arrays of one client's part (:func:`client_pair_moments`); a column's count is its pair
#: count with itself, the diagonal of ``pair_counts``
PAIR_MOMENT_NAMES = ("mean", "pair_counts", "pair_sums", "scatter")


def observed_means(X, observed=None) -> np.ndarray:
    """Mean of the observed values of each column of ``X`` (n, d), shape (d,); 0 where none."""
    observed = ~np.isnan(X) if observed is None else observed
    return np.where(observed, X, 0.0).sum(axis=0) / np.maximum(observed.sum(axis=0), 1.0)


def pair_products(X, centre, with_sums=False):
    """Sums over the rows where columns j and l are both observed, in chunked BLAS products.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        NaN where missing.
    centre : ndarray of shape (d,)
        Finite.
    with_sums : bool, default=False
        Also return the sums of ``x_j − c_j``.

    Returns
    -------
    counts : ndarray of shape (d, d)
        Rows where j and l are both observed (float64, whole numbers).
    sums : ndarray of shape (d, d) or None
        Entry (j, l): the sum of ``x_j − c_j`` over those rows (not symmetric).
    products : ndarray of shape (d, d)
        The sum of ``(x_j − c_j)(x_l − c_l)`` over those rows.
    """
    d = X.shape[1]
    counts, products = np.zeros((d, d)), np.zeros((d, d))
    sums = np.zeros((d, d)) if with_sums else None
    step = rows_per_chunk(2 * d)
    for start in range(0, X.shape[0], step):
        Z = X[start:start + step] - centre
        missing = np.isnan(Z)
        if missing.any():
            Z[missing] = 0.0
            obs = (~missing).astype(np.float64)
            counts += obs.T @ obs
            if with_sums:
                sums += Z.T @ obs
        else:
            counts += Z.shape[0]
            if with_sums:
                sums += Z.sum(axis=0)[:, None]
        products += Z.T @ Z
    return counts, sums, products


def pairwise_covariance(products, counts) -> np.ndarray:
    """``products / counts`` symmetrised, 0 for pairs never observed together, shape (d, d);
    not necessarily positive definite (pairwise deletion)."""
    cov = np.where(counts > 0, products / np.maximum(counts, 1.0), 0.0)
    return 0.5 * (cov + cov.T)


def client_pair_moments(X) -> dict:
    """One client's part of the pairwise-complete moments, from its own rows only.

    Parameters
    ----------
    X : ndarray of shape (m, d)
        NaN where missing.

    Returns
    -------
    dict of ndarray (keys :data:`PAIR_MOMENT_NAMES`)
        ``mean`` (d,): the observed values' mean per column (0 for a column with none);
        ``pair_counts``, ``pair_sums``, ``scatter`` (d, d): :func:`pair_products` about that mean.
    """
    X = np.asarray(X, dtype=np.float64)
    mean = observed_means(X)
    return dict(zip(PAIR_MOMENT_NAMES, (mean, *pair_products(X, mean, with_sums=True))))


def combine_pair_moments(means, pair_counts, pair_sums, scatters):
    """Server part: the global mean of the observed values and the pairwise-complete covariance.

    With ``δ_i = mean_i − c`` (``c`` the global column means), the sum over client i's rows
    where j and l are both observed of ``(x_j − c_j)(x_l − c_l)`` is
    ``scatter_jl + δ_l pair_sums_jl + δ_j pair_sums_lj + δ_j δ_l pair_counts_jl``.

    Parameters
    ----------
    means : ndarray of shape (n_clients, d)
    pair_counts, pair_sums, scatters : ndarray of shape (n_clients, d, d)
        The clients' :func:`client_pair_moments`, stacked.

    Returns
    -------
    mean : ndarray of shape (d,)
        0 for a column no client observed.
    cov : ndarray of shape (d, d)
        As :func:`._summaries.nan_moments` on the pooled rows.
    """
    means, pair_counts = np.asarray(means, dtype=np.float64), np.asarray(pair_counts, dtype=np.float64)
    counts = np.diagonal(pair_counts, axis1=1, axis2=2)
    mean = (counts * means).sum(axis=0) / np.maximum(counts.sum(axis=0), 1.0)
    dev = means - mean
    products = (np.sum(scatters, axis=0) + np.einsum("ijl,il->jl", pair_sums, dev)
                + np.einsum("ilj,ij->jl", pair_sums, dev) + np.einsum("ijl,ij,il->jl", pair_counts, dev, dev))
    return mean, pairwise_covariance(products, pair_counts.sum(axis=0))
