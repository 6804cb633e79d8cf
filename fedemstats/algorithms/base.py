"""What every expectation-space algorithm shares: settings, round 0, the server half and the driver.

Algorithms never see raw rows: they ask a model for client statistics on a
federation and move in statistic space (SPEC §1, §3). :class:`Algorithm` owns the
settings common to FedEM and VR-FedEM (compressor, participation, step size, memory
step α, geometry, safeguard), round 0 (:class:`.start.RoundZero`: Ŝ_0 and the memories V_{0,i}), the server half
of a round (:meth:`Algorithm.server_step`: direction, step rule, safeguard, convergence
test) and the driver: :meth:`Algorithm.start` returns an :class:`AlgorithmRun` that
steps one round at a time, and :meth:`Algorithm.run` steps it until ``n_rounds`` or
the stopping rule. Subclasses implement one round (:meth:`Algorithm.round`).
"""
from __future__ import annotations

import inspect
import logging

import numpy as np

from .._validation import check_int, check_positive, check_rng
from ..compression import make_compressor
from ..ledger import BitLedger
from ..models._geometry import IdentityGeometry
from ..participation import make_participation
from .broadcast import Broadcast, snap_point
from .controller import StepController, running_average
from .fine_start import (everyone_rounds, fine_rounds, fine_start_compressor, round_alpha, round_compressor,
                         round_sample)
from .server import DIVERGENCE_ADVICE, check_iterate, direction
from .start import V_INIT_CHOICES, RoundZero
from .history import History
from .state import ENTROPY_BOUND, AlgorithmRun, AlgorithmState, FitResult, draw_entropy
from .step_size import THEORY_ROW_VARIANCE, StepSize, effective_omega, make_step_size, theory_step_size

__all__ = ["Algorithm", "AlgorithmRun", "AlgorithmState", "FitResult", "draw_entropy", "V_INIT_CHOICES",
           "ENTROPY_BOUND", "StepSize", "make_step_size", "theory_step_size", "effective_omega"]

logger = logging.getLogger(__name__)

class Algorithm(RoundZero):
    """Base of the expectation-space algorithms (FedEM, VR-FedEM).

    Parameters
    ----------
    model : Model
    compressor : str or Compressor, default="identity"
        See :func:`fedemstats.compression.make_compressor`.
    participation : float, int or Participation, default=1.0
        See :func:`fedemstats.participation.make_participation`; the fine start's rounds and the
        first coarse ones take every client (:meth:`sample_round`).
    step_size : float, "auto", "theory" or callable, default="auto"
        γ_k (see :func:`.step_size.make_step_size`); ``"auto"`` adapts to the noise the
        server measures (:mod:`.controller`).
    alpha : float, optional
        Memory step; default ``1 / (1 + ω)`` (paper 003, Theorems 1 and 3).
    track_h : bool, default=False
        Record the exact mean-field norm ||h(Ŝ_k)||² each round (a full pass; a
        diagnostic, not counted in the ledger).
    precondition : bool, default=True
        Compress in the model's geometry (``model.geometry``); ω is then measured on
        the geometry's blocks.
    safeguard : bool, default=True
        Trust region and log-likelihood watchdog in noisy regimes (:mod:`.controller`).
    downlink_compressor : "auto", None, str or Compressor, default="auto"
        How the server sends the iterate (:mod:`.broadcast`): ``"auto"`` quantises its steps
        with the uplink's compressor (identity uplink: float64, as the paper); None sends
        Ŝ as float64 every round.
    fine_start : bool, default=False
        Run the first rounds of a coarse compressor, up and down, at the fine start's
        precision (:mod:`.fine_start`; FedEM's default is True, VR-FedEM has none).

    Notes
    -----
    Every constructor argument is stored under its own name, so
    ``type(algo)(**algo.get_params())`` builds the same algorithm.
    """

    #: rows per client per round; None = exact local means (FedEM and VR-FedEM set it)
    batch_size = None
    #: what the :class:`~.server.DivergenceError` of a blown-up iterate tells the user to change
    divergence_advice = DIVERGENCE_ADVICE

    def __init__(self, model, compressor="identity", participation=1.0, step_size="auto", alpha=None,
                 track_h=False, precondition=True, safeguard=True, downlink_compressor="auto", fine_start=False):
        self.model = model
        self.compressor = make_compressor(compressor)
        self.compressor.check_size(model.q)
        self.participation = make_participation(participation)
        self.step_size = step_size
        self.alpha = None if alpha is None else check_positive(alpha, "alpha", strict=False)
        self.track_h = bool(track_h)
        self.precondition = bool(precondition)
        self.safeguard = bool(safeguard)
        self.downlink_compressor = downlink_compressor
        self.fine_start = bool(fine_start)
        downlink = Broadcast.spec(downlink_compressor, self.compressor)
        blocks = model.layout.offsets
        self.fine_rounds = fine_rounds(self.compressor, model.q, blocks, self.fine_start)
        self.broadcast = Broadcast(downlink, model.q, fine_rounds(downlink, model.q, blocks, self.fine_start))

    def get_params(self) -> dict:
        """The constructor arguments as stored (compressor and participation as objects)."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    # ------------------------------------------------------------------ derived settings
    def uplink_compressor(self, round_):
        """The compressor of round ``round_``'s uploads: the fine start's in the first
        :attr:`fine_rounds` rounds (:mod:`.fine_start`), then :attr:`compressor`."""
        return round_compressor(self.compressor, self.fine_rounds, round_)

    def sample_round(self, round_, n_clients, rng):
        """(active, π) of round ``round_``: every client in the first
        :data:`.fine_start.EVERYONE_ROUNDS` rounds of a run with a fine start
        (:func:`.fine_start.round_sample`), then the participation's sample."""
        return round_sample(self.participation, everyone_rounds(self.fine_rounds), round_, n_clients, rng)

    def omega(self, geometry=None) -> float:
        """The compressor's ω on the blocks it quantises (the geometry's, else the layout's)."""
        blocks = self.model.layout.offsets if geometry is None else geometry.blocks
        return float(self.compressor.omega(self.model.q, blocks))

    def resolved_alpha(self, geometry=None) -> float:
        """α: the given one, else ``1 / (1 + ω)``."""
        return 1.0 / (1.0 + self.omega(geometry)) if self.alpha is None else self.alpha

    def resolved_alphas(self, geometry=None) -> tuple:
        """(α of the fine start's rounds, α after them): :meth:`resolved_alpha`, except that a
        default α is ``1 / (1 + ω)`` of the compressor each round's messages come from
        (:func:`.fine_start.round_alpha`); a given α holds throughout."""
        alpha = self.resolved_alpha(geometry)
        if self.alpha is not None or not self.fine_rounds:
            return alpha, alpha
        blocks = self.model.layout.offsets if geometry is None else geometry.blocks
        return 1.0 / (1.0 + float(fine_start_compressor().omega(self.model.q, blocks))), alpha

    def round_alpha(self, alphas, round_) -> float:
        """α of round ``round_`` from :meth:`resolved_alphas`' pair."""
        return round_alpha(alphas, self.fine_rounds, round_)

    def full_batches(self) -> bool:
        """Whether clients evaluate all their rows every round (no mini-batch noise)."""
        return self.batch_size is None

    def tests_convergence(self) -> bool:
        """Whether a run with ``tol > 0`` tests convergence at all: with full batches (every
        round's log-likelihood is a full-data one); mini-batch runs go to their budget."""
        return self.full_batches()

    def stochastic(self, n_clients) -> bool:
        """Whether the step is noisy: compression either way, partial participation or mini-batches."""
        return (self.omega() > 0.0 or not self.broadcast.lossless or not self.full_batches()
                or bool(np.any(self.participation.inclusion(n_clients) < 1.0)))

    def schedule(self, n_clients, budget=None):
        """The step sizes γ_k of a user or theorem rule (``"auto"``: the exact-EM step, 1).

        ``"theory"`` with mini-batches uses Corollary 2 with σ² = THEORY_ROW_VARIANCE / b over
        ``budget`` rounds."""
        sigma2 = 0.0 if self.full_batches() else THEORY_ROW_VARIANCE / self.rows_per_batch()
        return make_step_size(self.step_size, omega=self.omega(), n_clients=n_clients,
                              inclusion=self.participation.inclusion(n_clients), sigma2=sigma2, k_max=budget)

    def rows_per_batch(self) -> int:
        """b, the mini-batch size (only meaningful when not :meth:`full_batches`)."""
        return int(self.batch_size)

    def controller(self, n_clients, budget=None) -> StepController:
        """The server's step rule, safeguard and convergence test for ``n_clients`` clients."""
        stochastic = self.stochastic(n_clients)
        adaptive = isinstance(self.step_size, str) and self.step_size == "auto" and stochastic
        return StepController(None if adaptive else self.schedule(n_clients, budget), stochastic, self.safeguard,
                              watchdog=self.full_batches(), geometric=self.compresses_in_geometry())

    def client_geometry(self, theta, s_hat):
        """Where clients compress: the model's geometry at (θ, Ŝ), unless ``precondition=False``
        or the compressor is lossless (then the raw coordinates, so exact EM stays bit-exact)."""
        if self.compresses_in_geometry():
            return self.model.geometry(theta, s_hat)
        return IdentityGeometry(self.model.layout)

    def compresses_in_geometry(self) -> bool:
        """Whether clients compress in the model's geometry: ``precondition`` with a lossy compressor."""
        return self.precondition and self.omega() > 0.0

    def round_geometries(self, theta, s_hat, n_clients):
        """(trust, coords): the geometry the safeguard and the step rule measure in (the
        model's in noisy regimes), and :meth:`client_geometry`."""
        coords = self.client_geometry(theta, s_hat)
        if not self.stochastic(n_clients) or not isinstance(coords, IdentityGeometry):
            return coords, coords
        return self.model.geometry(theta, s_hat), coords

    def h_norm2(self, federation, s_hat) -> float:
        """||h(Ŝ)||² if ``track_h`` (a full diagnostic pass), else NaN."""
        return self.model.mean_field_norm2(federation, s_hat) if self.track_h else np.nan

    # ------------------------------------------------------------------ server half
    def server_step(self, state, weights, active, pi, sums, loglik, noise, geometries, alpha, tol=None,
                    project=None) -> dict:
        """Server half of round k -> k+1, in place on ``state``; pure given its inputs.

        Parameters
        ----------
        state : AlgorithmState
            With ``state.control`` (:class:`.controller.ControllerState`).
        weights : ndarray of shape (n_clients,)
        active : ndarray of int of shape (m,)
        pi : ndarray of shape (m,)
        sums : tuple of ndarray of shape (q,)
            :func:`.server.weighted_sums` of the decoded messages (raw coordinates).
        loglik : ndarray of shape (m,)
            ℓ_i(θ_k) reported by the active clients.
        noise : tuple of ndarray of shape (m,)
            (signal², noise²) of each message in the geometry
            (:meth:`~fedemstats.compression.Compressor.noise_estimate`).
        geometries : tuple (Geometry, Geometry)
            This round's (trust, coords) of :meth:`round_geometries`: the trust region is
            measured in the first, the noise of the messages in the second.
        alpha : float
        tol : float, optional
            Convergence threshold (see :meth:`.controller.StepController.converged`).
        project : callable, optional
            ``project(s) -> s'`` applied to the round's target Ŝ_k + H
            before the step: H becomes project(Ŝ_k + H) − Ŝ_k (differential privacy: the
            noise-level floor, :meth:`~fedemstats.models.base.Model.dp_denoise`).

        Returns
        -------
        dict
            The round's history fields: ``loglik``, ``loglik_se``, ``step_size``,
            ``step_fraction``, ``trust_ratio``, ``noise_ratio``, ``rejected``, ``gain``, ``converged``.
        """
        ctl, cs, k = self.controller(weights.shape[0], state.budget), state.control, state.round
        geometry, coords = geometries
        # the running noise estimates measured the fine start's quantiser, not the one that now
        # takes over: steps taken with them were too long (fine_start's measurements)
        if k > 0 and k == self.fine_rounds:
            cs.noise_avg = cs.total_avg = None
        if k > 0 and k == self.broadcast.fine_rounds:
            state.downlink.noise_ratio = None
        w = weights[active]
        h, state.v = direction(state.v, sums, alpha)
        if project is not None:
            h = project(state.s_hat + h) - state.s_hat
        ll, var = ctl.loglik(cs, weights, active, pi, loglik) if active.size else (np.nan, np.inf)
        converged, gain = ctl.converged(cs, ll, var, tol, active)
        row = {"loglik": ll, "loglik_se": float(np.sqrt(var)), "gain": gain, "converged": converged,
               "rejected": False, "step_fraction": 1.0, "trust_ratio": np.nan, "noise_ratio": np.nan}
        if ctl.rejects(cs, ll, var, tol or 0.0):
            state.s_hat = ctl.reject(cs)
            row.update(step_size=0.0, step_fraction=0.0, rejected=True, converged=False,
                       broadcast_bits=self.broadcast.revert(state.downlink))
        else:
            hy = coords.forward(h[None, :])[0]
            cs.gain_ratio = running_average(cs.gain_ratio, coords.gain_ratio(hy))
            fixed, sampled_sq = self.participation.fixed_size, None
            if fixed:  # Cochran's estimator needs the decoded sum's norm (direction_noise)
                sampled = coords.forward(sums[0][None, :])[0]
                sampled_sq = float(sampled @ sampled)
            noise_h = (ctl.direction_noise(w, pi, *noise, fixed_size=fixed, sampled_sq=sampled_sq)
                       if active.size else 0.0)
            gamma = ctl.gamma(cs, k + 1, noise_h, float(hy @ hy), state.downlink.noise_ratio)
            base, snap = state.s_hat, None
            if ctl.safeguard:
                ratio = ctl.trust_ratio(cs, self.broadcast.noise_level(state.downlink, coords, k))
                step, fraction, inside, snap = self._safe_step(geometry, state.s_hat, h, gamma, ratio)
            else:
                ratio, step, fraction, inside = np.nan, gamma * h, 1.0, None
            if snap is not None and self.broadcast.lossless:
                step = snap - state.s_hat + step  # the float64 step carries the snap itself
            elif snap is not None:
                base = snap
            u, bits, scale = self.broadcast.send(state.downlink, step, coords, inside, state.entropy, k,
                                                 snapped=base is snap)
            ctl.accept(cs, state.s_hat, ll, var, gamma, fraction * scale,
                       self.broadcast.noise_level(state.downlink, coords, k))
            state.s_hat = base + u
            row.update(step_size=gamma, step_fraction=fraction, trust_ratio=ratio, broadcast_bits=bits,
                       noise_ratio=cs.noise_ratio)
            check_iterate(state.s_hat, k + 1, gamma, state.scale, self.divergence_advice)
        state.round = k + 1
        return row

    def _safe_step(self, geometry, s_hat, h, gamma, ratio):
        """The safeguarded step from Ŝ along H: (step, fraction, inside, snap).

        ``fraction`` is the trust region's share of γ H and ``inside(u)`` tells whether a
        (quantised) step ``u`` from where the step starts keeps the iterate in the region, both
        with the round's ``ratio`` (:meth:`.controller.StepController.trust_ratio`). The step
        starts at Ŝ (``snap`` None) unless Ŝ itself lies outside (T had to repair it: an
        indefinite start, a Heywood case, a noisy collapse, a variance that one step took to
        the floor), when no fraction of any step is inside. The step then first *snaps* Ŝ to
        the statistics the current model implies, ``snap`` = E_θ[s] with θ = T(Ŝ) (which T maps
        back to the same θ, so the fixed point is untouched), and moves from there along
        H + Ŝ − E_θ[s], the mean field at the snapped point. The snap is public (every client
        computes it from Ŝ, :func:`.broadcast.snap_point`): only the move is quantised.
        """
        if geometry.contains(s_hat, np.zeros_like(h), ratio):
            step = geometry.project_step(s_hat, gamma * h, ratio)
            fraction = geometry.step_fraction(s_hat, step, ratio)
            return fraction * step, fraction, lambda u: geometry.contains(s_hat, u, ratio), None
        try:
            snap = snap_point(self.model, s_hat)
        except NotImplementedError:
            return gamma * h, 1.0, None, None
        region = self.model.geometry(self.model.t_map(snap), snap)
        step = region.project_step(snap, gamma * (h + (s_hat - snap)), ratio)
        fraction = region.step_fraction(snap, step, ratio)
        return fraction * step, fraction, lambda u: region.contains(snap, u, ratio), snap

    # ------------------------------------------------------------------ hooks
    def round(self, state, federation, rng, alpha, ledger, history, tol=None):
        """Run round k -> k+1 in place on ``state``, recording it in ``ledger`` and ``history``;
        the row's ``converged`` says whether the convergence test held with ``tol``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ driver
    def start(self, federation, theta0, random_state=None, tol=None) -> AlgorithmRun:
        """Round 0 from θ_0; returns the run to :meth:`AlgorithmRun.step`.

        Parameters
        ----------
        federation : Federation
        theta0 : parameters
            Initial θ_0 (e.g. from the model's federated initialisation).
        random_state : None, int or Generator
        tol : float, optional
            Threshold of the convergence test reported in each row's ``converged``.
        """
        rng = check_rng(random_state)
        self.participation.inclusion(federation.n_clients)  # a bad sampler fails before round 0
        ledger, records = BitLedger(), History()
        state = self.init_state(federation, theta0, rng, ledger, records)
        return AlgorithmRun(self, federation, state, rng, ledger, records, tol)

    def run(self, federation, theta0, n_rounds, random_state=None, tol=None, progress=None) -> FitResult:
        """Round 0, then up to ``n_rounds`` rounds.

        Parameters
        ----------
        federation : Federation
        theta0 : parameters
        n_rounds : int
            Rounds after the initialisation (round 0).
        random_state : None, int or Generator
        tol : float, optional
            Stop when the convergence test holds (:meth:`.controller.StepController.converged`):
            for exact EM the mean log-likelihood changes by less than ``tol``; noisy runs
            also need their gain per unit step, mean field and step jitter below ``tol / 2``.
        progress : callable, optional
            Called as ``progress(round, history_row)`` after each round.

        Returns
        -------
        FitResult
        """
        n_rounds = check_int(n_rounds, "n_rounds", minimum=0)
        run = self.start(federation, theta0, random_state, tol)
        run.state.budget = n_rounds
        converged = False
        for _ in range(n_rounds):
            row = run.step()
            if progress is not None:
                progress(row["round"], row)
            if row.get("converged", False):
                converged = True
                break
        logger.debug("%s finished after %d rounds (converged=%s)", type(self).__name__, run.state.round, converged)
        return run.result(converged)
