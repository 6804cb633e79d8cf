"""Property-based tests of FederatedMLPClassifier (issue 13): any input either fits or is named.

Generated: shapes (1-30 rows, 1-5 features, 1-4 classes), X dtypes (float32/64,
int64, bool), scales from 1e-300 to 1e300, constant and duplicated columns,
label types (int, str, mixed), clients (iid, one client, one row per client,
wrong-length groups, mixed-type groups) and hyper-parameters in and out of range.

Invariants (each on its own kind of input, so that every kind is exercised):

* valid input: ``fit`` either succeeds, with finite ``params_`` and finite
  ``predict_proba`` rows that sum to 1 on the training rows, or raises
  ``TrainingDivergedError`` (a ``ValueError``) naming the feature scale;
* an invalid argument: ``ValueError`` / ``TypeError`` naming it;
* a data problem (one class, mixed label types, groups of the wrong length
  or of mixed types, inf or NaN in X): an error naming it;
* the same ``random_state`` gives the same parameters and predictions, and
  predicting twice gives the same result.

Profiles: the default one is fast enough for ``make test``;
``HYPOTHESIS_PROFILE=long`` runs many more examples (benchmark-style). The
profiles are applied per test, not loaded globally, so other test modules keep
their own Hypothesis settings.
"""
import warnings

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from _hypothesis_profiles import profile

from fedemstats.estimators.neural import METHODS, FederatedMLPClassifier
from fedemstats.neural import TrainingDivergedError

PROFILE = profile("neural", 100, 1500)
# Determinism needs two fits per example: a quarter of the examples is enough.
SEED_PROFILE = settings(PROFILE, max_examples=max(1, PROFILE.max_examples // 4))

MAX_ROWS, MAX_FEATURES, MAX_CLASSES = 30, 5, 4
# Overflow warnings on the way to a TrainingDivergedError are expected.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Two classes need two rows.
MIN_ROWS_TWO_CLASSES = 2
# Data problems and the words an error about each must contain.
DATA_WORDS = {
    "one class": ("at least 2 classes",),
    "inf": ("infinity",),  # scikit-learn's check
    "nan": ("NaN",),
    "y mixed": ("y mixes",),
    "groups mixed": ("groups mixes",),
    "groups length": ("groups must have shape",),
}

# (name, valid values, invalid values); the name is what an error about it must mention.
HYPER = {
    "client_fraction": (st.floats(0.1, 1.0), st.sampled_from([0.0, -0.5, 1.5, float("nan")])),
    "local_epochs": (st.integers(1, 2), st.sampled_from([0, -1, 1.5, True])),
    "batch_size": (st.sampled_from([None, 1, 4, 32, float("inf")]), st.sampled_from([0, 2.5, -3, "8"])),
    "learning_rate": (st.floats(1e-3, 1e3), st.sampled_from([0.0, -0.1, float("nan"), float("inf"), "0.1"])),
    "max_iter": (st.integers(1, 3), st.sampled_from([0, -2, 2.0])),
    "mu": (st.one_of(st.none(), st.floats(0.0, 1e3)), st.sampled_from([-1.0, float("nan"), float("inf")])),
    "n_components": (st.integers(1, 3), st.sampled_from([0, 1.5])),
    "server_optimizer": (st.sampled_from([None, "sgd", "adam", "adamax"]), st.sampled_from(["sgdd", 1, ""])),
    "server_lr": (st.floats(1e-3, 10.0), st.sampled_from([0.0, -1.0, float("inf")])),
    "wire_dtype": (st.sampled_from(["float32", "float64"]), st.sampled_from(["float16", None, 32])),
    "n_clients": (st.integers(1, 6), st.sampled_from([0, -1, 2.5])),
    "hidden_layer_sizes": (st.sampled_from([(2,), 3, (4, 2)]), st.sampled_from([(0,), (3, -1), (2.5,)])),
}


@st.composite
def hyper_parameters(draw, n_bad=0):
    """Estimator keyword arguments with ``n_bad`` invalid values, and the names of the invalid ones."""
    kw = {"method": draw(st.sampled_from(METHODS)), "random_state": draw(st.integers(0, 2 ** 32 - 1))}
    bad = set(draw(st.sets(st.sampled_from(sorted(HYPER) + ["method"]), min_size=n_bad, max_size=n_bad)))
    for name in sorted(HYPER):
        if name in bad:
            kw[name] = draw(HYPER[name][1])
        elif draw(st.booleans()):
            kw[name] = draw(HYPER[name][0])
    if "method" in bad:
        kw["method"] = draw(st.sampled_from(["FedAvg", "sgd", None, 1]))
    if kw["method"] == "mixture" and kw.get("mu") == 0.0:  # the mixture needs a positive precision
        if n_bad:
            bad.add("mu")
        else:
            kw["mu"] = None
    kw.setdefault("max_iter", 2)  # keep the default profile fast
    kw.setdefault("hidden_layer_sizes", (3,))
    return kw, bad


@st.composite
def features(draw, n_rows, problem=None):
    """X of shape (n_rows, n_features) in one of the dtypes; ``problem``: "inf" or "nan" entries."""
    n_features = draw(st.integers(1, MAX_FEATURES))
    dtype = draw(st.sampled_from(["float64", "float32", "int64", "bool"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if dtype == "bool":
        X = rng.random((n_rows, n_features)) < 0.5
    elif dtype == "int64":
        X = rng.integers(-draw(st.sampled_from([1, 100, 2 ** 40])), 2 ** 40, size=(n_rows, n_features))
    else:
        # float32 holds |x| < 3.4e38; a larger scale turns into inf (the "inf" problem)
        top = 300 if dtype == "float64" or problem == "inf" else 37
        X = rng.standard_normal((n_rows, n_features)) * 10.0 ** draw(st.floats(-300, top))
    if n_features > 1 and draw(st.booleans()):
        X[:, 0] = X[0, 0]  # a constant column
    if n_features > 2 and draw(st.booleans()):
        X[:, -1] = X[:, 1]  # a duplicated column
    if problem in ("inf", "nan"):
        X = X.astype(np.float32 if dtype == "float32" else np.float64)
        X[draw(st.integers(0, n_rows - 1)), -1] = np.inf if problem == "inf" else np.nan
        return X
    return X.astype(dtype)


@st.composite
def labels(draw, n_rows, problem=None):
    """y of shape (n_rows,) of ints or strings; ``problem``: "one class" or "y mixed" (int and str)."""
    n_classes = 1 if problem == "one class" else draw(st.integers(2, MAX_CLASSES))
    idx = np.arange(n_rows) % n_classes  # every class present (when n_rows >= n_classes)
    if problem == "y mixed":
        return np.array([1, "b", 2, "d"], dtype=object)[idx]
    if draw(st.booleans()):
        return np.array([3, -1, 10, 7])[idx]
    return np.array(["cat", "dog", "emu", "yak"])[idx]


@st.composite
def client_groups(draw, n_rows, problem=None):
    """``groups`` (or None): one client, one row per client, random; ``problem``: wrong length or mixed types."""
    if problem == "groups length":
        return np.zeros(n_rows + draw(st.sampled_from([-1, 1])), dtype=int)
    if problem == "groups mixed":
        return np.array([0, "a"] * n_rows, dtype=object)[:n_rows]
    kind = draw(st.sampled_from(["none", "one client", "one row each", "random"]))
    if kind == "none":
        return None
    if kind == "one client":
        return np.zeros(n_rows, dtype=int)
    if kind == "one row each":
        return np.arange(n_rows)
    return np.array(draw(st.lists(st.integers(0, 4), min_size=n_rows, max_size=n_rows)))


@st.composite
def cases(draw, n_bad=0, problem=None):
    """(X, y, groups, estimator kwargs, invalid argument names), with one data ``problem`` or none."""
    n_rows = draw(st.integers(1 if problem == "one class" else MIN_ROWS_TWO_CLASSES, MAX_ROWS))
    X = draw(features(n_rows, problem))
    y = draw(labels(n_rows, problem))
    groups = draw(client_groups(n_rows, problem))
    kw, bad = draw(hyper_parameters(n_bad))
    return X, y, groups, kw, bad


def _fit(X, y, groups, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return FederatedMLPClassifier(**kw).fit(X, y, groups=groups)


def _fit_or_divergence(X, y, groups, kw):
    """The fitted estimator, or None after checking the divergence message (valid input only)."""
    try:
        return _fit(X, y, groups, kw)
    except TrainingDivergedError as exc:
        assert "max |X| = " in str(exc) and "learning rate" in str(exc)
        event("training diverged: refused")  # counts shown by --hypothesis-show-statistics
        return None


def _assert_fitted_and_finite(clf, X):
    assert np.all(np.isfinite(clf.params_))
    proba = clf.predict_proba(X)
    assert proba.shape == (X.shape[0], clf.classes_.size) and np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    assert set(clf.predict(X)) <= set(clf.classes_)


@PROFILE
@given(cases())
def test_valid_input_fits_finite_or_names_the_divergence(case):
    X, y, groups, kw, _ = case
    clf = _fit_or_divergence(X, y, groups, kw)
    if clf is not None:
        event(f"fitted: {kw['method']}")
        _assert_fitted_and_finite(clf, X)


@PROFILE
@given(st.integers(1, 2).flatmap(lambda n_bad: cases(n_bad=n_bad)))
def test_invalid_argument_is_named(case):
    X, y, groups, kw, bad = case
    with pytest.raises((ValueError, TypeError)) as info:
        _fit(X, y, groups, kw)
    named = [name for name in bad if name in str(info.value)]
    assert named, f"{info.value!r} names none of {sorted(bad)}"
    event(f"named: {named[0]}")


@PROFILE
@given(st.sampled_from(sorted(DATA_WORDS)).flatmap(lambda p: st.tuples(st.just(p), cases(problem=p))))
def test_data_problem_is_named(problem_case):
    problem, (X, y, groups, kw, _) = problem_case
    with pytest.raises((ValueError, TypeError)) as info:
        _fit(X, y, groups, kw)
    assert any(word in str(info.value) for word in DATA_WORDS[problem]), f"{problem}: {info.value!r}"
    event(f"named: {problem}")


@SEED_PROFILE
@given(cases())
def test_same_seed_same_model(case):
    X, y, groups, kw, _ = case
    first = _fit_or_divergence(X, y, groups, kw)
    if first is None:
        return
    second = _fit(X, y, groups, kw)
    np.testing.assert_array_equal(second.params_, first.params_)
    np.testing.assert_array_equal(second.predict_proba(X), first.predict_proba(X))
    np.testing.assert_array_equal(first.predict_proba(X), first.predict_proba(X))  # predict draws nothing
