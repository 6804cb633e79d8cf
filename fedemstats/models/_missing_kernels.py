"""Shared pieces of the missing-value models: missingness patterns, chunked segment
sums and Gaussian conditionals on the observed block (SPEC §5).

Rows are grouped by missingness pattern so that each pattern's observed covariance
block Σ_oo is factorised once per component (batched over patterns), and the row-level
work is a few vectorised products over row chunks. Segment sums over clients run in
the same pass (one ``np.add.reduceat`` per chunk), never a Python loop over clients.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["LOG_2PI", "missing_patterns", "rows_per_chunk", "segment_sums", "second_moment_sums",
           "mirror_upper", "gaussian_blocks", "gaussian_conditionals", "nan_moments", "check_shift_scale",
           "public_scale", "check_missing_input"]

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


@njit(cache=True)
def _second_moments_full(z, r, C, pat, owner, out):
    n, K, d = z.shape
    for i in range(n):
        s, p = owner[i], pat[i]
        for k in range(K):
            w = r[i, k]
            if w == 0.0:
                continue
            for a in range(d):
                wa = w * z[i, k, a]
                for b in range(a, d):
                    out[s, k, a, b] += wa * z[i, k, b] + w * C[k, p, a, b]


@njit(cache=True)
def _second_moments_diag(z, r, C, pat, owner, out):
    n, K, d = z.shape
    for i in range(n):
        s, p = owner[i], pat[i]
        for k in range(K):
            w = r[i, k]
            for a in range(d):
                out[s, k, a] += w * (z[i, k, a] * z[i, k, a] + C[k, p, a, a])


def second_moment_sums(z, r, C, pat, owner, out):
    """Add ``Σ_rows r_k (z_k z_kᵀ + C_{k,pattern})`` into ``out`` per segment, in place.

    A compiled loop over rows (no (n, K, d, d) temporaries); full matrices get their
    upper triangle only, see :func:`mirror_upper`.

    Parameters
    ----------
    z : ndarray of shape (c, K, d)
    r : ndarray of shape (c, K)
    C : ndarray of shape (K, P, d, d)
    pat, owner : ndarray of int of shape (c,)
        Pattern and segment of each row.
    out : ndarray of shape (n_seg, K, d, d) or (n_seg, K, d)
        Diagonal second moments when 3-D.
    """
    args = (np.ascontiguousarray(z), np.ascontiguousarray(r), C, np.ascontiguousarray(pat),
            np.ascontiguousarray(owner), out)
    (_second_moments_full if out.ndim == 4 else _second_moments_diag)(*args)


def mirror_upper(S):
    """In place: copy the strict upper triangle of (..., d, d) blocks to the lower one."""
    iu, ju = np.triu_indices(S.shape[-1], 1)
    S[..., ju, iu] = S[..., iu, ju]
    return S


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


def check_shift_scale(shift, scale, d):
    """Validated public centre ``c`` (default zeros) and positive scales ``σ`` (default ones).

    Returns
    -------
    shift, scale : ndarray of shape (d,)
    """
    shift = np.zeros(d) if shift is None else np.array(shift, dtype=np.float64).ravel()
    scale = np.ones(d) if scale is None else np.array(scale, dtype=np.float64).ravel()
    if shift.shape != (d,) or not np.all(np.isfinite(shift)):
        raise ValueError(f"shift must be a finite array of shape ({d},).")
    if scale.shape != (d,) or not np.all(np.isfinite(scale)) or (scale <= 0).any():
        raise ValueError(f"scale must be a finite positive array of shape ({d},).")
    return shift, scale


def public_scale(cov):
    """Standard deviations from a (pairwise) covariance, with zero variances set to 1."""
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return np.where(sd > 0, sd, 1.0)


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
