"""Labels, evaluation data and hyper-parameters of the neural bridge that used to pass silently
(a new user's sweep): each is refused or warned about, naming what is wrong."""
import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits

from fedemstats.federation import Federation
from fedemstats.neural import MLP, run_hard_em
from fedemstats.neural.fedsparse import run_fedsparse
from fedemstats.estimators.neural import FederatedMLPClassifier


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:400] / 16.0, y[:400]


def _clients(X, y, k=4):
    return [(X[i::k], y[i::k]) for i in range(k)]


@pytest.mark.parametrize("bad, match", [
    (lambda y: y[:, None], r"one-dimensional, shape \(n,\); got shape \(100, 1\)"),
    (lambda y: np.where(y == 9, -1, y), r"whole class indices in \[0, 10\) .* from -1"),
    (lambda y: y + 0.7, r"whole class indices"),
    (lambda y: np.where(y == 9, 10, y), r"whole class indices in \[0, 10\) .* to 10"),
    (lambda y: y.astype(str), r"class indices, got dtype <U"),
])
def test_bad_labels_are_refused_before_training(digits, bad, match):
    """A (n, 1) column broadcast the loss over every pair of rows (8 % accuracy, no error); −1
    wrapped to the last class; 0.7 was truncated; 10 was an IndexError inside the loss."""
    X, y = digits
    clients = [(Xk, bad(yk)) for Xk, yk in _clients(X, y)]
    for run in (run_hard_em, run_fedsparse):
        with pytest.raises(ValueError, match=match) as info:
            run(MLP((64, 16, 10)), clients, rounds=1, random_state=0)
        assert str(info.value).startswith("client 0: y must")


def test_bad_evaluation_labels_are_refused_not_scored_zero(digits):
    X, y = digits
    with pytest.raises(ValueError, match="eval_data: y must hold class indices"):
        run_hard_em(MLP((64, 16, 10)), _clients(X, y), rounds=1, eval_data=(X, y.astype(str)), random_state=0)
    with pytest.raises(ValueError, match=r"eval_data: need X_test of shape \(n, 64\)"):
        run_hard_em(MLP((64, 16, 10)), _clients(X, y), rounds=1, eval_data=(X[:, :10], y), random_state=0)
    X_nan = X.copy()
    X_nan[5, 3] = np.nan  # scored silently before: every prediction of a NaN row is wrong
    with pytest.raises(ValueError, match="eval_data: X_test contains inf or NaN"):
        run_hard_em(MLP((64, 16, 10)), _clients(X, y), rounds=1, eval_data=(X_nan, y), random_state=0)


def test_run_hard_em_takes_a_federation_and_its_labels(digits):
    """docs/neural_sparse.md: every runner takes a client list or a Federation plus y=."""
    X, y = digits
    groups = np.arange(len(y)) % 4
    fed, order, _ = Federation.from_groups(X, groups)
    a = run_hard_em(MLP((64, 16, 10)), fed, y=y[order], rounds=2, random_state=0)
    b = run_hard_em(MLP((64, 16, 10)), [(fed.client(i), y[order][fed.offsets[i]:fed.offsets[i + 1]])
                                        for i in range(fed.n_clients)], rounds=2, random_state=0)
    np.testing.assert_array_equal(a.params, b.params)


def test_fedsparse_lambda0_controls_sparsity_at_the_default_threshold_rate():
    """At the paper's client threshold rate (1e-3) the docs' example pruned nothing for any λ0."""
    from fedemstats.neural import iid_clients
    X, y = load_digits(return_X_y=True)
    clients = iid_clients(X / 16.0, y, 20, random_state=0)
    sparsity = [run_fedsparse(MLP((64, 32, 10)), clients, rounds=30, lambda0=lam, random_state=0).sparsity
                for lam in (0.0, 0.3)]
    assert sparsity[1] >= sparsity[0] + 0.1, sparsity


@pytest.mark.parametrize("method, params, unused", [
    ("fedsparse", dict(mu=100.0), "['mu']"),
    ("fedpm", dict(n_components=3, server_lr=0.5), "['n_components', 'server_lr']"),
    ("median", dict(server_optimizer="adam"), "['server_optimizer']"),
])
def test_a_hyper_parameter_the_method_ignores_is_a_warning(digits, method, params, unused):
    X, y = digits
    with pytest.warns(UserWarning, match=re.escape(f"parameter(s) {unused} have no effect with method='{method}'")):
        FederatedMLPClassifier((8,), method=method, max_iter=1, random_state=0, **params).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the defaults never warn
        FederatedMLPClassifier((8,), method=method, max_iter=1, random_state=0).fit(X, y)


def test_more_mixture_components_than_clients_is_a_warning(digits):
    X, y = digits
    with pytest.warns(UserWarning, match="n_components=12 is more than the 10 clients"):
        FederatedMLPClassifier((8,), method="mixture", n_components=12, max_iter=1, random_state=0).fit(X, y)


@pytest.mark.parametrize("hook, match", [
    (lambda k, phi: phi * np.nan if k == 1 else phi, "uplink_hook returned inf or NaN for client 1"),
    (lambda k, phi: None, r"uplink_hook returned None for client 0; it must return the upload's shape"),
    (lambda k, phi: phi[:-1], r"uplink_hook returned \(\d+,\) for client 0"),
])
def test_a_faulty_uplink_hook_is_named_not_blamed_on_the_learning_rate(digits, hook, match):
    X, y = digits
    with pytest.raises(ValueError, match=match):
        run_hard_em(MLP((64, 16, 10)), _clients(X, y), rounds=1, uplink_hook=hook, random_state=0)
