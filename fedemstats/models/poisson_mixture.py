"""Poisson mixture for counts with missing values (latent class model, SPEC §5).

``y_j | z = k ~ Poisson(λ_kj)`` independently over coordinates; a missing coordinate is
marginalised (it drops out of the likelihood). Per row, with ``r_k ∝ π_k Π_{j∈o}
Poisson(y_j; λ_kj)``, the statistics are ``(r_k, r_k E[y_j | y_o, z = k])`` where the
expectation is ``y_j`` if observed and ``λ_kj`` otherwise. First moments only, so no
shift is needed (SPEC §2 concerns second moments).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from .._linalg import logsumexp
from .._validation import check_int, check_rng, column_labels
from ..layout import StatLayout
from ._mixture import component_mass, draw_components, log_norm_resp
from ._patterns import rows_per_chunk, segment_sums
from ._kmeans_summaries import filled_kmeans_summaries
from ._summaries import INIT_METHODS, SUMMARY_MIN_ROWS, check_init_method, nan_mean
from .base import Model
from .poisson_geometry import poisson_geometry

__all__ = ["PoissonMixtureParams", "PoissonMixtureModel", "check_counts", "init_poisson_mixture", "poisson_start",
           "RATE_FLOOR"]

#: Floor of the rates λ_kj in the T-map: a component that never sees a positive count
#: in column j would get λ = 0 and log λ = -inf (0 * -inf = NaN in the likelihood).
RATE_FLOOR = 1e-8
#: Spread of the "random" initial rates: λ_kj = mean_j * exp(INIT_LOG_SPREAD * ξ), ξ ~ N(0, 1).
INIT_LOG_SPREAD = 0.5


@dataclass(frozen=True, eq=False)
class PoissonMixtureParams:
    """Mixture weights and Poisson rates (treat arrays as read-only).

    Attributes
    ----------
    weights : ndarray of shape (K,)
    rates : ndarray of shape (K, d), > 0
    """

    weights: np.ndarray
    rates: np.ndarray


def check_counts(X, name="X", columns=None):
    """Raise ``ValueError`` unless the observed entries are non-negative integers.

    Parameters
    ----------
    X : ndarray of shape (n, d), NaN where missing
    name : str
        The argument named in the error.
    columns : sequence of str, optional
        Column names for the error (the estimator's ``feature_names_in_``); indices otherwise.
    """
    with np.errstate(invalid="ignore"):
        negative = X < 0
        fractional = np.isfinite(X) & (X != np.round(X))
    # "Negative values in data" is scikit-learn's wording, which its estimator checks look for
    for bad, what, advice in ((negative, "Negative values in data passed to the Poisson model",
                               "it needs counts >= 0"),
                              (fractional, "Non-integer values in data passed to the Poisson model",
                               "it needs integer counts (use model='gaussian' on transformed data instead)")):
        if bad.any():
            cols = np.flatnonzero(bad.any(axis=0))
            row = int(np.flatnonzero(bad[:, cols[0]])[0])
            raise ValueError(f"{what}: column(s) {column_labels(cols, columns)} of {name} (e.g. row {row}: "
                             f"{float(X[row, cols[0]])!r}); {advice}.")


def _log_joint(X, observed, theta):
    """``log π_k + log p(y_o | k)``, shape (c, K), and the filled counts (c, d)."""
    y = np.where(observed, X, 0.0)
    obs = observed.astype(np.float64)
    with np.errstate(divide="ignore"):
        logw = np.log(theta.weights)
    lr = np.log(theta.rates)
    const = np.sum(obs * gammaln(y + 1.0), axis=1)
    return y @ lr.T - obs @ theta.rates.T - const[:, None] + logw[None], y


def poisson_row_stats(X, observed, theta):
    """Per-row ``[r (K), r_k E[y | y_o, k] (K*d), loglik]``, shape (c, K + K*d + 1)."""
    wlp, y = _log_joint(X, observed, theta)
    ll, r = log_norm_resp(wlp)
    filled = np.where(observed[:, None, :], y[:, None, :], theta.rates[None])
    c = X.shape[0]
    return np.concatenate([r, (r[:, :, None] * filled).reshape(c, -1), ll[:, None]], axis=1)


class PoissonMixtureModel(Model):
    """Mixture of independent Poissons (latent class model) with missing counts.

    Parameters
    ----------
    n_components : int
    n_features : int

    Notes
    -----
    T-map: ``π_k = S0_k / Σ S0`` with ``S0_k`` clipped below at
    :data:`._mixture.RESP_FLOOR`, ``λ_kj = max(S1_kj / S0_k, RATE_FLOOR)``: any finite
    ``s`` maps to valid parameters.
    """

    allow_nan = True
    init_methods = INIT_METHODS

    def __init__(self, n_components, n_features):
        self.n_components = check_int(n_components, "n_components")
        self.n_features = check_int(n_features, "n_features")
        self.layout = StatLayout([("resp", (self.n_components,)),
                                  ("sum_y", (self.n_components, self.n_features))])

    def client_stats(self, federation, theta, clients=None, batch=None, rng=None):
        """:meth:`Model.client_stats`: missing counts marginalised, chunked segment sums."""
        X, seg = federation.select(clients, batch, rng)
        observed = ~np.isnan(X)
        fn = lambda a, b: poisson_row_stats(X[a:b], observed[a:b], theta)  # noqa: E731
        sums = segment_sums(fn, seg, self.q + 1, rows_per_chunk(2 * self.q))
        sums /= np.diff(seg)[:, None]
        return sums[:, :self.q], sums[:, self.q].copy()

    def t_map(self, s) -> PoissonMixtureParams:
        """Total M-step (see class Notes); ValueError if ``s`` is misshapen or not finite."""
        parts = self.unpack_stats(s)
        s0, weights = component_mass(parts["resp"])
        return PoissonMixtureParams(weights, np.maximum(parts["sum_y"] / s0[:, None], RATE_FLOOR))

    def expected_stats(self, theta) -> np.ndarray:
        """E_θ[s] = (π, π λ), which ``t_map`` maps back to θ."""
        return self.layout.pack({"resp": theta.weights, "sum_y": theta.weights[:, None] * theta.rates})

    def geometry(self, theta, s_hat):
        """Rate scaling (:func:`.poisson_geometry.poisson_geometry`, ``docs/geometry.md``)."""
        return poisson_geometry(self, theta, s_hat, RATE_FLOOR)

    #: counts stay counts: the per-row statistics are clipped, not the rows
    dp_clips_rows = False

    def dp_row_bound(self, radius) -> float:
        """B = √(1 + ρ²) for (r, r y) with ‖y‖ ≤ ρ (ρ = ``clip``, counts are not rescaled);
        rows beyond it have their statistic vector clipped to B."""
        return float(np.sqrt(1.0 + radius ** 2))

    def log_likelihood(self, X, theta) -> np.ndarray:
        """Observed-data log-probability of each row, shape (n,)."""
        X = np.asarray(X, dtype=np.float64)
        return logsumexp(_log_joint(X, ~np.isnan(X), theta)[0], axis=1)

    def responsibilities(self, X, theta) -> np.ndarray:
        """Posterior class probabilities from the observed counts, shape (n, K)."""
        X = np.asarray(X, dtype=np.float64)
        return log_norm_resp(_log_joint(X, ~np.isnan(X), theta)[0])[1]

    def n_parameters(self, theta) -> int:
        K, d = self.n_components, self.n_features
        return int(K * d + K - 1)

    def impute(self, X, theta, rng=None, sample=False):
        """``E[y_m | y_o] = Σ_k r_k λ_km``, or a draw ``k ~ r``, ``y_m ~ Poisson(λ_km)``.

        Returns
        -------
        ndarray of shape (n, d)
        """
        X = np.asarray(X, dtype=np.float64)
        observed = ~np.isnan(X)
        r = self.responsibilities(X, theta)
        if sample:
            rng = check_rng(rng)
            k = draw_components(r, rng)
            fill = rng.poisson(theta.rates[k]).astype(np.float64)
        else:
            fill = r @ theta.rates
        return np.where(observed, X, fill)

    def init_theta(self, federation, rng=None, method="kmeans", **kwargs) -> PoissonMixtureParams:
        """Federated initialisation; see :func:`init_poisson_mixture`."""
        return init_poisson_mixture(federation, self, method=method, rng=rng, **kwargs)


def init_poisson_mixture(federation, model, method="kmeans", rng=None, min_rows=SUMMARY_MIN_ROWS):
    """Initial weights and rates without moving raw rows.

    ``"kmeans"``: clients fill their own missing counts with the global column means (from
    client sums) and send local k-means summaries (:func:`._kmeans_summaries.filled_kmeans_summaries`,
    clusters of at least ``min_rows`` rows); the rates are the server's centroids. If the
    clients are too small to send ``K`` centroids, falls back to ``"random"``:
    ``λ_kj = mean_j exp(INIT_LOG_SPREAD ξ_kj)``, ξ ~ N(0, 1). Rates are floored at
    :data:`RATE_FLOOR`; weights start uniform.

    Returns
    -------
    PoissonMixtureParams
    """
    check_init_method(method)
    rng = check_rng(rng)
    K = model.n_components
    mean = nan_mean(federation)  # column sums / counts from the clients
    rates = filled_kmeans_summaries(federation, mean, K, rng, min_rows) if method == "kmeans" else None
    return poisson_start(mean, model, rng, rates)


def poisson_start(mean, model, rng, rates=None) -> PoissonMixtureParams:
    """θ_0 from the observed counts' column means (d,): the given ``rates`` (K, d), or
    ``mean_j exp(INIT_LOG_SPREAD ξ_kj)`` drawn from ``rng``; floored at :data:`RATE_FLOOR`,
    uniform weights. The part of :func:`init_poisson_mixture` after the clients' summaries (a
    Flower server calls it on the nodes' moments)."""
    if rates is None:
        rates = mean[None] * np.exp(INIT_LOG_SPREAD * rng.standard_normal((model.n_components, model.n_features)))
    return PoissonMixtureParams(np.full(model.n_components, 1.0 / model.n_components), np.maximum(rates, RATE_FLOOR))
