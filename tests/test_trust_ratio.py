"""The trust region shrinks with the noise of the step (issue 11's continuity item).

The region guards a compressed step against its own noise; an exact EM step (a convex combination
of valid statistics) needs none. Its ratio is min(TRUST_RATIO, TRUST_SIGMAS · √ν), ν the relative
noise of the uplink's direction plus the downlink's broadcast, so it is the full TRUST_RATIO at the
default ``dither:s=4`` and vanishes as the quantisation gets finer.
"""
import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.preprocessing import StandardScaler

from fedemstats.algorithms.broadcast import Broadcast
from fedemstats.algorithms.fine_start import FINE_START_ROUNDS
from fedemstats.algorithms.controller import TRUST_SIGMAS, ControllerState, StepController
from fedemstats.compression import make_compressor
from fedemstats.estimators import FederatedGaussianMixture
from fedemstats.layout import StatLayout
from fedemstats.models._geometry import IdentityGeometry, TRUST_RATIO


def _state(noise, total):
    cs = ControllerState(loglik_memory=np.zeros(3))
    cs.noise_avg, cs.total_avg = noise, total
    return cs


@pytest.mark.parametrize("uplink, downlink", [(0.0, 0.0), (1e-6, 0.0), (0.0, 1e-4), (2e-3, 3e-3), (0.5, 0.6)])
def test_ratio_is_sigmas_times_the_relative_noise_capped_at_the_region(uplink, downlink):
    expected = min(TRUST_RATIO, TRUST_SIGMAS * np.sqrt(uplink + downlink))
    assert StepController.trust_ratio(_state(uplink * 7.0, 7.0), downlink) == pytest.approx(expected, rel=1e-12)


def test_ratio_vanishes_with_the_noise_and_ignores_negative_estimates():
    # the noise estimates are unbiased, so a tiny noise can be estimated below zero: it counts as none
    assert StepController.trust_ratio(_state(-1e-3, 1.0), -1e-4) == 0.0
    assert StepController.trust_ratio(_state(None, None), 0.0) == 0.0
    # a noise estimate that is not a number says nothing: the full region
    assert StepController.trust_ratio(_state(np.nan, 1.0), 0.0) == TRUST_RATIO
    ratios = [StepController.trust_ratio(_state(nu, 1.0), 0.0) for nu in (2e-2, 1e-4, 1e-6, 1e-8)]
    assert ratios[0] == TRUST_RATIO and all(a > b for a, b in zip(ratios, ratios[1:])) and ratios[-1] < 1e-3


def test_broadcast_noise_level_is_the_bound_until_measured_then_the_measure():
    q = 40
    coords = IdentityGeometry(StatLayout([("a", (10,)), ("b", (q - 10,))]))
    assert Broadcast(None, q).noise_level(None, coords, 0) == 0.0  # lossless float64 downlink
    bc = Broadcast("dither:s=4", q)
    bs = bc.start(3, True)
    assert bc.noise_level(bs, coords, 0) == make_compressor("dither:s=4").omega(q, coords.blocks)
    step = np.random.default_rng(0).normal(size=q)
    bc.send(bs, step, coords, None, 12345, 1)
    assert bs.noise_ratio is not None and bc.noise_level(bs, coords, 0) == bs.noise_ratio


@pytest.fixture(scope="module")
def diabetes():
    return StandardScaler().fit_transform(load_diabetes().data)


def _history(X, **kw):
    return FederatedGaussianMixture(3, n_clients=20, random_state=0, tol=0.0, max_iter=25, **kw).fit(X).history_


@pytest.mark.filterwarnings("ignore:.*did not converge")
def test_default_compression_keeps_the_full_region(diabetes):
    """At dither:s=4 the step's noise is far above (TRUST_RATIO / TRUST_SIGMAS)²: the region is as
    before, once the fine start's 64-level rounds are over (their region is smaller)."""
    h = _history(diabetes, compressor="dither:s=4").iloc[1:]
    moved, fine = ~h["rejected"].to_numpy(bool), h["round"].to_numpy() <= FINE_START_ROUNDS
    np.testing.assert_array_equal(h["trust_ratio"].to_numpy()[moved & ~fine], TRUST_RATIO)
    assert np.all(h["trust_ratio"].to_numpy()[moved & fine] < TRUST_RATIO)


@pytest.mark.filterwarnings("ignore:.*did not converge")
def test_fine_compression_shrinks_the_region_and_exact_em_has_none(diabetes):
    fine = _history(diabetes, compressor="dither:s=65536", step_size=1.0)["trust_ratio"].to_numpy()[1:]
    assert np.all(fine < TRUST_RATIO / 4)
    assert np.isnan(_history(diabetes, algorithm="em")["trust_ratio"].to_numpy()).all()
