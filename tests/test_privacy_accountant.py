"""Issue 14 acceptance: the accountant is dp_accounting's, and calibration hits the target ε."""
from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from fedemstats.privacy import PrivacyPlan, calibrate_noise_multiplier, epsilon_spent
from fedemstats.privacy.accountant import PLD_DISCRETISATION, RDP_ORDERS

EPS_ABS_TOL = 1e-6
CALIBRATION_REL_TOL = 0.01


def independent_epsilon(sigma, rounds, rate, count_release, delta, kind):
    """The same releases written out directly against dp_accounting (not through our code)."""
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    acc = (rdp.RdpAccountant(list(RDP_ORDERS), relation) if kind == "rdp"
           else pld.PLDAccountant(relation, value_discretization_interval=PLD_DISCRETISATION))
    for _ in range(int(count_release) + 1):  # the count, then round 0 (everyone)
        acc.compose(dp_accounting.GaussianDpEvent(sigma))
    later = dp_accounting.GaussianDpEvent(sigma) if rate >= 1 else \
        dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(later, rounds - 1)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("kind", ["rdp", "pld"])
@pytest.mark.parametrize("sigma, rounds, rate, count", [(3.0, 10, 1.0, True), (1.5, 25, 0.2, True),
                                                        (8.0, 40, 1.0, False)])
def test_epsilon_matches_an_independent_dp_accounting_call(kind, sigma, rounds, rate, count):
    plan = PrivacyPlan(rounds=rounds, sampling_rate=rate, count_release=count, delta=1e-5, accountant=kind)
    ours = epsilon_spent(sigma, plan)
    theirs = independent_epsilon(sigma, rounds, rate, count, 1e-5, kind)
    assert ours == pytest.approx(theirs, abs=EPS_ABS_TOL)


@pytest.mark.parametrize("epsilon, rounds, rate", [(0.5, 20, 1.0), (2.0, 10, 1.0), (8.0, 30, 0.3)])
def test_calibrated_sigma_achieves_the_requested_epsilon(epsilon, rounds, rate):
    plan = PrivacyPlan(rounds=rounds, sampling_rate=rate, delta=1e-5)
    sigma = calibrate_noise_multiplier(epsilon, plan)
    spent = epsilon_spent(sigma, plan)
    assert spent <= epsilon * (1 + 1e-9)
    assert spent == pytest.approx(epsilon, rel=CALIBRATION_REL_TOL)
    # and it is the smallest such σ: 1% less noise overspends
    assert epsilon_spent(0.99 * sigma, plan) > epsilon


def test_more_rounds_spend_more_and_a_tiny_budget_is_refused():
    plan = PrivacyPlan(rounds=10)
    assert epsilon_spent(4.0, plan, rounds=3) < epsilon_spent(4.0, plan, rounds=10)
    with pytest.raises(ValueError, match="epsilon=1e-06 is too small"):
        calibrate_noise_multiplier(1e-6, PrivacyPlan(rounds=50))


def test_a_budget_too_large_to_calibrate_names_epsilon_and_the_way_out():
    """ε = 1000 over 10 rounds needs σ below the search bracket: it failed 15 frames deep in
    dp_accounting ('did not bracket a solution'); it now says what to do."""
    with pytest.raises(ValueError, match=r"epsilon=1000 is so large .*noise_multiplier < 0.3"):
        calibrate_noise_multiplier(1000.0, PrivacyPlan(rounds=10))


def test_a_public_scale_of_the_wrong_length_names_privacy_scale():
    from fedemstats import DPConfig
    with pytest.raises(ValueError, match=r"privacy: scale must be a number or have shape \(3,\)"):
        DPConfig(epsilon=1.0, scale=[1.0, 2.0]).public_geometry(3)
    np.testing.assert_array_equal(DPConfig(epsilon=1.0, scale=2.0).public_geometry(3)[1], [2.0, 2.0, 2.0])
