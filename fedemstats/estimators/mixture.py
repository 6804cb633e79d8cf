"""FederatedGaussianMixture: scikit-learn's GaussianMixture API, fitted by FedEM."""
from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_int, check_rng
from ..models.gmm import GaussianMixtureModel, estimate_log_prob_resp
from ..models._summaries import constant_columns, global_mean_and_variances
from ..models.gmm_init import INIT_METHODS, SUMMARY_MIN_ROWS, TooFewSummariesError
from ..models.gmm_params import COVARIANCE_TYPES, make_params
from ._base import DEFAULT_ONLINE_POWER, FederatedEMMixin

__all__ = ["FederatedGaussianMixture"]

#: ``reg_covar`` above this fraction of a (non-constant) column's variance draws a warning.
REG_COVAR_WARN_FRACTION = 0.01


def warn_if_reg_covar_dominates(mean, variances, reg_covar):
    """Warn when ``reg_covar`` is not small next to a non-constant column's variance.

    ``reg_covar`` is added to every covariance diagonal in the data's units, as scikit-learn
    does, so on data in small units (variances of 1e-10) it replaces the data's variances and
    the fitted mixture says little about them, silently: exact EM matches scikit-learn there
    too. Constant columns (:func:`~fedemstats.models._summaries.constant_columns`) are left out,
    since ``reg_covar`` is what keeps their covariances invertible.

    Parameters
    ----------
    mean, variances : ndarray of shape (n_features,)
        Pooled column means and variances from the clients' summaries (no row leaves a client).
    reg_covar : float
    """
    constant = constant_columns(np.sqrt(variances), mean)
    small = np.flatnonzero(~constant & (reg_covar > REG_COVAR_WARN_FRACTION * variances))
    if small.size:
        shown = ", ".join(str(j) for j in small[:5]) + (", ..." if small.size > 5 else "")
        warnings.warn(
            f"reg_covar={reg_covar:g} is more than {REG_COVAR_WARN_FRACTION:.0%} of the variance of column(s) "
            f"{shown} (smallest {variances[small].min():.3g}); it is added to every covariance diagonal, so "
            "their fitted variances are mostly reg_covar, not the data. Standardise X (e.g. "
            "sklearn.preprocessing.StandardScaler) or lower reg_covar.", UserWarning)


class FederatedGaussianMixture(FederatedEMMixin, DensityMixin, BaseEstimator):
    """Gaussian mixture fitted by federated EM on clients' compressed statistics.

    The public API follows :class:`sklearn.mixture.GaussianMixture`. Rows are
    grouped into clients by ``groups`` (or given as a list of per-client arrays);
    only (compressed) sufficient statistics leave a client, including during the
    default initialisation (SPEC §3).

    Parameters
    ----------
    n_components : int, default=1
    covariance_type : {"full", "tied", "diag", "spherical"}, default="full"
    tol : float, default=1e-3
        Convergence threshold on the mean log-likelihood gain per row. Exact EM stops when
        a round gains less (scikit-learn's rule); compressed or partial runs when the gain
        per unit step, its noise and the estimated gain of an EM step say the same
        (``docs/fedem.md``, "Convergence"). VR-FedEM with mini-batches tests it on its outer
        loops' full passes; mini-batch FedEM and online EM do not test it.
    reg_covar : float, default=1e-6
        Added to the covariance diagonals, as scikit-learn does.
    max_iter : int or "auto", default="auto"
        Maximum number of M-steps; round 0 performs the first, so at most
        ``max_iter - 1`` FedEM rounds run (``n_iter_`` counts M-steps). ``"auto"``: 100
        (scikit-learn's default) for exact EM and mini-batch FedEM, and 500 for a run
        whose steps are noisy (a lossy compressor either way, partial participation, VR-FedEM),
        which needs more rounds than exact EM; 10 for a private fit (each round is a release, so
        more rounds mean more noise in each); ``max_iter_`` holds the value used.
    n_init : int, default=1
        Number of initialisations; the best final log-likelihood is kept.
    init_params : {"kmeans", "random"}, default="kmeans"
        ``"kmeans"``: server-side weighted k-means on client k-means centroids
        (clusters under 5 rows are never sent); ``"random"``: means drawn around the
        global mean from global moments.
    weights_init, means_init, precisions_init : array-like, optional
        User initial parameters (scikit-learn shapes).
    warm_start : bool, default=False
        Start from the previous fit's parameters.
    algorithm : {"fedem", "vr-fedem", "online", "em"}, default="fedem"
        ``"em"`` is exact EM spread over clients (identity, everyone, γ = 1);
        ``"vr-fedem"`` is VR-FedEM (paper 003 Algorithm 2, full participation only);
        ``"online"`` is mini-batch online EM (Cappé & Moulines; needs ``batch_size``).
    compressor : str or Compressor, default="identity"
        E.g. ``"dither:s=4"``, ``"blockp:p=2"``, ``"randk:k=10"``.
    participation : float, int or Participation, default=1.0
        1.0: every client every round; p in (0, 1): Bernoulli(p); int k: k clients. Round 0
        and FedEM's first 10 rounds under a compressor coarser than 64 levels (its fine start's
        5 and the first 5 coarse ones) hear every client whatever the participation
        (``docs/fedem.md``, "The fine start").
    step_size : float, "auto", "theory" or callable, default="auto"
        γ_k. "auto" is 1 (exact EM) without compression, partial participation or
        mini-batches, and otherwise adapts each round to the noise the server measures in
        the clients' messages (``docs/fedem.md``, "Step size"); "theory" is paper 003's
        Theorem 1 rule (worst case, much smaller); a float is a constant step and a callable
        ``k -> γ_k`` a schedule (the safeguard may scale either down).
    alpha : float, optional
        Memory step; default ``1 / (1 + ω)``.
    v_init : {"mean-field", "zero"}, default="mean-field"
        Initial client memories (:class:`~fedemstats.algorithms.FedEM`); exact EM skips the
        mean-field pass, whose memories cancel there; a lossy compressor quantises round 0's
        transfers at 1024 levels (``docs/fedem.md``, round 0).
    batch_size : int, optional
        Rows per client per round (stochastic FedEM, VR-FedEM, online EM); ``None`` is
        exact local means (VR-FedEM: Theorem 3's ``ceil(k_in / (1 + ω)²)``). Stochastic FedEM
        runs ``max_iter`` rounds; VR-FedEM stops when its full passes say it has converged.
    k_in : int, optional
        VR-FedEM inner steps per outer loop; default ``ceil(sqrt(m))``.
    online_power, online_gamma0 : float, default=0.6, 1.0
        Online EM step ``γ_k = online_gamma0 · k^(-online_power)``, power in (1/2, 1].
    n_clients : int, default=10
        Number of iid clients when neither ``groups`` nor a list of arrays is given.
    client_weights : {"samples", "uniform"}, default="samples"
    precondition : bool, default=True
        Compress in the model's geometry (each component whitened by its current mean and
        covariance), so that quantisation noise is relative to each component's own scale
        (``docs/geometry.md``). False: raw statistic coordinates (paper 003 as stated).
    safeguard : bool, default=True
        In noisy runs (compression, partial participation, mini-batches): a trust region in
        the model's geometry that no step can leave (weights and whitened covariances shrink
        at most 4× per round at the noise of ``dither:s=4``, more freely as the noise falls)
        and a watchdog that undoes a step whose log-likelihood drop exceeds its noise
        (``docs/fedem.md``). Logged in ``history_``.
    downlink_compressor : "auto", None, str or Compressor, default="auto"
        How the server broadcasts the iterate: ``"auto"`` quantises its steps with the
        uplink's compressor in the model's geometry (identity uplink: float64); None sends
        Ŝ as float64 every round (``docs/fedem.md``, downlink). A private fit (``privacy``)
        keeps a lossless uplink and may quantise only this.
    track_h : bool, default=False
        Record the exact ||h(Ŝ_k)||² per round in ``history_`` (extra full pass).
    random_state : int, Generator or None
    verbose : int, default=0
        1: progress bar; 2: also log every ``verbose_interval`` rounds.
    verbose_interval : int, default=10
    privacy : DPConfig, optional
        Differential privacy of the fit (``docs/privacy.md``): rows clipped in the public
        geometry, Gaussian noise calibrated by ``dp_accounting``; adds ``history_["epsilon"]``
        and ``privacy_spent_``. ``None`` (default) changes nothing.

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,)
    means_ : ndarray of shape (n_components, n_features)
    covariances_, precisions_, precisions_cholesky_ : ndarray
        Shapes as in scikit-learn for the covariance type.
    converged_ : bool
    n_iter_ : int
    max_iter_ : int
        The M-steps this fit was allowed (``max_iter``, resolved when "auto").
    lower_bound_ : float
        Mean log-likelihood at the last round (HT estimate under partial participation).
    history_ : pandas.DataFrame
        Per round: ``round, loglik, loglik_se, gain, converged, step_size, step_fraction,
        trust_ratio, noise_ratio, rejected, uplink_bits, downlink_bits, broadcast_bits,
        cumulative_bits, n_active, n_cond_exp, h_norm2`` (VR-FedEM adds ``outer``; a private
        fit ``epsilon``); ``docs/fedem.md``, "History columns".
    ledger_ : BitLedger
    n_features_in_ : int
    """

    _parameter_constraints: dict = {
        **FederatedEMMixin._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "covariance_type": [StrOptions(set(COVARIANCE_TYPES))],
        "reg_covar": [Interval(Real, 0.0, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "init_params": [StrOptions(set(INIT_METHODS))],
        "weights_init": ["array-like", None],
        "means_init": ["array-like", None],
        "precisions_init": ["array-like", None],
        "warm_start": ["boolean"],
    }

    def __init__(self, n_components=1, *, covariance_type="full", tol=1e-3, reg_covar=1e-6,
                 max_iter="auto", n_init=1, init_params="kmeans", weights_init=None, means_init=None,
                 precisions_init=None, warm_start=False, algorithm="fedem", compressor="identity",
                 participation=1.0, step_size="auto", alpha=None, v_init="mean-field",
                 batch_size=None, k_in=None, online_power=DEFAULT_ONLINE_POWER, online_gamma0=1.0,
                 n_clients=10, client_weights="samples", track_h=False,
                 precondition=True, safeguard=True, downlink_compressor="auto",
                 random_state=None, verbose=0,
                 verbose_interval=10, privacy=None):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.tol = tol
        self.reg_covar = reg_covar
        self.max_iter = max_iter
        self.n_init = n_init
        self.init_params = init_params
        self.weights_init = weights_init
        self.means_init = means_init
        self.precisions_init = precisions_init
        self.warm_start = warm_start
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

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, groups=None):
        """Fit by federated EM.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of arrays
            All rows (with ``groups``), or one array of shape (m_i, n_features) per client.
        y : ignored
        groups : array-like of shape (n_samples,), optional
            Client label of each row.

        Returns
        -------
        self : FederatedGaussianMixture
            Fitted.
        """
        self._check_federated_params()
        warm = self.warm_start and hasattr(self, "means_")
        fed, _, _ = self._federation(X, groups, reset=not warm, min_rows=2)
        if fed.n_rows < self.n_components:
            raise ValueError(f"Expected n_samples >= n_components but got n_components = "
                             f"{self.n_components}, n_samples = {fed.n_rows}.")
        # one pass of pooled moments serves the reg_covar check and the model's public centring
        mean, variances = global_mean_and_variances(fed)
        warn_if_reg_covar_dominates(mean, variances, self.reg_covar)
        rng = check_rng(self.random_state)
        model = GaussianMixtureModel(self.n_components, fed.n_features, self.covariance_type, self.reg_covar,
                                     **GaussianMixtureModel.centring_from_moments(mean, variances))
        best = self._fit_best_of(
            model, fed, 1 if warm else self.n_init,
            lambda: self._theta_previous() if warm else self._initial_theta(fed, model, rng), rng)
        self._set_params(best.theta)
        return self

    def fit_predict(self, X, y=None, *, groups=None):
        """Fit, then return the component label of each row, shape (n_samples,)."""
        X_flat = np.vstack(X) if isinstance(X, (list, tuple)) and np.ndim(X[0]) == 2 else X
        return self.fit(X, y, groups=groups).predict(X_flat)

    def _initial_theta(self, fed, model, rng):
        user = (self.weights_init, self.means_init, self.precisions_init)
        if all(u is not None for u in user):
            return make_params(self.weights_init, self.means_init, precisions=self.precisions_init,
                               covariance_type=self.covariance_type)
        try:
            theta = model.init_theta(fed, rng=rng, method=self.init_params)
        except TooFewSummariesError:
            warnings.warn(f"clients are too small to send k-means centroids of >= {SUMMARY_MIN_ROWS} rows; "
                          "falling back to init_params='random' (global moments).", UserWarning)
            theta = model.init_theta(fed, rng=rng, method="random")
        if any(u is not None for u in user):
            theta = make_params(
                theta.weights if self.weights_init is None else self.weights_init,
                theta.means if self.means_init is None else self.means_init,
                covariances=theta.covariances if self.precisions_init is None else None,
                precisions=self.precisions_init, covariance_type=self.covariance_type)
        return theta

    def _theta_previous(self):
        return make_params(self.weights_, self.means_, covariances=self.covariances_,
                           covariance_type=self.covariance_type)

    def _set_params(self, theta):
        self.theta_ = theta
        self.weights_ = theta.weights
        self.means_ = theta.means
        self.covariances_ = theta.covariances
        self.precisions_cholesky_ = theta.precisions_cholesky
        self.precisions_ = theta.precisions

    # ------------------------------------------------------------------ inference
    def _validated(self, X):
        check_is_fitted(self, "theta_")
        return validate_data(self, X, reset=False, dtype=np.float64)

    def score_samples(self, X):
        """Log-density of each row, shape (n_samples,)."""
        log_norm, _ = estimate_log_prob_resp(self._validated(X), self.theta_)
        return log_norm

    def score(self, X, y=None):
        """Mean log-likelihood of ``X`` (float)."""
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X):
        """Responsibilities, shape (n_samples, n_components)."""
        _, log_resp = estimate_log_prob_resp(self._validated(X), self.theta_)
        return np.exp(log_resp)

    def predict(self, X):
        """Most likely component of each row, shape (n_samples,)."""
        _, log_resp = estimate_log_prob_resp(self._validated(X), self.theta_)
        return log_resp.argmax(axis=1)

    def sample(self, n_samples=1):
        """Draw ``(X (n_samples, n_features), labels (n_samples,))`` from the fitted mixture."""
        check_is_fitted(self, "theta_")
        check_int(n_samples, "n_samples")
        return self._model().sample(self.theta_, n_samples, check_rng(self.random_state))

    def _model(self):
        return GaussianMixtureModel(self.n_components, self.n_features_in_, self.covariance_type, self.reg_covar)

    def _n_parameters(self):
        return self._model().n_parameters(self.theta_)

    def bic(self, X):
        """Bayesian information criterion on ``X`` (lower is better)."""
        log_norm, _ = estimate_log_prob_resp(self._validated(X), self.theta_)
        return -2 * log_norm.sum() + self._n_parameters() * np.log(log_norm.shape[0])

    def aic(self, X):
        """Akaike information criterion on ``X`` (lower is better)."""
        log_norm, _ = estimate_log_prob_resp(self._validated(X), self.theta_)
        return -2 * log_norm.sum() + 2 * self._n_parameters()

