"""Gaussian with values missing at random: statistics, total T-map, imputation (SPEC §5).

For a row with observed block ``o`` and missing block ``m`` the E-step completes the
row with ``x̂_m = μ_m + Σ_mo Σ_oo⁻¹ (x_o − μ_o)`` and adds the conditional covariance
``C_mm = Σ_mm − Σ_mo Σ_oo⁻¹ Σ_om`` to the second moment. Rows are grouped by
missingness pattern and each pattern's observed block is factorised once, in its
Schur-complement form (see :func:`._missing_kernels.gaussian_blocks`). The row kernel here is written for a
mixture of K Gaussians (responsibilities from the observed block), so that
:mod:`.gmm_missing` reuses it; this model is the K = 1 case without a weight block.
Second moments are taken about a public shift ``c`` (SPEC §2 numerical care).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._linalg import logsumexp, safe_cholesky, symmetrize
from .._validation import check_int, check_positive, check_rng
from ..layout import StatLayout
from ._missing_kernels import (check_shift_scale, gaussian_blocks, gaussian_conditionals, mirror_upper,
                               missing_patterns, nan_moments, rows_per_chunk, second_moment_sums)
from .base import Model

__all__ = ["GaussianParams", "GaussianMissingModel", "mixture_segment_stats",
           "mixture_log_likelihood", "impute_mixture", "init_gaussian"]

@dataclass(frozen=True, eq=False)
class GaussianParams:
    """Mean and covariance of a multivariate normal (treat arrays as read-only).

    Attributes
    ----------
    mean : ndarray of shape (d,)
    covariance : ndarray of shape (d, d), symmetric positive definite
    """

    mean: np.ndarray
    covariance: np.ndarray


def _responsibilities(logp, weights):
    """Log-likelihood (c,) and responsibilities (c, K) from component log-densities."""
    with np.errstate(divide="ignore"):
        wlp = logp + np.log(weights)[None, :]
    ll = logsumexp(wlp, axis=1)
    return ll, np.exp(wlp - ll[:, None])


def mixture_segment_stats(X, seg, weights, means, covs, shift, diag=False):
    """Per-segment sums of the conditional expected statistics of a Gaussian mixture.

    Rows are grouped by missingness pattern once; first-order parts are summed per
    chunk of rows with ``np.add.reduceat`` and second moments by a compiled loop
    (:func:`._missing_kernels.second_moment_sums`), in one pass over all segments.

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
    first : ndarray of shape (n_seg, K + K*d + 1)
        Sums of ``[r_k, r_k (x̂_k − c), loglik]``.
    second : ndarray of shape (n_seg, K, d, d) or (n_seg, K, d)
        Sums of ``r_k ((x̂_k − c)(x̂_k − c)ᵀ + C_k,mm)`` (diag: the diagonal).
    """
    K, d = means.shape
    n, n_seg = X.shape[0], seg.size - 1
    observed = ~np.isnan(X)
    patterns, pat = missing_patterns(observed)
    blocks = gaussian_blocks(covs, patterns)
    owner = np.repeat(np.arange(n_seg), np.diff(seg))
    first = np.zeros((n_seg, K + K * d + 1))
    second = np.zeros((n_seg, K, d) if diag else (n_seg, K, d, d))
    for a in range(0, n, rows_per_chunk(K * d * d)):
        b = min(n, a + rows_per_chunk(K * d * d))
        yhat, logp = gaussian_conditionals(X[a:b], observed[a:b], pat[a:b], means, blocks)
        ll, r = _responsibilities(logp, weights)
        z = yhat + (means - shift)[None]
        rows = np.concatenate([r, (r[:, :, None] * z).reshape(b - a, -1), ll[:, None]], axis=1)
        own = owner[a:b]
        heads = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
        first[own[heads]] += np.add.reduceat(rows, heads, axis=0)
        second_moment_sums(z, r, blocks[1], pat[a:b], own, second)
    return first, second if diag else mirror_upper(second)


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
    u = rng.random(c)
    k = np.minimum((np.cumsum(r, axis=1) < u[:, None]).sum(axis=1), r.shape[1] - 1)
    noise = np.einsum("nij,nj->ni", chol[k, pat], rng.standard_normal(full[:, 0].shape))
    return np.where(observed, 0.0, full[np.arange(c), k] + noise)


def init_gaussian(X, reg_covar=1e-6):
    """Initial :class:`GaussianParams` from pairwise-complete global moments.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        All clients' rows; only sums over rows enter (what clients would send, see
        :func:`._missing_kernels.nan_moments`).
    reg_covar : float

    Returns
    -------
    GaussianParams
    """
    mean, cov = nan_moments(X)
    cov = cov + reg_covar * np.eye(cov.shape[0])
    _, cov, _ = safe_cholesky(cov, reg_covar)
    return GaussianParams(mean, symmetrize(cov))


class GaussianMissingModel(Model):
    """Multivariate normal fitted on rows with values missing at random.

    Parameters
    ----------
    n_features : int
    reg_covar : float, default=1e-6
        Added to the covariance diagonal in the T-map (original units).
    shift : array-like of shape (n_features,), optional
        Public centring point ``c`` (e.g. the global mean of the observed values).
    scale : array-like of shape (n_features,), optional
        Public positive scales ``σ`` (e.g. global standard deviations); default ones.

    Notes
    -----
    Statistics on standardised data ``x̃ = (x − c) / σ`` (SPEC §2 numerical care; the
    scale keeps columns of very different units commensurate under one quantisation
    norm): ``sum_x`` = mean of ``E[x̃ | x_o]`` (d,), ``sum_xx`` = mean of
    ``E[x̃ x̃ᵀ | x_o]`` (d, d). T-map: ``μ = c + σ∘S1``,
    ``Σ = D(S2 − S1 S1ᵀ)D + reg_covar I`` with ``D = diag(σ)``, symmetrised; only if
    its Cholesky factorisation fails are its eigenvalues floored
    (:func:`fedemstats._linalg.safe_cholesky`). Any finite ``s`` maps to valid parameters.
    """

    allow_nan = True

    def __init__(self, n_features, reg_covar=1e-6, shift=None, scale=None):
        self.n_features = check_int(n_features, "n_features")
        self.reg_covar = check_positive(reg_covar, "reg_covar", strict=False)
        d = self.n_features
        self.shift, self.scale = check_shift_scale(shift, scale, d)
        self.layout = StatLayout([("sum_x", (d,)), ("sum_xx", (d, d))])

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """Per-client mean statistics and mean observed-data log-likelihood, one pass.

        Returns
        -------
        stats : ndarray of shape (n_active, q)
        loglik : ndarray of shape (n_active,)
            In the original units.
        """
        X, seg = federation.select(clients, batch, rng)
        sd = self.scale
        first, second = mixture_segment_stats((X - self.shift) / sd, seg, np.ones(1),
                                              ((theta.mean - self.shift) / sd)[None],
                                              (theta.covariance / np.outer(sd, sd))[None],
                                              np.zeros(self.n_features))
        counts = np.diff(seg)[:, None]
        stats = np.concatenate([first[:, 1:-1], second.reshape(seg.size - 1, -1)], axis=1) / counts
        jacobian = np.add.reduceat(~np.isnan(X) @ np.log(sd), seg[:-1]) if X.shape[0] else 0.0
        return stats, (first[:, -1] - jacobian) / counts[:, 0]

    def t_map(self, s) -> GaussianParams:
        """Total M-step (see class Notes).

        Raises
        ------
        ValueError
            If ``s`` has the wrong shape or is not finite.
        """
        parts = self.unpack_stats(s)
        m, sd = parts["sum_x"], self.scale
        cov = symmetrize((parts["sum_xx"] - np.outer(m, m)) * np.outer(sd, sd))
        cov.flat[:: self.n_features + 1] += self.reg_covar
        _, cov, _ = safe_cholesky(cov, self.reg_covar)
        return GaussianParams(self.shift + sd * m, cov)

    def log_likelihood(self, X, theta) -> np.ndarray:
        """Observed-data log-density of each row, shape (n,)."""
        return mixture_log_likelihood(np.asarray(X, dtype=np.float64), np.ones(1),
                                      theta.mean[None], theta.covariance[None])

    def n_parameters(self, theta) -> int:
        d = self.n_features
        return int(d + d * (d + 1) // 2)

    def init_theta(self, federation, rng=None) -> GaussianParams:
        """Initial parameters from global pairwise moments (no raw row leaves a client)."""
        return init_gaussian(federation.X, self.reg_covar)

    def impute(self, X, theta, rng=None, sample=False):
        """Conditional mean (or a draw) of the missing entries, shape (n, d)."""
        return impute_mixture(X, np.ones(1), theta.mean[None], theta.covariance[None], rng, sample)
