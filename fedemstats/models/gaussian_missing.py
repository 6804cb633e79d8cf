"""Gaussian with values missing at random: statistics, total T-map, imputation (SPEC §5).

For a row with observed block ``o`` and missing block ``m`` the E-step completes the
row with ``x̂_m = μ_m + Σ_mo Σ_oo⁻¹ (x_o − μ_o)`` and adds the conditional covariance
``C_mm = Σ_mm − Σ_mo Σ_oo⁻¹ Σ_om`` to the second moment. Rows are grouped by
missingness pattern (each pattern's Σ_oo is factorised once, see
:func:`._missing_kernels.gaussian_blocks`). The row kernel here is written for a
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
from ._missing_kernels import (gaussian_blocks, gaussian_conditionals, missing_patterns,
                               nan_moments, rows_per_chunk, segment_sums)
from .base import Model

__all__ = ["GaussianParams", "GaussianMissingModel", "mixture_row_stats",
           "mixture_log_likelihood", "impute_mixture", "init_gaussian"]

#: Per-row temporaries of the mixture kernel: gathered Q and C, and the outer product.
_TEMPS_PER_ROW = 3


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


def mixture_row_stats(X, observed, pat, weights, means, covs, blocks, shift, diag=False):
    """Per-row conditional expected statistics of a Gaussian mixture with missing values.

    Parameters
    ----------
    X : ndarray of shape (c, d)
    observed : ndarray of bool of shape (c, d)
    pat : ndarray of int of shape (c,)
    weights : ndarray of shape (K,)
    means : ndarray of shape (K, d)
    covs : ndarray of shape (K, d, d)
    blocks : tuple (Q, C, logdet) from :func:`gaussian_blocks`
    shift : ndarray of shape (d,)
    diag : bool, default=False
        Return only the diagonal of the second moments (diagonal covariances).

    Returns
    -------
    rows : ndarray of shape (c, K + K*d + K*d2 + 1)
        ``[r_k, r_k (x̂_k − c), r_k ((x̂_k − c)(x̂_k − c)ᵀ + C_k), loglik]`` with
        ``d2 = d`` if ``diag`` else ``d*d``.
    """
    Q, C, logdet = blocks
    yhat, logp = gaussian_conditionals(X, observed, pat, means, covs, Q, logdet)
    with np.errstate(divide="ignore"):
        wlp = logp + np.log(weights)[None, :]
    ll = logsumexp(wlp, axis=1)
    r = np.exp(wlp - ll[:, None])
    z = yhat + (means - shift)[None]
    c = X.shape[0]
    Cr = np.swapaxes(C[:, pat], 0, 1)
    if diag:
        s2 = r[:, :, None] * (z ** 2 + np.diagonal(Cr, axis1=-2, axis2=-1))
    else:
        s2 = r[:, :, None, None] * (z[..., :, None] * z[..., None, :] + Cr)
    return np.concatenate([r, (r[:, :, None] * z).reshape(c, -1), s2.reshape(c, -1), ll[:, None]], axis=1)


def _pass(X, weights, means, covs, row_fn_factory, width, seg=None):
    """Group ``X`` by pattern, factorise the blocks once, then run a chunked segment pass."""
    observed = ~np.isnan(X)
    patterns, pat = missing_patterns(observed)
    blocks = gaussian_blocks(covs, patterns)
    K, d = means.shape
    seg = np.array([0, X.shape[0]]) if seg is None else seg
    fn = row_fn_factory(X, observed, pat, blocks)
    return segment_sums(fn, seg, width, rows_per_chunk(_TEMPS_PER_ROW * K * d * d))


def mixture_log_likelihood(X, weights, means, covs):
    """Log-density of the observed part of each row, shape (n,).

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    weights : ndarray of shape (K,)
    means : ndarray of shape (K, d)
    covs : ndarray of shape (K, d, d)
    """
    n = X.shape[0]
    if n == 0:
        return np.zeros(0)
    out = np.empty(n)

    def factory(Xa, observed, pat, blocks):
        def fn(a, b):
            _, logp = gaussian_conditionals(Xa[a:b], observed[a:b], pat[a:b], means, covs,
                                            blocks[0], blocks[2])
            with np.errstate(divide="ignore"):
                out[a:b] = logsumexp(logp + np.log(weights)[None, :], axis=1)
            return np.zeros((b - a, 1))
        return fn

    _pass(X, weights, means, covs, factory, 1)
    return out


def impute_mixture(X, weights, means, covs, rng=None, sample=False):
    """Fill missing entries with their conditional mean, or draw them (multiple imputation).

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    weights, means, covs : mixture parameters of shapes (K,), (K, d), (K, d, d)
    rng : numpy.random.Generator, optional
        Required when ``sample``.
    sample : bool, default=False
        ``False``: ``E[x_m | x_o] = Σ_k r_k(x_o) x̂_{k,m}``. ``True``: draw the component
        ``k ~ r(x_o)`` and then ``x_m ~ N(x̂_{k,m}, C_{k,mm})``.

    Returns
    -------
    ndarray of shape (n, d)
    """
    X = np.array(X, dtype=np.float64)
    if X.shape[0] == 0:
        return X
    rng = check_rng(rng) if sample else None

    def factory(Xa, observed, pat, blocks):
        chol = _conditional_cholesky(blocks[1]) if sample else None

        def fn(a, b):
            obs = observed[a:b]
            yhat, logp = gaussian_conditionals(Xa[a:b], obs, pat[a:b], means, covs,
                                               blocks[0], blocks[2])
            with np.errstate(divide="ignore"):
                wlp = logp + np.log(weights)[None, :]
            r = np.exp(wlp - logsumexp(wlp, axis=1)[:, None])
            full = yhat + means[None]
            if sample:
                fill = _draw(full, r, chol, pat[a:b], obs, rng)
            else:
                fill = np.einsum("nk,nkd->nd", r, full)
            X[a:b] = np.where(obs, Xa[a:b], fill)
            return np.zeros((b - a, 1))
        return fn

    _pass(X.copy(), weights, means, covs, factory, 1)
    return X


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
        Added to the covariance diagonal in the T-map.
    shift : array-like of shape (n_features,), optional
        Public centring point ``c`` (e.g. the global mean of the observed values).

    Notes
    -----
    Statistics: ``sum_x`` = mean of ``E[x − c | x_o]`` (d,) and ``sum_xx`` = mean of
    ``E[(x − c)(x − c)ᵀ | x_o]`` (d, d). T-map: ``μ = S1 + c``, ``Σ = S2 − S1 S1ᵀ +
    reg_covar I``, symmetrised; only if its Cholesky factorisation fails are its
    eigenvalues floored (:func:`fedemstats._linalg.safe_cholesky`). Any finite ``s``
    therefore maps to valid parameters.
    """

    allow_nan = True

    def __init__(self, n_features, reg_covar=1e-6, shift=None):
        self.n_features = check_int(n_features, "n_features")
        self.reg_covar = check_positive(reg_covar, "reg_covar", strict=False)
        d = self.n_features
        self.shift = np.zeros(d) if shift is None else np.asarray(shift, dtype=np.float64).copy()
        if self.shift.shape != (d,) or not np.all(np.isfinite(self.shift)):
            raise ValueError(f"shift must be a finite array of shape ({d},).")
        self.layout = StatLayout([("sum_x", (d,)), ("sum_xx", (d, d))])

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """Per-client mean statistics and mean observed-data log-likelihood, one pass.

        Returns
        -------
        stats : ndarray of shape (n_active, q)
        loglik : ndarray of shape (n_active,)
        """
        X, seg = federation.select(clients, batch, rng)
        d = self.n_features
        means, covs = theta.mean[None], theta.covariance[None]
        ones = np.ones(1)

        def factory(Xa, observed, pat, blocks):
            return lambda a, b: mixture_row_stats(Xa[a:b], observed[a:b], pat[a:b], ones, means, covs,
                                                  blocks, self.shift)[:, 1:]

        sums = _pass(X, ones, means, covs, factory, d + d * d + 1, seg)
        sums /= np.diff(seg)[:, None]
        return sums[:, :self.q], sums[:, self.q].copy()

    def t_map(self, s) -> GaussianParams:
        """Total M-step (see class Notes).

        Raises
        ------
        ValueError
            If ``s`` has the wrong shape or is not finite.
        """
        s = np.asarray(s, dtype=np.float64)
        if s.shape != (self.q,) or not np.all(np.isfinite(s)):
            raise ValueError(f"s must be a finite vector of shape ({self.q},).")
        parts = self.layout.unpack(s)
        m = parts["sum_x"]
        cov = symmetrize(parts["sum_xx"] - np.outer(m, m))
        cov.flat[:: self.n_features + 1] += self.reg_covar
        _, cov, _ = safe_cholesky(cov, self.reg_covar)
        return GaussianParams(m + self.shift, cov)

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
