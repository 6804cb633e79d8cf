"""Pairwise-complete moments of rows with missing values: the products both halves use.

:func:`pair_products` is the one pass over rows: for every pair of columns (j, l), over the
rows where both are observed, their count and the sums of ``(x_j − c_j)(x_l − c_l)`` (and of
``x_j − c_j``) about a centre ``c``. The in-process engine, which holds every client's rows,
evaluates it once on all of them about the global means (:func:`._summaries.nan_moments`). A
node of a real deployment (``fedemstats.flower``) evaluates it on its own rows about its own
column means and sends :func:`client_pair_moments`, once; the server's
:func:`combine_pair_moments` moves every pair's sums to the global means exactly and gets the
same mean and covariance (equal up to rounding), with no precision lost to a large offset.

Both halves leave out what a client observes too rarely to share (:data:`MIN_OBSERVED_ROWS`):
a column it observes in one row only (:func:`withhold_rare_cells`: that column's mean would be
the row's value), and a pair of columns it observes together in one row only
(:func:`drop_rare_pairs`, and :func:`client_pair_moments` on a node: a node's ``pair_sums`` of that
pair would be the row's values less its public column means).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..federation import MIN_CLIENT_ROWS
from ._patterns import rows_per_chunk, segment_owner

__all__ = ["PAIR_MOMENT_NAMES", "MIN_OBSERVED_ROWS", "observed_means", "withhold_rare_cells", "too_few",
           "drop_rare_pairs", "pair_products", "pairwise_covariance", "client_pair_moments", "combine_pair_moments"]

#: A client shares a column's values, or a pair of columns' products, in the start's moments
#: only over at least this many of its rows: the federation's smallest client, for the same
#: reason (a mean over one row is that row's value; SPEC §3, no raw value leaves a client).
MIN_OBSERVED_ROWS = MIN_CLIENT_ROWS

#: the arrays of one client's part (:func:`client_pair_moments`); a column's count is its pair
#: count with itself, the diagonal of ``pair_counts``
PAIR_MOMENT_NAMES = ("mean", "pair_counts", "pair_sums", "scatter")


def observed_means(X) -> np.ndarray:
    """Mean of the observed values of each column of ``X`` (n, d), shape (d,); 0 where none."""
    observed = ~np.isnan(X)
    return np.where(observed, X, 0.0).sum(axis=0) / np.maximum(observed.sum(axis=0), 1.0)


def withhold_rare_cells(X, offsets=None):
    """``X`` with NaN at the cells of every column that the cell's client observes in fewer
    than :data:`MIN_OBSERVED_ROWS` of its rows.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        NaN where missing.
    offsets : ndarray of int of shape (n_clients + 1,), optional
        The clients' row ranges; all rows are one client's when not given.

    Returns
    -------
    X : ndarray of shape (n, d)
        ``X`` itself when no cell is withheld.
    counts : ndarray of int of shape (n_clients, d)
        Each client's values per column in it.
    """
    offsets = np.array([0, X.shape[0]]) if offsets is None else np.asarray(offsets)
    observed = ~np.isnan(X)
    counts = _column_counts(observed, offsets)
    rare = too_few(counts)
    if not rare.any():
        return X, counts
    withheld = X.copy()
    withheld[rare[segment_owner(offsets)] & observed] = np.nan
    return withheld, np.where(rare, 0, counts)


def _column_counts(observed, offsets) -> np.ndarray:
    """Each client's observed values per column, shape (n_clients, d) (no client is empty)."""
    return np.add.reduceat(observed, offsets[:-1], axis=0, dtype=np.int64)


def too_few(counts) -> np.ndarray:
    """Where ``counts`` of observed values (any shape) are positive but below
    :data:`MIN_OBSERVED_ROWS`: what a client leaves out; bool, the same shape."""
    return (counts > 0) & (counts < MIN_OBSERVED_ROWS)


def drop_rare_pairs(X, offsets, seen, centre, counts, products):
    """Pooled pair sums (:func:`pair_products` of all clients' rows about ``centre``) less every
    client's pairs it observes together in too few rows (:func:`too_few`; what
    :func:`client_pair_moments` leaves out on a node).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        NaN where missing, after :func:`withhold_rare_cells`.
    offsets : ndarray of int of shape (n_clients + 1,)
    seen : ndarray of int of shape (n_clients, d)
        Each client's values per column in ``X`` (:func:`withhold_rare_cells`).
    centre : ndarray of shape (d,)
    counts, products : ndarray of shape (d, d)

    Returns
    -------
    counts, products : ndarray of shape (d, d)
        New arrays when some pair was dropped, else the given ones.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    if X.shape[1] < 2:
        return counts, products
    # columns seen in c_j and c_l of m rows are seen together in at least c_j + c_l - m: only
    # clients whose two least-seen columns allow fewer than MIN_OBSERVED_ROWS are checked
    seen = np.sort(np.where(seen > 0, seen, np.inf), axis=1)
    suspects = np.flatnonzero(seen[:, 0] + seen[:, 1] - np.diff(offsets) < MIN_OBSERVED_ROWS)
    if not suspects.size:
        return counts, products
    rare_counts, rare_products = np.zeros_like(counts), np.zeros_like(products)
    _rare_pair_sums(np.ascontiguousarray(X, dtype=np.float64), offsets, suspects, np.asarray(centre, dtype=np.float64),
                    MIN_OBSERVED_ROWS, rare_counts, rare_products)
    if not rare_counts.any():
        return counts, products
    return counts - rare_counts, products - rare_products


@njit(cache=True)
def _rare_pair_sums(X, offsets, clients, centre, min_rows, counts_out, products_out):
    """Adds to the outputs, for each of ``clients``, the counts and centred products of the
    pairs of distinct columns it observes together in 1 to ``min_rows - 1`` rows (one compiled
    pass: the clients are often many and tiny). ``X`` has been through :func:`withhold_rare_cells`,
    so no column's count with itself is in that range."""
    d = X.shape[1]
    pair, rare, cols = np.empty((d, d)), np.empty((d, d), dtype=np.bool_), np.empty(d, dtype=np.int64)
    for c in clients:
        a, b = offsets[c], offsets[c + 1]
        pair[:, :] = 0.0
        for r in range(a, b):  # the upper triangle (j < l): a column's own count is >= min_rows
            k = _observed_columns(X, r, cols)
            for p in range(k):
                for q in range(p + 1, k):
                    pair[cols[p], cols[q]] += 1.0
        found = False
        for j in range(d):
            for l in range(j + 1, d):
                rare[j, l] = 0.0 < pair[j, l] < min_rows
                found |= rare[j, l]
        if not found:
            continue
        for r in range(a, b):
            k = _observed_columns(X, r, cols)
            for p in range(k):
                j = cols[p]
                zj = X[r, j] - centre[j]
                for q in range(p + 1, k):
                    l = cols[q]
                    if rare[j, l]:
                        value = zj * (X[r, l] - centre[l])
                        products_out[j, l] += value
                        products_out[l, j] += value
        for j in range(d):
            for l in range(j + 1, d):
                if rare[j, l]:
                    counts_out[j, l] += pair[j, l]
                    counts_out[l, j] += pair[j, l]


@njit(cache=True)
def _observed_columns(X, r, out):
    """Writes row ``r``'s observed columns to ``out[:k]``; returns k."""
    k = 0
    for j in range(X.shape[1]):
        if not np.isnan(X[r, j]):
            out[k] = j
            k += 1
    return k


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
        Columns observed in fewer than :data:`MIN_OBSERVED_ROWS` rows count as unobserved, and
        pairs observed together in fewer have zero counts and sums.
    """
    X, _ = withhold_rare_cells(np.asarray(X, dtype=np.float64))
    mean = observed_means(X)
    counts, sums, products = pair_products(X, mean, with_sums=True)
    rare = too_few(counts)
    counts[rare], sums[rare], products[rare] = 0.0, 0.0, 0.0  # rare is symmetric: (j, l) and (l, j)
    return dict(zip(PAIR_MOMENT_NAMES, (mean, counts, sums, products)))


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
