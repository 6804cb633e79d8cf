"""The log-likelihood an EM step gains, read in a model's geometry: ½ Σ_j c_j y_j² with y = P h
and c = 1 / π_k on a mixture's component k (``Geometry.gain_weights``; the convergence test's
mean-field and jitter bounds, docs/fedem.md *Convergence*).

The reference is independent of the geometry: the complete-data Kullback-Leibler divergence between
two parameter values, in closed form. Moving component k's mean by δ with L_k⁻¹ δ = ε e_1 changes
E_θ[s] by π_k (δ, δ mᵀ + m δᵀ + δ δᵀ), and KL = π_k ε² / 2. The weighted reading gives that up to
O(ε⁴); the unweighted ½ ‖y‖² gives π_k² ε² / 2, a factor π_k short (raw wine over 3-row clients
said ``converged_`` where one EM step still gained 1.5 ``tol``, tests/test_converged_em_step.py).
"""
import dataclasses

import numpy as np
import pytest
from scipy.linalg import cholesky

from _geometry_cases import make_case
from fedemstats.models.gmm_params import covariance_matrices

EPS = 1e-3


def _proxy(geometry, ds):
    y = geometry.forward(ds[None])[0]
    c = geometry.gain_weights()
    return 0.5 * float(np.sum(y * y if c is None else c * y * y)), 0.5 * float(y @ y)


@pytest.mark.parametrize("name", ["gmm-full", "gmm-tied", "gmm-diag", "gmm-spherical"])
def test_a_mean_move_gains_the_complete_data_kl_of_its_component(name):
    model, _, theta, _ = make_case(name)
    k = int(np.argmin(theta.weights))
    assert theta.weights[k] < 0.5  # the unweighted reading must be visibly short
    cov = covariance_matrices(theta.covariances, model.covariance_type, model.n_features)
    L = cholesky(cov[0 if model.covariance_type == "tied" else k], lower=True)
    means = np.array(theta.means, dtype=np.float64)
    means[k] += EPS * L[:, 0]  # whitened: ε e_1
    moved = dataclasses.replace(theta, means=means)
    s_a = model.expected_stats(theta)
    geometry = model.geometry(theta, s_a)
    kl = theta.weights[k] * EPS ** 2 / 2.0  # π_k · ½ (L⁻¹δ)ᵀ (L⁻¹δ)
    weighted, unweighted = _proxy(geometry, model.expected_stats(moved) - s_a)
    assert weighted == pytest.approx(kl, rel=1e-5)
    assert unweighted == pytest.approx(theta.weights[k] * kl, rel=1e-5)


def test_a_poisson_rate_move_gains_the_complete_data_kl_of_its_component():
    model, _, theta, _ = make_case("poisson")
    k = int(np.argmin(theta.weights))
    j = int(np.argmax(theta.rates[k]))  # far above the scale's floor: scaled by sqrt(λ_kj)
    lam = theta.rates[k, j]
    rates = np.array(theta.rates, dtype=np.float64)
    rates[k, j] = lam + EPS * np.sqrt(lam)
    moved = dataclasses.replace(theta, rates=rates)
    s_a = model.expected_stats(theta)
    geometry = model.geometry(theta, s_a)
    new = rates[k, j]
    kl = theta.weights[k] * (new * np.log(new / lam) - new + lam)  # Poisson KL, weighted by π_k
    weighted, unweighted = _proxy(geometry, model.expected_stats(moved) - s_a)
    assert weighted == pytest.approx(kl, rel=1e-3)
    assert unweighted == pytest.approx(theta.weights[k] * kl, rel=1e-3)


@pytest.mark.parametrize("name", ["fa", "gaussian-missing"])
def test_one_component_models_read_the_plain_norm(name):
    model, _, theta, s_hat = make_case(name)
    geometry = model.geometry(theta, s_hat)
    assert geometry.gain_weights() is None
    y = np.random.default_rng(0).normal(size=model.q)
    assert geometry.gain_ratio(y) == 1.0


def test_gain_ratio_is_one_for_a_zero_direction_and_weighs_components():
    model, _, theta, s_hat = make_case("gmm-diag")
    geometry = model.geometry(theta, s_hat)
    assert geometry.gain_ratio(np.zeros(model.q)) == 1.0
    c = geometry.gain_weights()
    parts = model.layout.unpack(c)
    for name in ("resp", "sum_x", "sum_xx"):
        per_component = np.asarray(parts[name]).reshape(model.n_components, -1)
        np.testing.assert_allclose(per_component, np.repeat(1.0 / theta.weights[:, None],
                                                            per_component.shape[1], axis=1))
    y = np.zeros(model.q)
    y[model.layout.slice("sum_x")] = 1.0  # every component's mean moves alike: ρ = mean of 1 / π_k
    assert geometry.gain_ratio(y) == pytest.approx(np.mean(1.0 / theta.weights))
