"""FederatedFactorAnalysis: scikit-learn's FactorAnalysis API, fitted by FedEM on rows
that may hold missing values."""
from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_missing_input, check_rng, column_labels
from ..models.factor import (NOISE_REL_FLOOR, FactorAnalysisModel, FactorParams, factor_log_likelihood,
                             factor_transform)
from ._base import DEFAULT_ONLINE_POWER, FederatedEMMixin

__all__ = ["FederatedFactorAnalysis", "ortho_rotation", "ROTATIONS"]

ROTATIONS = ("varimax", "quartimax")
#: Relative gain below which the rotation iterations stop (scikit-learn's value).
ROTATION_TOL = 1e-6
ROTATION_MAX_ITER = 100


def ortho_rotation(loadings, method="varimax", tol=ROTATION_TOL, max_iter=ROTATION_MAX_ITER):
    """Orthogonal varimax / quartimax rotation of a loading matrix (Kaiser 1958).

    The same SVD iteration as scikit-learn's FactorAnalysis, so that ``rotation=``
    gives the same components.

    Parameters
    ----------
    loadings : ndarray of shape (d, k)
    method : {"varimax", "quartimax"}

    Returns
    -------
    rotated : ndarray of shape (k, d)
        Rotated components (``components_`` layout).
    """
    d, k = loadings.shape
    rot = np.eye(k)
    var = 0.0
    for _ in range(max_iter):
        comp = loadings @ rot
        tmp = comp * (comp ** 2).sum(axis=0) / d if method == "varimax" else 0.0
        u, s, vt = np.linalg.svd(loadings.T @ (comp ** 3 - tmp))
        rot = u @ vt
        if var != 0 and s.sum() < var * (1 + tol):
            break
        var = s.sum()
    return (loadings @ rot).T


class FederatedFactorAnalysis(FederatedEMMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                              BaseEstimator):
    """Factor analysis fitted by federated EM; rows may hold missing values (NaN).

    The public API follows :class:`sklearn.decomposition.FactorAnalysis`. Clients send
    (compressed) means of the conditional sufficient statistics ``E[x∘x]``,
    ``E[x z̃ᵀ]``, ``E[z̃ z̃ᵀ]`` (SPEC §5); missing entries are integrated out.

    Parameters
    ----------
    n_components : int, optional
        Number of factors ``k``; all features when ``None``. At most ``n_features``
        and ``n_samples``.
    tol : float, default=1e-5
        Stop when the mean log-likelihood per row gains less than ``tol`` in a round
        (scikit-learn's ``tol`` is on the total log-likelihood); compressed or partial
        runs use the noisy-run test of ``docs/fedem.md`` ("Convergence") with this ``tol``.
        VR-FedEM tests it on its outer loops' full passes; mini-batch FedEM does not test it.
    copy : bool, default=True
        Kept for API compatibility; the input is never modified.
    max_iter : int or "auto", default="auto"
        Maximum number of M-steps, as :class:`FederatedGaussianMixture`'s but with
        scikit-learn's ``FactorAnalysis`` default: ``"auto"`` is 1000 for exact EM, 5000 for a
        compressed or partial run (EM for factor analysis is slow), 10 for a private fit.
    noise_variance_init : array-like of shape (n_features,), optional
        Initial noise variances; default the global variances (from client sums). Values
        above a feature's variance are capped at it (no maximum-likelihood Ψ_j exceeds it).
    rotation : {"varimax", "quartimax"}, optional
        Orthogonal rotation applied to the fitted loadings.
    algorithm, compressor, participation, step_size, alpha, v_init, batch_size, k_in, \
online_power, online_gamma0, n_clients, client_weights, precondition, safeguard, downlink_compressor, track_h, \
random_state, verbose, verbose_interval
        Federated parameters, as :class:`FederatedGaussianMixture`.
    privacy : DPConfig, optional
        Differential privacy of the fit (``docs/privacy.md``): rows clipped in the public
        geometry, Gaussian noise calibrated by ``dp_accounting``; adds ``history_["epsilon"]``
        and ``privacy_spent_``. ``None`` (default) changes nothing.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
    noise_variance_ : ndarray of shape (n_features,)
    mean_ : ndarray of shape (n_features,)
    theta_ : FactorParams
        The fitted parameters (components rotated as ``rotation`` says).
    model_ : FactorAnalysisModel
        The model the fit ran on (statistic layout, T-map), e.g. for
        :func:`fedemstats.diagnostics.em_step_gain`.
    loglike_ : list of float
        Total log-likelihood at the start of each round (``history_["loglik"] *
        n_samples``; a Horvitz-Thompson estimate under partial participation).
    n_iter_ : int
    max_iter_ : int
        The M-steps this fit was allowed (``max_iter``, resolved when "auto").
    converged_ : bool
    history_ : pandas.DataFrame
        Per round, as :class:`FederatedGaussianMixture`'s ``history_``.
    ledger_ : BitLedger
    n_features_in_ : int
    """

    _allow_nan = True
    #: scikit-learn's ``FactorAnalysis`` default
    _exact_max_iter = 1000
    _parameter_constraints: dict = {
        **FederatedEMMixin._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "copy": ["boolean"],
        "noise_variance_init": ["array-like", None],
        "rotation": [StrOptions(set(ROTATIONS)), None],
    }

    def __init__(self, n_components=None, *, tol=1e-5, copy=True, max_iter="auto", noise_variance_init=None,
                 rotation=None, algorithm="fedem", compressor="identity", participation=1.0,
                 step_size="auto", alpha=None, v_init="mean-field", batch_size=None, k_in=None,
                 online_power=DEFAULT_ONLINE_POWER, online_gamma0=1.0, n_clients=10,
                 client_weights="samples", track_h=False,
                 precondition=True, safeguard=True, downlink_compressor="auto",
                 random_state=0, verbose=0,
                 verbose_interval=10, privacy=None):
        self.n_components = n_components
        self.tol = tol
        self.copy = copy
        self.max_iter = max_iter
        self.noise_variance_init = noise_variance_init
        self.rotation = rotation
        self.algorithm = algorithm
        self.compressor = compressor
        self.participation = participation
        self.step_size = step_size
        self.alpha = alpha
        self.v_init = v_init
        self.batch_size = batch_size
        self.k_in = k_in
        self.online_power = online_power
        self.online_gamma0 = online_gamma0
        self.n_clients = n_clients
        self.client_weights = client_weights
        self.track_h = track_h
        self.precondition = precondition
        self.safeguard = safeguard
        self.downlink_compressor = downlink_compressor
        self.random_state = random_state
        self.verbose = verbose
        self.verbose_interval = verbose_interval
        self.privacy = privacy

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, groups=None):
        """Fit by federated EM.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of arrays
            NaN marks a missing value. Columns with no observed value and rows with
            no observed value raise ``ValueError`` (such rows are not skipped).
        y : ignored
        groups : array-like of shape (n_samples,), optional
            Client label of each row.

        Returns
        -------
        self : FederatedFactorAnalysis
            Fitted.
        """
        self._check_federated_params()
        fed, _, _ = self._federation(X, groups, min_rows=2)
        check_missing_input(fed.X, columns=self._column_names)
        k = self._n_factors(fed)
        psi0 = self._noise_init(fed.n_features)
        model = FactorAnalysisModel.from_federation(fed, n_factors=k)
        theta0 = model.init_theta(fed, noise_variance_init=psi0)
        result = self._run_algorithm(model, fed, theta0, check_rng(self.random_state))
        self._store_run(result)
        theta = result.theta
        comps = theta.components
        if self.rotation is not None:
            comps = ortho_rotation(comps.T, self.rotation)
        self.model_, self.theta_ = model, FactorParams(comps, theta.noise_variance, theta.mean)
        self.components_ = comps
        self.noise_variance_ = theta.noise_variance
        self.mean_ = theta.mean
        self.loglike_ = (result.history["loglik"].to_numpy() * fed.n_rows).tolist()
        floored = np.flatnonzero(model.at_noise_floor(result.theta, result.state.s_hat))
        if floored.size:
            names = column_labels(floored, self._column_names)
            warnings.warn(f"the noise variance of feature(s) {names} is at its floor ({NOISE_REL_FLOOR:g} "
                          "of the feature's variance): a Heywood case. Such a feature is constant or an (almost) "
                          "exact linear combination of others, e.g. a duplicated column; drop it, or use fewer "
                          "components.", UserWarning, stacklevel=2)
        return self

    def _n_factors(self, fed):
        d = fed.n_features
        k = d if self.n_components is None else self.n_components
        if k > d:
            raise ValueError(f"n_components={k} must be <= n_features={d}.")
        if k > fed.n_rows:
            raise ValueError(f"n_components={k} must be <= n_samples={fed.n_rows}.")
        return k

    def _noise_init(self, d):
        if self.noise_variance_init is None:
            return None
        psi = np.asarray(self.noise_variance_init, dtype=np.float64)
        if psi.shape != (d,) or not np.all(np.isfinite(psi)) or (psi <= 0).any():
            raise ValueError(f"noise_variance_init must be {d} finite positive numbers; got shape {psi.shape}.")
        return psi

    # ------------------------------------------------------------------ inference
    def _validated(self, X):
        check_is_fitted(self, "theta_")
        return validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite="allow-nan")

    def transform(self, X):
        """Posterior means of the factors ``E[z | x_o]``, shape (n_samples, n_components).

        Rows may hold NaN: the factors are inferred from the observed entries.
        """
        return factor_transform(self._validated(X), self.theta_)

    def score_samples(self, X):
        """Log-likelihood of the observed entries of each row, shape (n_samples,)."""
        return factor_log_likelihood(self._validated(X), self.theta_)

    def score(self, X, y=None):
        """Mean log-likelihood per row (float)."""
        return float(np.mean(self.score_samples(X)))

    def get_covariance(self):
        """Model covariance ``components_ᵀ components_ + diag(noise_variance_)``, (d, d)."""
        check_is_fitted(self, "theta_")
        return self.theta_.covariance

    def get_precision(self):
        """Inverse model covariance by the Woodbury identity, shape (d, d)."""
        check_is_fitted(self, "theta_")
        W, ipsi = self.components_, 1.0 / self.noise_variance_
        Wp = W * ipsi
        inner = np.linalg.inv(np.eye(W.shape[0]) + Wp @ W.T)
        return np.diag(ipsi) - Wp.T @ inner @ Wp

    @property
    def _n_features_out(self):
        return self.components_.shape[0]
