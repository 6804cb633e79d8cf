"""The noisy-run convergence test's window rule (issue 11 item 3; ``docs/fedem.md``, "Convergence").

:meth:`.controller.StepController.converged` combines it with the mean-field and jitter tests.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CONVERGENCE_PATIENCE", "CONVERGENCE_WINDOW", "STOCHASTIC_TOL_FRACTION", "WINDOW_SE_FRACTION",
           "REFRESH_PATIENCE", "COVERAGE_MISS", "window_converged", "refresh_converged", "everyone_reported",
           "coverage_rounds"]

#: Shortest window of rounds over which the stochastic convergence test measures the gain
#: (one noisy round is not convergence) ...
CONVERGENCE_PATIENCE = 3
#: ... and the longest: over W rounds the log-likelihood gain grows like W while the noise
#: of the difference of two estimates does not, so a longer window resolves a smaller gain.
CONVERGENCE_WINDOW = 60
#: A noisy run stops when its log-likelihood gain per unit step is not significantly above
#: this fraction of ``tol``, and an EM step's estimated gain and the jitter of its step are below
#: it (:meth:`.controller.StepController.converged`): stricter than exact EM's
#: |Δℓ| < tol because the noisy path reaches its plateaus differently; stopping a little later
#: costs rounds, not accuracy (measured on diabetes, p = 0.5: a window test at the full tol
#: stopped 1.5e-3 nats per row short of exact EM).
STOCHASTIC_TOL_FRACTION = 0.5
#: The window's standard error per unit step must be below this fraction of the bound: a window
#: that passes then shows an estimated gain per unit step below ``tol`` (bound + 2 SE), and a
#: log-likelihood that is all noise (early rounds at p = 0.5, a stalled run) cannot pass.
WINDOW_SE_FRACTION = 0.5
#: VR-FedEM stops when this many consecutive outer loops each gained less than
#: STOCHASTIC_TOL_FRACTION · ``tol`` per unit step (:func:`refresh_converged`): one loop whose
#: rises and falls happen to cancel is not convergence.
REFRESH_PATIENCE = 2
#: :func:`coverage_rounds` allows for hearing every client with this chance of missing one
COVERAGE_MISS = 0.1


def window_converged(trail, tol) -> bool:
    """Whether some window of the trail shows no gain per unit step significantly (two standard
    errors) above b = STOCHASTIC_TOL_FRACTION · ``tol``, with a standard error per unit step below
    WINDOW_SE_FRACTION · b: its estimated gain per unit step is then below ``tol``.

    The bound on the standard error also counts the spread the steps inside the window add by
    their quantisation noise (``step_sigma``, :meth:`.controller.StepController.accept`): a noisy
    step can lower ℓ by chance, and a window that straddles it shows no net gain although the mean
    field has not vanished. Without that term, on the raw breast-cancer mixture (6 columns, 10
    clients) ``blockp:p=2``, ``randk:k=20`` and 5-of-10 participation said ``converged_`` 0.27–0.29
    nats/row short of exact EM, whose next step from there gained 1.8e-3 to 3e-3 (> ``tol``). The
    significance margin keeps the estimates' noise alone: with the steps' spread in it too, a
    window could pass with a gain up to twice as large (a diabetes fit at γ = 0.05 then stopped
    1.2e-3 nats/row short of exact EM instead of 5.7e-4).

    Under partial participation the control-variate log-likelihood keeps a first-order noise at
    stationarity (each client's log-likelihood moves with the iterate's jitter although their
    sum does not): demanding gain + 2 SE < b, which certifies the gain below b, never passed on
    factor analysis's slow plateaus (diabetes, p = 0.5: 1,000 rounds, well past exact EM's
    solution). Without the bound on the standard error, a window that is all noise would pass.
    """
    last_ll, last_var, _, _ = trail[-1]
    recent = trail[:0:-1]  # the last round first
    moves = np.cumsum([m for _, _, m, _ in recent])  # Σ of the last 1, 2, ... moves
    steps_var = np.cumsum([v for _, _, _, v in recent])  # and of their steps' variances
    for w in range(CONVERGENCE_PATIENCE, len(trail)):
        travel = moves[w - 1]
        if travel <= 0.0:
            continue
        ll, var, _, _ = trail[-1 - w]
        se, allowed = np.sqrt(last_var + var), STOCHASTIC_TOL_FRACTION * tol * travel
        spread = np.sqrt(last_var + var + steps_var[w - 1])
        if abs(last_ll - ll) - 2.0 * se < allowed and spread < WINDOW_SE_FRACTION * allowed:
            return True
    return False


def everyone_reported(unseen, held, active, n_clients) -> tuple:
    """Whether every client has reported since the convergence test last failed, and the
    clients still unseen after this round.

    Parameters
    ----------
    unseen : ndarray of bool of shape (n_clients,) or None
        Clients not active in any round since the test last failed (that round included: its
        direction fed the running averages this round's test read); None before any test.
    held : bool
        Whether this round's other convergence tests held.
    active : ndarray of int
        This round's active clients.
    n_clients : int

    Returns
    -------
    covered : bool
        The estimates this round's test read include a report of every client made since
        the test last failed. Under full participation it is True from the second test on.
    unseen : ndarray of bool of shape (n_clients,)
        For the next round: restarted (every client) when the test failed, then this
        round's active clients removed (their messages enter the averages after the test).

    Notes
    -----
    Under partial participation an absent client contributes its memory V_i, the statistic
    it sent when it last took part. The estimates therefore miss what the iterate's moves
    since then did to its statistic, and the test is re-read every round while the same
    client may stay away: on the Portal counts (24 plots, Poisson imputer, K = 8, p = 0.5,
    ``benchmarks/bench_counts.py``) one plot's statistics drove the iterate off a saddle
    point, that plot sat out 4 rounds in a row (probability 1/16), the estimated field fell
    to 0.05 of its bound while the true one rose to 1.1 times it, and the fit said
    ``converged_`` where one exact EM step gained 7.3 ``tol``. Waiting only for clients of at
    least 1 % of the weight was measured and rejected: with the same plots dealt over 120
    clients a fit stopped where an EM step gained 17 ``tol`` (``docs/fedem.md``, test 4).
    """
    covered = unseen is not None and not unseen.any()
    if not held or unseen is None:
        unseen = np.ones(n_clients, dtype=bool)
    unseen[active] = False
    return covered, unseen


def coverage_rounds(inclusion) -> int:
    """Rounds after which every client has been drawn at least once, except with probability
    about :data:`COVERAGE_MISS` (0 under full participation).

    The smallest R with Σ_i (1 − π_i)^R ≤ COVERAGE_MISS: rounds are drawn independently, so
    client i is missed by all R with probability (1 − π_i)^R, and the sum bounds the chance
    that some client is (a union bound, whatever the draws within a round). About
    ln(n / COVERAGE_MISS) / p for n clients at rate p: 8 rounds for 24 clients at p = 0.5, 110
    for 10,000 at p = 0.1, 570 at p = 0.02. :func:`everyone_reported` needs that many rounds once the other tests hold, so
    ``max_iter="auto"`` adds them to a partial-participation fit's budget.

    Parameters
    ----------
    inclusion : ndarray of shape (n_clients,)
        The clients' inclusion probabilities π_i (in (0, 1]).
    """
    miss = 1.0 - np.asarray(inclusion, dtype=np.float64)
    miss = miss[miss > 0.0]
    if miss.size == 0:
        return 0
    rounds = 1
    while np.sum(miss ** rounds) > COVERAGE_MISS:
        rounds *= 2
    low, high = rounds // 2, rounds  # the sum falls with R: bisect (low fails, high holds)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if np.sum(miss ** mid) <= COVERAGE_MISS else (mid, high)
    return int(high)


def refresh_converged(gains, tol, drifts, drift_max) -> bool:
    """VR-FedEM's convergence test, on its outer loops (``docs/fedem.md``, "Convergence").

    Parameters
    ----------
    gains : sequence of float
        Per outer loop, the exact log-likelihood change between the two full passes that
        bound it (every worker refreshes on all its rows, paper 003 Algorithm 2 line 20),
        divided by the steps Σ γ t taken in between; NaN when nothing moved.
    tol : float
    drifts : sequence of float
        Per outer loop (aligned with ``gains``), the share of the step's direction its
        workers' drift took (:meth:`.vr_fedem.VRFedEM.spider_noise`; NaN: not measured), with ...
    drift_max : float
        ... the most a loop may have for its gain to count.

    Returns
    -------
    bool
        Whether each of the last :data:`REFRESH_PATIENCE` loops gained less than
        b = STOCHASTIC_TOL_FRACTION · ``tol`` per unit step, in absolute value (a loop
        whose log-likelihood fell by more is not steady either), with a drift of at most
        ``drift_max``.

    Notes
    -----
    Both log-likelihoods are full-data values, so unlike :func:`window_converged` no noise
    is to be accounted for; the mini-batch noise of the inner steps only moves the iterate.
    Dividing by the steps keeps a small step from faking convergence. A loop whose steps the
    drift dominated can gain little while the mean field has not vanished (noise cancelling
    the gain): on standardised diabetes (full covariances, ``dither:s=4``, ``batch_size=8``)
    a fit said ``converged_`` 0.11 nats per row short of exact EM after loops whose drift took
    0.34 and 0.80 of the direction; held to ``drift_max`` it went on and converged 8.9e-4 above.
    """
    recent = np.asarray(gains[-REFRESH_PATIENCE:], dtype=float)
    if recent.size < REFRESH_PATIENCE or not np.all(np.isfinite(recent)):
        return False
    noisy = np.asarray(drifts[-REFRESH_PATIENCE:], dtype=float)
    if noisy.size < REFRESH_PATIENCE or not np.all(noisy <= drift_max):  # NaN: not measured
        return False
    return bool(np.all(np.abs(recent) < STOCHASTIC_TOL_FRACTION * tol))
