"""The server's step controller on its own (fedemstats.algorithms.controller): the decisions the
end-to-end tests only see through whole fits."""
import itertools

import numpy as np
import pytest

from fedemstats.algorithms.controller import (AUTO_GAMMA_MIN, CAP_MIN, CONVERGENCE_PATIENCE, CONVERGENCE_WINDOW,
                                              DROP_SIGMAS, DROP_TOL_FRACTION, NOISE_STEP_MAX,
                                              ROUNDOFF, STOCHASTIC_TOL_FRACTION, WINDOW_SE_FRACTION,
                                              StepController, running_average)
from fedemstats.algorithms.convergence import COVERAGE_MISS, coverage_rounds


def _accepted(ctl, ll=-8.391, gamma=0.3):
    cs = ctl.start(np.zeros(4))
    ctl.accept(cs, np.zeros(3), ll, 0.0, gamma, 1.0)
    return cs


def test_watchdog_rejects_a_drop_but_not_the_iterate_it_returned_to():
    """At tol = 0 with an exact log-likelihood, the iterate a rejection returns to is evaluated again and
    its sum over clients may sit one round-off below the accepted value: judging it rejected it forever."""
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl)
    assert ctl.rejects(cs, -8.392, 0.0, tol=0.0)
    ctl.reject(cs)
    again = -8.391 * (1.0 + 0.5 * ROUNDOFF)  # the same iterate, summed anew
    assert again < -8.391
    assert not ctl.rejects(cs, again, 0.0, tol=0.0)
    ctl.accept(cs, np.zeros(3), again, 0.0, 0.15, 1.0)
    assert ctl.rejects(cs, again - 1e-3, 0.0, tol=0.0)  # a real step is judged again


def test_no_convergence_window_straddles_a_rejection():
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    cs.noise_avg, cs.total_avg = 0.0, 0.0
    for _ in range(CONVERGENCE_PATIENCE + 1):
        ctl.converged(cs, -1.0, 0.0, tol=1e-3)
    assert ctl.converged(cs, -1.0, 0.0, tol=1e-3)[0]  # flat and moving: converged
    ctl.reject(cs)
    cs.noise_avg, cs.total_avg = 0.0, 0.0
    assert not ctl.converged(cs, -1.0, 0.0, tol=1e-3)[0]


def _held(ctl):
    """A run whose other convergence tests hold: flat log-likelihood, moving, no field or noise."""
    cs = _accepted(ctl, ll=-1.0)
    cs.noise_avg, cs.total_avg = 0.0, 0.0
    return cs


def test_no_convergence_before_every_client_reported_since_the_tests_last_failed():
    """4 clients, partial participation: the tests hold from the start, client 3 sits out. An
    absent client's memory misses what the iterate's moves did to its statistic."""
    ctl = StepController(None, stochastic=True)
    cs = _held(ctl)
    for _ in range(CONVERGENCE_PATIENCE + 5):
        assert not ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([0, 1, 2]))[0]
    # client 3 reports this round: its message enters the averages the *next* test reads
    assert not ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([3]))[0]
    assert ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([0]))[0]


def test_a_failed_test_restarts_the_count_of_clients_heard():
    ctl = StepController(None, stochastic=True)
    cs = _held(ctl)
    for _ in range(CONVERGENCE_PATIENCE + 1):
        ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.arange(4))
    assert ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([0, 1]))[0]  # all four heard since
    cs.total_avg = 1.0  # a mean field: the test fails, and what was heard before counts no more
    assert not ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([0, 1]))[0]
    cs.total_avg = 0.0
    assert not ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([2]))[0]  # 3 not heard since
    assert not ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([3]))[0]
    assert ctl.converged(cs, -1.0, 0.0, 1e-3, active=np.array([0]))[0]


def test_full_participation_converges_where_the_other_tests_first_hold():
    """Every client reports every round: the count adds no round (as before it existed)."""
    ctl = StepController(None, stochastic=True)
    cs = _held(ctl)
    cs.total_avg = 1.0
    for _ in range(CONVERGENCE_PATIENCE + 2):
        assert not ctl.converged(cs, -1.0, 0.0, 1e-3)[0]
    cs.total_avg = 0.0
    assert ctl.converged(cs, -1.0, 0.0, 1e-3)[0]


def test_a_fixed_step_too_large_for_the_noise_never_converges():
    """Flat log-likelihood, no mean field, but the step's jitter ½γ/(2−γ)·Var exceeds tol/2."""
    tol, gamma = 1e-3, 0.3
    ctl = StepController(lambda k: gamma, stochastic=True)
    cs = _accepted(ctl, ll=-1.0, gamma=gamma)
    noise = 2.5 * STOCHASTIC_TOL_FRACTION * tol * 2.0 * (2.0 - gamma) / gamma
    cs.noise_avg = cs.total_avg = noise
    for _ in range(CONVERGENCE_PATIENCE + 3):
        converged, _ = ctl.converged(cs, -1.0, 0.0, tol)
    assert not converged
    cs.noise_avg = cs.total_avg = noise / 10.0
    assert ctl.converged(cs, -1.0, 0.0, tol)[0]


@pytest.mark.parametrize("tol", [1e-3, 1e-5])
def test_an_em_step_must_gain_less_than_the_bound_not_tol(tol):
    """Flat log-likelihood, no noise: the mean-field test decides. An estimated EM step's gain
    ½‖P h‖² between b = STOCHASTIC_TOL_FRACTION · tol and tol is not convergence (on iris' factor
    analysis at p = 0.5, an estimate that dipped under tol stopped the fit where an exact EM step
    still gained 1.5 tol); just under b it is."""
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    bound = STOCHASTIC_TOL_FRACTION * tol
    cs.noise_avg = 0.0
    cs.total_avg = 2.0 * 0.9 * tol  # ½‖P h‖² = 0.9 tol: under exact EM's rule, over b
    for _ in range(CONVERGENCE_PATIENCE + 3):
        converged, _ = ctl.converged(cs, -1.0, 0.0, tol)
    assert not converged
    cs.total_avg = 2.0 * 0.99 * bound
    assert ctl.converged(cs, -1.0, 0.0, tol)[0]


def test_the_mean_field_and_jitter_tests_weigh_a_mixture_by_its_gain_ratio():
    """Flat log-likelihood: ½‖P h‖² = 0.6 b passes alone, but a mixture whose components carry
    ρ = 1 / π_k ≈ 3 gains 1.8 b per EM step (``Geometry.gain_ratio``): not converged. The jitter
    test likewise: a jitter cost of 0.6 b is 1.8 b at ρ = 3."""
    tol = 1e-3
    bound = STOCHASTIC_TOL_FRACTION * tol
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    cs.noise_avg, cs.total_avg = 0.0, 2.0 * 0.6 * bound
    for _ in range(CONVERGENCE_PATIENCE + 3):
        converged, _ = ctl.converged(cs, -1.0, 0.0, tol)
    assert converged
    cs.gain_ratio = 3.0
    assert not ctl.converged(cs, -1.0, 0.0, tol)[0]
    cs.total_avg = 2.0 * 0.3 * bound  # ρ ½‖P h‖² = 0.9 b
    assert ctl.converged(cs, -1.0, 0.0, tol)[0]

    gamma = 0.3
    ctl = StepController(lambda k: gamma, stochastic=True)
    cs = _accepted(ctl, ll=-1.0, gamma=gamma)
    cs.noise_avg = cs.total_avg = 0.6 * bound * 2.0 * (2.0 - gamma) / gamma  # jitter cost 0.6 b, no field
    for _ in range(CONVERGENCE_PATIENCE + 3):
        converged, _ = ctl.converged(cs, -1.0, 0.0, tol)
    assert converged
    cs.gain_ratio = 3.0
    assert not ctl.converged(cs, -1.0, 0.0, tol)[0]


def test_mini_batch_runs_do_not_claim_convergence():
    ctl = StepController(None, stochastic=True, watchdog=False)
    cs = _accepted(ctl, ll=-1.0)
    cs.noise_avg, cs.total_avg = 0.0, 0.0
    assert not any(ctl.converged(cs, -1.0, 0.0, tol=1e-3)[0] for _ in range(10))


def test_running_average_starts_at_the_first_value():
    assert running_average(None, 2.0) == 2.0
    assert running_average(2.0, 0.0) < 2.0


def _trail_test(ctl, cs, lls, se, tol):
    """Feed the log-likelihoods ``lls`` with standard error ``se`` (no mean field, no noise)."""
    cs.noise_avg, cs.total_avg = 0.0, 0.0
    out = None
    for ll in lls:
        cs.last_move = 1.0
        out = ctl.converged(cs, ll, se ** 2, tol)[0]
    return out


def test_a_gain_within_the_noise_converges_once_the_window_resolves_it():
    """Partial participation: the control-variate log-likelihood keeps a noise of first order at
    stationarity. A trail rising at 0.9 b per unit step (b = STOCHASTIC_TOL_FRACTION · tol) with
    a noise that "gain + 2 SE < b" could never beat converges once a window's standard error per
    unit step is below WINDOW_SE_FRACTION · b, and not on a short window (all noise)."""
    tol = 1e-5
    bound = STOCHASTIC_TOL_FRACTION * tol
    # two estimates' SE: 0.8 x what the longest window allows, far above what gain + 2 SE < b allows
    se = 0.8 * WINDOW_SE_FRACTION * bound * CONVERGENCE_WINDOW / np.sqrt(2.0)
    ctl = StepController(None, stochastic=True)
    trail = -1.0 + 0.9 * bound * np.arange(CONVERGENCE_WINDOW + 1)
    assert not _trail_test(ctl, _accepted(ctl, ll=-1.0), trail[:CONVERGENCE_PATIENCE + 2], se, tol)
    assert _trail_test(ctl, _accepted(ctl, ll=-1.0), trail, se, tol)


def test_a_log_likelihood_that_is_all_noise_never_converges():
    """A flat trail whose standard error exceeds what even the longest window allows."""
    tol = 1e-5
    se = 1.2 * WINDOW_SE_FRACTION * STOCHASTIC_TOL_FRACTION * tol * CONVERGENCE_WINDOW / np.sqrt(2.0)
    ctl = StepController(None, stochastic=True)
    assert not _trail_test(ctl, _accepted(ctl, ll=-1.0), np.full(2 * CONVERGENCE_WINDOW, -1.0), se, tol)


def test_a_window_straddling_a_noisy_step_that_fell_does_not_converge():
    """Exact log-likelihoods (p = 1) rising at 3 tol per step, then a noisy step that fell: the
    window of the last 3 rounds shows a net gain of 0.2 tol. Counting only the estimates' noise
    (none) it passed; the steps' own spread (step_sigma, 2 tol each) says that window is noise."""
    tol = 1e-3
    lls = -1.0 + tol * np.array([0.0, 3.0, 6.0, 9.0, 6.5, 8.0, 9.2])

    def run(sigma):
        ctl = StepController(None, stochastic=True)
        cs = _accepted(ctl, ll=-1.0)
        cs.noise_avg, cs.total_avg = 0.0, 0.0
        out = None
        for ll in lls:
            cs.last_move, cs.step_sigma = 1.0, sigma
            out = ctl.converged(cs, ll, 0.0, tol)[0]
        return out

    assert run(0.0)  # what the test did before the steps' spread was counted
    assert not run(2.0 * tol)


def test_a_gain_above_tol_does_not_converge():
    tol, se = 1e-5, 1e-7
    ctl = StepController(None, stochastic=True)
    rising = -1.0 + 2.0 * tol * np.arange(CONVERGENCE_WINDOW + 1)  # 2 tol per unit step
    assert not _trail_test(ctl, _accepted(ctl, ll=-1.0), rising, se, tol)
    assert _trail_test(ctl, _accepted(ctl, ll=-1.0), np.full(CONVERGENCE_WINDOW + 1, -1.0), se, tol)


def test_a_smallest_step_is_not_undone_and_the_watchdog_stands_down_until_a_gain():
    """From statistics T had to repair (a variance below reg_covar) the mean field itself lowers the
    log-likelihood; undoing its steps pinned the iterate there. A drop after a step at the floor
    (AUTO_GAMMA_MIN) stands, later drops too, and a gain beyond the noise re-arms the watchdog."""
    tol = 1e-3
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    cs.cap = 0.1 * AUTO_GAMMA_MIN  # after rejections: "auto" is held at its floor
    assert ctl.gamma(cs, 5, 0.0, 1.0) == AUTO_GAMMA_MIN and cs.smallest
    ctl.accept(cs, np.zeros(3), -1.0, 0.0, AUTO_GAMMA_MIN, 1.0)
    assert not ctl.rejects(cs, -1.01, 0.0, tol) and cs.descending
    ctl.accept(cs, np.zeros(3), -1.01, 0.0, AUTO_GAMMA_MIN, 1.0)
    cs.cap = 1.0
    assert ctl.gamma(cs, 6, 0.0, 1.0) > AUTO_GAMMA_MIN and not cs.smallest
    assert not ctl.rejects(cs, -1.02, 0.0, tol)  # still descending: a larger step's drop stands too
    ctl.accept(cs, np.zeros(3), -1.02, 0.0, 0.3, 1.0)
    assert not ctl.rejects(cs, -1.015, 0.0, tol)
    ctl.accept(cs, np.zeros(3), -1.015, 0.0, 0.3, 1.0)  # a gain: the watchdog is back
    assert not cs.descending
    assert ctl.rejects(cs, -1.02, 0.0, tol)


def test_the_floor_bounds_the_noise_a_step_carries_in_the_geometry():
    """Noise far above the signal: "auto" wants γ ≈ 0, and its floor is the γ whose noise
    γ √(Var P H) is NOISE_STEP_MAX (below AUTO_GAMMA_MIN), a step at the smallest γ. In raw
    coordinates (``geometric=False``) a length has no scale: the floor stays AUTO_GAMMA_MIN."""
    noise = 1e4  # Var P H
    for geometric, floor in ((True, NOISE_STEP_MAX / np.sqrt(noise)), (False, AUTO_GAMMA_MIN)):
        ctl = StepController(None, stochastic=True, geometric=geometric)
        cs = _accepted(ctl, ll=-1.0)
        gamma = ctl.gamma(cs, 5, noise, 0.99 * noise)  # the estimated field is 0
        assert gamma == pytest.approx(floor, rel=1e-12) and cs.smallest
    assert NOISE_STEP_MAX / np.sqrt(noise) < AUTO_GAMMA_MIN
    # a moderate noise leaves the floor where it was
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    assert ctl.gamma(cs, 5, 4.0, 4.04) == AUTO_GAMMA_MIN


def test_a_drop_after_a_step_above_the_floor_is_still_undone():
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    assert ctl.gamma(cs, 5, 0.0, 1.0) > AUTO_GAMMA_MIN and not cs.smallest
    assert ctl.rejects(cs, -1.01, 0.0, tol=1e-3) and not cs.descending


def test_a_schedule_at_the_smallest_cap_is_not_undone():
    ctl = StepController(lambda k: 0.5, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    cs.cap = CAP_MIN
    assert ctl.gamma(cs, 5, 0.0, 1.0) == 0.5 * CAP_MIN and cs.smallest
    assert not ctl.rejects(cs, -1.01, 0.0, tol=1e-3)


def test_the_smaller_step_after_a_rejection_falling_too_stands_the_watchdog_down():
    """Boston (heterogeneous split, diagonal covariances): from an iterate above what the mean field
    leads back to, every step falls; undone, the fit crept down at the largest step whose drop stayed
    under the threshold (182 rounds, 41 undone). The smaller step after a rejection falling as well,
    beyond the estimate's noise, is that signature."""
    tol = 1e-3
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    assert ctl.rejects(cs, -1.01, 0.0, tol)
    ctl.reject(cs)
    assert not ctl.rejects(cs, -1.0, 0.0, tol)  # the iterate returned to
    ctl.accept(cs, np.zeros(3), -1.0, 0.0, 0.15, 1.0)
    assert not ctl.rejects(cs, -1.00005, 0.0, tol) and cs.descending  # under the threshold, but a drop
    ctl.accept(cs, np.zeros(3), -1.00005, 0.0, 0.15, 1.0)
    assert not ctl.rejects(cs, -1.01, 0.0, tol)  # standing down
    ctl.accept(cs, np.zeros(3), -1.01, 0.0, 0.2, 1.0)
    assert not ctl.rejects(cs, -1.00995, 0.0, tol) and cs.descending  # a gain within the noise: still down
    ctl.accept(cs, np.zeros(3), -1.00995, 0.0, 0.2, 1.0)
    assert not ctl.rejects(cs, -1.005, 0.0, tol) and not cs.descending  # a gain beyond it: back up
    ctl.accept(cs, np.zeros(3), -1.005, 0.0, 0.2, 1.0)
    assert ctl.rejects(cs, -1.01, 0.0, tol)


def test_a_drop_within_the_estimates_noise_after_a_rejection_keeps_the_watchdog():
    """Partial participation: the log-likelihood is an estimate, and a smaller step that falls by
    less than its noise is no evidence against the accepted value."""
    tol, var = 1e-3, 1e-6  # standard error 1e-3
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    assert ctl.rejects(cs, -1.02, var, tol)
    ctl.reject(cs)
    assert not ctl.rejects(cs, -1.0, var, tol)
    ctl.accept(cs, np.zeros(3), -1.0, var, 0.15, 1.0)
    assert not ctl.rejects(cs, -1.001, var, tol) and not cs.descending


def test_a_drop_the_steps_own_noise_explains_is_not_undone():
    """An unbiased quantised step changes ℓ by its expected gain plus up to ‖P h‖ ‖e‖ (its first-order
    noise; dithering puts the error on the step's largest coordinates). Raw digits imputer, dither:s=4:
    drops of 2-2.3 of that below the expected gain were undone, a third of the rounds, and the fit
    stalled. Within DROP_SIGMAS of it a drop stands; beyond it, it is still undone."""
    tol, total, noise, downlink, gamma = 1e-4, 2.4e-4, 1.2e-5, 0.5, 0.36
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-84.8)
    ctl.gamma(cs, 5, noise, total)
    ctl.accept(cs, np.zeros(3), -84.8, 0.0, gamma, 1.0, downlink)
    sigma = gamma * np.sqrt((total - noise) * (noise + downlink * total))
    np.testing.assert_allclose(cs.step_sigma, sigma, rtol=1e-12)
    assert 2.0 * sigma > DROP_TOL_FRACTION * tol  # the case met: beyond the old threshold
    assert not ctl.rejects(cs, -84.8 - 2.0 * sigma, 0.0, tol)
    ctl.accept(cs, np.zeros(3), -84.8 - 2.0 * sigma, 0.0, gamma, 1.0, downlink)
    assert ctl.rejects(cs, -84.8 - 2.0 * sigma - DROP_SIGMAS * cs.step_sigma - tol, 0.0, tol)


def test_a_step_without_noise_or_after_a_rejection_has_no_spread():
    ctl = StepController(None, stochastic=True)
    cs = _accepted(ctl, ll=-1.0)
    ctl.gamma(cs, 5, 0.0, 1.0)
    ctl.accept(cs, np.zeros(3), -1.0, 0.0, 0.5, 1.0, 0.0)
    assert cs.step_sigma == 0.0  # noiseless step: the watchdog is as before
    ctl.gamma(cs, 6, 0.1, 1.0)
    ctl.accept(cs, np.zeros(3), -1.0, 0.0, 0.5, 1.0, 0.2)
    assert cs.step_sigma > 0.0
    ctl.reject(cs)
    assert cs.step_sigma == 0.0  # the iterate returned to was not reached by a noisy step


def test_the_fixed_size_sampling_variance_is_unbiased_where_the_bernoulli_form_is_not():
    """Over every 5-of-10 subset (the design, enumerated): the mean of direction_noise with
    fixed_size equals the true variance of H's Horvitz-Thompson sum exactly. The Bernoulli form,
    which fixed-size rounds used, counts the contributions' common part (the mean field) as
    noise: with the field twice the clients' spread it more than doubled the variance, and the field's
    estimate ‖H‖² − Var H fell to about 0 (a false convergence, test_compressed_real_data)."""
    rng = np.random.default_rng(0)
    n, k = 10, 5
    x = rng.normal(size=(n, 4)) + 2.0  # a common part: the mean field
    w, pi = rng.dirichlet(np.ones(n)), np.full(n, k / n)
    target = w @ x
    subsets = [list(a) for a in itertools.combinations(range(n), k)]
    sums = [(w[a] / pi[a]) @ x[a] for a in subsets]
    true_var = np.mean([np.sum((h - target) ** 2) for h in sums])

    def estimate(a, h, fixed):
        return StepController.direction_noise(w[a], pi[a], np.sum(x[a] ** 2, axis=1), np.zeros(k),
                                              fixed_size=fixed, sampled_sq=float(h @ h))

    fixed = np.mean([estimate(a, h, True) for a, h in zip(subsets, sums)])
    bernoulli = np.mean([estimate(a, h, False) for a, h in zip(subsets, sums)])
    assert fixed == pytest.approx(true_var, rel=1e-12)
    assert bernoulli > 2.0 * true_var


@pytest.mark.parametrize("inclusion", [np.full(24, 0.5), np.full(300, 0.1), np.r_[np.full(5, 0.9), np.full(40, 0.2)]],
                         ids=["24@0.5", "300@0.1", "mixed"])
def test_coverage_rounds_hears_every_client_but_with_the_allowed_chance(inclusion):
    """The smallest R whose union bound Σ (1 − π_i)^R is within COVERAGE_MISS; by Monte Carlo,
    independent draws then miss some client at most that often, and one round fewer breaks the bound."""
    rounds = coverage_rounds(inclusion)
    miss = 1.0 - inclusion
    assert np.sum(miss ** rounds) <= COVERAGE_MISS < np.sum(miss ** (rounds - 1))
    drawn = np.random.default_rng(0).random((4000, rounds, inclusion.size)) < inclusion
    missed = np.mean(~drawn.any(axis=1).all(axis=1))
    assert missed <= COVERAGE_MISS + 4 * np.sqrt(COVERAGE_MISS * (1 - COVERAGE_MISS) / 4000)


def test_coverage_rounds_is_zero_under_full_participation():
    assert coverage_rounds(np.ones(7)) == 0
    assert coverage_rounds(np.r_[np.ones(3), 0.5]) == coverage_rounds(np.array([0.5]))
