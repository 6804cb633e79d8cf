"""Federated initialisations of the Gaussian mixture: no raw row leaves a client (SPEC §3).

What each client sends is computed from its own rows only and is an aggregate
(:mod:`._summaries`): counts, means and centred scatter matrices, or local k-means
centroids of clusters holding at least ``min_rows`` rows, or the model's own
per-client statistics. The model instance comes in as an argument, so this module
needs only the parameter container (:mod:`.gmm_params`), not the model's file.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_rng
from ._kmeans_summaries import LOCAL_KMEANS_MAX_ROWS, client_row_sample, init_kmeans_summaries
from ._summaries import INIT_METHODS, SUMMARY_MIN_ROWS, TooFewSummariesError, check_init_method, global_moments
from .gmm_params import GMMParams, make_params, shared_covariances

__all__ = ["init_params", "init_random_from_moments", "INIT_METHODS", "SUMMARY_MIN_ROWS",
           "TooFewSummariesError"]


#: Rows of the hard-label pass per free parameter of the mixture, over all clients: each
#: client labels an evenly spread sample of max(LOCAL_KMEANS_MAX_ROWS, this × parameters /
#: clients) of its rows. 20 rows per parameter estimate θ_0 about as well as all rows do
#: for a start, and keep the pass a fraction of one E-step on large data (issue 15,
#: set-up cost: the full pass was 1.1 rounds of the 1e6 x 10 fit).
HARD_PASS_ROWS_PER_PARAMETER = 20


def hard_pass_rows(federation, model, theta) -> int:
    """Rows each client labels in the k-means initialisation's hard pass (θ: its shape)."""
    per_client = HARD_PASS_ROWS_PER_PARAMETER * model.n_parameters(theta) / federation.n_clients
    return max(LOCAL_KMEANS_MAX_ROWS, int(np.ceil(per_client)))


def init_random_from_moments(mean, cov, model, rng) -> GMMParams:
    """θ_0 from global moments: means drawn from N(mean, cov + reg_covar I), every
    component with that covariance, uniform weights (``init_params="random"``).

    Parameters
    ----------
    mean : ndarray of shape (d,)
    cov : ndarray of shape (d, d)
    model : GaussianMixtureModel
    rng : numpy.random.Generator
    """
    K, ctype = model.n_components, model.covariance_type
    # repaired as the T-map repairs any statistic (collinear columns at a scale where reg_covar
    # is negligible leave cov + reg_covar I singular in float64)
    _, cov, _ = model.repair(cov + model.reg_covar * np.eye(model.n_features))
    means = rng.multivariate_normal(mean, cov, size=K)
    return make_params(np.full(K, 1.0 / K), means, shared_covariances(cov, ctype, K), covariance_type=ctype)


def init_params(federation, model, method="kmeans", rng=None, min_rows=SUMMARY_MIN_ROWS) -> GMMParams:
    """Initial parameters without moving raw rows.

    ``"kmeans"``: means from :func:`._kmeans_summaries.init_kmeans_summaries`; then one E/M
    pass from those means with hard (nearest-mean) responsibilities, computed by the
    clients as model statistics (``client_stats(hard=True)`` under identity covariances
    and equal weights) on their rows, or on an evenly spread sample of
    :func:`hard_pass_rows` of them when they hold more (:func:`._kmeans_summaries.client_row_sample`),
    and the model's T-map — scikit-learn's ``init_params="kmeans"`` in federated form.
    ``"random"``: means drawn from N(global mean, global covariance), every component
    with the global covariance (+ ``reg_covar``), uniform weights.

    Parameters
    ----------
    federation : Federation
    model : GaussianMixtureModel
    method : {"kmeans", "random"}, default="kmeans"
    rng : numpy.random.Generator or int, optional
    min_rows : int, default=5
        Smallest local cluster a client may summarise (``"kmeans"`` only).

    Returns
    -------
    GMMParams

    Raises
    ------
    TooFewSummariesError
        ``"kmeans"`` on clients too small to send ``n_components`` centroids.
    """
    rng = check_rng(rng)
    K, d, ctype = model.n_components, model.n_features, model.covariance_type
    if federation.n_features != d:
        raise ValueError(f"federation has {federation.n_features} features; model has {d}.")
    if check_init_method(method) == "random":
        return init_random_from_moments(*global_moments(federation), model, rng)
    means = init_kmeans_summaries(federation, K, rng, min_rows=min_rows)
    # Nearest-mean labels do not depend on the common variance, but in floating point the
    # squared distances must not vanish next to the log-weight constant: at data scale 1e-8,
    # unit variances would make every row a tie. The data's own mean variance (the model's public
    # scale) keeps the labels equivariant to rescaling.
    unit = float(np.mean(model.column_scale ** 2))  # public centring's pass, not a new one
    eye = shared_covariances(unit * np.eye(d), ctype, K)
    labels_theta = make_params(np.full(K, 1.0 / K), means, eye, covariance_type=ctype)
    sample = client_row_sample(federation, hard_pass_rows(federation, model, labels_theta), rng)
    stats, _ = model.client_stats(sample, labels_theta, hard=True)
    return model.t_map(sample.weights @ stats)
