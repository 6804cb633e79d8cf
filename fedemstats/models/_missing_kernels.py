"""Shared pieces of the missing-value models: missingness patterns, chunked segment
sums and Gaussian conditionals on the observed block (SPEC §5).

Rows are grouped by missingness pattern so that each pattern's observed covariance
block Σ_oo is factorised once per component (batched over patterns), and the row-level
work is a few vectorised products over row chunks. Segment sums over clients run in
the same pass (one ``np.add.reduceat`` per chunk), never a Python loop over clients.
"""
from __future__ import annotations

import numpy as np

__all__ = ["LOG_2PI", "missing_patterns", "rows_per_chunk", "segment_sums",
           "gaussian_blocks", "gaussian_conditionals", "nan_moments", "check_missing_input"]

LOG_2PI = float(np.log(2.0 * np.pi))
#: Floats held by one chunk's per-row temporaries; bounds memory at ~32 MB per array
#: whatever n and d are (per-row second moments are d*d each).
CHUNK_FLOATS = 2 ** 22


def missing_patterns(observed):
    """Group rows by their pattern of observed coordinates.

    Parameters
    ----------
    observed : ndarray of bool of shape (n, d)

    Returns
    -------
    patterns : ndarray of bool of shape (n_patterns, d)
        The distinct patterns (True = observed).
    inverse : ndarray of int64 of shape (n,)
        ``patterns[inverse[i]]`` is row ``i``'s pattern.
    """
    if observed.shape[0] == 0:
        return np.ones((0, observed.shape[1]), dtype=bool), np.zeros(0, dtype=np.int64)
    packed = np.packbits(observed, axis=1)
    _, first, inverse = np.unique(packed, axis=0, return_index=True, return_inverse=True)
    return observed[first], np.asarray(inverse, dtype=np.int64).ravel()


def rows_per_chunk(floats_per_row: int) -> int:
    """Rows per chunk so that one per-row temporary holds about :data:`CHUNK_FLOATS`."""
    return max(1, CHUNK_FLOATS // max(1, int(floats_per_row)))


def segment_sums(row_fn, seg, width, chunk):
    """Per-segment sums of per-row vectors computed chunk by chunk.

    Parameters
    ----------
    row_fn : callable ``(start, stop) -> ndarray of shape (stop - start, width)``
    seg : ndarray of int of shape (n_seg + 1,)
        Segment boundaries (clients), contiguous and non-empty.
    width : int
    chunk : int
        Rows per call of ``row_fn``.

    Returns
    -------
    sums : ndarray of shape (n_seg, width)
    """
    n, n_seg = int(seg[-1]), seg.size - 1
    owner = np.repeat(np.arange(n_seg), np.diff(seg))
    out = np.zeros((n_seg, width))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        own = owner[start:stop]
        heads = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
        out[own[heads]] += np.add.reduceat(row_fn(start, stop), heads, axis=0)
    return out


def gaussian_blocks(covs, patterns):
    """Per component and pattern: inverse and log-determinant of the observed block.

    The observed block is embedded as ``A = O Σ O + (I - O)`` (O = diag(pattern)), whose
    Cholesky factor gives ``log det Σ_oo`` and whose inverse minus ``I - O`` is
    ``Σ_oo^{-1}`` padded with zeros. Then ``Σ Q y`` completes a centred row (its missing
    part is ``Σ_mo Σ_oo^{-1} y_o``) and ``C = Σ - Σ Q Σ`` is the conditional covariance
    of the missing block (zero elsewhere).

    Parameters
    ----------
    covs : ndarray of shape (K, d, d)
        Symmetric positive definite.
    patterns : ndarray of bool of shape (P, d)

    Returns
    -------
    Q : ndarray of shape (K, P, d, d)
        ``Σ_oo^{-1}`` zero-padded.
    C : ndarray of shape (K, P, d, d)
        Conditional covariance of the missing block, zero-padded.
    logdet : ndarray of shape (K, P)
        ``log det Σ_oo`` (0 for a pattern with nothing observed).
    """
    o = patterns.astype(np.float64)
    oo = o[:, :, None] * o[:, None, :]
    pad = np.eye(o.shape[1])[None] * (1.0 - o)[:, None, :]
    A = covs[:, None] * oo[None] + pad[None]
    L = np.linalg.cholesky(A)
    logdet = 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    Linv = np.linalg.inv(L)
    Q = np.swapaxes(Linv, -1, -2) @ Linv - pad[None]
    Q *= oo[None]
    SQ = covs[:, None] @ Q
    mm = (1.0 - o)[:, :, None] * (1.0 - o)[:, None, :]
    C = (covs[:, None] - SQ @ covs[:, None]) * mm[None]
    return Q, 0.5 * (C + np.swapaxes(C, -1, -2)), logdet


def gaussian_conditionals(X, observed, pat, means, covs, Q, logdet):
    """Completed centred rows and observed-block log-densities for each component.

    Parameters
    ----------
    X : ndarray of shape (c, d)
        Rows (NaN where missing).
    observed : ndarray of bool of shape (c, d)
    pat : ndarray of int of shape (c,)
        Pattern index of each row (into ``Q`` / ``logdet``).
    means : ndarray of shape (K, d)
    covs : ndarray of shape (K, d, d)
    Q, logdet : from :func:`gaussian_blocks`

    Returns
    -------
    yhat : ndarray of shape (c, K, d)
        ``E[x | x_o, k] - mu_k``: observed entries are ``x_o - mu_k,o``; missing ones
        ``Σ_mo Σ_oo^{-1} (x_o - mu_o)``.
    logp : ndarray of shape (c, K)
        ``log N(x_o; mu_k,o, Σ_k,oo)`` (0 for a row with nothing observed).
    """
    c, d = X.shape
    K = means.shape[0]
    n_obs = observed.sum(axis=1)
    yhat = np.empty((c, K, d))
    logp = np.empty((c, K))
    for k in range(K):  # K is the number of components (small), not clients
        y = np.where(observed, X - means[k], 0.0)
        u = np.einsum("nij,nj->ni", Q[k, pat], y)
        logp[:, k] = -0.5 * (n_obs * LOG_2PI + logdet[k, pat] + np.sum(y * u, axis=1))
        yhat[:, k] = np.where(observed, y, u @ covs[k])
    return yhat, logp


def nan_moments(X, observed=None):
    """Mean and pairwise-complete covariance from sums of observed values.

    What a client sends is its column sums and counts, then (after the server has
    broadcast the mean ``c``) the pairwise sums ``sum (x_j - c_j)(x_l - c_l)`` and
    pairwise counts over rows where both are observed; the server adds them up.
    Summing over the whole array here gives the same numbers.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        NaN where missing; every column needs an observed value.
    observed : ndarray of bool of shape (n, d), optional

    Returns
    -------
    mean : ndarray of shape (d,)
    cov : ndarray of shape (d, d)
        Symmetric, not necessarily positive definite (pairwise deletion); pairs never
        observed together get 0.
    """
    observed = ~np.isnan(X) if observed is None else observed
    obs = observed.astype(np.float64)
    Xz = np.where(observed, X, 0.0)
    mean = Xz.sum(axis=0) / np.maximum(obs.sum(axis=0), 1.0)
    Z = np.where(observed, X - mean, 0.0)
    pair_n = obs.T @ obs
    cov = np.where(pair_n > 0, (Z.T @ Z) / np.maximum(pair_n, 1.0), 0.0)
    return mean, 0.5 * (cov + cov.T)


def check_missing_input(X, observed=None, *, fitting=True):
    """Reject inputs the missing-value models cannot learn from.

    Raises
    ------
    ValueError
        If a column has no observed value, or (when ``fitting``) a row has none:
        such rows carry no information and are *not* skipped silently.
    """
    observed = ~np.isnan(X) if observed is None else observed
    empty_cols = np.flatnonzero(~observed.any(axis=0))
    if empty_cols.size:
        raise ValueError(f"column(s) {empty_cols[:10].tolist()} have no observed value; a model "
                         "cannot be fitted for them: drop these columns.")
    if fitting:
        empty_rows = np.flatnonzero(~observed.any(axis=1))
        if empty_rows.size:
            raise ValueError(
                f"{empty_rows.size} row(s) (e.g. {empty_rows[:5].tolist()}) have no observed value. "
                "They carry no information about the parameters and are not skipped "
                "silently: drop them before fit, e.g. X[~np.isnan(X).all(axis=1)] "
                "(transform imputes such rows with the fitted marginal means).")
    return observed
