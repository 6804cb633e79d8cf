"""Stochastic baselines as FedEM settings, and the estimator registry entries."""
import numpy as np
import pytest

from fedemstats.algorithms import FedEM, naive_compressed_em, online_em, stochastic_fedem
from fedemstats.federation import Federation
from fedemstats.models import GaussianMixtureModel, make_params

ENTROPY_BOUND = 2**62  # FedEM draws the public entropy of the client streams first


def problem(n_clients=4, rows=50, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    z = rng.integers(0, 3, n_clients * rows)
    X = means[z] + rng.standard_normal((z.size, 2))
    fed = Federation(X, np.arange(n_clients + 1) * rows)
    model = GaussianMixtureModel(3, 2, "full", shift=X.mean(0))
    theta0 = make_params(np.full(3, 1 / 3), means + 0.5, np.repeat(np.eye(2)[None], 3, 0))
    return model, fed, theta0


@pytest.mark.parametrize("gamma0, power", [(1.0, 0.6), (0.5, 1.0)])
def test_online_em_is_the_cappe_moulines_recursion(gamma0, power):
    model, fed, theta0 = problem()
    b, rounds, seed = 7, 15, 3
    res = online_em(model, b, gamma0=gamma0, power=power).run(fed, theta0, rounds, seed)
    rng = np.random.default_rng(seed)
    rng.integers(ENTROPY_BOUND)
    s = model.mean_stats(fed, theta0)
    for k in range(1, rounds + 1):
        X, seg = fed.select(None, b, rng)
        batch_mean = fed.weights @ model.segment_stats(X, seg, model.t_map(s))[0]
        s = s + gamma0 * k ** (-power) * (batch_mean - s)
    np.testing.assert_allclose(res.state.s_hat, s, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.history["step_size"].iloc[1:], gamma0 * np.arange(1, rounds + 1) ** -power)


def test_online_em_costs_b_rows_per_client_and_no_memory_upload():
    model, fed, theta0 = problem()
    h = online_em(model, 5).run(fed, theta0, 4, 0).history
    np.testing.assert_array_equal(h["n_cond_exp"], [fed.n_rows, 20, 20, 20, 20])


@pytest.mark.parametrize("power", [0.5, 0.3, 1.2])
def test_online_power_outside_robbins_monro_range_is_refused(power):
    model, _, _ = problem()
    with pytest.raises(ValueError, match=r"\(1/2, 1\]"):
        online_em(model, 5, power=power)


def test_online_gamma0_above_one_is_refused():
    model, _, _ = problem()
    with pytest.raises(ValueError, match="gamma0"):
        online_em(model, 5, gamma0=1.5)


def test_naive_compressed_em_has_no_memories():
    model, fed, theta0 = problem()
    res = naive_compressed_em(model, "dither:s=2", step_size=0.2).run(fed, theta0, 5, 0)
    assert not res.state.v_clients.any() and not res.state.v.any()
    ref = FedEM(model, compressor="dither:s=2", step_size=0.2, alpha=0.0, v_init="zero",
                safeguard=False).run(fed, theta0, 5, 0)
    np.testing.assert_array_equal(res.state.s_hat, ref.state.s_hat)


def test_stochastic_fedem_uses_mini_batches_and_mean_field_memories():
    model, fed, theta0 = problem()
    res = stochastic_fedem(model, 6, compressor="dither:s=4", step_size=0.3).run(fed, theta0, 3, 0)
    np.testing.assert_array_equal(res.history["n_cond_exp"], [2 * fed.n_rows, 24, 24, 24])
    assert res.state.v_clients.any()


# ---------------------------------------------------------------------- estimators
@pytest.fixture
def registered():
    from fedemstats.estimators._algorithms import ALGORITHMS
    return ALGORITHMS


def test_estimator_fits_with_vr_fedem(registered):
    from fedemstats.estimators.mixture import FederatedGaussianMixture
    assert "vr-fedem" in registered and "online" in registered
    model, fed, _ = problem(rows=80)
    groups = np.repeat(np.arange(fed.n_clients), fed.sizes)
    # 60 rounds each (tol = 0), so that the parameters can be compared
    est = FederatedGaussianMixture(3, algorithm="vr-fedem", step_size=0.5, batch_size=10, max_iter=60, tol=0,
                                   random_state=0).fit(fed.X, groups=groups)
    assert est.history_["outer"].max() >= 2 and np.isfinite(est.means_).all()
    em = FederatedGaussianMixture(3, algorithm="em", max_iter=60, tol=0, random_state=0).fit(fed.X, groups=groups)
    np.testing.assert_allclose(np.sort(est.means_, 0), np.sort(em.means_, 0), atol=1e-3)
    # at the default tol it stops on its outer loops' full passes, within tol of EM's log-likelihood
    early = FederatedGaussianMixture(3, algorithm="vr-fedem", step_size=0.5, batch_size=10, max_iter=60,
                                     random_state=0).fit(fed.X, groups=groups)
    assert early.converged_ and early.n_iter_ < 60
    assert abs(em.score(fed.X) - early.score(fed.X)) < early.tol


def test_estimator_reads_k_in_and_online_parameters(registered):
    from fedemstats.estimators.mixture import FederatedGaussianMixture
    model, fed, _ = problem(rows=80)
    groups = np.repeat(np.arange(fed.n_clients), fed.sizes)
    est = FederatedGaussianMixture(3, algorithm="vr-fedem", step_size=0.5, batch_size=10, max_iter=9,
                                   k_in=4, random_state=0)
    assert list(est.fit(fed.X, groups=groups).history_["outer"].iloc[1:]) == [1] * 4 + [2] * 4
    online = FederatedGaussianMixture(3, algorithm="online", batch_size=10, max_iter=5, online_power=1.0,
                                      random_state=0)
    steps = online.fit(fed.X, groups=groups).history_["step_size"].iloc[1:]
    np.testing.assert_allclose(steps, 1.0 / np.arange(1, 5))


def test_estimator_errors_for_the_new_algorithms(registered):
    from fedemstats.estimators.mixture import FederatedGaussianMixture
    X = np.random.default_rng(0).normal(size=(60, 2))
    with pytest.raises(ValueError, match="batch_size"):
        FederatedGaussianMixture(2, algorithm="online", max_iter=3).fit(X)
    with pytest.raises(ValueError, match="full participation"):
        FederatedGaussianMixture(2, algorithm="vr-fedem", participation=0.5, max_iter=3).fit(X)
