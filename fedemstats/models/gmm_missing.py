"""Gaussian mixture with values missing at random (SPEC §5).

Responsibilities come from each component's density of the *observed* block; given the
component, the missing block is completed with the Gaussian conditional mean and its
conditional covariance is added to the second moment (the row kernel of
:mod:`.gaussian_missing`). The statistics have exactly the layout of
:class:`.gmm.GaussianMixtureModel` (``resp``, ``sum_x``, ``sum_xx`` on shifted data),
so the T-map, parameter container and parameter count are reused from :mod:`.gmm`.
"""
from __future__ import annotations

import numpy as np

from .._linalg import safe_cholesky
from .._validation import check_rng
from ..federation import Federation
from .gaussian_missing import impute_mixture, mixture_log_likelihood, mixture_segment_stats
from .gmm import GaussianMixtureModel, GMMParams, make_params
from .gmm_init import SUMMARY_MIN_ROWS, TooFewSummariesError, init_kmeans_summaries
from ._missing_kernels import nan_moments

__all__ = ["GaussianMixtureMissingModel", "MISSING_COVARIANCE_TYPES", "init_gmm_missing"]

#: Covariance types supported with missing values (the conditional needs a full or
#: diagonal matrix per component).
MISSING_COVARIANCE_TYPES = ("full", "diag")


def _full_covariances(theta: GMMParams) -> np.ndarray:
    """Covariances as (K, d, d) matrices whatever the (supported) covariance type."""
    if theta.covariance_type == "full":
        return theta.covariances
    return theta.covariances[:, :, None] * np.eye(theta.n_features)[None]


class GaussianMixtureMissingModel(GaussianMixtureModel):
    """Gaussian mixture whose rows may hold NaN (marginalised in the E-step).

    Parameters
    ----------
    n_components : int
    n_features : int
    covariance_type : {"full", "diag"}, default="full"
    reg_covar : float, default=1e-6
    shift : array-like of shape (n_features,), optional
        Public centring point ``c`` of the second moments.

    Notes
    -----
    Per row, with ``r_k ∝ π_k N(x_o; μ_k,o, Σ_k,oo)`` and ``x̂_k = E[x | x_o, k]``:
    ``(r_k, r_k (x̂_k − c), r_k ((x̂_k − c)(x̂_k − c)ᵀ + C_k,mm))`` (diag: the diagonal).
    Without missing values these are :class:`GaussianMixtureModel`'s statistics.
    The T-map (and its projection) is :meth:`GaussianMixtureModel.t_map`.
    """

    allow_nan = True

    def __init__(self, n_components, n_features, covariance_type="full", reg_covar=1e-6, shift=None):
        if covariance_type not in MISSING_COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {MISSING_COVARIANCE_TYPES} with missing "
                             f"values; got {covariance_type!r}.")
        super().__init__(n_components, n_features, covariance_type, reg_covar, shift)

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """Per-client mean statistics and mean observed-data log-likelihood, one pass.

        Returns
        -------
        stats : ndarray of shape (n_active, q)
        loglik : ndarray of shape (n_active,)
        """
        self._check_theta(theta)
        X, seg = federation.select(clients, batch, rng)
        first, second = mixture_segment_stats(X, seg, theta.weights, theta.means, _full_covariances(theta),
                                              self.shift, self.covariance_type == "diag")
        counts = np.diff(seg)[:, None]
        stats = np.concatenate([first[:, :-1], second.reshape(seg.size - 1, -1)], axis=1) / counts
        return stats, first[:, -1] / counts[:, 0]

    def log_likelihood(self, X, theta) -> np.ndarray:
        """Observed-data log-density of each row, shape (n,)."""
        self._check_theta(theta)
        return mixture_log_likelihood(np.asarray(X, dtype=np.float64), theta.weights, theta.means,
                                      _full_covariances(theta))

    def impute(self, X, theta, rng=None, sample=False):
        """Conditional mean (or a posterior draw) of the missing entries, shape (n, d)."""
        self._check_theta(theta)
        return impute_mixture(X, theta.weights, theta.means, _full_covariances(theta), rng, sample)

    def init_theta(self, federation, rng=None, method="kmeans", **kwargs) -> GMMParams:
        """Federated initialisation; see :func:`init_gmm_missing`."""
        return init_gmm_missing(federation, self, method=method, rng=rng, **kwargs)


def init_gmm_missing(federation, model, method="kmeans", rng=None, min_rows=SUMMARY_MIN_ROWS):
    """Initial mixture parameters without moving raw rows.

    The server broadcasts the global means and pairwise covariance (from sums, see
    :func:`._missing_kernels.nan_moments`). ``"kmeans"``: each client fills its own
    missing entries with the global means and sends local k-means summaries
    (:func:`.gmm_init.init_kmeans_summaries`, clusters of at least ``min_rows`` rows);
    if the clients are too small to send ``K`` centroids it falls back to ``"random"``.
    ``"random"``: means drawn from N(global mean, global covariance). Every component
    starts with the global covariance (diagonal for ``"diag"``) and weight 1/K.

    Parameters
    ----------
    federation : Federation
    model : GaussianMixtureMissingModel
    method : {"kmeans", "random"}, default="kmeans"
    rng : numpy.random.Generator or int, optional
    min_rows : int, default=5

    Returns
    -------
    GMMParams
    """
    if method not in ("kmeans", "random"):
        raise ValueError(f"method must be 'kmeans' or 'random'; got {method!r}.")
    rng = check_rng(rng)
    K, d = model.n_components, model.n_features
    mean, cov = nan_moments(federation.X)
    cov = cov + model.reg_covar * np.eye(d)
    cov = safe_cholesky(cov, model.reg_covar)[1]  # pairwise deletion may be indefinite
    means = None
    if method == "kmeans":
        filled = np.where(np.isnan(federation.X), mean, federation.X)
        try:
            means = init_kmeans_summaries(Federation(filled, federation.offsets), K, rng, min_rows=min_rows)
        except TooFewSummariesError:
            pass  # clients too small for k-means summaries: documented fallback below
    if means is None:
        means = rng.multivariate_normal(mean, cov, size=K)
    covs = np.repeat(cov[None], K, axis=0) if model.covariance_type == "full" \
        else np.repeat(np.diag(cov)[None], K, axis=0)
    return make_params(np.full(K, 1.0 / K), means, covs, covariance_type=model.covariance_type)

