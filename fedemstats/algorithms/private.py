"""Differentially private FedEM (issue 14): FedEM's round on bounded, noised statistics.

Each round releases one Gaussian mechanism on Σ_{i∈A} c_i, the active clients' bounded
contributions in the coordinates P_k of the release (:mod:`.private_stats`: the model's
whitening at θ_k, or the raw coordinates), with noise N(0, σ²Δ² I): added to the
aggregate by the server (``mode="central"``) or drawn in shares N(0, σ²Δ²/|A|) by the
clients (``"distributed"``, which needs secure aggregation). The count Ñ (rows or
clients) is released once at round 0 the same way (sensitivity 1) unless it is public.
Client i's statistic is then S_i = n P_k⁻¹(c_i + ζ_i) / Ñ with uniform weights 1/n, so that
FedEM's H = Σ_{i∈A} (1/(n π)) (S_i − Ŝ_k) (+ P_k⁻¹ Z / (π Ñ) in central mode) is the
Horvitz-Thompson mean statistic at θ_k minus Ŝ_k (P_k⁻¹ is linear and public): the round's
structure (``client_update``, then ``server_step``) is unchanged. Everything after the
noise — P_k⁻¹, the step, the trust region, the noise-level floor of the covariances
(:meth:`~fedemstats.models.base.Model.dp_denoise`), the broadcast (any downlink
quantiser) — is post-processing of the release, so it costs no privacy.

Settings that would re-use un-noised data are off: the memories (α = 0, V = 0: they
would carry stale, un-noised statistics into later rounds), the log-likelihood watchdog
and the convergence test (their decisions would depend on raw log-likelihoods; the
rounds run to the end, which is what the accountant charges anyway).
"""
from __future__ import annotations

import logging

import numpy as np

from ..compression import make_compressor
from ..ledger import FLOAT64_BITS
from ..participation import BernoulliParticipation, FixedSizeParticipation, FullParticipation
from ..privacy import (PrivacyPlan, calibrate_noise_multiplier, check_privacy, epsilon_spent, gaussian_noise,
                       sampling_rate)
from ..privacy.secagg import share_bits
from .controller import StepController
from .fedem import FedEM
from .private_secagg import (Release, count_grid, count_share, grid_sensitivity, share_grid, stats_shares,
                             sums_from_total)
from .private_stats import clipped_contributions, noise_geometry, sensitivity
from .server import client_update, weighted_sums
from .state import draw_entropy
from .step_size import make_step_size
from .streams import round_streams

__all__ = ["PrivateFedEM", "DP_DEFAULT_STEP"]

logger = logging.getLogger(__name__)

#: the step of "auto" under privacy: noisy EM (γ = 1); the adaptive rule would read raw messages
DP_DEFAULT_STEP = 1.0
#: the noisy count is floored here (a count cannot be below one row or client)
MIN_COUNT = 1.0


class PrivateFedEM(FedEM):
    """FedEM under (ε, δ)-differential privacy (``docs/privacy.md``).

    Parameters
    ----------
    model : Model
        With its public geometry (:func:`.private_stats.public_model`).
    privacy : DPConfig
    participation : float, int or Participation, default=1.0
        Full, Bernoulli(p) with one p (Poisson sampling: amplifies in central mode), or a
        fixed-size sample (accounted without amplification).
    step_size : float, "auto" or callable, default="auto"
        ``"auto"`` is γ = 1 (noisy EM).
    safeguard : bool, default=True
        The trust region (a function of public quantities only).
    downlink_compressor : "auto", None, str or Compressor, default="auto"
        Post-processing of the noisy iterate; any compressor.
    compressor : str or Compressor, default="identity"
        The uplink; must be lossless (the noise has to come before any lossy step, and a
        sum of individually quantised messages is not a function of the noisy sum).
    """

    #: A private round's noise grows with the rounds the budget is split over. (A component whose
    #: count fell below that noise used to have its covariance floored about twice as large each
    #: round, until Ŝ blew up at round 53-65 of 100 on a 2-component mixture at ε = 1; it now keeps
    #: its previous moments, :mod:`fedemstats.models.gmm_denoise`.)
    divergence_advice = ("A private round's noise grows with the number of rounds the budget is split "
                         "over: use fewer rounds (max_iter; 'auto' is 10 for a private fit), fewer "
                         "components, a larger epsilon or more rows.")

    def __init__(self, model, privacy, participation=1.0, step_size="auto", safeguard=True,
                 downlink_compressor="auto", compressor="identity"):
        if make_compressor(compressor).omega(model.q) != 0.0:
            raise ValueError("compressor: a private fit needs a lossless uplink ('identity'); quantise the "
                             "downlink instead (downlink_compressor), which is post-processing.")
        # no fine start: the privacy noise, not quantisation, dominates the first steps
        super().__init__(model, compressor, participation, step_size, alpha=0.0, v_init="zero",
                         safeguard=safeguard, downlink_compressor=downlink_compressor, fine_start=False)
        self.privacy = check_privacy(privacy)
        if isinstance(self.participation, BernoulliParticipation) and np.ndim(self.participation.p) > 0:
            raise ValueError("participation: a private fit needs one participation probability for every "
                             "client (per-client rates make the weighted sum's sensitivity B / min p).")
        if not isinstance(self.participation, (FullParticipation, BernoulliParticipation,
                                               FixedSizeParticipation)):
            raise ValueError("participation: a private fit supports full, Bernoulli(p) or fixed-size "
                             "participation.")
        self.planned_rounds = None

    # ------------------------------------------------------------------ accounting
    def plan(self, n_clients, n_rounds) -> PrivacyPlan:
        """The releases of a run of ``n_rounds`` rounds after round 0."""
        cfg = self.privacy
        return PrivacyPlan(rounds=int(n_rounds) + 1, delta=cfg.delta, accountant=cfg.accountant,
                           sampling_rate=sampling_rate(self.participation, n_clients, cfg.mode),
                           count_release=cfg.public_count is None)

    def noise_multiplier(self, plan) -> float:
        """σ: the given one, or the smallest that spends at most ε over ``plan``."""
        if self.privacy.noise_multiplier is not None:
            return float(self.privacy.noise_multiplier)
        return calibrate_noise_multiplier(self.privacy.epsilon, plan)

    # ------------------------------------------------------------------ settings
    def stochastic(self, n_clients) -> bool:
        """Always: the noise makes every round stochastic (trust region in the model's geometry)."""
        return True

    def controller(self, n_clients, budget=None) -> StepController:
        """A public step schedule and the trust region; no watchdog, no convergence test."""
        rule = DP_DEFAULT_STEP if isinstance(self.step_size, str) else self.step_size
        return StepController(make_step_size(rule), True, self.safeguard, watchdog=False)

    # ------------------------------------------------------------------ the mechanism
    def private_stats(self, federation, theta, clients, dp, rng, geometry, pi):
        """Central mode: the active clients' clipped statistics S_i = n P⁻¹ c_i / Ñ and the
        server's noise on H.

        Parameters
        ----------
        geometry : Geometry
            P, the release's coordinates (:func:`.private_stats.noise_geometry` at θ).
        pi : float
            The clients' inclusion probability this round (1 at round 0, where all take part).

        Returns
        -------
        stats : ndarray of shape (m, q)
            Raw statistic coordinates.
        dp_noise : ndarray of shape (q,)
            P⁻¹ Z / (π Ñ) with Z ~ N(0, σ²Δ² I).
        """
        contrib, _ = clipped_contributions(self.model, federation, theta, clients, self.privacy, geometry)
        # P⁻¹ is linear and public: the mapped noise is P⁻¹ of the noisy sum's noise
        return federation.n_clients * geometry.inverse(contrib) / dp["count"], \
            self.central_noise(dp, pi, rng, geometry)

    def secure_total(self, federation, theta, clients, dp, stream, geometry):
        """Distributed mode: Σ_{i∈clients} u_i, the one value secure aggregation gives the
        server (:mod:`.private_secagg`; summed here, exactly, since every u_i is on the grid)."""
        if not clients.size:
            return np.zeros(self.model.q)
        release = self.release(dp, clients.size, stream)
        return stats_shares(self.model, federation, theta, clients, clients, self.privacy, geometry, release,
                            dp["entropy"]).sum(axis=0)

    @staticmethod
    def release(dp, n_active, stream) -> Release:
        """The public description of one distributed release."""
        return Release(dp["sigma"], dp["sensitivity"], dp["count"], dp["grid"], int(n_active), int(stream))

    def central_noise(self, dp, pi, rng, geometry):
        """The server's draw on H in central mode: P⁻¹ Z / (π Ñ), Z ~ N(0, σ²Δ² I) of shape (q,),
        π the round's inclusion probability (the Horvitz-Thompson weight of the noisy sum)."""
        z = gaussian_noise(self.model.q, dp["sigma"] * dp["sensitivity"], rng)
        return geometry.inverse(z)[0] / (pi * dp["count"])

    @staticmethod
    def noise_std(dp, pi) -> float:
        """τ = σΔ / (π Ñ): the release's noise standard deviation per coordinate of the mean
        statistic, in the release's coordinates (public)."""
        return dp["sigma"] * dp["sensitivity"] / (pi * dp["count"])

    def private_count(self, federation, dp, rng) -> float:
        """Ñ: the public count, or Σ counts + N(0, σ²) released once (floored at one); in
        distributed mode the clients' shares on secure aggregation's grid."""
        cfg = self.privacy
        if cfg.public_count is not None:
            return float(cfg.public_count)
        counts = federation.sizes.astype(np.float64) if cfg.level == "row" else np.ones(federation.n_clients)
        if cfg.mode == "central":
            total = float(counts.sum()) + float(gaussian_noise((), dp["sigma"], rng))
        else:
            grid = count_grid(dp["sigma"], federation.n_clients)
            total = sum(count_share(c, dp["sigma"], federation.n_clients, grid, dp["entropy"], i)
                        for i, c in enumerate(counts))
        return max(total, MIN_COUNT)

    def distributed_setup(self, dp, n_clients) -> None:
        """After the count: the shares' grid and the sensitivity Δ' it implies (in place)."""
        dp["grid"] = share_grid(dp["sigma"], dp["sensitivity"], dp["count"], n_clients)
        dp["sensitivity"] = grid_sensitivity(dp["sensitivity"], dp["grid"], dp["count"], self.model.q)

    def new_dp(self, n_clients, rng) -> dict:
        """σ (calibrated for ``planned_rounds``), Δ, the noise entropy and the plan."""
        if self.planned_rounds is None:
            raise ValueError("PrivateFedEM needs the number of rounds before it starts: use run(..., n_rounds).")
        plan = self.plan(n_clients, self.planned_rounds)
        return {"sigma": self.noise_multiplier(plan), "sensitivity": sensitivity(self.model, self.privacy),
                "entropy": draw_entropy(rng), "plan": plan}

    def state_from_release(self, s0, dp, geometry, n_clients, theta0):
        """The state after round 0 from the released Ŝ_0 at the public θ_0 (no memories), its
        covariances floored at the noise level (post-processing of the release)."""
        previous = self.model.expected_stats(theta0)
        weights = np.full(n_clients, 1.0 / n_clients)
        state, _ = self.initial_state((np.zeros((n_clients, self.model.q)), np.full(n_clients, np.nan)), None,
                                      weights, dp["entropy"])
        state.s_hat = self.model.dp_denoise(s0, geometry, self.noise_std(dp, 1.0), previous)
        state.scale = float(np.max(np.abs(s0)))
        state.extra["dp"] = dp
        return state

    def step_on_release(self, state, n_clients, active, pi, sums, release, dp, inclusion, theta) -> dict:
        """The server half of a private round on the release's (Horvitz-Thompson, plain) sums:
        the noise-level floor on the noisy target Ŝ_k + H, then the step and the trust region,
        all post-processing (they read released values, the public P_k and τ only). ``theta`` is
        T(Ŝ_k), the point the release was made at."""
        geometries = self.round_geometries(theta, state.s_hat, n_clients)
        zeros, tau = np.zeros(active.size), self.noise_std(dp, inclusion)
        previous = self.model.expected_stats(theta)
        return self.server_step(state, np.full(n_clients, 1.0 / n_clients), active, pi, sums,
                                np.full(active.size, np.nan), (zeros, zeros), geometries, 0.0, None,
                                project=lambda s: self.model.dp_denoise(s, release, tau, previous))

    # ------------------------------------------------------------------ round 0 and the rounds
    def run(self, federation, theta0, n_rounds, random_state=None, tol=None, progress=None):
        """As :meth:`~.base.Algorithm.run`; the noise is calibrated for exactly ``n_rounds``
        rounds after round 0, which all run (``tol`` is ignored: stopping on raw
        log-likelihoods would leak)."""
        self.planned_rounds = int(n_rounds)
        return super().run(federation, theta0, n_rounds, random_state, None, progress)

    def init_state(self, federation, theta0, rng, ledger, history):
        """Round 0: the private count, then Ŝ_0 from every client's noised statistics at the
        public θ_0 (one release); no memories."""
        n, q = federation.n_clients, self.model.q
        dp = self.new_dp(n, rng)
        dp["count"] = self.private_count(federation, dp, rng)
        everyone = np.arange(n)
        geometry = noise_geometry(self.model, self.privacy, theta0)
        if self.privacy.mode == "central":
            stats, central = self.private_stats(federation, theta0, everyone, dp, rng, geometry, 1.0)
            # round 0 has every client (π = 1): Ŝ_0 = mean_i S_i + P⁻¹ Z / Ñ
            s0 = np.full(n, 1.0 / n) @ (stats + central[None, :])
            uplink = n * (q + 1) * FLOAT64_BITS
        else:
            self.distributed_setup(dp, n)
            # mean_i n P⁻¹ u_i = P⁻¹ Σ u_i
            s0 = geometry.inverse(self.secure_total(federation, theta0, everyone, dp, 0, geometry)[None, :])[0]
            uplink = n * (share_bits(1) * (self.privacy.public_count is None) + share_bits(q))
        state = self.state_from_release(s0, dp, geometry, n, theta0)
        downlink = n * self.model.n_parameters(theta0) * FLOAT64_BITS
        ledger.record(0, uplink, downlink, n)
        history.append(round=0, loglik=np.nan, uplink_bits=uplink, downlink_bits=downlink, n_active=n,
                       step_size=np.nan, h_norm2=self.h_norm2(federation, state.s_hat), n_cond_exp=federation.n_rows,
                       epsilon=epsilon_spent(dp["sigma"], dp["plan"], 1), noise_multiplier=dp["sigma"])
        logger.info("private FedEM: noise multiplier %.4g, sensitivity %.4g, %d releases", dp["sigma"],
                    dp["sensitivity"], dp["plan"].rounds)
        return state

    def round(self, state, federation, rng, alpha, ledger, history, tol=None):
        """Round k -> k+1 on noised statistics (the structure of :meth:`FedEM.round`)."""
        model, k, dp, n = self.model, state.round, state.extra["dp"], federation.n_clients
        active, pi = self.sample_round(k, n, rng)
        theta = model.t_map(state.s_hat)
        inclusion = self.participation.expected_fraction(n)
        release = noise_geometry(model, self.privacy, theta)
        if self.privacy.mode == "distributed":
            total = self.secure_total(federation, theta, active, dp, k + 1, release)
            sums = sums_from_total(total, release, state.s_hat, active.size, n, inclusion)
            uplink = active.size * share_bits(model.q)
        else:
            sums, uplink = self._central_sums(state, federation, theta, active, pi, dp, rng, release, inclusion)
        row = self.step_on_release(state, n, active, pi, sums, release, dp, inclusion, theta)
        downlink = self.broadcast.catch_up(state.downlink, active, k)
        ledger.record(state.round, uplink, downlink, active.size)
        history.append(round=state.round, uplink_bits=uplink, downlink_bits=downlink, n_active=int(active.size),
                       h_norm2=self.h_norm2(federation, state.s_hat), n_cond_exp=self._n_rows_used(federation, active),
                       epsilon=epsilon_spent(dp["sigma"], dp["plan"], state.round + 1),
                       noise_multiplier=dp["sigma"], **row)
        return state

    def _central_sums(self, state, federation, theta, active, pi, dp, rng, release, inclusion):
        """Central mode: the clients' clipped statistics through FedEM's own client half, and the
        server's Gaussian noise joined to the sum before any step is taken or sent (V = 0: no
        memories, so H is this sum). The release happens even with no client (an empty sum plus
        noise), as the accountant assumes."""
        n, k = federation.n_clients, state.round
        if active.size:
            stats, central = self.private_stats(federation, theta, active, dp, rng, release, inclusion)
            coords = self.round_geometries(theta, state.s_hat, n)[1]
            message, q_rows, _, _ = client_update(stats, state.s_hat, state.v_clients[active], self.compressor,
                                               0.0, round_streams(state.entropy, k, active), coords)
            uplink = self.compressor.bits(message)
        else:
            q_rows, uplink = np.empty((0, self.model.q)), 0
            central = self.central_noise(dp, inclusion, rng, release)
        horvitz_thompson, plain = weighted_sums(q_rows, np.full(active.size, 1.0 / n), pi)
        return (horvitz_thompson + central, plain), uplink
