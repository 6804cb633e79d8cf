"""Property-based tests of the Poisson mixture's geometry on ugly parameters: rates from the
T-map's floor (1e-8) to 1e6 in one component, empty components, columns whose every rate sits
at the floor (Hypothesis; docs/geometry.md, *The scale's floor*)."""
import numpy as np
from _hypothesis_profiles import profile
from hypothesis import given
from hypothesis import strategies as st

from fedemstats.models.poisson_geometry import SCALE_FLOOR_FRACTION, PoissonGeometry
from fedemstats.models.poisson_mixture import RATE_FLOOR, PoissonMixtureModel, PoissonMixtureParams

PROFILE = profile("poisson-geometry", 60, 600)


def _case(seed, K, d):
    """(model, θ, Ŝ = E_θ[s]) with log-uniform rates over [RATE_FLOOR, 1e6], a third of them at
    the floor, and sometimes an empty component."""
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.ones(K))
    if K > 1 and rng.random() < 0.3:
        weights[rng.integers(K)] = 0.0
        weights /= weights.sum()
    rates = 10.0 ** rng.uniform(np.log10(RATE_FLOOR), 6.0, size=(K, d))
    rates[rng.random((K, d)) < 1 / 3] = RATE_FLOOR
    model = PoissonMixtureModel(K, d)
    theta = PoissonMixtureParams(weights, rates)
    return model, theta, model.expected_stats(theta)


@PROFILE
@given(seed=st.integers(0, 2 ** 32 - 1), K=st.integers(1, 5), d=st.integers(1, 6))
def test_floored_scale_inverts_and_bounds_a_rate_that_rises_to_its_column_mean(seed, K, d):
    model, theta, s_hat = _case(seed, K, d)
    G = PoissonGeometry(model, theta, s_hat, RATE_FLOOR)
    x = np.random.default_rng(seed + 1).normal(size=(3, model.q)) * np.abs(s_hat).max()
    np.testing.assert_allclose(G.inverse(G.forward(x)), x, rtol=1e-12, atol=1e-12 * np.abs(x).max())
    column = theta.weights @ theta.rates
    offset = model.layout.offsets[1]
    for k, j in zip(*np.nonzero(~G.fallback & (theta.rates < column))):
        # the step that lifts rate (k, j) to its column's mean: its whitened size is at most
        # s0_k sqrt(λ̄_j / SCALE_FLOOR_FRACTION) (by 1/sqrt(RATE_FLOOR) = 1e4 times the change before)
        step = np.zeros(model.q)
        step[offset + k * d + j] = theta.weights[k] * (column[j] - theta.rates[k, j])
        y = G.forward(step[None])[0, offset + k * d + j]
        bound = theta.weights[k] * np.sqrt(column[j] / SCALE_FLOOR_FRACTION)
        assert abs(y) <= bound * (1 + 1e-12), (k, j, y, bound)
