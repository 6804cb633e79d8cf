"""Gaussian mixture with values missing at random (SPEC §5).

Responsibilities come from each component's density of the *observed* block; given the
component, the missing block is completed with the Gaussian conditional mean and its
conditional covariance is added to the second moment (:mod:`._mixture_missing`). The
statistics have exactly the layout of :class:`.gmm.GaussianMixtureModel` (``resp``,
``sum_x``, ``sum_xx`` on shifted data), so the T-map, parameter container and
parameter count are reused from :mod:`.gmm`.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_rng
from ._mixture_missing import impute_mixture, mixture_log_likelihood, mixture_segment_sums
from ._kmeans_summaries import filled_kmeans_summaries
from ._summaries import SUMMARY_MIN_ROWS, check_init_method, regularised_nan_moments, standardising_shift_scale
from .gmm import GaussianMixtureModel
from .gmm_params import GMMParams, full_covariances, make_params, shared_covariances

__all__ = ["GaussianMixtureMissingModel", "MISSING_COVARIANCE_TYPES", "init_gmm_missing", "gmm_missing_start"]

#: Covariance types supported with missing values (the conditional needs a full or
#: diagonal matrix per component).
MISSING_COVARIANCE_TYPES = ("full", "diag")


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

    def __init__(self, n_components, n_features, covariance_type="full", reg_covar=1e-6, shift=None,
                 column_scale=None):
        if covariance_type not in MISSING_COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {MISSING_COVARIANCE_TYPES} with missing "
                             f"values; got {covariance_type!r}.")
        super().__init__(n_components, n_features, covariance_type, reg_covar, shift, column_scale)

    @classmethod
    def public_centring(cls, federation) -> dict:
        """``{"shift", "column_scale"}``: the observed values' mean and standard deviations
        (:func:`._summaries.standardising_shift_scale`, whose moments the initialisation reuses)."""
        public = standardising_shift_scale(federation)
        return {"shift": public["shift"], "column_scale": public["scale"]}

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """:meth:`Model.client_stats`: missing entries marginalised in the E-step (see class Notes)."""
        self._check_theta(theta)
        X, seg = federation.select(clients, batch, rng)
        sums = mixture_segment_sums(X, seg, theta.weights, theta.means, full_covariances(theta), self.shift,
                                    self.covariance_type == "diag")
        sums /= np.diff(seg)[:, None]
        return sums[:, :-1], sums[:, -1].copy()

    def log_likelihood(self, X, theta) -> np.ndarray:
        """Observed-data log-density of each row, shape (n,)."""
        self._check_theta(theta)
        return mixture_log_likelihood(np.asarray(X, dtype=np.float64), theta.weights, theta.means,
                                      full_covariances(theta))

    def impute(self, X, theta, rng=None, sample=False):
        """Conditional mean (or a posterior draw) of the missing entries, shape (n, d)."""
        self._check_theta(theta)
        return impute_mixture(X, theta.weights, theta.means, full_covariances(theta), rng, sample)

    def init_theta(self, federation, rng=None, method="kmeans", **kwargs) -> GMMParams:
        """Federated initialisation; see :func:`init_gmm_missing`."""
        return init_gmm_missing(federation, self, method=method, rng=rng, **kwargs)


def init_gmm_missing(federation, model, method="kmeans", rng=None, min_rows=SUMMARY_MIN_ROWS):
    """Initial mixture parameters without moving raw rows.

    The server broadcasts the global means and pairwise covariance (from sums, see
    :func:`._summaries.nan_moments`). ``"kmeans"``: each client fills its own missing
    entries with the global means and sends local k-means summaries
    (:func:`._kmeans_summaries.filled_kmeans_summaries`, clusters of at least ``min_rows`` rows);
    if the clients are too small to send ``K`` centroids it falls back to ``"random"``.
    ``"random"``: means drawn from N(global mean, global covariance). Every component
    starts with the global covariance (diagonal for ``"diag"``) and weight 1/K.

    Parameters
    ----------
    federation, model, method, rng, min_rows :
        As :func:`.gmm_init.init_params`, with a :class:`GaussianMixtureMissingModel`.

    Returns
    -------
    GMMParams
    """
    check_init_method(method)
    rng = check_rng(rng)
    K = model.n_components
    mean, cov = regularised_nan_moments(federation, model.reg_covar)
    means = filled_kmeans_summaries(federation, mean, K, rng, min_rows) if method == "kmeans" else None
    return gmm_missing_start(mean, cov, model, rng, means)


def gmm_missing_start(mean, cov, model, rng, means=None) -> GMMParams:
    """θ_0 from regularised global moments (:func:`._summaries.regularise_moments`, in original
    units): the given ``means``, or K draws from N(``mean``, ``cov``) from ``rng``; every component
    with ``cov`` (its diagonal for ``"diag"``), weights 1/K. The part of :func:`init_gmm_missing`
    after the clients' summaries (a Flower server calls it on the nodes' moments)."""
    K = model.n_components
    if means is None:
        means = rng.multivariate_normal(mean, cov, size=K)
    covs = shared_covariances(cov, model.covariance_type, K)
    return make_params(np.full(K, 1.0 / K), means, covs, covariance_type=model.covariance_type)
