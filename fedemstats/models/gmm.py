"""Gaussian mixture as a curved exponential family: statistics, total T-map, likelihood (SPEC §5).

Per row the conditional expected statistics are ``(r_k, r_k x, second moment)`` on
shifted data ``x - c`` (SPEC §2 numerical care): full ``r_k x x^T``, tied ``x x^T``
(not weighted), diag ``r_k x*x``, spherical ``r_k ||x||^2``. The T-map reproduces
scikit-learn's ``GaussianMixture._m_step`` on exact statistics and projects any other
vector onto valid parameters. Parameter shapes follow scikit-learn.
"""
from __future__ import annotations

import numpy as np

from .._linalg import (LOG_2PI, REPAIR_RIDGE_FRACTION, empirical_floor, inv_cholesky_upper,
                       log_det_triangular, logsumexp, scaled_cholesky, symmetrize)
from .._threads import run
from .._validation import check_array_2d, check_int, check_positive, check_rng
from ..layout import SYMMETRIC, StatLayout
from . import _gmm_kernels as _k
from ._mixture import RESP_FLOOR, component_mass
from ._summaries import INIT_METHODS, check_shift_scale, global_mean_and_variances, public_scale
from .base import Model
from .gmm_denoise import floor_noisy_covariances
from .gmm_geometry import gmm_geometry
from .gmm_init import init_params
from .gmm_params import (COVARIANCE_TYPES, MIXTURE_REL_FLOOR, GMMParams, as_matrices, check_covariance_type,
                         covariance_shape, make_params)

__all__ = ["GMMParams", "make_params", "GaussianMixtureModel", "estimate_log_prob_resp",
           "COVARIANCE_TYPES", "RESP_FLOOR", "second_moment_block"]

_CODES = {"full": _k.COV_FULL, "tied": _k.COV_TIED, "diag": _k.COV_DIAG, "spherical": _k.COV_SPHERICAL}


def second_moment_block(covariance_type, K, d) -> tuple:
    """The layout entry of the second moments: full and tied ones are symmetric
    (stored as packed upper triangles, :mod:`fedemstats.layout`)."""
    shape = covariance_shape(covariance_type, K, d)
    return ("sum_xx", shape, SYMMETRIC) if covariance_type in ("full", "tied") else ("sum_xx", shape)


def _kernel_arrays(theta: GMMParams, shift):
    """Shifted means, precision factors in kernel form and per-component constants."""
    K, d = theta.means.shape
    pc, ctype = theta.precisions_cholesky, theta.covariance_type
    tri, diag = np.zeros((0, 0, 0)), np.zeros((0, 0))
    if ctype in ("full", "tied") and not np.any(pc[..., ~np.eye(d, dtype=bool)]):
        # diagonal factors (e.g. the identity of the k-means labelling pass): the
        # diagonal form gives the same numbers with d instead of d (d + 1) / 2 products
        diag = np.ascontiguousarray(np.broadcast_to(np.diagonal(pc, axis1=-2, axis2=-1), (K, d)))
    elif ctype == "full":
        tri = np.ascontiguousarray(pc)
    elif ctype == "tied":
        tri = np.ascontiguousarray(np.broadcast_to(pc, (K, d, d)))
    elif ctype == "diag":
        diag = np.ascontiguousarray(pc)
    else:
        diag = np.ascontiguousarray(np.repeat(pc[:, None], d, axis=1))
    log_det = log_det_triangular(tri) if tri.size else np.sum(np.log(diag), axis=1)
    with np.errstate(divide="ignore"):
        const = np.log(theta.weights) + log_det - 0.5 * d * LOG_2PI
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
    wlp = run(_k.weighted_log_prob, X.size * means.shape[0], X, shift, means, tri, diag, const)
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
    column_scale : array-like of shape (n_features,), optional
        Public positive column scales ``σ`` (:meth:`public_centring`: the pooled standard
        deviations); default ones. The T-map's eigenvalue floor holds in these units
        (:meth:`repair`), so a repair does not depend on each column's unit. The statistics
        themselves stay in original units (centred on ``shift`` only), unlike the ``scale``
        of the models that standardise their data.

    Attributes
    ----------
    layout : StatLayout
        ``resp (K,)``, ``sum_x (K, d)``, ``sum_xx`` (full (K, d, d), tied (d, d), both
        symmetric and sent as packed upper triangles; diag (K, d), spherical (K,)), all
        per-row means on ``x - shift``.
    """

    init_methods = INIT_METHODS

    def __init__(self, n_components, n_features, covariance_type="full", reg_covar=1e-6, shift=None,
                 column_scale=None):
        self.n_components = check_int(n_components, "n_components")
        self.n_features = check_int(n_features, "n_features")
        self.covariance_type = check_covariance_type(covariance_type)
        self.reg_covar = check_positive(reg_covar, "reg_covar", strict=False)
        K, d = self.n_components, self.n_features
        self.shift, self.column_scale = check_shift_scale(shift, column_scale, d)
        self.layout = StatLayout([("resp", (K,)), ("sum_x", (K, d)), second_moment_block(covariance_type, K, d)])

    def repair(self, cov):
        """:func:`fedemstats._linalg.scaled_cholesky` of one covariance matrix: with ``c =
        REPAIR_RIDGE_FRACTION``, the eigenvalues of ``Σ − c reg_covar I`` are floored in the public
        scale's units (at ``max(0, MIXTURE_REL_FLOOR − c reg_covar / max σ²)``, or relative to a
        standardised eigenvalue above 1), then ``c reg_covar I`` is added back. Valid statistics
        (every exact covariance is at least ``reg_covar I``) are never floored, whatever the columns'
        units; a repaired matrix is at least ``c reg_covar I``; the floor is fixed for the fit, a
        constraint the M-step maximises under."""
        # a floor moving with each component's largest eigenvalue made exact EM lose likelihood on a
        # constant column (raw wine: 7e-3 nats/row in a round); in original units at 1e-10 it bound
        # valid statistics of raw breast-cancer (4.7-5.9 nats/row below scikit-learn)
        return scaled_cholesky(cov, self.column_scale, REPAIR_RIDGE_FRACTION * self.reg_covar, MIXTURE_REL_FLOOR)

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
        code = _CODES[self.covariance_type]
        work = X.shape[0] * _k.row_flops(self.n_components, self.n_features, code)
        # the same blocks either way (equal to rounding; the choice depends on the data only);
        # threads only pay off on enough work
        parallel = work >= _k.PARALLEL_MIN_FLOPS and X.shape[0] >= 2 * _k.MIN_BLOCK_ROWS
        kernel = _k.segment_sums if parallel else _k.segment_sums_serial
        sums = kernel(X, seg, self.shift, means, tri, diag, const, code, self.q, bool(hard))
        sums /= np.diff(seg)[:, None]
        return sums[:, :self.q], sums[:, self.q].copy()

    # ------------------------------------------------------------------ T-map
    def t_map(self, s) -> GMMParams:
        """Total M-step: any finite ``s`` of shape (q,) maps to valid :class:`GMMParams`.

        On exact mean statistics this is scikit-learn's M-step: ``pi_k = S0_k / sum S0``,
        ``mu_k = S1_k / S0_k + c``, ``Sigma_k = S2_k / S0_k - (mu_k - c)(mu_k - c)^T +
        reg_covar I`` (tied: ``(S2 - sum_k S0_k m_k m_k^T) / sum S0``; diag and spherical
        the diagonal / mean of the diagonal). Projection for other ``s``:

        1. ``S0_k`` is clipped below at :data:`RESP_FLOOR` and the weights renormalised;
        2. covariance matrices are symmetrised;
        3. the eigenvalues of ``D⁻¹ (Σ − reg_covar I) D⁻¹`` (``D`` the public scale; diag and
           spherical: the variances) below their floor are raised to it and ``reg_covar I``
           is added back (:meth:`repair`, continuous in ``s``); valid input keeps the exact
           fast path.

        Raises
        ------
        ValueError
            If ``s`` has the wrong shape or holds NaN/inf, or the result overflows.
        """
        parts = self.unpack_stats(s)
        s0, weights = component_mass(parts["resp"])
        m = parts["sum_x"] / s0[:, None]
        cov = _raw_covariances(self.covariance_type, s0, m, parts["sum_xx"], self.reg_covar)
        if not (np.all(np.isfinite(m)) and np.all(np.isfinite(cov))):
            raise ValueError("t_map overflowed on extreme statistics; lower the step size.")
        cov, pc = _repair(cov, self.covariance_type, self)
        return GMMParams(weights, m + self.shift, cov, pc, self.covariance_type)

    def expected_stats(self, theta) -> np.ndarray:
        """E_θ[s] on shifted data: (π, π m, π (Σ − reg I + m mᵀ)) per component (tied:
        Σ − reg I + Σ_k π_k m_k m_kᵀ; diag / spherical: the diagonal / its sum), so that
        ``t_map`` returns θ."""
        w, m, ctype, d = theta.weights, theta.means - self.shift, self.covariance_type, self.n_features
        cov = np.asarray(theta.covariances, dtype=np.float64)
        if ctype == "full":
            second = w[:, None, None] * (cov - self.reg_covar * np.eye(d) + m[:, :, None] * m[:, None, :])
        elif ctype == "tied":
            second = cov - self.reg_covar * np.eye(d) + np.einsum("k,ki,kj->ij", w, m, m)
        elif ctype == "diag":
            second = w[:, None] * (cov - self.reg_covar + m ** 2)
        else:
            second = w * (d * (cov - self.reg_covar) + np.sum(m ** 2, axis=1))
        return self.layout.pack({"resp": w, "sum_x": w[:, None] * m, "sum_xx": second})

    def geometry(self, theta, s_hat):
        """Per-component whitening (:func:`.gmm_geometry.gmm_geometry`, ``docs/geometry.md``)."""
        return gmm_geometry(self, theta, s_hat)

    def dp_row_bound(self, radius) -> float:
        """B = √(1 + ρ² + ρ⁴): Σ_k r_k² ≤ 1 bounds (r, r x, r xxᵀ) for every covariance type
        (tied: xxᵀ unweighted, still ≤ ρ²), whatever θ (:meth:`Model.dp_row_bound`)."""
        return float(np.sqrt(1.0 + radius ** 2 + radius ** 4))

    #: private fits may clip and noise in the per-component whitening (:meth:`geometry`): there
    #: the same B bounds (r, r u, r u uᵀ) of a row whose whitened offsets u_k are all within ρ,
    #: and the per-row clip to B enforces it for every other row
    dp_model_geometry = True

    def dp_denoise(self, s, geometry, noise_std, previous=None) -> np.ndarray:
        """Covariance eigenvalues floored at the release's noise level; a component the release
        cannot tell from empty keeps ``previous``'s mean and covariance
        (:func:`.gmm_denoise.floor_noisy_covariances`)."""
        return floor_noisy_covariances(self, s, geometry, noise_std, previous)

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

    @classmethod
    def public_centring(cls, federation) -> dict:
        """``{"shift": global mean, "column_scale": pooled standard deviations}`` from the clients' counts,
        means and centred sums of squares (:func:`._summaries.global_mean_and_variances`;
        constant columns get the others' scale, :func:`._summaries.public_scale`)."""
        return cls.centring_from_moments(*global_mean_and_variances(federation))

    @staticmethod
    def centring_from_moments(mean, variances) -> dict:
        """:meth:`public_centring` from the pooled ``mean`` and column ``variances`` (n_features,)
        already in hand (the estimator also checks ``reg_covar`` against them)."""
        return {"shift": mean, "column_scale": public_scale(np.diag(variances), mean)}

    def init_theta(self, federation, rng=None, method="kmeans", **kwargs) -> GMMParams:
        """Federated initialisation (see :func:`fedemstats.models.gmm_init.init_params`)."""
        return init_params(federation, self, method=method, rng=rng, **kwargs)

    def params_to_dict(self, theta) -> dict:
        """``weights``, ``means`` and ``covariances`` (scikit-learn's shapes); the precision
        factors are derived from the covariances and left out."""
        return {"weights": theta.weights, "means": theta.means, "covariances": theta.covariances}


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


def _repair(cov, ctype, model):
    """(covariances, precisions_cholesky), flooring only what fails (see t_map)."""
    if ctype in ("diag", "spherical"):
        # the variances' empirical parts floored in the public scale's units, as repair() does
        # for matrices (a spherical variance is a mean over the columns)
        unit = model.column_scale ** 2 if ctype == "diag" else np.mean(model.column_scale ** 2)
        reg = REPAIR_RIDGE_FRACTION * model.reg_covar
        e_std = (cov - reg) / unit
        e0, tol = empirical_floor(reg / np.max(model.column_scale) ** 2, MIXTURE_REL_FLOOR,
                                  float(np.max(np.abs(e_std))), 1)
        bad = e_std < e0 - tol
        if bad.any():
            cov = np.where(bad, e0 * unit + reg, cov)
        return cov, 1.0 / np.sqrt(cov)
    mats = as_matrices(cov, ctype).copy()
    pcs = np.empty_like(mats)
    for k, c in enumerate(mats):
        L, mats[k], _ = model.repair(c)
        pcs[k] = inv_cholesky_upper(L)
    return (mats, pcs) if ctype == "full" else (mats[0], pcs[0])
