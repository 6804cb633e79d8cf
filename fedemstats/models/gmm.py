"""Gaussian mixture as a curved exponential family: statistics, total T-map, likelihood (SPEC §5).

Per row the conditional expected statistics are ``(r_k, r_k x, second moment)`` on
shifted data ``x - c`` (SPEC §2 numerical care): full ``r_k x x^T``, tied ``x x^T``
(not weighted), diag ``r_k x*x``, spherical ``r_k ||x||^2``. The T-map reproduces
scikit-learn's ``GaussianMixture._m_step`` on exact statistics and projects any other
vector onto valid parameters. Parameter shapes follow scikit-learn.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import get_num_threads

from .._linalg import (check_spd, eig_floor_value, inv_cholesky_upper, log_det_triangular,
                       logsumexp, precision_cholesky_from_precision, safe_cholesky, symmetrize)
from .._validation import check_array_2d, check_int, check_positive, check_rng
from ..layout import StatLayout
from . import _gmm_kernels as _k
from .base import Model

__all__ = ["GMMParams", "make_params", "GaussianMixtureModel", "estimate_log_prob_resp",
           "COVARIANCE_TYPES", "RESP_FLOOR"]

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
_CODES = {"full": _k.COV_FULL, "tied": _k.COV_TIED, "diag": _k.COV_DIAG, "spherical": _k.COV_SPHERICAL}
#: Floor of the responsibility statistic S0_k in the T-map; scikit-learn adds 10*eps to
#: n_k for the same reason (an empty component must not divide by zero).
RESP_FLOOR = 10 * np.finfo(np.float64).eps
#: Tolerance on sum(weights) == 1 in make_params.
WEIGHTS_SUM_TOL = 1e-6


@dataclass(frozen=True, eq=False)
class GMMParams:
    """Gaussian-mixture parameters with scikit-learn's shapes (treat arrays as read-only).

    Attributes
    ----------
    weights : ndarray of shape (K,)
    means : ndarray of shape (K, d)
    covariances : ndarray
        full (K, d, d), tied (d, d), diag (K, d), spherical (K,).
    precisions_cholesky : ndarray
        Same shape; full/tied are upper-triangular ``U`` with ``U U^T = Sigma^{-1}``,
        diag/spherical are ``1 / sqrt(variance)``.
    covariance_type : {"full", "tied", "diag", "spherical"}
    """

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    precisions_cholesky: np.ndarray
    covariance_type: str

    @property
    def n_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.means.shape[1])

    @property
    def precisions(self) -> np.ndarray:
        """Precision matrices (or inverse variances) as scikit-learn's ``precisions_``."""
        pc = self.precisions_cholesky
        if self.covariance_type == "full":
            return np.einsum("kij,klj->kil", pc, pc)
        if self.covariance_type == "tied":
            return pc @ pc.T
        return pc ** 2


def _cov_shape(ctype, K, d):
    return {"full": (K, d, d), "tied": (d, d), "diag": (K, d), "spherical": (K,)}[ctype]


def _check_ctype(covariance_type):
    if covariance_type not in COVARIANCE_TYPES:
        raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}; got {covariance_type!r}.")


def _as_matrices(a, ctype):
    """View full as (K, d, d) and tied as (1, d, d) for per-matrix loops."""
    return a if ctype == "full" else a[None]


def make_params(weights, means, covariances=None, precisions=None, covariance_type="full", *,
                precisions_cholesky=None) -> GMMParams:
    """Validated :class:`GMMParams` from scikit-learn style arrays.

    Exactly one of ``covariances``, ``precisions`` (like ``precisions_init``: precision
    matrices, not their Cholesky factors) or ``precisions_cholesky`` must be given.

    Parameters
    ----------
    weights : array-like of shape (K,)
        Non-negative, summing to 1 (within 1e-6; renormalised).
    means : array-like of shape (K, d)
    covariances, precisions, precisions_cholesky : array-like, optional
        Shapes per ``covariance_type`` (see :class:`GMMParams`); symmetric positive definite.
    covariance_type : {"full", "tied", "diag", "spherical"}

    Returns
    -------
    GMMParams

    Raises
    ------
    ValueError
        On wrong shapes, non-finite values, weights not summing to one, or matrices that
        are not symmetric positive definite.
    """
    _check_ctype(covariance_type)
    w = np.asarray(weights, dtype=np.float64)
    mu = np.asarray(means, dtype=np.float64)
    if w.ndim != 1 or mu.ndim != 2 or mu.shape[0] != w.shape[0]:
        raise ValueError(f"weights must be (K,) and means (K, d); got {w.shape} and {mu.shape}.")
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(mu))):
        raise ValueError("weights and means must be finite.")
    if (w < 0).any() or abs(w.sum() - 1.0) > WEIGHTS_SUM_TOL:
        raise ValueError(f"weights must be non-negative and sum to 1; got sum {w.sum():.6g}.")
    given = [a is not None for a in (covariances, precisions, precisions_cholesky)]
    if sum(given) != 1:
        raise ValueError("give exactly one of covariances, precisions or precisions_cholesky.")
    arr = np.asarray(next(a for a in (covariances, precisions, precisions_cholesky) if a is not None),
                     dtype=np.float64)
    K, d = mu.shape
    if arr.shape != _cov_shape(covariance_type, K, d):
        raise ValueError(f"{covariance_type!r} covariances/precisions must have shape "
                         f"{_cov_shape(covariance_type, K, d)}; got {arr.shape}.")
    cov, pc = _complete(arr, given.index(True), covariance_type)
    return GMMParams(w / w.sum(), mu.copy(), cov, pc, covariance_type)


def _complete(arr, kind, ctype):
    """(covariances, precisions_cholesky) from covariances (0), precisions (1) or U (2)."""
    if ctype in ("diag", "spherical"):
        if not np.all(np.isfinite(arr)) or (arr <= 0).any():
            raise ValueError(f"{ctype!r} variances/precisions must be finite and > 0.")
        if kind == 0:
            return arr.copy(), 1.0 / np.sqrt(arr)
        pc = np.sqrt(arr) if kind == 1 else arr.copy()
        return 1.0 / pc ** 2, pc
    mats = _as_matrices(arr, ctype)
    if kind == 2:
        if not np.all(np.isfinite(mats)) or (np.diagonal(mats, axis1=1, axis2=2) <= 0).any():
            raise ValueError("precisions_cholesky must be finite with a positive diagonal.")
        mats = np.einsum("kij,klj->kil", mats, mats)
        kind = 1
    for m in mats:
        check_spd(m, "precisions" if kind == 1 else "covariances")
    if kind == 0:
        pcs = np.array([inv_cholesky_upper(safe_cholesky(c)[0]) for c in mats])
        covs = mats.copy()
    else:
        pcs = np.array([precision_cholesky_from_precision(p) for p in mats])
        covs = np.array([np.linalg.inv(p) for p in mats])
    if ctype == "tied":
        return covs[0], pcs[0]
    return covs, pcs


def _kernel_arrays(theta: GMMParams, shift):
    """Shifted means, precision factors in kernel form and per-component constants."""
    K, d = theta.means.shape
    pc, ctype = theta.precisions_cholesky, theta.covariance_type
    tri, diag = np.zeros((0, 0, 0)), np.zeros((0, 0))
    if ctype == "full":
        tri = np.ascontiguousarray(pc)
    elif ctype == "tied":
        tri = np.ascontiguousarray(np.broadcast_to(pc, (K, d, d)))
    elif ctype == "diag":
        diag = np.ascontiguousarray(pc)
    else:
        diag = np.ascontiguousarray(np.repeat(pc[:, None], d, axis=1))
    log_det = log_det_triangular(tri) if tri.size else np.sum(np.log(diag), axis=1)
    with np.errstate(divide="ignore"):
        const = np.log(theta.weights) + log_det - 0.5 * d * _k.LOG_2PI
    means = np.ascontiguousarray(theta.means - shift)
    return means, tri, diag, const


def estimate_log_prob_resp(X, theta: GMMParams, shift=None):
    """Per-row log-density and log-responsibilities (scikit-learn's ``_estimate_log_prob_resp``).

    Parameters
    ----------
    X : array-like of shape (n, d)
    theta : GMMParams
    shift : ndarray of shape (d,), optional
        Centring point used inside the kernel (precision only); default zeros.

    Returns
    -------
    log_norm : ndarray of shape (n,)
    log_resp : ndarray of shape (n, K)
    """
    X = check_array_2d(X)
    if X.shape[1] != theta.n_features:
        raise ValueError(f"X has {X.shape[1]} features; the model has {theta.n_features}.")
    shift = np.zeros(X.shape[1]) if shift is None else np.asarray(shift, dtype=np.float64)
    means, tri, diag, const = _kernel_arrays(theta, shift)
    wlp = _k.weighted_log_prob(X, shift, means, tri, diag, const)
    log_norm = logsumexp(wlp, axis=1)
    with np.errstate(invalid="ignore"):
        return log_norm, wlp - log_norm[:, None]


class GaussianMixtureModel(Model):
    """Gaussian mixture with scikit-learn's covariance types as a FedEM model.

    Parameters
    ----------
    n_components : int
    n_features : int
    covariance_type : {"full", "tied", "diag", "spherical"}, default="full"
    reg_covar : float, default=1e-6
        Added to the covariance diagonal in the T-map (as scikit-learn).
    shift : array-like of shape (n_features,), optional
        Public centring point ``c`` (e.g. the global mean); default zeros.

    Attributes
    ----------
    layout : StatLayout
        ``resp (K,)``, ``sum_x (K, d)``, ``sum_xx`` (full (K, d, d), tied (d, d),
        diag (K, d), spherical (K,)), all per-row means on ``x - shift``.
    """

    def __init__(self, n_components, n_features, covariance_type="full", reg_covar=1e-6, shift=None):
        self.n_components = check_int(n_components, "n_components")
        self.n_features = check_int(n_features, "n_features")
        _check_ctype(covariance_type)
        self.covariance_type = covariance_type
        self.reg_covar = check_positive(reg_covar, "reg_covar", strict=False)
        K, d = self.n_components, self.n_features
        self.shift = np.zeros(d) if shift is None else np.asarray(shift, dtype=np.float64).copy()
        if self.shift.shape != (d,) or not np.all(np.isfinite(self.shift)):
            raise ValueError(f"shift must be a finite array of shape ({d},); got {self.shift.shape}.")
        second = {"full": (K, d, d), "tied": (d, d), "diag": (K, d), "spherical": (K,)}
        self.layout = StatLayout([("resp", (K,)), ("sum_x", (K, d)),
                                  ("sum_xx", second[covariance_type])])

    # ------------------------------------------------------------------ statistics
    def _check_theta(self, theta):
        if not isinstance(theta, GMMParams) or theta.covariance_type != self.covariance_type \
                or theta.means.shape != (self.n_components, self.n_features):
            raise ValueError(f"theta must be GMMParams with {self.n_components} components, "
                             f"{self.n_features} features and covariance_type "
                             f"{self.covariance_type!r}.")

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None, *, hard=False):
        """Per-client mean statistics and mean log-likelihood in one parallel pass.

        Parameters
        ----------
        federation : Federation
        theta : GMMParams
        clients : array-like of int of shape (n_active,), optional
        batch : int, optional
            ``min(batch, m_i)`` rows per client drawn with ``rng``; all rows when ``None``.
        rng : numpy.random.Generator, optional
        hard : bool, default=False
            One-hot responsibilities (argmax); with identity covariances and equal weights
            these are k-means labels (used by :mod:`.gmm_init`).

        Returns
        -------
        stats : ndarray of shape (n_active, q)
        loglik : ndarray of shape (n_active,)
        """
        self._check_theta(theta)
        if federation.n_features != self.n_features:
            raise ValueError(f"federation has {federation.n_features} features; model has {self.n_features}.")
        if batch is not None:
            batch = check_int(batch, "batch")
        X, seg = federation.select(clients, batch, rng)
        means, tri, diag, const = _kernel_arrays(theta, self.shift)
        kernel = _k.segment_sums if X.shape[0] >= 2 * _k.MIN_BLOCK_ROWS else _k.segment_sums_serial
        sums = kernel(X, seg, self.shift, means, tri, diag, const,
                        _CODES[self.covariance_type], self.q, bool(hard), get_num_threads())
        sums /= np.diff(seg)[:, None]
        stats = sums[:, :self.q]
        if self.covariance_type in ("full", "tied"):
            _mirror_upper(self.layout.unpack(stats)["sum_xx"], self.n_features)
        return stats, sums[:, self.q].copy()

    # ------------------------------------------------------------------ T-map
    def t_map(self, s) -> GMMParams:
        """Total M-step: any finite ``s`` of shape (q,) maps to valid :class:`GMMParams`.

        On exact mean statistics this is scikit-learn's M-step: ``pi_k = S0_k / sum S0``,
        ``mu_k = S1_k / S0_k + c``, ``Sigma_k = S2_k / S0_k - (mu_k - c)(mu_k - c)^T +
        reg_covar I`` (tied: ``(S2 - sum_k S0_k m_k m_k^T) / sum S0``; diag and spherical
        the diagonal / mean of the diagonal). Projection for other ``s``:

        1. ``S0_k`` is clipped below at :data:`RESP_FLOOR` and the weights renormalised;
        2. covariance matrices are symmetrised;
        3. only if a Cholesky factorisation fails (resp. a variance is <= 0), the matrix's
           eigenvalues (resp. the variance) are raised to
           ``max(reg_covar, EIG_REL_FLOOR * max|eig|, EIG_ABS_FLOOR)``
           (:func:`fedemstats._linalg.eigen_floor`); valid input keeps the exact fast path.

        Raises
        ------
        ValueError
            If ``s`` has the wrong shape or holds NaN/inf, or the result overflows.
        """
        parts = self.unpack_stats(s)
        s0 = np.maximum(parts["resp"], RESP_FLOOR)
        m = parts["sum_x"] / s0[:, None]
        cov = _raw_covariances(self.covariance_type, s0, m, parts["sum_xx"], self.reg_covar)
        if not (np.all(np.isfinite(m)) and np.all(np.isfinite(cov))):
            raise ValueError("t_map overflowed on extreme statistics; lower the step size.")
        cov, pc = _repair(cov, self.covariance_type, self.reg_covar)
        return GMMParams(s0 / s0.sum(), m + self.shift, cov, pc, self.covariance_type)

    # ------------------------------------------------------------------ likelihood & co
    def log_likelihood(self, X, theta) -> np.ndarray:
        """Log-density of each row, shape (n,)."""
        self._check_theta(theta)
        return estimate_log_prob_resp(X, theta, self.shift)[0]

    def n_parameters(self, theta) -> int:
        """Free parameters as scikit-learn's ``_n_parameters``."""
        K, d = theta.means.shape
        cov = {"full": K * d * (d + 1) / 2, "diag": K * d, "tied": d * (d + 1) / 2,
               "spherical": K}[theta.covariance_type]
        return int(cov + K * d + K - 1)

    def sample(self, theta, n, rng=None):
        """Draw ``n`` rows like ``GaussianMixture.sample``: returns X (n, d), labels (n,)."""
        n = check_int(n, "n")
        rng = check_rng(rng)
        counts = rng.multinomial(n, theta.weights)
        ctype, cov = theta.covariance_type, theta.covariances
        parts = []
        for k, c in enumerate(counts):
            if ctype in ("full", "tied"):
                ck = cov[k] if ctype == "full" else cov
                parts.append(rng.multivariate_normal(theta.means[k], ck, int(c)))
            else:
                sd = np.sqrt(cov[k])
                parts.append(theta.means[k] + rng.standard_normal((int(c), self.n_features)) * sd)
        labels = np.repeat(np.arange(theta.n_components), counts)
        return np.vstack(parts), labels

    def init_theta(self, federation, rng=None, method="kmeans", **kwargs) -> GMMParams:
        """Federated initialisation (see :func:`fedemstats.models.gmm_init.init_params`)."""
        from .gmm_init import init_params
        return init_params(federation, self, method=method, rng=rng, **kwargs)


def _mirror_upper(S2, d):
    """In place: copy the strict upper triangle of (..., d, d) blocks to the lower one."""
    iu, ju = np.triu_indices(d, 1)
    S2[..., ju, iu] = S2[..., iu, ju]


def _raw_covariances(ctype, s0, m, s2, reg):
    """Unrepaired M-step covariances from (clipped) S0, shifted means m and S2."""
    d = m.shape[1]
    if ctype == "full":
        cov = s2 / s0[:, None, None] - m[:, :, None] * m[:, None, :]
        cov = symmetrize(cov)
        cov[:, np.arange(d), np.arange(d)] += reg
    elif ctype == "tied":
        cov = (s2 - np.einsum("k,ki,kj->ij", s0, m, m)) / s0.sum()
        cov = symmetrize(cov)
        cov.flat[:: d + 1] += reg
    elif ctype == "diag":
        cov = s2 / s0[:, None] - m ** 2 + reg
    else:
        cov = (s2 / s0 - np.sum(m ** 2, axis=1)) / d + reg
    return cov


def _repair(cov, ctype, reg):
    """(covariances, precisions_cholesky), flooring only what fails (see t_map)."""
    if ctype in ("diag", "spherical"):
        bad = cov <= 0
        if bad.any():
            cov = np.where(bad, eig_floor_value(np.max(np.abs(cov)), reg), cov)
        return cov, 1.0 / np.sqrt(cov)
    mats = _as_matrices(cov, ctype).copy()
    pcs = np.empty_like(mats)
    for k, c in enumerate(mats):
        L, mats[k], _ = safe_cholesky(c, reg)
        pcs[k] = inv_cholesky_upper(L)
    return (mats, pcs) if ctype == "full" else (mats[0], pcs[0])
