"""The server's decisions in a FedEM round: step size, safeguard and convergence (issues 11, 12).

Every decision is a pure function of what the server receives in a round (the decoded
messages, the compressor's estimate of their noise, each active client's mean
log-likelihood) and of the public iterate, so an in-process run and a Flower run take
the same steps. See ``docs/fedem.md`` ("Step size", "Safeguard", "Convergence").

Three estimates drive it.

* **Log-likelihood with a control variate.** The server keeps the last log-likelihood
  ℓ̃_i each client reported and estimates ℓ(θ_k) = Σ_i w_i ℓ_i(θ_k) by
  ``Σ_i w_i ℓ̃_i + Σ_{i∈A} (w_i/π_i)(ℓ_i(θ_k) − ℓ̃_i)``: unbiased given the memories,
  exact under full participation, and its variance vanishes as the iterates settle
  (the same device as FedEM's memories V_i, applied to one scalar per client).
* **Noise of the direction.** H = V + Σ_{i∈A} (w_i/π_i) q_i estimates the mean field
  h(Ŝ). Its variance, measured in the model's geometry, is the compression noise
  Σ (w_i/π_i)² E‖Q(x_i) − x_i‖² plus the sampling noise Σ w_i²(1 − π_i)/π_i² ‖x_i‖²
  (Horvitz-Thompson), both estimated from the messages alone
  (:meth:`Compressor.noise_estimate`).
* **Its signal.** E‖H‖² = ‖h‖² + Var H, so the Wiener factor
  γ = 1 − Var H / E‖H‖² is the step that best estimates h from H in mean square.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..models._geometry import TRUST_RATIO
from .convergence import (CONVERGENCE_PATIENCE, CONVERGENCE_WINDOW, STOCHASTIC_TOL_FRACTION,  # noqa: F401
                          WINDOW_SE_FRACTION, everyone_reported, window_converged)

__all__ = ["ControllerState", "StepController", "AUTO_GAMMA_MIN", "NOISE_STEP_MAX", "AUTO_GROWTH", "NOISE_MEMORY",
           "DROP_SIGMAS", "DROP_TOL_FRACTION", "CAP_MIN", "CONVERGENCE_PATIENCE", "CONVERGENCE_WINDOW",
           "STOCHASTIC_TOL_FRACTION", "WINDOW_SE_FRACTION", "MINIBATCH_DECAY", "ROUNDOFF",
           "running_average", "TRUST_SIGMAS"]

#: "auto" never steps below this: the safeguard (not a vanishing step) handles a noisy round,
#: and a floor keeps a run whose noise estimate spiked from freezing.
AUTO_GAMMA_MIN = 0.01
#: ... except that its noise, γ √(Var P H), never moves the iterate further than this per round in
#: the model's geometry (where a fitted block is of order 1): there the floor walked the iterate by
#: a whitened unit per round, each walk changed the geometry and with it the memories' errors
#: measured in it, and those errors fed the noise (breast cancer imputer, p = 0.5, tests/test_imputer.py).
NOISE_STEP_MAX = 0.1
#: "auto" may grow the step by at most this factor per accepted round ("grow slowly, cut fast":
#: a noise estimate that is low by chance cannot jump the step to 1 in one round).
AUTO_GROWTH = 1.25
#: Weight of the past in the running averages of the noise and of ‖H‖² (about five rounds).
NOISE_MEMORY = 0.8
#: A log-likelihood drop beyond this many standard errors of the two estimates ...
DROP_SIGMAS = 3.0
#: ... plus this fraction of ``tol`` rejects the step that led there.
DROP_TOL_FRACTION = 0.1
#: A rejection halves the step cap; it never goes below this, and regrows by AUTO_GROWTH per accepted round.
CAP_MIN = 1e-4
#: Relative round-off of a log-likelihood summed over clients: below it, a drop is no drop.
ROUNDOFF = 1e-12
#: The trust region's ratio (:meth:`StepController.trust_ratio`) is TRUST_SIGMAS times the step's
#: relative noise √ν, capped at TRUST_RATIO: the noise can move a margin by about √ν of the step,
#: so a margin is kept that far clear of zero; at the default ``dither:s=4`` ν is rarely below
#: (TRUST_RATIO / TRUST_SIGMAS)² = 1/64, and the ratio is TRUST_RATIO.
TRUST_SIGMAS = 2.0
#: With mini-batches "auto" also decays as k^(-MINIBATCH_DECAY) (Robbins-Monro, as online EM):
#: mini-batch noise is invisible in the messages (it looks like signal), and only a
#: decreasing step averages it out.
MINIBATCH_DECAY = 0.6


@dataclass
class ControllerState:
    """What the server remembers between rounds to take its decisions.

    Attributes
    ----------
    loglik_memory : ndarray of shape (n_clients,)
        ℓ̃_i, each client's last reported mean log-likelihood.
    noise_avg, total_avg : float or None
        Running averages of Var H and ‖H‖² in the model's geometry.
    gain_ratio : float or None
        Running average of the geometry's factor from ½ ‖P H‖² to an EM step's gain
        (:meth:`~fedemstats.models._geometry.Geometry.gain_ratio`: 1 / π_k in a mixture).
    gamma_prev : float
        γ of the last accepted step.
    cap : float
        In (0, 1]: halved by each rejection, regrown by AUTO_GROWTH per accepted round; it
        bounds "auto"'s γ and scales a user schedule's.
    accepted : tuple or None
        (Ŝ, ℓ̂, var ℓ̂) of the last accepted iterate: where a rejection returns to.
    last_move : float
        γ·t of the step that led to the current iterate (0 after a rejection).
    previous : tuple or None
        (ℓ̂, var ℓ̂) of the previous round.
    reverted : bool
        Whether the current iterate is the accepted one a rejection returned to (its
        log-likelihood is no step's outcome, so the watchdog has nothing to judge).
    smallest : bool
        Whether the step that led to the current iterate was the smallest the rule takes
        ("auto" held at AUTO_GAMMA_MIN, a schedule's cap at CAP_MIN).
    descending : bool
        The watchdog stands down: the mean field itself lowered the log-likelihood, so the
        accepted value is no bound it respects (:meth:`StepController.rejects`).
    probing : bool
        The next step judged is the smaller one after a rejection.
    step_sigma : float
        Standard deviation of the log-likelihood change that the quantisation noise of the
        step leading to the current iterate can cause (:meth:`StepController.accept`).
    trail : list of tuple
        (ℓ̂, var ℓ̂, move, step_sigma²) of the last CONVERGENCE_WINDOW + 1 rounds, for the
        convergence test (move and step_sigma of the step that led to the round's iterate).
    ceiling : float or None
        A bound on "auto"'s γ that replaces the mini-batch decay k^(-MINIBATCH_DECAY) when set:
        VR-FedEM's, from the noise its workers' statistics are found to carry at each refresh
        (:func:`.vr_fedem.spider_ceiling`).
    unseen : ndarray of bool of shape (n_clients,) or None
        Clients that have not reported since the convergence test last failed
        (:func:`.convergence.everyone_reported`).
    """

    loglik_memory: np.ndarray
    noise_avg: float | None = None
    total_avg: float | None = None
    gain_ratio: float | None = None
    gamma_prev: float = 1.0
    cap: float = 1.0
    accepted: tuple | None = None
    last_move: float = 0.0
    previous: tuple | None = None
    trail: list = field(default_factory=list)
    reverted: bool = False
    smallest: bool = False
    descending: bool = False
    probing: bool = False
    step_sigma: float = 0.0
    ceiling: float | None = None
    unseen: np.ndarray | None = None

    @property
    def field_sq(self) -> float:
        """‖P h‖², the squared mean field in the model's geometry, estimated as E‖P H‖² − Var P H
        of the running averages (clipped at 0: both are estimates)."""
        return max(self.total_avg - self.noise_avg, 0.0)

    @property
    def noise_ratio(self) -> float:
        """Var H / E‖H‖² of the running averages (the uplink's relative noise); NaN before
        any measurement or when E‖H‖² is 0."""
        return self.noise_avg / self.total_avg if self.total_avg else np.nan


def running_average(avg, value):
    """Exponential running average with memory NOISE_MEMORY (the first value starts it)."""
    return value if avg is None else NOISE_MEMORY * avg + (1.0 - NOISE_MEMORY) * value


class StepController:
    """The server's step rule, safeguard and convergence test.

    Parameters
    ----------
    schedule : callable ``k -> γ_k`` or None
        A user schedule (constant, decreasing, callable, or the theorem rule); None is
        the adaptive ``"auto"`` rule.
    stochastic : bool
        Whether H is noisy (compression, partial participation or mini-batches). Exact
        EM takes γ = 1 steps with no safeguard and the plain log-likelihood change as its
        convergence test (scikit-learn's rule).
    safeguard : bool
        Trust region and log-likelihood watchdog in the stochastic regime.
    watchdog : bool
        Whether the log-likelihood is a full-batch one the watchdog can trust (not with
        mini-batches, whose log-likelihood carries their own sampling noise).
    geometric : bool
        Whether the noise estimates are measured in the model's geometry (compression with
        ``precondition=True``), where :meth:`gamma_floor` bounds the step's noise.
    """

    def __init__(self, schedule, stochastic, safeguard=True, watchdog=True, geometric=True):
        self.schedule, self.stochastic = schedule, bool(stochastic)
        self.geometric = bool(geometric)
        self.safeguard = bool(safeguard) and self.stochastic
        self.watchdog = self.safeguard and bool(watchdog)
        self.full_batch = bool(watchdog)
        #: mini-batches (the watchdog is off for them): "auto" decays as k^(-MINIBATCH_DECAY)
        self.decay = MINIBATCH_DECAY if self.stochastic and not watchdog else 0.0

    def start(self, loglik0) -> ControllerState:
        """The state after round 0 (every client reported ℓ_i(θ_0))."""
        return ControllerState(loglik_memory=np.asarray(loglik0, dtype=np.float64).copy())

    # ------------------------------------------------------------------ estimates
    @staticmethod
    def loglik(cs, weights, active, pi, loglik):
        """Control-variate estimate of ℓ(θ_k) and its variance; updates the memories.

        Parameters
        ----------
        cs : ControllerState
        weights : ndarray of shape (n_clients,)
        active : ndarray of int of shape (m,)
        pi : ndarray of shape (m,)
        loglik : ndarray of shape (m,)
            ℓ_i(θ_k) of the active clients.

        Returns
        -------
        estimate, variance : float
        """
        mem = cs.loglik_memory
        c = weights[active] / pi
        diff = loglik - mem[active]
        estimate = float(weights @ mem + c @ diff)
        variance = float(np.sum(c ** 2 * (1.0 - pi) * diff ** 2))
        mem[active] = loglik
        return estimate, variance

    @staticmethod
    def direction_noise(weights_active, pi, signal_sq, noise_sq, fixed_size=False, sampled_sq=None) -> float:
        """Estimated Var H in the model's geometry: compression + Horvitz-Thompson sampling.

        With z_i = (w_i/π_i) x_i the contributions of the m active clients (x_i what client i
        encoded, in the geometry), the sampling variance of Σ z_i is (1 − π) Σ ‖z_i‖² under
        Bernoulli(π) sampling, and (1 − π)/(m − 1) (m Σ ‖z_i‖² − ‖Σ z_i‖²) for a fixed-size
        sample (``fixed_size``, equal π_i; Cochran's estimator, the contributions centred on their
        mean). The Bernoulli form there counts their common part, the mean field, as noise:
        with 5 of 10 clients it matched ‖h‖², the field's estimate ‖H‖² − Var H fell to about 0,
        and a raw breast-cancer mixture said ``converged_`` 0.27 nats/row short of exact EM.
        ``sampled_sq`` is ‖Σ_i (w_i/π_i) Q(x_i)‖², the decoded sum's; its quantisation part
        Σ (w_i/π_i)² noise_sq_i is taken out.
        """
        c = weights_active / pi
        compression = float(np.sum(c ** 2 * noise_sq))
        z_sq = c ** 2 * signal_sq
        m = weights_active.shape[0]
        if fixed_size and m >= 2 and sampled_sq is not None:
            sampling = (1.0 - float(pi[0])) / (m - 1) * (m * float(np.sum(z_sq)) - (sampled_sq - compression))
            return compression + max(sampling, 0.0)
        return compression + float(np.sum((1.0 - pi) * z_sq))

    # ------------------------------------------------------------------ decisions
    def rejects(self, cs, loglik, variance, tol) -> bool:
        """Watchdog: did the last step lower the log-likelihood beyond its noise?

        The watchdog stands down (``descending``) when the mean field itself lowers the
        log-likelihood: after a drop at the smallest step the rule takes, or when the smaller
        step that follows a rejection falls too (beyond the estimate's noise). From valid
        statistics an EM step cannot lower it; from statistics T had to repair (a variance
        below reg_covar, where a component is pure in a discrete column) it does, and undoing
        those steps pinned the iterate there (diabetes in 147 clients of 3 rows, diagonal
        covariances: 0.046 nats/row above exact EM, every other round undone, no convergence
        in 300 rounds). A gain beyond the noise stands it up again.

        The noise is that of the two estimates and that of the step itself: an unbiased
        quantised step changes the log-likelihood by its expected gain plus a random term
        (``step_sigma``, :meth:`accept`), which a drop within DROP_SIGMAS of it does not refute."""
        if not self.watchdog or cs.accepted is None or cs.reverted:
            return False
        _, ll_ok, var_ok = cs.accepted
        # the round-off of a sum of n clients' log-likelihoods is a drop no step made
        noise = DROP_SIGMAS * np.sqrt(variance + var_ok + cs.step_sigma ** 2) + ROUNDOFF * abs(ll_ok)
        margin = noise + DROP_TOL_FRACTION * tol
        probing, cs.probing = cs.probing, False
        if loglik > ll_ok + margin:  # a gain beyond the noise: the watchdog stands up
            cs.descending = False
        elif loglik < ll_ok - margin:  # a drop it undoes, unless no smaller step is left or it stands down
            if not (cs.smallest or cs.descending):
                return True
            cs.descending = True
        elif probing and loglik < ll_ok - noise:  # the smaller step after a rejection fell too
            cs.descending = True
        return False

    def gamma(self, cs, k, noise, total, downlink_noise=None) -> float:
        """γ_{k+1}: the schedule's, or the adaptive rule's; both under the cap.

        ``downlink_noise`` is the broadcast's measured ‖u − step‖² / ‖step‖²: the step's own
        quantisation noise divides the Wiener factor by 1 + it."""
        cs.noise_avg, cs.total_avg = running_average(cs.noise_avg, noise), running_average(cs.total_avg, total)
        if self.schedule is not None:
            # a user's step is scaled down by the rejections (the cap starts at 1), never clipped
            cs.smallest = cs.cap <= CAP_MIN
            return float(self.schedule(k)) * (cs.cap if self.safeguard else 1.0)
        wiener = 1.0 - cs.noise_ratio if cs.total_avg > 0.0 else 1.0
        wiener /= 1.0 + (downlink_noise or 0.0)
        wanted = min(wiener, AUTO_GROWTH * cs.gamma_prev, cs.cap)
        floor = self.gamma_floor(cs)
        cs.smallest = wanted <= floor
        ceiling = float(k) ** -self.decay if cs.ceiling is None else cs.ceiling
        return float(min(max(wanted, floor), ceiling))

    def gamma_floor(self, cs) -> float:
        """The smallest γ "auto" takes: AUTO_GAMMA_MIN, lowered so that the step's noise
        γ √(Var P H) stays within NOISE_STEP_MAX when the noise is measured in the model's
        geometry (``geometric``; in raw coordinates a length has no scale to compare with)."""
        if not (self.geometric and cs.noise_avg and cs.noise_avg > 0.0):
            return AUTO_GAMMA_MIN
        return min(AUTO_GAMMA_MIN, NOISE_STEP_MAX / float(np.sqrt(cs.noise_avg)))

    @staticmethod
    def trust_ratio(cs, downlink_noise) -> float:
        """The trust region's ratio this round: min(TRUST_RATIO, TRUST_SIGMAS · √ν).

        ν is the relative noise of the step the clients will apply: the uplink's measured
        Var H / E‖H‖² (running averages) plus the broadcast's ``downlink_noise``. The region
        guards a step against its noise; a noiseless step needs none (an EM step is a convex
        combination of valid statistics), so the region vanishes as the quantisation gets
        finer and compressed FedEM tends to exact EM (issue 11's continuity item).
        """
        uplink = cs.noise_ratio if cs.total_avg else 0.0
        nu = max(uplink, 0.0) + max(downlink_noise, 0.0)
        if not np.isfinite(nu):  # a noise estimate that is not a number: the full region
            return TRUST_RATIO
        return float(min(TRUST_RATIO, TRUST_SIGMAS * np.sqrt(nu)))

    def reject(self, cs):
        """Go back to the last accepted iterate and halve the cap; returns that Ŝ."""
        cs.cap = max(0.5 * cs.cap, CAP_MIN)
        cs.reverted = True
        cs.probing = True
        cs.gamma_prev = min(cs.gamma_prev, cs.cap)
        cs.noise_avg = cs.total_avg = None
        # a rejected round means the run is not steady: no window may straddle it
        cs.trail = []
        cs.last_move = 0.0
        cs.step_sigma = 0.0
        return cs.accepted[0].copy()

    def accept(self, cs, s_hat, loglik, variance, gamma, fraction, downlink_noise=0.0):
        """Remember an accepted iterate and the step taken from it (``gamma · fraction`` of H:
        0 when nothing moved, which the convergence test then does not count).

        Also the spread of the log-likelihood change the step's noise can cause. The step the
        clients apply is t H + e (t = γ · fraction), e its quantisation error (the uplink's
        Var H and the broadcast's ``downlink_noise`` · ‖t H‖²), and to first order it changes ℓ
        by t ⟨g, H⟩ + ⟨g, e⟩ with g ≈ P h, the mean field in the model's geometry (where an EM
        step's gain is ½‖P h‖²). Dithering's error is largest on the largest coordinates, which
        are those of g, so the Cauchy-Schwarz bound ‖g‖ ‖e‖ is used, not an isotropic guess:
        measured on the raw digits imputer (64 features, ``dither:s=4``), the drops that
        made the watchdog undo 69 of 329 rounds (exact EM: 69 rounds) were 2.0 to 2.3 of this
        bound below their expected gain."""
        cs.accepted = (s_hat.copy(), loglik, variance)
        cs.reverted = False
        cs.gamma_prev = gamma
        cs.cap = min(1.0, AUTO_GROWTH * cs.cap)
        cs.last_move = gamma * fraction
        if cs.total_avg is None or not np.isfinite(downlink_noise):
            cs.step_sigma = 0.0
            return
        # the noise estimates are unbiased, not positive: a negative one is no spread
        spread = max(cs.noise_avg + max(downlink_noise, 0.0) * cs.total_avg, 0.0)
        cs.step_sigma = float(cs.last_move * np.sqrt(cs.field_sq * spread))

    def converged(self, cs, loglik, variance, tol, active=None) -> tuple:
        """The convergence test of this round; returns (converged, gain per unit step).

        Exact EM: |ℓ_k − ℓ_{k−1}| < tol (scikit-learn's rule). Stochastic runs, three tests:

        * the log-likelihood shows no gain (:func:`.convergence.window_converged`): over some window of W
          rounds (CONVERGENCE_PATIENCE ≤ W ≤ CONVERGENCE_WINDOW), the gain *per unit step*
          |ℓ̂_k − ℓ̂_{k−W}| / Σ γ t (a small step does not fake convergence) is not two standard
          errors above b = STOCHASTIC_TOL_FRACTION · ``tol``, and its standard error is below
          WINDOW_SE_FRACTION · b (the estimated gain is then below ``tol``);
        * an EM step would gain less than b: ½ ρ (E‖P H‖² − Var P H), the estimated squared mean
          field in the model's geometry weighted by ρ = ``cs.gain_ratio`` (1 / π_k on a mixture's
          component k), ≈ Q, the complete-data gain of an exact EM step, is below b: exact EM's
          rule made stricter (a step gains between Q and 2Q, and the estimate is tested every
          round). A run stalled by noise gains nothing per step but fails this;
        * the log-likelihood the step's own jitter costs at stationarity, ½ ρ γ / (2 − γ) Var P H,
          is below b (a fixed step too large for the noise never gets within tol);

        and every client has reported since the tests last failed (``active``: this round's
        clients, None for all; :func:`.convergence.everyone_reported`). The gain reported is
        the one-round gain per unit step.
        """
        previous, cs.previous = cs.previous, (loglik, variance)
        move_before = cs.last_move  # γ·t of the step that led here
        cs.trail = (cs.trail + [(loglik, variance, move_before, cs.step_sigma ** 2)])[-(CONVERGENCE_WINDOW + 1):]
        if previous is None or tol is None:
            return False, np.nan
        change = loglik - previous[0]
        if not self.stochastic:
            return bool(abs(change) < tol), change
        gain = change / move_before if move_before > 0.0 else np.nan
        if cs.total_avg is None or not self.full_batch:
            # a mini-batch log-likelihood carries sampling noise no variance here accounts for:
            # such runs go to max_iter (as online EM's fixed number of passes)
            return False, gain
        # measured: bounded at tol, iris' factor analysis at p = 0.5 stopped where an exact EM step
        # still gained 1.5 tol; unweighted (ρ = 1), raw wine's mixture over 3-row clients too
        rho = cs.gain_ratio or 1.0
        field = 0.5 * rho * cs.field_sq
        # a fixed step's stationary jitter has variance ≈ γ / (2 − γ) · Var P H (half that in ℓ)
        jitter = 0.5 * rho * cs.gamma_prev / (2.0 - cs.gamma_prev) * cs.noise_avg
        bound = STOCHASTIC_TOL_FRACTION * tol
        held = window_converged(cs.trail, tol) and field < bound and jitter < bound
        n = cs.loglik_memory.shape[0]
        covered, cs.unseen = everyone_reported(cs.unseen, held, np.arange(n) if active is None else active, n)
        return held and covered, gain
