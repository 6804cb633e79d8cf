"""Issue 14 acceptance: the estimators' privacy= API, its errors, reproducibility and privacy=None."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

from fedemstats import DPConfig, FederatedFactorAnalysis, FederatedGaussianMixture, FederatedImputer

ROUNDS = 6


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(0)
    return np.vstack([rng.normal(-2, 1, (300, 3)), rng.normal(2, 1, (300, 3))])


@pytest.mark.parametrize("mode", ["central", "distributed"])
def test_same_seed_same_fit_and_a_new_seed_new_noise(X, mode):
    cfg = DPConfig(epsilon=2.0, clip=4.0, mode=mode)
    fit = lambda seed: FederatedGaussianMixture(2, max_iter=ROUNDS, random_state=seed, privacy=cfg).fit(X)  # noqa
    a, b, c = fit(1), fit(1), fit(2)
    np.testing.assert_array_equal(a.means_, b.means_)
    assert not np.allclose(a.means_, c.means_)


@pytest.mark.parametrize("make", [lambda p: FederatedGaussianMixture(2, max_iter=ROUNDS, random_state=0, privacy=p),
                                  lambda p: FederatedFactorAnalysis(1, max_iter=ROUNDS, random_state=0, privacy=p),
                                  lambda p: FederatedImputer(max_iter=ROUNDS, random_state=0, privacy=p)])
def test_epsilon_column_and_privacy_spent(X, make):
    est = make(DPConfig(epsilon=3.0, clip=4.0)).fit(X)
    eps = est.history_["epsilon"].to_numpy()
    assert eps.shape == (ROUNDS,) and np.all(np.diff(eps) > 0)
    assert est.privacy_spent_["epsilon"] == pytest.approx(eps[-1]) == pytest.approx(3.0, rel=0.01)
    # given a noise multiplier, the ε spent is reported instead
    est = make(DPConfig(noise_multiplier=est.privacy_spent_["noise_multiplier"], clip=4.0)).fit(X)
    assert est.privacy_spent_["epsilon"] == pytest.approx(3.0, rel=0.01)


def test_privacy_none_changes_nothing(X):
    plain = FederatedGaussianMixture(2, max_iter=ROUNDS, random_state=0).fit(X)
    none = FederatedGaussianMixture(2, max_iter=ROUNDS, random_state=0, privacy=None).fit(X)
    np.testing.assert_array_equal(plain.means_, none.means_)
    assert "epsilon" not in none.history_ and not hasattr(none, "privacy_spent_")


#: seeds run, and how many must find both clusters (measured: 12 of 16, before and after the
#: private fit stopped drawing a data-derived start; the others sit near the symmetric point
#: where both components are the global Gaussian after 8 rounds: θ_0 comes from public
#: information alone, and k-means on the public stand-in splits it along a random direction)
USEFUL_SEEDS, USEFUL_MIN = 16, 11


def test_private_fit_is_useful_at_a_large_budget():
    """Two well-separated clusters of 2,000 rows are found at ε = 8 (means within 0.5 of ±2)
    from most random starts."""
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(-2, 1, (2000, 3)), rng.normal(2, 1, (2000, 3))])
    found = 0
    for seed in range(USEFUL_SEEDS):
        est = FederatedGaussianMixture(2, max_iter=8, random_state=seed,
                                       privacy=DPConfig(epsilon=8.0, clip=4.0)).fit(X)
        found += np.allclose(np.sort(est.means_[:, 0]), [-2, 2], atol=0.5)
    assert found >= USEFUL_MIN, found


@pytest.mark.parametrize("cfg, estimator_kw, match", [
    (dict(epsilon=0.0), {}, "epsilon must be"),
    (dict(epsilon=-1.0), {}, "epsilon must be"),
    (dict(epsilon=1.0, delta=0.0), {}, "delta must lie"),
    (dict(epsilon=1.0, delta=1.0), {}, "delta must lie"),
    (dict(epsilon=1.0, clip=0.0), {}, "clip must be"),
    (dict(epsilon=1.0, level="group"), {}, "level must be"),
    (dict(epsilon=1.0, geometry="raw"), {}, "geometry must be"),
    (dict(epsilon=1.0, noise_multiplier=2.0), {}, "exactly one of epsilon"),
    (dict(epsilon=1.0), {"algorithm": "em"}, "algorithm='em'"),
    (dict(epsilon=1.0), {"algorithm": "vr-fedem"}, "algorithm='vr-fedem'"),
    (dict(epsilon=1.0), {"compressor": "dither:s=4"}, "compressor"),
    (dict(epsilon=1.0), {"n_init": 2}, "n_init"),
    (dict(epsilon=1e-6), {"max_iter": 50}, "too small"),
])
def test_bad_input_is_refused_naming_the_argument(X, cfg, estimator_kw, match):
    kw = {"max_iter": ROUNDS, "random_state": 0, **estimator_kw}
    est = FederatedGaussianMixture(2, privacy=DPConfig(**cfg), **kw)
    with pytest.raises(ValueError, match=match):
        est.fit(X)


def test_a_non_config_privacy_is_refused(X):
    with pytest.raises(ValueError, match="privacy"):
        FederatedGaussianMixture(2, privacy={"epsilon": 1.0}).fit(X)


@pytest.mark.parametrize("model, n_components", [("poisson", 3), ("gmm", 3)])
def test_a_private_fit_honours_init_params(model, n_components):
    """init_params reaches the public θ_0 of a private fit (the Poisson imputer's was ignored)."""
    rng = np.random.default_rng(3)
    X = rng.poisson(rng.choice([1.0, 6.0, 15.0], size=(400, 1)), size=(400, 4)).astype(float)
    X[rng.random(X.shape) < 0.1] = np.nan
    cfg = DPConfig(epsilon=4.0, clip=4.0)
    fits = {init: FederatedImputer(model=model, n_components=n_components, init_params=init, max_iter=1,
                                   random_state=0, privacy=cfg).fit(X) for init in ("kmeans", "random")}
    assert not np.allclose(fits["kmeans"].transform(X), fits["random"].transform(X))


def test_a_private_fit_never_initialises_on_the_data(X, monkeypatch):
    """θ_0 of a private fit comes from the public geometry alone: init_theta never sees the rows."""
    from fedemstats.models import GaussianMixtureModel

    seen, real = [], GaussianMixtureModel.init_theta

    def recording(self, federation, *args, **kwargs):
        seen.append(federation.n_rows)
        return real(self, federation, *args, **kwargs)
    monkeypatch.setattr(GaussianMixtureModel, "init_theta", recording)
    FederatedGaussianMixture(2, max_iter=2, random_state=0, privacy=DPConfig(epsilon=2.0)).fit(X)
    assert seen and X.shape[0] not in seen
    FederatedGaussianMixture(2, max_iter=2, random_state=0).fit(X)
    assert seen[-1] == X.shape[0]  # the non-private fit does (the test can fail)


@pytest.fixture(scope="module")
def correlated():
    rng = np.random.default_rng(0)
    return rng.normal(size=(2000, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0.0, 0.0, 1.0]])


def test_private_fits_at_default_and_long_rounds_end_near_exact_em(correlated):
    """At scikit-learn's max_iter (100) a private 2-component mixture at ε = 1 on 2,000 rows blew up
    at round 53-65 (seeds 0-2): a component whose count fell below the noise level had its
    covariance floored about twice as large each round. It now keeps its previous moments
    (``gmm_denoise``), and the long runs end, further from exact EM than ``max_iter="auto"``'s 10
    M-steps (the budget split over ten times the releases): measured held-out gaps 0.03-0.07 nats per
    row at "auto", 0.13-0.26 at 100."""
    dp = DPConfig(epsilon=1.0, delta=1e-5, clip=3.0)
    M = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0.0, 0.0, 1.0]])
    held_out = np.random.default_rng(1).normal(size=(4000, 3)) @ M
    exact = GaussianMixture(2, random_state=0).fit(correlated).score(held_out)
    gaps = {}
    for max_iter in ("auto", 100):
        est = FederatedGaussianMixture(2, n_clients=20, random_state=0, privacy=dp, max_iter=max_iter).fit(correlated)
        assert all(np.isfinite(a).all() for a in (est.weights_, est.means_, est.covariances_))
        gaps[max_iter] = exact - est.score(held_out)
    assert est.n_iter_ == 100
    assert 0.0 < gaps["auto"] < gaps[100] < 0.5, gaps
    # a private run that does blow up still names the private fixes
    from fedemstats.algorithms import DivergenceError
    from fedemstats.algorithms.private import PrivateFedEM
    from fedemstats.algorithms.server import check_iterate
    with pytest.raises(DivergenceError, match="fewer rounds"):
        check_iterate(np.array([np.inf]), 53, 1.0, None, PrivateFedEM.divergence_advice)


@pytest.mark.parametrize("max_iter", ["auto", 20, 100])
def test_private_factor_analysis_at_client_level_does_not_crash(correlated, max_iter):
    """Client-level DP over 20 clients (ε = 10): a release made S_zz nearly singular, the T-map
    gave loadings of 1e9 and the next E-step raised LinAlgError on every seed. The design's
    noise-level floor (FactorAnalysisModel.dp_denoise) bounds them."""
    dp = DPConfig(epsilon=10.0, clip=2.5, level="client")
    for seed in range(3):
        est = FederatedFactorAnalysis(2, n_clients=20, random_state=seed, privacy=dp, max_iter=max_iter).fit(correlated)
        assert np.isfinite(est.score(correlated)) and np.all(np.isfinite(est.components_))
        assert np.abs(est.components_).max() < 1e3 * correlated.std(axis=0).max()
