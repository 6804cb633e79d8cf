"""Property-based tests of the three federated EM estimators (issue 13, "What to build").

Invariants, over generated shapes, scales, constant / duplicated columns, small clients
and hyper-parameters:

* a fit either succeeds with finite parameters and predictions, or raises ``ValueError`` /
  ``TypeError`` whose message names the offending argument;
* exact EM (``compressor="identity"``) is equivariant to ``x -> c (x + b)``: means scale
  by ``c`` (and shift by ``c b``), covariances by ``c²``, the mean log-likelihood shifts
  by ``-d log c`` (``d`` the mean number of observed entries of a row). ``c = 2^k`` with ``|k| <= 26`` spans [1.5e-8, 6.7e7]; multiplying by a
  power of two is exact in float64, so every operation of the fit scales exactly and the
  only differences left are the rounding of the ``log c`` terms in the log-densities (a few
  ulp of ``d |log c|``), which EM passes on to the parameters amplified at most by the
  condition number κ of the fitted covariances: parameters and the log-likelihood are
  compared at ``ROUNDOFF_ULPS · eps · (1 + d |log c|) · κ`` (about 1e-12 on a
  well-conditioned fit; more when a component sits on a few rows and ``reg_covar`` makes
  it near singular). A non-equivariant constant (an absolute floor, a tie broken by
  rounding) shows up as a difference of order 1;
* the same seed gives the same result.

Profiles (``tests/_hypothesis_profiles.py``): the default one is derandomised (the same
examples every run); ``HYPOTHESIS_PROFILE=long`` runs 20 times more, random examples (a
benchmark-style run).
"""
import warnings

import numpy as np
import pytest
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

from _hypothesis_profiles import profile
from fedemstats.estimators import FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer
from fedemstats.models.factor import NOISE_REL_FLOOR

SETTINGS = profile("estimators", default_examples=25, long_examples=500)  # examples per test

#: power-of-two exponents of the rescaling c (2^26 ≈ 6.7e7)
LOG2_SCALE = 26
#: ulps of rounding allowed per unit of d |log c| and of condition number (see module docstring)
ROUNDOFF_ULPS = 64
EPS = np.finfo(np.float64).eps
#: EM rounds of the equivariance fits (tol=0: the stopping rule cannot differ by rounding)
ROUNDS = 8
#: arguments an acceptable refusal may name
#: powers of ten of the data: half inside the representable range, half anywhere in float64's
MAGNITUDES = st.one_of(st.integers(-60, 60), st.integers(-300, 300))
ARGUMENT_NAMES = ("X", "n_components", "groups", "client", "rows", "column")


@st.composite
def datasets(draw, missing=False):
    """(X (n, d), groups (n,)) with optional constant and duplicated columns and missing values."""
    n_clients = draw(st.integers(1, 4))
    rows = draw(st.integers(2, 30))
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_clients * rows, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d) * 3
    if draw(st.booleans()):
        X[:, draw(st.integers(0, d - 1))] = draw(st.sampled_from([0.0, 1.0, -7.5]))
    if d > 1 and draw(st.booleans()):
        X[:, -1] = X[:, 0]
    if missing:
        mask = rng.random(X.shape) < draw(st.sampled_from([0.0, 0.1, 0.3]))
        mask[np.arange(X.shape[0]), rng.integers(0, d, X.shape[0])] = False  # every row keeps a value
        X[mask] = np.nan
    groups = np.repeat(np.arange(n_clients), rows)
    note(f"n_clients={n_clients} rows={rows} d={d} seed={seed}")
    return X, groups


def _fit_or_named_refusal(estimator, X, groups):
    """The fitted estimator, or None after checking the refusal names an argument."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # small-client fallbacks are documented warnings
            return estimator.fit(X, groups=groups)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert any(name in message for name in ARGUMENT_NAMES), message
        assert "step" not in message.lower(), message
        event(f"refused: {type(exc).__name__}")
        return None


def _finite(*arrays):
    for a in arrays:
        assert np.all(np.isfinite(a)), a


# ---------------------------------------------------------------------- fit or a named refusal
@SETTINGS
@given(data=datasets(), magnitude=MAGNITUDES, k=st.integers(1, 4),
       ctype=st.sampled_from(["full", "tied", "diag", "spherical"]))
def test_gmm_fits_finite_or_names_the_argument(data, magnitude, k, ctype):
    X, groups = data
    X = X * 10.0 ** magnitude
    gmm = _fit_or_named_refusal(FederatedGaussianMixture(k, covariance_type=ctype, max_iter=5, random_state=0),
                                X, groups)
    if gmm is not None:
        event("fitted")
        _finite(gmm.weights_, gmm.means_, gmm.covariances_, gmm.precisions_cholesky_, gmm.score_samples(X),
                gmm.predict_proba(X))


@SETTINGS
@given(data=datasets(missing=True), magnitude=MAGNITUDES, k=st.integers(1, 4))
def test_factor_analysis_fits_finite_or_names_the_argument(data, magnitude, k):
    X, groups = data
    X = X * 10.0 ** magnitude
    fa = _fit_or_named_refusal(FederatedFactorAnalysis(k, max_iter=10, random_state=0), X, groups)
    if fa is not None:
        event("fitted")
        _finite(fa.components_, fa.noise_variance_, fa.mean_, fa.transform(X), fa.score_samples(X))
        assert (fa.noise_variance_ > 0).all()


@SETTINGS
@given(data=datasets(missing=True), magnitude=MAGNITUDES, model=st.sampled_from(["gaussian", "gmm"]))
def test_imputer_fits_finite_or_names_the_argument(data, magnitude, model):
    X, groups = data
    X = X * 10.0 ** magnitude
    imp = _fit_or_named_refusal(FederatedImputer(model, n_components=2, max_iter=5, random_state=0), X, groups)
    if imp is not None:
        event("fitted")
        filled = imp.transform(X)
        _finite(filled)
        np.testing.assert_array_equal(filled[~np.isnan(X)], X[~np.isnan(X)])


# ---------------------------------------------------------------------- equivariance
def _rescaled(X, log2c, offset):
    """``(X + offset, c (X + offset))`` with ``c = 2^log2c`` (exact); all-zero data is its own
    rescaling, so it carries no unit to be equivariant to."""
    base = X + offset
    assume(np.nanmax(np.abs(base)) > 0)
    return base, np.ldexp(base, log2c)


def _tolerance(d, log2c, covariances):
    """Relative tolerance ROUNDOFF_ULPS eps (1 + d |log c|) κ, κ the worst covariance condition number."""
    mats = np.asarray(covariances, dtype=np.float64)
    if mats.ndim <= 1:  # diag / spherical / noise variances: the ratio of extreme variances
        kappa = float(mats.max() / mats.min())
    else:
        kappa = max(float(np.linalg.cond(m)) for m in mats.reshape(-1, d, d))
    return ROUNDOFF_ULPS * EPS * (1.0 + d * abs(log2c) * np.log(2.0)) * max(kappa, 1.0)


def _close(actual, desired, rtol):
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * np.abs(desired).max())


def _close_loglik(a, b, X, log2c, rtol):
    """Mean log-likelihoods: a row's density of its observed entries scales by c^-(observed count)."""
    shift = float(np.mean((~np.isnan(X)).sum(axis=1))) * log2c * np.log(2.0)
    assert abs(a - (b + shift)) <= rtol * (1.0 + abs(shift) + abs(a)), (a, b + shift)


@SETTINGS
@given(data=datasets(), log2c=st.integers(-LOG2_SCALE, LOG2_SCALE), offset=st.sampled_from([0.0, 2.5, -1000.0]),
       k=st.integers(1, 3), ctype=st.sampled_from(["full", "tied", "diag", "spherical"]),
       reg=st.sampled_from([1e-6, 1e-3]))
def test_gmm_is_equivariant_to_rescaling(data, log2c, offset, k, ctype, reg):
    X, groups = data
    base, scaled = _rescaled(X, log2c, offset)
    c = 2.0 ** log2c
    kw = dict(covariance_type=ctype, max_iter=ROUNDS, tol=0.0, random_state=0)
    a = _fit_or_named_refusal(FederatedGaussianMixture(k, reg_covar=reg, **kw), base, groups)
    if a is None:
        return
    b = FederatedGaussianMixture(k, reg_covar=reg * c * c, **kw).fit(scaled, groups=groups)  # reg in data units²
    d = X.shape[1]
    rtol = _tolerance(d, log2c, a.covariances_ if ctype in ("full", "tied") else a.covariances_.ravel())
    event(f"rtol {rtol:.0e}")
    _close(b.means_ / c, a.means_, rtol)
    _close(b.covariances_ / c ** 2, a.covariances_, rtol)
    _close(b.weights_, a.weights_, rtol)
    _close_loglik(a.score(base), b.score(scaled), X, log2c, rtol)


@SETTINGS
@given(data=datasets(missing=True), log2c=st.integers(-LOG2_SCALE, LOG2_SCALE),
       offset=st.sampled_from([0.0, 2.5, -1000.0]), k=st.integers(1, 3))
def test_factor_analysis_is_equivariant_to_rescaling(data, log2c, offset, k):
    X, groups = data
    base, scaled = _rescaled(X, log2c, offset)
    c = 2.0 ** log2c
    a = _fit_or_named_refusal(FederatedFactorAnalysis(k, max_iter=ROUNDS, tol=0.0, random_state=0), base, groups)
    if a is None:
        return
    b = FederatedFactorAnalysis(k, max_iter=ROUNDS, tol=0.0, random_state=0).fit(scaled, groups=groups)
    d = X.shape[1]
    rtol = _tolerance(d, log2c, a.get_covariance()[None])
    event(f"rtol {rtol:.0e}")
    _close(b.components_ / c, a.components_, rtol)
    _close(b.noise_variance_ / c ** 2, a.noise_variance_, rtol)
    _close(b.mean_ / c, a.mean_, rtol)
    _close_loglik(a.score(base), b.score(scaled), X, log2c, rtol)


@SETTINGS
@given(data=datasets(missing=True), log2c=st.integers(-LOG2_SCALE, LOG2_SCALE),
       offset=st.sampled_from([0.0, 2.5, -1000.0]), model=st.sampled_from(["gaussian", "gmm"]))
def test_imputer_is_equivariant_to_rescaling(data, log2c, offset, model):
    X, groups = data
    base, scaled = _rescaled(X, log2c, offset)
    c = 2.0 ** log2c
    kw = dict(n_components=2, max_iter=ROUNDS, tol=0.0, random_state=0)
    a = _fit_or_named_refusal(FederatedImputer(model, reg_covar=1e-6, **kw), base, groups)
    if a is None:
        return
    # the Gaussian imputer's reg_covar is in units of each column's public scale (equivariant as
    # given); the imputer's GMM keeps scikit-learn's original units, so it is rescaled with the data
    b = FederatedImputer(model, reg_covar=1e-6 * c * c if model == "gmm" else 1e-6, **kw).fit(scaled, groups=groups)
    fa, fb = a.transform(base), b.transform(scaled)
    observed = ~np.isnan(base)
    filled = np.where(observed, base, fa)
    cov = np.cov(filled, rowvar=False).reshape(X.shape[1], X.shape[1]) + 1e-6 * np.eye(X.shape[1])
    rtol = _tolerance(X.shape[1], log2c, cov[None])  # κ of the data's covariance (+ reg) as the conditioning
    event(f"rtol {rtol:.0e}")
    _close(fb / c, fa, rtol)


# ---------------------------------------------------------------------- determinism
@SETTINGS
@given(data=datasets(missing=True), seed=st.integers(0, 2 ** 31 - 1),
       compressor=st.sampled_from(["identity", "dither:s=4", "randk:k=2"]))
def test_the_same_seed_gives_the_same_result(data, seed, compressor):
    X, groups = data
    fits = []
    for _ in range(2):
        est = FederatedFactorAnalysis(1, max_iter=4, compressor=compressor, random_state=seed)
        fits.append(_fit_or_named_refusal(est, X, groups))
    if fits[0] is None:
        assert fits[1] is None
        return
    np.testing.assert_array_equal(fits[0].components_, fits[1].components_)
    np.testing.assert_array_equal(fits[0].noise_variance_, fits[1].noise_variance_)
    np.testing.assert_array_equal(fits[0].history_["loglik"], fits[1].history_["loglik"])


@pytest.mark.parametrize("column", [0.0, 1e5, -3.25])
def test_factor_analysis_on_constant_columns_floors_the_noise_relative_to_the_data(column):
    """A constant column's Ψ is the floor NOISE_REL_FLOOR of the data's scale, in every unit."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4)) @ rng.normal(size=(4, 4))
    X[:, 2] = column
    floors = []
    for c in (1.0, 2.0 ** -20, 2.0 ** 20):
        fa = FederatedFactorAnalysis(2, max_iter=50, random_state=0).fit(X * c)
        _finite(fa.components_, fa.noise_variance_, fa.score_samples(X * c))
        floors.append(fa.noise_variance_[2] / c ** 2)
        assert 0 < floors[-1] < 10 * NOISE_REL_FLOOR * X.var()
        assert np.abs(fa.components_[:, 2]).max() / c < 1e-5
    np.testing.assert_allclose(floors, floors[0], rtol=1e-9)


def test_factor_analysis_on_all_constant_data_fits():
    fa = FederatedFactorAnalysis(2, max_iter=20, random_state=0).fit(np.full((60, 3), 4.0))
    _finite(fa.components_, fa.noise_variance_, fa.transform(np.full((2, 3), 4.0)))
