"""Secure aggregation's grid (fedemstats.privacy.secagg, algorithms.private_secagg).

* Flower's own SecAgg+ quantiser maps a share on our grid to an integer exactly, whatever
  NumPy's global random state (its stochastic rounding then has nothing to round).
* The stochastic rounding of the noise is unbiased (Monte Carlo, 4 standard errors).
* The rounded contributions' sum respects Δ' = Δ + √q h Ñ over random and adversarial
  neighbouring pairs.
* The grid never lets n clients' levels wrap the 2³² modulus; bad bounds are refused.
"""
import numpy as np
import pytest

from fedemstats.algorithms.private_secagg import count_grid, count_sensitivity, grid_sensitivity, share_grid
from fedemstats.privacy.secagg import MODULUS_RANGE, SecAggGrid, noisy_share, secagg_grid, share_bits


@pytest.mark.parametrize("n_clients", [2, 3, 7, 64, 1000, 100_000])
def test_grid_is_powers_of_two_and_never_wraps(n_clients):
    grid = secagg_grid(9.54, n_clients)
    assert grid.clip_range == 16.0 and grid.clip_range >= 9.54
    assert grid.target_range & (grid.target_range - 1) == 0
    assert n_clients * grid.target_range < MODULUS_RANGE
    assert 2 * n_clients * grid.target_range >= MODULUS_RANGE or grid.target_range == 2 ** 30
    assert np.log2(grid.step) == np.round(np.log2(grid.step))


@pytest.mark.parametrize("bound, n", [(0.0, 3), (-1.0, 3), (np.inf, 3), (np.nan, 3), (1.0, 0), (1.0, 2 ** 33)])
def test_bad_grids_are_refused(bound, n):
    with pytest.raises(ValueError, match="secure aggregation"):
        secagg_grid(bound, n)


def test_flower_quantiser_maps_shares_on_the_grid_exactly():
    flwr_quantize = pytest.importorskip("flwr.common.secure_aggregation.quantization").quantize
    rng = np.random.default_rng(0)
    grid = secagg_grid(20.0, 6)
    values = rng.normal(0, 5, 400)
    shares = noisy_share(values, 0.3, grid, key=123, stream=1, client=2)
    expected = np.rint((shares + grid.clip_range) / grid.step).astype(np.int64)
    assert np.all((shares / grid.step) == np.rint(shares / grid.step))
    for seed in range(3):  # Flower draws from NumPy's global state: it must not matter
        np.random.seed(seed)
        (got,) = flwr_quantize([shares], grid.clip_range, grid.target_range)
        np.testing.assert_array_equal(got.astype(np.int64), expected)
    # an off-grid value would be rounded at random by Flower: the check above can fail
    np.random.seed(0)
    (a,) = flwr_quantize([values], grid.clip_range, grid.target_range)
    np.random.seed(1)
    (b,) = flwr_quantize([values], grid.clip_range, grid.target_range)
    assert np.any(a != b)


def test_stochastic_rounding_is_unbiased_and_the_value_rounds_to_nearest():
    grid = SecAggGrid(clip_range=1.0, target_range=2 ** 4)  # h = 1/8: coarse on purpose
    noise = np.full(200_000, 0.3 * grid.step)
    rng = np.random.default_rng(1)
    shares, clipped = grid.share(np.zeros_like(noise), noise, rng)
    assert clipped == 0
    assert set(np.unique(shares)) <= {0.0, grid.step}
    se = grid.step * np.sqrt(0.3 * 0.7 / noise.size)
    assert abs(shares.mean() - noise[0]) < 4 * se
    value = np.array([0.49 * grid.step, 0.51 * grid.step, -3.2 * grid.step])
    rounded, _ = grid.share(value, np.zeros(3), rng)
    np.testing.assert_array_equal(rounded / grid.step, [0.0, 1.0, -3.0])


def test_out_of_range_shares_are_clipped_and_counted():
    grid = SecAggGrid(clip_range=1.0, target_range=2 ** 10)
    shares, clipped = grid.share(np.array([0.5, 3.0, -7.0]), np.zeros(3), np.random.default_rng(0))
    assert clipped == 2 and shares.tolist() == [0.5, 1.0, -1.0]


def test_rounded_sums_respect_the_grid_sensitivity():
    """Neighbouring contributions (one client's c moves by ≤ Δ): the rounded sums move by ≤ Δ'/Ñ."""
    rng = np.random.default_rng(2)
    q, delta, count, n = 12, 9.54, 300.0, 5
    grid = share_grid(1.0, delta, count, n)
    bound = grid_sensitivity(delta, grid, count, q) / count
    worst = 0.0
    for trial in range(1500):
        c = rng.normal(0, 50, (n, q))
        move = rng.normal(size=q)
        # half the pairs adversarial: the change sits exactly on the clip boundary and the
        # coordinates sit on half-steps, where rounding flips
        move *= delta / np.linalg.norm(move) if trial % 2 else rng.uniform(0, delta) / np.linalg.norm(move)
        if trial % 3 == 0:
            c[0] = (np.floor(c[0] / count / grid.step) + 0.5 - 1e-12) * grid.step * count
        neighbour = c.copy()
        neighbour[0] += move
        a = np.rint(c / count / grid.step).sum(0) * grid.step
        b = np.rint(neighbour / count / grid.step).sum(0) * grid.step
        worst = max(worst, np.linalg.norm(a - b) / bound)
    assert worst <= 1.0 + 1e-12
    assert worst > 0.9  # the bound is nearly attained by the boundary pairs (the test can fail)


def test_count_grid_keeps_integers_exact_while_the_step_allows():
    small, large = count_grid(4.0, 8), count_grid(4.0, 100_000)
    assert small.step <= 1.0 and count_sensitivity(small) == 1.0
    assert large.step > 1.0 and count_sensitivity(large) == 1.0 + large.step
    assert share_bits(10) == 11 * 32
