"""Gaussian mixture on rows with values missing at random: per-client statistics,
observed-data likelihood and imputation (SPEC §5).

Responsibilities come from each component's density of the observed block; given the
component, the missing block is completed with the Gaussian conditional mean and its
conditional covariance is added to the second moment (:mod:`._conditionals`). The
single Gaussian (:mod:`.gaussian_missing`, K = 1) and the mixture (:mod:`.gmm_missing`)
both use these kernels.
"""
from __future__ import annotations

import numpy as np

from ..layout import sym_size
from .._validation import check_rng
from ._conditionals import gaussian_blocks, gaussian_conditionals, second_moment_sums
from ._mixture import draw_components, log_norm_resp
from ._patterns import missing_patterns, rows_per_chunk, segment_owner, segment_sums

__all__ = ["mixture_segment_sums", "mixture_log_likelihood", "impute_mixture"]


def _responsibilities(logp, weights):
    """Log-likelihood (c,) and responsibilities (c, K) from component log-densities."""
    with np.errstate(divide="ignore"):
        wlp = logp + np.log(weights)[None, :]
    return log_norm_resp(wlp)


def mixture_segment_sums(X, seg, weights, means, covs, shift, diag=False):
    """Per-segment sums of the conditional expected statistics of a Gaussian mixture.

    Rows are grouped by missingness pattern once, then processed in chunks
    (:func:`._patterns.segment_sums`); full second moments are added by a compiled loop
    (:func:`._conditionals.second_moment_sums`) in the same pass.

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    seg : ndarray of int of shape (n_seg + 1,)
        Segment (client) boundaries.
    weights : ndarray of shape (K,)
    means : ndarray of shape (K, d)
    covs : ndarray of shape (K, d, d)
    shift : ndarray of shape (d,)
        Public centre ``c`` of the moments.
    diag : bool, default=False
        Diagonal second moments only.

    Returns
    -------
    sums : ndarray of shape (n_seg, K + K*d + K*d*(d+1)/2 + 1) (diag: K + 2*K*d + 1)
        Sums of ``[r_k, r_k z_k, r_k (z_k z_kᵀ + C_k,mm), loglik]`` with ``z_k = x̂_k − c``
        (full: the packed upper triangles of the second moments; diag: their diagonals),
        i.e. the statistic layout of :class:`.gmm.GaussianMixtureModel` followed by the
        log-likelihood.
    """
    K, d = means.shape
    observed = ~np.isnan(X)
    patterns, pat = missing_patterns(observed)
    blocks = gaussian_blocks(covs, patterns)
    owner = segment_owner(seg)
    second = None if diag else np.zeros((seg.size - 1, K, sym_size(d)))

    def rows(a, b):
        yhat, logp = gaussian_conditionals(X[a:b], observed[a:b], pat[a:b], means, blocks)
        ll, r = _responsibilities(logp, weights)
        z = yhat + (means - shift)[None]
        parts = [r, (r[:, :, None] * z).reshape(b - a, -1)]
        if diag:
            c_diag = np.diagonal(blocks[1], axis1=-2, axis2=-1)[:, pat[a:b]].transpose(1, 0, 2)
            parts.append((r[:, :, None] * (z * z + c_diag)).reshape(b - a, -1))
        else:
            second_moment_sums(z, r, blocks[1], pat[a:b], owner[a:b], second)
        return np.concatenate(parts + [ll[:, None]], axis=1)

    width = K + K * d + (K * d if diag else 0) + 1
    sums = segment_sums(rows, seg, width, rows_per_chunk(K * d * d))
    if diag:
        return sums
    return np.concatenate([sums[:, :-1], second.reshape(seg.size - 1, -1), sums[:, -1:]], axis=1)


def _chunks(X, means, covs):
    """Yield ``(slice, yhat, logp, observed, pat, blocks)`` over row chunks of ``X``."""
    observed = ~np.isnan(X)
    patterns, pat = missing_patterns(observed)
    blocks = gaussian_blocks(covs, patterns)
    K, d = means.shape
    step = rows_per_chunk(K * d * d)
    for a in range(0, X.shape[0], step):
        sl = slice(a, min(X.shape[0], a + step))
        yhat, logp = gaussian_conditionals(X[sl], observed[sl], pat[sl], means, blocks)
        yield sl, yhat, logp, observed[sl], pat[sl], blocks


def mixture_log_likelihood(X, weights, means, covs):
    """Log-density of the observed part of each row, shape (n,).

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    weights : ndarray of shape (K,)
    means : ndarray of shape (K, d)
    covs : ndarray of shape (K, d, d)
    """
    out = np.zeros(X.shape[0])
    for sl, _, logp, _, _, _ in _chunks(X, means, covs):
        out[sl] = _responsibilities(logp, weights)[0]
    return out


def impute_mixture(X, weights, means, covs, rng=None, sample=False):
    """Fill missing entries with their conditional mean, or draw them (multiple imputation).

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    weights, means, covs : mixture parameters of shapes (K,), (K, d), (K, d, d)
    rng : numpy.random.Generator, optional
        Used when ``sample``.
    sample : bool, default=False
        ``False``: ``E[x_m | x_o] = Σ_k r_k(x_o) x̂_{k,m}``. ``True``: draw the component
        ``k ~ r(x_o)`` and then ``x_m ~ N(x̂_{k,m}, C_{k,mm})``.

    Returns
    -------
    ndarray of shape (n, d)
    """
    X = np.asarray(X, dtype=np.float64)
    out = X.copy()
    rng = check_rng(rng) if sample else None
    chol = None
    for sl, yhat, logp, obs, pat, blocks in _chunks(X, means, covs):
        r = _responsibilities(logp, weights)[1]
        full = yhat + means[None]
        if sample:
            chol = _conditional_cholesky(blocks[1]) if chol is None else chol
            fill = _draw(full, r, chol, pat, obs, rng)
        else:
            fill = np.einsum("nk,nkd->nd", r, full)
        out[sl] = np.where(obs, X[sl], fill)
    return out


def _conditional_cholesky(C):
    """Cholesky factors of ``C + (I − M)`` (K, P, d, d): the identity padding on the
    observed block keeps the factorisation defined and leaves the missing block's factor."""
    d = C.shape[-1]
    diag = np.diagonal(C, axis1=-2, axis2=-1)
    pad = (diag == 0.0) & np.all(C == 0.0, axis=-1)
    L = np.linalg.cholesky(C + np.eye(d) * pad[..., None, :])
    return L * (~pad)[..., :, None]


def _draw(full, r, chol, pat, observed, rng):
    """One posterior draw per row: component from ``r``, then the conditional normal."""
    c = full.shape[0]
    k = draw_components(r, rng)
    noise = np.einsum("nij,nj->ni", chol[k, pat], rng.standard_normal(full[:, 0].shape))
    return np.where(observed, 0.0, full[np.arange(c), k] + noise)
