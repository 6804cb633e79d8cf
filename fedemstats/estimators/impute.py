"""FederatedImputer: fill missing values with conditional expectations under a model
fitted by federated EM (Gaussian, Gaussian mixture or Poisson mixture)."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.impute import MissingIndicator
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_feature_names_in, check_is_fitted, validate_data

from .._validation import check_missing_input, check_rng
from ..models._summaries import nan_moments
from ..models.gaussian_missing import GaussianMissingModel
from ..models.gmm_init import INIT_METHODS
from ..models.gmm_missing import MISSING_COVARIANCE_TYPES, GaussianMixtureMissingModel
from ..models.poisson_mixture import PoissonMixtureModel, check_counts
from ._base import DEFAULT_ONLINE_POWER, FederatedEMMixin
from .mixture import warn_if_reg_covar_dominates

__all__ = ["FederatedImputer", "IMPUTER_MODELS"]

#: ``model=`` name -> model class
MODEL_CLASSES = {"gaussian": GaussianMissingModel, "gmm": GaussianMixtureMissingModel,
                 "poisson": PoissonMixtureModel}
IMPUTER_MODELS = tuple(MODEL_CLASSES)


def _is_nan_marker(value):
    return isinstance(value, Real) and np.isnan(value)


class FederatedImputer(FederatedEMMixin, TransformerMixin, BaseEstimator):
    """Model-based imputation fitted by federated EM; rows never leave their client.

    ``transform`` replaces each missing entry by its conditional expectation given the
    row's observed entries under the fitted model; with ``sample_posterior=True`` it
    draws from that conditional instead (run it with several seeds for multiple
    imputation).

    Parameters
    ----------
    model : {"gaussian", "gmm", "poisson"}, default="gaussian"
        ``"gaussian"``: one multivariate normal (conditional mean = linear regression of
        the missing on the observed entries). ``"gmm"``: Gaussian mixture, responsibilities
        from the observed block. ``"poisson"``: mixture of independent Poissons for
        non-negative integer counts (latent class model).
    n_components : int, default=3
        Mixture components (``"gmm"`` and ``"poisson"``; ignored by ``"gaussian"``).
    covariance_type : {"full", "diag"}, default="full"
        ``"gmm"`` only.
    reg_covar : float, default=1e-6
        Added to covariance diagonals. ``"gaussian"``: in units of each column's variance (the
        pooled public scale), so imputations are equivariant to rescaling a column; ``"gmm"``: in
        original units, as scikit-learn's ``GaussianMixture`` (``fit`` warns when it is more than 1 %
        of a column's variance: the fitted variances of such a column are then mostly ``reg_covar``,
        its likelihood hardly depends on its means, and compressed fits impute it no better than
        noise; standardise such data).
    missing_values : float or int, default=np.nan
        The placeholder for missing values; all its occurrences are imputed.
    add_indicator : bool, default=False
        Append a :class:`sklearn.impute.MissingIndicator` of the columns that had
        missing values during fit.
    sample_posterior : bool, default=False
        Draw from the conditional distribution instead of taking its mean.
    n_init : int, default=1
        Initialisations (mixtures); the best final log-likelihood is kept.
    init_params : {"kmeans", "random"}, default="kmeans"
        Mixture initialisation from clients' local k-means summaries (falls back to
        ``"random"`` when clients are too small to send them) or random means.
    max_iter : int or "auto", default="auto"
        Maximum number of M-steps, as :class:`FederatedGaussianMixture`'s (``"auto"``: 100 for
        exact EM, 500 for a compressed or partial run, 10 for a private fit).
    tol : float, default=1e-4
        Stop when the mean log-likelihood per row gains less than ``tol`` (compressed or
        partial runs: the noisy-run test of ``docs/fedem.md``, "Convergence").
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
    theta_ : parameters of the fitted model
        :class:`~fedemstats.models.gaussian_missing.GaussianParams`,
        :class:`~fedemstats.models.gmm.GMMParams` or
        :class:`~fedemstats.models.poisson_mixture.PoissonMixtureParams`.
    model_ : Model
    indicator_ : MissingIndicator or None
    n_iter_, max_iter_, converged_, lower_bound_, history_, ledger_
        As :class:`FederatedGaussianMixture`.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        When fitted on a DataFrame with string column names.
    """

    _allow_nan = True
    _parameter_constraints: dict = {
        **FederatedEMMixin._parameter_constraints,
        "model": [StrOptions(set(IMPUTER_MODELS))],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "covariance_type": [StrOptions(set(MISSING_COVARIANCE_TYPES))],
        "reg_covar": [Interval(Real, 0.0, None, closed="left")],
        "missing_values": [Real],
        "add_indicator": ["boolean"],
        "sample_posterior": ["boolean"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "init_params": [StrOptions(set(INIT_METHODS))],
    }

    def __init__(self, model="gaussian", *, n_components=3, covariance_type="full", reg_covar=1e-6,
                 missing_values=np.nan, add_indicator=False, sample_posterior=False, n_init=1,
                 init_params="kmeans", max_iter="auto", tol=1e-4, algorithm="fedem", compressor="identity",
                 participation=1.0, step_size="auto", alpha=None, v_init="mean-field", batch_size=None,
                 k_in=None, online_power=DEFAULT_ONLINE_POWER, online_gamma0=1.0, n_clients=10,
                 client_weights="samples", track_h=False,
                 precondition=True, safeguard=True, downlink_compressor="auto",
                 random_state=None, verbose=0, verbose_interval=10, privacy=None):
        self.model = model
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        self.missing_values = missing_values
        self.add_indicator = add_indicator
        self.sample_posterior = sample_posterior
        self.n_init = n_init
        self.init_params = init_params
        self.max_iter = max_iter
        self.tol = tol
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
        if self.model == "poisson":
            # Counts are non-negative integers. ``positive_only`` declares the sign;
            # ``categorical`` is scikit-learn's only tag for integer-coded input: with it
            # the estimator checks round their data to non-negative integers instead of
            # feeding reals, which this model rejects by design (``check_counts``).
            tags.input_tags.positive_only = True
            tags.input_tags.categorical = True
        return tags

    # ------------------------------------------------------------------ fit
    def _to_nan(self, X):
        """Replace the ``missing_values`` placeholder by NaN (pandas columns kept)."""
        if _is_nan_marker(self.missing_values):
            return X
        if isinstance(X, (list, tuple)) and len(X) and np.ndim(X[0]) == 2:
            return [self._to_nan(np.asarray(a, dtype=np.float64)) for a in X]
        frame = hasattr(X, "columns")
        values = X.to_numpy(dtype=np.float64) if frame else np.asarray(X, dtype=np.float64)
        if np.isnan(values).any():
            # as scikit-learn's imputers: a NaN next to another placeholder is an error, not a gap
            raise ValueError(f"Input X contains NaN, but missing_values={self.missing_values!r}: NaN would be "
                             "imputed silently. Replace the NaN by the placeholder, or use missing_values=np.nan.")
        values = np.where(values == self.missing_values, np.nan, values)
        return type(X)(values, index=X.index, columns=X.columns) if frame else values

    def fit(self, X, y=None, *, groups=None):
        """Fit the imputation model by federated EM.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of arrays
            Missing entries marked by ``missing_values``. A column with no observed
            value, or a row with no observed value, raises ``ValueError`` (such rows
            are not skipped silently: drop them first).
        y : ignored
        groups : array-like of shape (n_samples,), optional
            Client label of each row.

        Returns
        -------
        self : FederatedImputer
            Fitted.
        """
        self._check_federated_params()
        fed, X_flat, _ = self._federation(self._to_nan(X), groups, min_rows=2)
        check_missing_input(fed.X, columns=self._column_names)
        K = 1 if self.model == "gaussian" else self.n_components
        if K > fed.n_rows:
            raise ValueError(f"n_components={K} must be <= n_samples={fed.n_rows}.")
        if self.model == "poisson":
            check_counts(X_flat, columns=self._column_names)  # rows in the order the user passed them
        rng = check_rng(self.random_state)
        model = self._make_model(fed)
        if self.model == "gmm":  # its reg_covar is in the data's units, as FederatedGaussianMixture's
            mean, cov = nan_moments(fed)  # cached: the model's public centring computed them
            warn_if_reg_covar_dominates(mean, np.diag(cov), self.reg_covar)
        if self.model == "gaussian":
            n_init, initial_theta = 1, lambda: model.init_theta(fed, rng=rng)
        else:
            n_init, initial_theta = self.n_init, lambda: model.init_theta(fed, rng=rng, method=self.init_params)
        best = self._fit_best_of(model, fed, n_init, initial_theta, rng)
        # a private fit's model carries the public geometry, not the data's centring
        self.model_, self.theta_ = getattr(best, "model", model), best.theta
        self._rng_ = rng
        self.indicator_ = MissingIndicator(error_on_new=False).fit(X_flat) if self.add_indicator else None
        return self

    def _make_model(self, fed):
        """The chosen model with its public shift / scale from round-1 client summaries."""
        hyper = {"poisson": {"n_components": self.n_components},
                 "gaussian": {"reg_covar": self.reg_covar},
                 "gmm": {"n_components": self.n_components, "covariance_type": self.covariance_type,
                         "reg_covar": self.reg_covar}}[self.model]
        return MODEL_CLASSES[self.model].from_federation(fed, **hyper)

    # ------------------------------------------------------------------ transform
    def transform(self, X):
        """Impute the missing entries of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_features [+ n_indicator_columns])
        """
        check_is_fitted(self, "theta_")
        X = validate_data(self, self._to_nan(X), reset=False, dtype=np.float64,
                          ensure_all_finite="allow-nan")
        if self.model == "poisson":
            check_counts(X, columns=self._column_names)
        out = self.model_.impute(X, self.theta_, rng=self._rng_, sample=self.sample_posterior)
        if self.indicator_ is not None:
            out = np.hstack([out, self.indicator_.transform(X).astype(np.float64)])
        return out

    def get_feature_names_out(self, input_features=None):
        """Output feature names: the input features, then the indicator's columns.

        Returns
        -------
        ndarray of str
        """
        check_is_fitted(self, "theta_")
        names = _check_feature_names_in(self, input_features)
        if self.indicator_ is None:
            return names
        return np.concatenate([names, self.indicator_.get_feature_names_out(names)])
