"""The server's step controller on its own (fedemstats.algorithms.controller): the decisions the
end-to-end tests only see through whole fits."""
import numpy as np

from fedemstats.algorithms.controller import (CONVERGENCE_PATIENCE, ROUNDOFF, STOCHASTIC_TOL_FRACTION,
                                              StepController, running_average)


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


def test_mini_batch_runs_do_not_claim_convergence():
    ctl = StepController(None, stochastic=True, watchdog=False)
    cs = _accepted(ctl, ll=-1.0)
    cs.noise_avg, cs.total_avg = 0.0, 0.0
    assert not any(ctl.converged(cs, -1.0, 0.0, tol=1e-3)[0] for _ in range(10))


def test_running_average_starts_at_the_first_value():
    assert running_average(None, 2.0) == 2.0
    assert running_average(2.0, 0.0) < 2.0
