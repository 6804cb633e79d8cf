"""Issue 13, failure class 2: training that overflows raises a ValueError naming the data scale, never NaN."""
import warnings

import numpy as np
import pytest

from fedemstats.estimators.neural import METHODS, FederatedMLPClassifier, _check_fitted_outputs
from fedemstats.neural import (MLP, GaussianPrior, HardEMResult, LaplacePrior, MixturePrior, TrainingDivergedError,
                               iid_clients, run_feddrop, run_fedpm, run_fedsparse, run_hard_em)
from fedemstats.ledger import BitLedger

LAYERS = (64, 8, 10)
# The overflow warnings numpy emits on the way to the error are expected here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
# Learning rate that makes one SGD step overflow standardised digits.
HUGE_LR = 1e200
# Scale of the issue's report: digits times 1e16 returned NaN parameters.
ISSUE_SCALE = 1e16
# Feature values whose products with FedPM's fixed weights (+-sqrt(2) for one input) overflow float64.
FEDPM_OVERFLOW_FEATURE = 1e308
# Finite features whose products with any non-trivial weights overflow float64.
PREDICT_OVERFLOW_FEATURE = np.finfo(np.float64).max


@pytest.fixture(scope="module")
def clients(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    return iid_clients(Xtr[:300], ytr[:300], 4, random_state=0)


@pytest.mark.parametrize("method", METHODS)
def test_issue_scale_raises_or_stays_finite(digits_standardised, method):
    Xtr, _, ytr, _ = digits_standardised
    X = Xtr * ISSUE_SCALE
    clf = FederatedMLPClassifier(method=method, max_iter=5, random_state=0)
    try:
        clf.fit(X, ytr)
    except TrainingDivergedError as exc:
        assert "max |X| = " in str(exc) and "standardise X" in str(exc)
        return
    assert method == "fedpm"  # fixed weights, Adam on the scores: nothing to overflow at 1e16
    assert np.all(np.isfinite(clf.params_))
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_issue_case_fedavg_names_round_client_scale_and_fix(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    with pytest.raises(ValueError, match=r"client \d+ diverged in round 1.*max \|X\| = .*e\+17.*standardise X"):
        FederatedMLPClassifier(max_iter=5, random_state=0).fit(Xtr * ISSUE_SCALE, ytr)


@pytest.mark.parametrize("run", [
    lambda m, c: run_hard_em(m, c, GaussianPrior(0.0), lr=HUGE_LR, rounds=2, random_state=0),
    lambda m, c: run_hard_em(m, c, LaplacePrior(0.0), lr=HUGE_LR, rounds=2, random_state=0),
    lambda m, c: run_hard_em(m, c, MixturePrior(2, 0.01), lr=HUGE_LR, rounds=2, random_state=0),
    lambda m, c: run_hard_em(m, c, lr=HUGE_LR, rounds=2, wire_dtype="float64", random_state=0),
    lambda m, c: run_fedsparse(m, c, lr=HUGE_LR, rounds=2, random_state=0),
    lambda m, c: run_feddrop(m, c, lr=HUGE_LR, rounds=2, random_state=0),
], ids=["fedavg", "median", "mixture", "fedavg-float64-wire", "fedsparse", "feddrop"])
def test_every_runner_refuses_a_diverged_client(clients, run):
    with pytest.raises(TrainingDivergedError, match=r"client \d+ diverged in round \d.*lower the learning rate"):
        run(MLP(LAYERS), clients)


def test_fedpm_refuses_scores_of_an_overflowing_client():
    # NaN scores would sample an all-zero mask that looks like a valid upload.
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0.5, 1.0, (40, 1)) * FEDPM_OVERFLOW_FEATURE, rng.integers(0, 2, 40)
    with pytest.raises(TrainingDivergedError, match=r"diverged in round 1.*max \|X\| = .*e\+307"):
        run_fedpm(MLP((1, 8, 2)), [(X[:20], y[:20]), (X[20:], y[20:])], rounds=2, random_state=0)


def test_non_finite_input_is_refused_by_name(clients):
    bad = [(X.copy(), y) for X, y in clients]
    bad[1][0][0, 0] = np.inf
    with pytest.raises(ValueError, match="client 1: X contains inf or NaN"):
        run_fedpm(MLP(LAYERS), bad, rounds=1, random_state=0)


def test_float32_wire_overflow_is_refused_before_the_server(clients):
    # Local parameters ~1e39 are finite in float64 but would reach the server as inf in float32.
    big = [(X * ISSUE_SCALE, y) for X, y in clients]
    with pytest.raises(TrainingDivergedError, match="beyond the float32 wire range"):
        run_hard_em(MLP(LAYERS), big, lr=0.1, rounds=3, wire_dtype="float32", random_state=0)
    assert np.all(np.isfinite(run_hard_em(MLP(LAYERS), big, lr=0.1, rounds=3, wire_dtype="float64",
                                          random_state=0).params))


@pytest.mark.parametrize("prior, hint", [(GaussianPrior(0.0), r"\.$"),
                                         (GaussianPrior(0.0, server_optimizer="sgd", server_lr=1.0), "server_lr")])
def test_non_finite_server_state_is_an_error(clients, prior, hint):
    # Finite uploads of 1e308 sum to inf in the server's weighted mean.
    with pytest.raises(TrainingDivergedError, match=r"server update diverged in round 1.*" + hint):
        run_hard_em(MLP(LAYERS), clients, prior, rounds=2, wire_dtype="float64", random_state=0,
                    uplink_hook=lambda k, phi: np.full_like(phi, 1e308))


def test_mixture_seeding_survives_large_finite_parameters():
    # k-means++ squared distances of parameters ~1e200 overflowed to inf and NaN probabilities.
    rng = np.random.default_rng(0)
    phis = rng.standard_normal((6, 20)) * 1e200
    state = MixturePrior(3, 0.01).init_state(np.zeros(20))
    new = MixturePrior(3, 0.01).m_step(state, phis, np.ones(6), np.ones(6), np.zeros(6, dtype=int), rng=rng)
    assert np.all(np.isfinite(new)) and len({tuple(row) for row in new}) == 3


def test_predict_on_overflowing_features_raises(digits_standardised):
    Xtr, Xte, ytr, _ = digits_standardised
    clf = FederatedMLPClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=0).fit(Xtr, ytr)
    with pytest.raises(ValueError, match=r"outputs overflow.*max \|X\| = 1.8e\+308"):
        clf.predict_proba(np.full_like(Xte, PREDICT_OVERFLOW_FEATURE))


def test_fit_refuses_finite_parameters_whose_outputs_overflow(digits_standardised):
    Xtr, _, _, _ = digits_standardised
    model = MLP(LAYERS)
    result = HardEMResult(model=model, history={}, ledger=BitLedger(), state=np.full(model.n_params, 1e300),
                          prior=GaussianPrior(0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(TrainingDivergedError, match="outputs overflow .* on the training rows"):
            _check_fitted_outputs(result, Xtr)


@pytest.mark.parametrize("labels, name", [
    (lambda n: np.array([1, "a"] * (n // 2), dtype=object), "y"),
    (lambda n: np.array([None, 1] * (n // 2), dtype=object), "y"),
])
def test_mixed_type_labels_name_y(digits_standardised, labels, name):
    Xtr, _, _, _ = digits_standardised
    X = Xtr[:40]
    with pytest.raises(ValueError, match=rf"^{name} mixes labels of types"):
        FederatedMLPClassifier(max_iter=1).fit(X, labels(len(X)))


@pytest.mark.parametrize("groups", [[1, "a"], [None, 2]])
def test_mixed_type_groups_name_groups(digits_standardised, groups):
    Xtr, _, ytr, _ = digits_standardised
    g = np.array(groups * 20, dtype=object)
    with pytest.raises(ValueError, match=r"^groups mixes labels of types"):
        FederatedMLPClassifier(max_iter=1).fit(Xtr[:40], ytr[:40], groups=g)
