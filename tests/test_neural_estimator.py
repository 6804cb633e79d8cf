"""FederatedMLPClassifier: scikit-learn API and input validation (SPEC §7-8)."""
import numpy as np
import pandas as pd
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedemstats.estimators.neural import METHODS, FederatedMLPClassifier
from fedemstats.neural import NeuralResult


# scikit-learn itself skips check_array_api_input unless SCIPY_ARRAY_API is set (3 skips);
# the estimator is NumPy-only, so nothing of ours is skipped.
@parametrize_with_checks([
    FederatedMLPClassifier(),
    FederatedMLPClassifier(method="median", client_fraction=0.5),
    FederatedMLPClassifier(method="mixture", hidden_layer_sizes=(20,)),
])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_fedavg_on_digits_with_history(digits_standardised):
    Xtr, Xte, ytr, yte = digits_standardised
    clf = FederatedMLPClassifier(hidden_layer_sizes=(32,), local_epochs=5, max_iter=20, random_state=0).fit(Xtr, ytr)
    assert clf.score(Xte, yte) > 0.9
    assert isinstance(clf.history_, pd.DataFrame) and len(clf.history_) == clf.n_iter_ == 20
    assert {"round", "train_loss", "uplink_bits", "downlink_bits", "n_active"} <= set(clf.history_.columns)
    np.testing.assert_array_equal(clf.classes_, np.arange(10))
    assert clf.params_.shape == (64 * 32 + 32 + 32 * 10 + 10,)


def test_groups_define_clients_and_fraction(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    groups = np.arange(ytr.size) % 7
    clf = FederatedMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, client_fraction=0.3,
                                 random_state=0).fit(Xtr, ytr, groups=groups)
    assert clf.history_["n_active"].eq(2).all()  # round(0.3 * 7) = 2
    with pytest.raises(ValueError, match="groups"):
        clf.fit(Xtr, ytr, groups=groups[:10])


def test_same_seed_same_model(digits_standardised):
    Xtr, Xte, ytr, _ = digits_standardised
    kw = dict(hidden_layer_sizes=(8,), max_iter=3, client_fraction=0.5, random_state=3)
    a = FederatedMLPClassifier(**kw).fit(Xtr, ytr).predict_proba(Xte)
    b = FederatedMLPClassifier(**kw).fit(Xtr, ytr).predict_proba(Xte)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("params, match", [
    (dict(client_fraction=0.0), "client_fraction"),
    (dict(client_fraction=1.01), "client_fraction"),
    (dict(local_epochs=0), "local_epochs"),
    (dict(batch_size=0), "batch_size"),
    (dict(method="sgd"), "method"),
    (dict(layer_sizes=(63, 10, 10)), "layer_sizes"),
    (dict(layer_sizes=(64, 10, 9)), "layer_sizes"),
    (dict(mu=-1.0), "mu"),
    (dict(server_optimizer="sgdd"), "server_optimizer"),
    (dict(server_lr=0.0), "server_lr"),
    (dict(wire_dtype="float16"), "wire_dtype"),
    (dict(method="fedpm", wire_dtype="float16"), "wire_dtype"),  # checked although FedPM sends no floats
    (dict(n_components=0), "n_components"),
    (dict(hidden_layer_sizes=(8, 0)), "hidden_layer_sizes"),
    (dict(learning_rate=float("nan")), "learning_rate"),
])
def test_bad_input_raises_clear_value_error(digits_standardised, params, match):
    Xtr, _, ytr, _ = digits_standardised
    with pytest.raises(ValueError, match=match):
        FederatedMLPClassifier(max_iter=1, **params).fit(Xtr, ytr)


def test_full_layer_sizes_accepted(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    clf = FederatedMLPClassifier(layer_sizes=(64, 12, 10), max_iter=1).fit(Xtr, ytr)
    assert clf.layer_sizes_ == (64, 12, 10)


def test_unseen_label_at_score_time_counts_as_error(digits_standardised):
    # As scikit-learn's classifiers: accuracy_score counts an unseen label as a miss, no error.
    Xtr, Xte, ytr, yte = digits_standardised
    keep = ytr < 9
    clf = FederatedMLPClassifier(hidden_layer_sizes=(16,), max_iter=10, random_state=0).fit(Xtr[keep], ytr[keep])
    assert 9 not in clf.classes_
    unseen = yte == 9
    acc_seen = clf.score(Xte[~unseen], yte[~unseen])
    assert clf.score(Xte, yte) == pytest.approx(acc_seen * (~unseen).mean())


def test_mixture_method_exposes_components(digits_standardised):
    Xtr, _, ytr, _ = digits_standardised
    clf = FederatedMLPClassifier(method="mixture", n_components=3, hidden_layer_sizes=(8,), max_iter=2,
                                 random_state=0).fit(Xtr, ytr)
    assert clf.params_.shape[0] == 3
    np.testing.assert_allclose(clf.predict_proba(Xtr[:5]).sum(axis=1), 1.0)


def _n_params(layer_sizes):
    return sum((a + 1) * b for a, b in zip(layer_sizes[:-1], layer_sizes[1:]))


@pytest.mark.parametrize("method", METHODS)
def test_params_set_for_every_method(digits_standardised, method):
    # Issue 10: params_ was None for fedpm (its result had no server parameters).
    Xtr, _, ytr, _ = digits_standardised
    clf = FederatedMLPClassifier(method=method, hidden_layer_sizes=(8,), max_iter=2, random_state=0).fit(Xtr, ytr)
    n_params = _n_params((64, 8, 10))
    expected = (clf.n_components, n_params) if method == "mixture" else (n_params,)
    assert isinstance(clf.params_, np.ndarray) and clf.params_.shape == expected
    assert np.all(np.isfinite(clf.params_))
    assert isinstance(clf.result_, NeuralResult)
    np.testing.assert_array_equal(clf.result_.params, clf.params_)
    assert clf.predict(Xtr[:5]).shape == (5,) and len(clf.history_) == clf.n_iter_ == 2


@pytest.mark.parametrize("method", METHODS)
def test_fitted_estimator_predicts_deterministically(digits_standardised, method):
    # Issue 13, class 5: fedpm drew a fresh unseeded mask in every predict_proba.
    Xtr, Xte, ytr, yte = digits_standardised
    kw = dict(method=method, hidden_layer_sizes=(16,), max_iter=3, random_state=0)
    clf = FederatedMLPClassifier(**kw).fit(Xtr, ytr)
    first = clf.predict_proba(Xte)
    np.testing.assert_array_equal(clf.predict_proba(Xte), first)
    assert clf.score(Xte, yte) == clf.score(Xte, yte)
    np.testing.assert_array_equal(FederatedMLPClassifier(**kw).fit(Xtr, ytr).predict_proba(Xte), first)


def test_fedpm_model_is_the_most_probable_subnetwork(digits_standardised):
    Xtr, Xte, ytr, _ = digits_standardised
    clf = FederatedMLPClassifier(method="fedpm", hidden_layer_sizes=(16,), max_iter=3, random_state=0).fit(Xtr, ytr)
    res = clf.result_
    np.testing.assert_array_equal(res.mask, res.theta > 0.5)
    np.testing.assert_array_equal(clf.params_[res.index], res.constants * res.mask)
    np.testing.assert_allclose(clf.predict_proba(Xte), clf.model_.predict_proba(clf.params_, Xte))
