"""Gaussian conditionals on the observed block of rows with missing values (SPEC §5).

For a row with observed block ``o`` and missing block ``m``: the completed row
``x̂_m = μ_m + Σ_mo Σ_oo⁻¹ (x_o − μ_o)``, its conditional covariance
``C_mm = Σ_mm − Σ_mo Σ_oo⁻¹ Σ_om`` and ``log N(x_o; μ_o, Σ_oo)``, per mixture component
and per missingness pattern (each pattern's block is factorised once), and the
compiled per-client sums of the conditional second moments ``z zᵀ + C_mm``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .._linalg import LOG_2PI

__all__ = ["gaussian_blocks", "gaussian_conditionals", "second_moment_sums"]


@njit(cache=True)
def _second_moments_upper(z, r, C, pat, owner, out):
    n, K, d = z.shape
    for i in range(n):
        s, p = owner[i], pat[i]
        for k in range(K):
            w = r[i, k]
            if w == 0.0:
                continue
            t = 0  # storage index of (a, b) in the packed upper triangle
            for a in range(d):
                wa = w * z[i, k, a]
                for b in range(a, d):
                    out[s, k, t] += wa * z[i, k, b] + w * C[k, p, a, b]
                    t += 1


def second_moment_sums(z, r, C, pat, owner, out):
    """Add ``Σ_rows r_k (z_k z_kᵀ + C_{k,pattern})`` into ``out`` per segment, in place.

    A compiled loop over rows (no (n, K, d, d) temporaries) that adds the upper
    triangle only, in the packed storage order of a symmetric layout block
    (:mod:`fedemstats.layout`); rows of zero responsibility are skipped. Diagonal second
    moments need no such loop (:func:`._mixture_missing.mixture_segment_sums` sums them
    with the first moments).

    Parameters
    ----------
    z : ndarray of shape (c, K, d)
    r : ndarray of shape (c, K)
    C : ndarray of shape (K, P, d, d)
    pat, owner : ndarray of int of shape (c,)
        Pattern and segment of each row.
    out : ndarray of shape (n_seg, K, d (d + 1) / 2)
    """
    _second_moments_upper(np.ascontiguousarray(z), np.ascontiguousarray(r), C, np.ascontiguousarray(pat),
                          np.ascontiguousarray(owner), out)


def gaussian_blocks(covs, patterns):
    """Per component and pattern: conditional covariance of the missing block and
    ``log det Σ_oo``.

    By the Schur complement, with ``P = Σ⁻¹``: ``Σ_oo⁻¹ = P_oo − P_om P_mm⁻¹ P_mo``,
    ``C_mm = Σ_mm − Σ_mo Σ_oo⁻¹ Σ_om = P_mm⁻¹`` and ``log det Σ_oo = log det Σ +
    log det P_mm``. So each pattern's observed block is handled by one Cholesky
    factorisation of its ``|m| × |m|`` block ``P_mm`` -- equivalent to factorising
    Σ_oo, and much cheaper when few entries are missing. Patterns are batched by
    their number of missing entries (a loop over sizes, not over rows or clients).

    Parameters
    ----------
    covs : ndarray of shape (K, d, d)
        Symmetric positive definite.
    patterns : ndarray of bool of shape (P, d)
        True = observed.

    Returns
    -------
    prec : ndarray of shape (K, d, d)
        ``Σ_k⁻¹``.
    C : ndarray of shape (K, P, d, d)
        ``C_mm`` zero-padded to (d, d).
    logdet : ndarray of shape (K, P)
        ``log det Σ_oo`` (0 for a pattern with nothing observed).
    """
    K, d, _ = covs.shape
    L = np.linalg.cholesky(covs)
    Linv = np.linalg.inv(L)
    prec = np.swapaxes(Linv, -1, -2) @ Linv
    logdet = np.repeat(2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)[:, None],
                       patterns.shape[0], axis=1)
    C = np.zeros((K, patterns.shape[0], d, d))
    n_miss = d - patterns.sum(axis=1)
    for size in np.unique(n_miss[n_miss > 0]):  # at most d sizes
        rows = np.flatnonzero(n_miss == size)
        idx = np.nonzero(~patterns[rows])[1].reshape(rows.size, size)
        ii, jj = idx[:, :, None], idx[:, None, :]
        Pmm = prec[:, ii, jj]
        Lm = np.linalg.cholesky(Pmm)
        logdet[:, rows] += 2.0 * np.sum(np.log(np.diagonal(Lm, axis1=-2, axis2=-1)), axis=-1)
        Lmi = np.linalg.inv(Lm)
        C[:, rows[:, None, None], ii, jj] = np.swapaxes(Lmi, -1, -2) @ Lmi
    return prec, C, logdet


def gaussian_conditionals(X, observed, pat, means, blocks):
    """Completed centred rows and observed-block log-densities for each component.

    Parameters
    ----------
    X : ndarray of shape (c, d)
        Rows (NaN where missing).
    observed : ndarray of bool of shape (c, d)
    pat : ndarray of int of shape (c,)
        Pattern index of each row (into the blocks).
    means : ndarray of shape (K, d)
    blocks : tuple (prec, C, logdet) from :func:`gaussian_blocks`

    Returns
    -------
    yhat : ndarray of shape (c, K, d)
        ``E[x | x_o, k] − μ_k``: observed entries ``x_o − μ_k,o``, missing ones
        ``Σ_mo Σ_oo⁻¹ (x_o − μ_o) = −P_mm⁻¹ P_mo (x_o − μ_o)``.
    logp : ndarray of shape (c, K)
        ``log N(x_o; μ_k,o, Σ_k,oo)`` (0 for a row with nothing observed).
    """
    prec, C, logdet = blocks
    c, d = X.shape
    K = means.shape[0]
    n_obs = observed.sum(axis=1)
    yhat = np.empty((c, K, d))
    logp = np.empty((c, K))
    for k in range(K):  # K is the number of components (small), not clients
        y = np.where(observed, X - means[k], 0.0)
        u = y @ prec[k]
        cu = np.einsum("nij,nj->ni", C[k, pat], u)
        quad = np.sum(y * u, axis=1) - np.sum(u * cu, axis=1)
        logp[:, k] = -0.5 * (n_obs * LOG_2PI + logdet[k, pat] + quad)
        yhat[:, k] = np.where(observed, y, -cu)
    return yhat, logp
