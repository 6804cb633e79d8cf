"""Scikit-learn classifier trained federatedly by hard-EM (SPEC §8).

``FederatedMLPClassifier(method="fedavg")`` is FedAvg (McMahan et al.,
paper 004); the other methods change the prior of the hierarchical model
(paper 001): ``fedprox`` (Gaussian, mu > 0), ``median`` (Laplace),
``mixture`` (K Gaussians: an ensemble), ``fedsparse`` (spike-and-slab) and
``fedpm`` (probabilistic masks, paper 002).

Every method returns a :class:`~fedemstats.neural.result.NeuralResult`; the
estimator reads only its ``params``, ``history``, ``ledger`` and
``predict_proba``.
"""
from __future__ import annotations

import inspect
import logging
import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_int, check_positive, check_rng
from ..neural.fedpm import run_fedpm
from ..neural.fedsparse import run_fedsparse
from ..neural.hard_em import run_hard_em
from ..neural.mlp import MLP
from ..neural.partition import iid_clients, split_clients, unique_labels
from ..neural.priors import GaussianPrior, LaplacePrior, MixturePrior
from ..neural.rounds import (TrainingDivergedError, check_batch_size, check_wire_dtype, divergence_message,
                             feature_scale, make_client_sampler)

__all__ = ["FederatedMLPClassifier"]

logger = logging.getLogger("fedemstats")

#: FedProx's proximal strength when ``mu`` is left to the method default
#: (Li et al. 2018 tune mu in {0.001, 0.01, 0.1, 1}; 0.01 is their usual pick).
FEDPROX_DEFAULT_MU = 0.01
#: The methods that use each method-specific hyper-parameter (any other method warns when it is set).
PARAMETER_METHODS = {"mu": ("fedavg", "fedprox", "median", "mixture"), "n_components": ("mixture",),
                     "server_optimizer": ("fedavg", "fedprox"), "server_lr": ("fedavg", "fedprox")}
#: Mixture prior strength when ``mu`` is left to the method default; see MixturePrior.
MIXTURE_DEFAULT_MU = 0.01
_HARD_EM_METHODS = ("fedavg", "fedprox", "median", "mixture")
METHODS = (*_HARD_EM_METHODS, "fedsparse", "fedpm")
SERVER_OPTIMIZERS = (None, "sgd", "adam", "adamax")


class FederatedMLPClassifier(ClassifierMixin, BaseEstimator):
    """Multilayer perceptron classifier trained by federated hard-EM.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Hidden layer widths (ReLU), as in scikit-learn's MLPClassifier.
    layer_sizes : tuple of int or None, default=None
        Full sizes ``(n_features, *hidden, n_classes)``; overrides
        ``hidden_layer_sizes`` and must match the data.
    method : {"fedavg", "fedprox", "median", "mixture", "fedsparse", "fedpm"}
    n_clients : int, default=10
        Number of iid clients when ``groups`` is not given (capped at n_samples).
    client_fraction : float in (0, 1], default=1.0
        C, the fraction of clients per round (at least one).
    local_epochs : int >= 1, default=1
        E.
    batch_size : int >= 1, None or inf, default=32
        B; None or ``float("inf")`` = full local batch (FedSGD with E = 1).
    learning_rate : float > 0, default=0.1
        Local SGD rate eta.
    max_iter : int >= 1, default=50
        Communication rounds.
    mu : float >= 0 or None, default=None
        Prior strength lambda (FedProx's mu). None: 0 for fedavg/median,
        ``FEDPROX_DEFAULT_MU`` for fedprox, ``MIXTURE_DEFAULT_MU`` for mixture.
    n_components : int, default=2
        Mixture components (``method="mixture"``).
    server_optimizer : None, "sgd", "adam" or "adamax", default=None
        FedOpt M-step on the pseudo-gradient (fedavg/fedprox); None = weighted mean.
    server_lr : float > 0, default=1.0
    wire_dtype : {"float32", "float64"}, default="float32"
        Precision of parameters on the wire (bit ledger and rounding).
    random_state : None, int, Generator or RandomState
    verbose : bool
        Progress bar and per-round INFO log lines.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    layer_sizes_ : tuple of int
    params_ : ndarray of shape (n_params,) or (n_components, n_params)
        Final server model as flat MLP parameters (one row per mixture
        component; for ``fedpm`` the fixed weights times the stored mask).
    history_ : pandas.DataFrame
        One row per round: ``round, n_active, uplink_bits, downlink_bits,
        local_loss, train_loss, test_accuracy, seconds``.
    n_iter_ : int
    result_ : NeuralResult
        The training run: ``HardEMResult`` (model, prior, state), ``FedSparseResult``
        or ``FedPMResult``.
    ledger_ : BitLedger
    assignments_ : dict
        Mixture component each client last started from (hard-EM methods; empty otherwise).

    Notes
    -----
    **Scaling.** Features are not standardised internally, as in
    scikit-learn's ``MLPClassifier``: ``params_`` is the network on the features
    as given, and FedAvg stays the algorithm of McMahan et al. Standardise first
    (a ``Pipeline`` with ``StandardScaler``; federated, from the clients'
    per-feature sums). When local training overflows (e.g. features of scale
    1e16), ``fit`` raises :class:`~fedemstats.neural.rounds.TrainingDivergedError`
    (a ``ValueError``) naming the round, the client, the feature scale and the fix;
    it never returns non-finite parameters. ``predict_proba`` raises a
    ``ValueError`` instead of returning NaN when ``X`` makes the outputs overflow.

    **Determinism.** Prediction draws no random number, and the same
    ``random_state`` gives the same model. For ``method="fedpm"`` the model is
    one sub-network, fixed at the end of ``fit``: the most probable one
    (weights with keep probability theta > 1/2), which scored about 2 points
    above a sampled mask on digits (docs/neural_sparse.md).
    """

    def __init__(self, hidden_layer_sizes=(100,), layer_sizes=None, method="fedavg", n_clients=10,
                 client_fraction=1.0, local_epochs=1, batch_size=32, learning_rate=0.1, max_iter=50,
                 mu=None, n_components=2, server_optimizer=None, server_lr=1.0, wire_dtype="float32",
                 random_state=None, verbose=False):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.layer_sizes = layer_sizes
        self.method = method
        self.n_clients = n_clients
        self.client_fraction = client_fraction
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.mu = mu
        self.n_components = n_components
        self.server_optimizer = server_optimizer
        self.server_lr = server_lr
        self.wire_dtype = wire_dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    def _check_params(self):
        """Every hyper-parameter, whatever the method, so a bad value never passes silently."""
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}; got {self.method!r}.")
        make_client_sampler(self.client_fraction)
        check_int(self.local_epochs, "local_epochs E")
        check_batch_size(self.batch_size)
        check_positive(self.learning_rate, "learning_rate")
        check_int(self.max_iter, "max_iter")
        check_int(self.n_clients, "n_clients")
        if self.mu is not None:
            # the mixture's responsibilities need a positive precision (MixturePrior)
            check_positive(self.mu, "mu" + (" (method='mixture')" if self.method == "mixture" else ""),
                           strict=self.method == "mixture")
        check_int(self.n_components, "n_components")
        if not any(self.server_optimizer is opt or self.server_optimizer == opt for opt in SERVER_OPTIMIZERS):
            raise ValueError(f"server_optimizer must be one of {list(SERVER_OPTIMIZERS)}; "
                             f"got {self.server_optimizer!r}.")
        check_positive(self.server_lr, "server_lr")
        check_wire_dtype(self.wire_dtype)
        if self.layer_sizes is None:
            hidden = self.hidden_layer_sizes
            for size in (hidden,) if np.ndim(hidden) == 0 else hidden:
                check_int(size, "hidden_layer_sizes entry")

    def _warn_unused(self, n_clients):
        """A set hyper-parameter the method does not use is a warning, not silently ignored."""
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()}
        unused = [name for name, methods in PARAMETER_METHODS.items()
                  if self.method not in methods and getattr(self, name) != defaults[name]]
        if unused:
            used_by = "; ".join(f"{name}: {', '.join(PARAMETER_METHODS[name])}" for name in unused)
            warnings.warn(f"parameter(s) {unused} have no effect with method={self.method!r}; leave them at "
                          f"their defaults (used by {used_by}).", UserWarning, stacklevel=3)
        if self.method == "mixture" and self.n_components > n_clients:
            warnings.warn(f"n_components={self.n_components} is more than the {n_clients} clients: at most "
                          f"{n_clients} components are ever chosen, and predict_proba still averages all of "
                          "them; lower n_components.", UserWarning, stacklevel=3)

    def _layer_sizes(self, n_features, n_classes):
        if self.layer_sizes is not None:
            sizes = tuple(self.layer_sizes)
            if len(sizes) < 2 or sizes[0] != n_features or sizes[-1] != n_classes:
                raise ValueError(
                    f"layer_sizes={sizes!r} must start with n_features={n_features} and end with "
                    f"n_classes={n_classes}; or pass hidden_layer_sizes only.")
            return sizes
        hidden = self.hidden_layer_sizes
        hidden = (hidden,) if np.ndim(hidden) == 0 else tuple(hidden)
        return (n_features, *hidden, n_classes)

    def _prior(self):
        mu = self.mu
        if self.method == "fedprox":
            return GaussianPrior(FEDPROX_DEFAULT_MU if mu is None else mu, self.server_optimizer, self.server_lr)
        if self.method == "median":
            return LaplacePrior(0.0 if mu is None else mu)
        if self.method == "mixture":
            return MixturePrior(self.n_components, MIXTURE_DEFAULT_MU if mu is None else mu)
        return GaussianPrior(0.0 if mu is None else mu, self.server_optimizer, self.server_lr)

    def _clients(self, X, y, groups, rng):
        if groups is not None:
            groups = np.asarray(groups)
            if groups.shape != (X.shape[0],):
                raise ValueError(f"groups must have shape ({X.shape[0]},); got {groups.shape}.")
            return split_clients(X, y, groups)  # one client per distinct group label
        n_clients = min(check_int(self.n_clients, "n_clients"), X.shape[0])
        if n_clients < self.n_clients:
            logger.info("only %d samples: using %d clients instead of %d.", X.shape[0], n_clients, self.n_clients)
        return iid_clients(X, y, n_clients, random_state=rng)

    # ------------------------------------------------------------------ fit / predict
    def fit(self, X, y, groups=None):
        """Train on ``X`` of shape (n_samples, n_features), labels ``y`` (n_samples,).

        ``groups`` (n_samples,) names the client of each row; without it the
        rows are split into ``n_clients`` iid clients.

        Raises
        ------
        ValueError
            Bad hyper-parameters or data (the message names them), and
            :class:`~fedemstats.neural.rounds.TrainingDivergedError` when
            training overflows instead of returning non-finite parameters.
        """
        self._check_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        self.classes_, y_idx = unique_labels(y, "y")  # before sklearn's check: names mixed label types
        if y.dtype == object and not all(isinstance(v, str) for v in self.classes_):
            # scikit-learn's wording (its estimator checks expect it), plus what is wrong and the fix
            kinds = sorted({type(v).__name__ for v in self.classes_})
            raise ValueError(f"Unknown label type: y has dtype object holding {kinds}; "
                             f"pass numeric labels as a numeric array, or strings.")
        check_classification_targets(y)
        if self.classes_.size < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data; "
                             f"got 1 class ({self.classes_[0]!r}).")
        self.layer_sizes_ = self._layer_sizes(X.shape[1], self.classes_.size)
        model = MLP(self.layer_sizes_)
        rng = check_rng(self.random_state)
        clients = self._clients(X, y_idx, groups, rng)
        self._warn_unused(len(clients))
        settings = dict(rounds=self.max_iter, client_fraction=self.client_fraction,
                        local_epochs=self.local_epochs, batch_size=self.batch_size, lr=self.learning_rate,
                        wire_dtype=self.wire_dtype, random_state=rng, verbose=self.verbose)
        self.assignments_ = {}
        if self.method == "fedsparse":
            result = run_fedsparse(model, clients, **settings)
        elif self.method == "fedpm":
            # FedPM uploads binary masks and never sends float parameters: no wire dtype
            settings.pop("wire_dtype")
            result = run_fedpm(model, clients, **settings)
        else:
            self.prior_ = self._prior()
            result = run_hard_em(model, clients, self.prior_, **settings)
            self.assignments_ = dict(result.assignments)
        _check_fitted_outputs(result, X)
        self.model_ = model
        self.result_ = result
        self.params_ = result.params
        self.history_ = pd.DataFrame(result.history)
        self.n_iter_ = int(len(self.history_))
        self.ledger_ = result.ledger
        return self

    def predict_proba(self, X):
        """Class probabilities of shape (n_samples, n_classes), columns in ``classes_`` order.

        Deterministic (no random draw). The mixture averages its components'
        probabilities (an ensemble). Raises ``ValueError`` if ``X`` makes the
        network's outputs overflow (features far larger than in training).
        """
        check_is_fitted(self, "params_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.result_.predict_proba(X)

    def predict(self, X):
        """Most probable class of each row, shape (n_samples,)."""
        check_is_fitted(self, "params_")
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def _check_fitted_outputs(result, X):
    """The fitted model must give finite probabilities on its own training rows ``X`` (n_samples, n_features).

    Finite parameters can still overflow on large features (e.g. 1e16 times
    large weights); that is a diverged fit, not a model to return.
    """
    try:
        result.predict_proba(X)
    except ValueError:
        raise TrainingDivergedError(divergence_message(
            "training diverged: the fitted network's outputs overflow to inf or NaN on the training rows",
            feature_scale(X))) from None
