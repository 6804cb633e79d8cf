"""Every hyper-parameter is declared, clones, and reaches the algorithm it configures (issue 10)."""
import inspect

import numpy as np
import pytest
from sklearn.base import clone

from fedemstats.algorithms import FedEM, VRFedEM
from fedemstats.estimators import FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer
from fedemstats.federation import Federation
from fedemstats.models import GaussianMixtureModel
from fedemstats.privacy import DPConfig

#: a valid non-default value for each federated hyper-parameter the estimators share
FEDERATED = {"algorithm": "vr-fedem", "compressor": "dither:s=4", "participation": 0.5, "step_size": 0.3,
             "alpha": 0.2, "v_init": "zero", "batch_size": 7, "k_in": 3, "online_power": 0.8,
             "online_gamma0": 0.5, "max_iter": 17, "tol": 1e-2, "n_clients": 4, "client_weights": "uniform",
             "track_h": True, "precondition": False, "safeguard": False, "downlink_compressor": "dither:s=8",
             "random_state": 123, "verbose": 1, "verbose_interval": 3,
             "privacy": DPConfig(epsilon=2.0, clip=2.5, level="client", mode="distributed")}

#: estimator class -> a valid non-default value for every one of its own hyper-parameters
NON_DEFAULT = {
    FederatedGaussianMixture: {"n_components": 3, "covariance_type": "diag", "reg_covar": 1e-3, "n_init": 2,
                               "init_params": "random", "weights_init": np.full(3, 1 / 3),
                               "means_init": np.arange(6.0).reshape(3, 2), "precisions_init": np.ones((3, 2)),
                               "warm_start": True},
    FederatedFactorAnalysis: {"n_components": 2, "copy": False, "noise_variance_init": np.ones(3),
                              "rotation": "varimax"},
    FederatedImputer: {"model": "gmm", "n_components": 2, "covariance_type": "diag", "reg_covar": 1e-3,
                       "missing_values": -1, "add_indicator": True, "sample_posterior": True, "n_init": 2,
                       "init_params": "random"},
}


def _same(a, b):
    return np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


@pytest.mark.parametrize("cls", list(NON_DEFAULT), ids=lambda c: c.__name__)
def test_clone_round_trips_every_hyper_parameter_at_a_non_default_value(cls):
    values = {**FEDERATED, **NON_DEFAULT[cls]}
    defaults = cls().get_params()
    assert set(values) == set(defaults), "a hyper-parameter without a test value (or a stale one)"
    assert set(cls._parameter_constraints) == set(defaults)
    for name, value in values.items():
        assert not _same(value, defaults[name]), name
    params = clone(cls(**values)).get_params()
    for name, value in values.items():
        assert _same(params[name], value), name


def test_factor_analysis_vr_fedem_runs_with_the_given_k_in():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 2)) @ rng.normal(size=(2, 4)) + rng.normal(scale=0.3, size=(240, 4))
    est = FederatedFactorAnalysis(2, algorithm="vr-fedem", k_in=3, step_size=0.5, max_iter=8, n_clients=4,
                                  random_state=0).fit(X)
    # 7 rounds after round 0, k_in = 3 inner steps per outer loop
    assert est.history_["outer"].iloc[1:].tolist() == [1, 1, 1, 2, 2, 2, 3]


def test_imputer_online_em_runs_with_the_given_power_and_batch():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    X[rng.random(X.shape) < 0.1] = np.nan
    X[np.isnan(X).all(axis=1), 0] = 0.0
    est = FederatedImputer(algorithm="online", batch_size=6, online_power=0.8, max_iter=6, n_clients=5,
                           random_state=0).fit(X)
    rounds = est.history_.iloc[1:]
    np.testing.assert_allclose(rounds["step_size"], np.arange(1, 6) ** -0.8)
    assert (rounds["n_cond_exp"] == 5 * 6).all()  # b = 6 rows from each of the 5 clients


def _model():
    return GaussianMixtureModel(2, 2)


@pytest.mark.parametrize("algo", [
    FedEM(_model(), compressor="dither:s=4", participation=0.5, step_size=0.3, alpha=0.2, v_init="zero",
          batch_size=5, track_h=True),
    VRFedEM(_model(), compressor="blockp:p=2", step_size=0.4, alpha=0.1, batch_size="full", k_in=6, track_h=True),
], ids=["FedEM", "VRFedEM"])
def test_algorithms_expose_their_constructor_settings(algo):
    params = algo.get_params()
    names = [p for p in inspect.signature(type(algo).__init__).parameters if p != "self"]
    assert list(params) == names
    again = type(algo)(**params)
    assert again.get_params() == params
    assert again.omega() == algo.omega() and again.resolved_alpha() == algo.resolved_alpha()
    fed = Federation(np.random.default_rng(0).normal(size=(40, 2)), [0, 20, 40])
    assert again.schedule(fed.n_clients)(3) == algo.schedule(fed.n_clients)(3)


MLP_NON_DEFAULT = {"batch_size": 8, "client_fraction": 0.5, "hidden_layer_sizes": (7, 5), "layer_sizes": (4, 7, 3),
                   "learning_rate": 0.02, "local_epochs": 3, "max_iter": 7, "method": "mixture", "mu": 0.5,
                   "n_clients": 4, "n_components": 3, "random_state": 11, "server_lr": 0.3,
                   "server_optimizer": "adam", "verbose": True, "wire_dtype": "float64"}


def test_mlp_clone_round_trips_every_hyper_parameter_at_a_non_default_value():
    from fedemstats.estimators import FederatedMLPClassifier

    defaults = FederatedMLPClassifier().get_params()
    assert set(MLP_NON_DEFAULT) == set(defaults), "a hyper-parameter without a test value (or a stale one)"
    for name, value in MLP_NON_DEFAULT.items():
        assert not _same(value, defaults[name]), name
    params = clone(FederatedMLPClassifier(**MLP_NON_DEFAULT)).get_params()
    for name, value in MLP_NON_DEFAULT.items():
        assert _same(params[name], value), name


@pytest.mark.parametrize("cls, exact", [(FederatedGaussianMixture, 100), (FederatedImputer, 100),
                                        (FederatedFactorAnalysis, 1000)], ids=lambda c: getattr(c, "__name__", c))
def test_max_iter_auto_gives_noisy_runs_more_m_steps(cls, exact, monkeypatch):
    """``max_iter="auto"``: scikit-learn's default for exact EM, NOISY_MAX_ITER_FACTOR times it for a
    run with noisy steps that tests convergence (VR-FedEM too, on its full passes), plus under partial
    participation the rounds to hear every client (its convergence test waits for them); mini-batch
    FedEM (no test) and an int keep theirs."""
    from fedemstats.algorithms.convergence import coverage_rounds
    from fedemstats.estimators._base import NOISY_MAX_ITER_FACTOR
    X = np.random.default_rng(0).normal(size=(120, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0, 0, 1]])
    assert cls().get_params()["max_iter"] == "auto"
    assert cls._exact_max_iter == exact
    # the fits below run with a smaller base: the runs that go to their budget (tol = 0, mini-batch)
    # then take 30 rounds, not factor analysis's 1000 (74 s of CI); the resolution rule is the same
    base = 30
    monkeypatch.setattr(cls, "_exact_max_iter", base)
    cases = [({}, base), ({"compressor": "dither:s=4"}, NOISY_MAX_ITER_FACTOR * base),
             ({"participation": 0.5}, NOISY_MAX_ITER_FACTOR * base + coverage_rounds(np.full(4, 0.5))),
             ({"compressor": "dither:s=4", "tol": 0.0}, base),  # tol = 0: a fixed number of rounds
             ({"algorithm": "online", "batch_size": 10}, base),
             ({"compressor": "dither:s=4", "batch_size": 10}, base),
             ({"compressor": "dither:s=4", "algorithm": "vr-fedem", "batch_size": 10}, NOISY_MAX_ITER_FACTOR * base),
             ({"compressor": "dither:s=4", "max_iter": 4}, 4)]
    for kw, expected in cases:
        est = cls(n_components=2, n_clients=4, random_state=0, **kw).fit(X)
        assert est.max_iter_ == expected, kw
        assert est.n_iter_ <= expected
    from fedemstats.estimators._base import PRIVATE_MAX_ITER
    private = cls(n_components=2, n_clients=4, random_state=0, privacy=FEDERATED["privacy"]).fit(X)
    assert private.max_iter_ == PRIVATE_MAX_ITER == 10 and private.n_iter_ == 10  # each round is a release


@pytest.mark.parametrize("bad", ["fast", 0, -3, 2.5, None])
def test_max_iter_must_be_a_positive_int_or_auto(bad):
    from sklearn.utils._param_validation import InvalidParameterError
    with pytest.raises(InvalidParameterError, match="max_iter"):
        FederatedGaussianMixture(2, max_iter=bad).fit(np.random.default_rng(0).normal(size=(40, 2)))
