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
from ..privacy import (PrivacyPlan, calibrate_noise_multiplier, check_privacy, client_noise_generator,
                       epsilon_spent, gaussian_noise, noise_share_std, sampling_rate)
from .controller import StepController
from .fedem import FedEM
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
#: the "round" key of the clients' count-noise streams (apart from every real round)
COUNT_STREAM = 2 ** 32


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

    def __init__(self, model, privacy, participation=1.0, step_size="auto", safeguard=True,
                 downlink_compressor="auto", compressor="identity"):
        if make_compressor(compressor).omega(model.q) != 0.0:
            raise ValueError("compressor: a private fit needs a lossless uplink ('identity'); quantise the "
                             "downlink instead (downlink_compressor), which is post-processing.")
        super().__init__(model, compressor, participation, step_size, alpha=0.0, v_init="zero",
                         safeguard=safeguard, downlink_compressor=downlink_compressor)
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
    def private_stats(self, federation, theta, clients, dp, round_, rng, geometry, pi):
        """The active clients' noised statistics S_i = n P⁻¹(c_i + ζ_i) / Ñ and the server's
        central noise on H (None in distributed mode).

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
        dp_noise : ndarray of shape (q,) or None
            P⁻¹ Z / (π Ñ) with Z ~ N(0, σ²Δ² I), in central mode.
        """
        cfg, n = self.privacy, federation.n_clients
        contrib, _ = clipped_contributions(self.model, federation, theta, clients, cfg, geometry)
        std = dp["sigma"] * dp["sensitivity"]
        if cfg.mode == "distributed":
            share = noise_share_std(std, clients.size, cfg.mode)
            contrib = contrib + np.vstack([gaussian_noise(self.model.q, share, client_noise_generator(
                dp["entropy"], round_, i)) for i in clients])
            central = None
        else:
            central = self.central_noise(dp, pi, rng, geometry)
        # P⁻¹ is linear and public: each client's share maps back on its own, and the sum
        # of the mapped shares is P⁻¹ of the noisy sum (post-processing of the release)
        return n * geometry.inverse(contrib) / dp["count"], central

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
        """Ñ: the public count, or Σ counts + N(0, σ²) released once (floored at one)."""
        cfg = self.privacy
        if cfg.public_count is not None:
            return float(cfg.public_count)
        counts = federation.sizes.astype(np.float64) if cfg.level == "row" else np.ones(federation.n_clients)
        total = float(counts.sum())
        if cfg.mode == "central":
            total += float(gaussian_noise((), dp["sigma"], rng))
        else:
            share = noise_share_std(dp["sigma"], federation.n_clients, cfg.mode)
            total += sum(float(gaussian_noise((), share, client_noise_generator(dp["entropy"], COUNT_STREAM, i)))
                         for i in range(federation.n_clients))
        return max(total, MIN_COUNT)

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
        if self.planned_rounds is None:
            raise ValueError("PrivateFedEM needs the number of rounds before it starts: use run(..., n_rounds).")
        n, q = federation.n_clients, self.model.q
        plan = self.plan(n, self.planned_rounds)
        sigma = self.noise_multiplier(plan)
        entropy = draw_entropy(rng)
        dp = {"sigma": sigma, "sensitivity": sensitivity(self.model, self.privacy), "entropy": entropy,
              "plan": plan}
        dp["count"] = self.private_count(federation, dp, rng)
        everyone = np.arange(n)
        geometry = noise_geometry(self.model, self.privacy, theta0)
        stats, central = self.private_stats(federation, theta0, everyone, dp, 0, rng, geometry, 1.0)
        if central is not None:
            # round 0 has every client (π = 1): Ŝ_0 = mean_i S_i + P⁻¹ Z / Ñ
            stats = stats + central[None, :]
        weights = np.full(n, 1.0 / n)
        state, _ = self.initial_state((stats, np.full(n, np.nan)), None, weights, entropy)
        # the noise-level floor of the covariances: a function of the released Ŝ_0, the public
        # geometry and τ only, so post-processing (free in DP terms)
        state.s_hat = self.model.dp_denoise(state.s_hat, geometry, self.noise_std(dp, 1.0))
        state.extra["dp"] = dp
        uplink = n * (q + 1) * FLOAT64_BITS
        downlink = n * self.model.n_parameters(theta0) * FLOAT64_BITS
        ledger.record(0, uplink, downlink, n)
        history.append(round=0, loglik=np.nan, uplink_bits=uplink, downlink_bits=downlink, n_active=n,
                       step_size=np.nan, h_norm2=self.h_norm2(federation, state.s_hat), n_cond_exp=federation.n_rows,
                       epsilon=epsilon_spent(sigma, plan, 1), noise_multiplier=sigma)
        logger.info("private FedEM: noise multiplier %.4g, sensitivity %.4g, %d releases", sigma,
                    dp["sensitivity"], plan.rounds)
        return state

    def round(self, state, federation, rng, alpha, ledger, history, tol=None):
        """Round k -> k+1 on noised statistics (the structure of :meth:`FedEM.round`)."""
        model, k, dp, n = self.model, state.round, state.extra["dp"], federation.n_clients
        active, pi = self.participation.sample(k, n, rng)
        theta = model.t_map(state.s_hat)
        geometries = self.round_geometries(theta, state.s_hat, n)
        central, inclusion = None, self.participation.expected_fraction(n)
        release = noise_geometry(model, self.privacy, theta)
        if active.size:
            stats, central = self.private_stats(federation, theta, active, dp, k + 1, rng, release, inclusion)
            message, q_rows, _ = client_update(stats, state.s_hat, state.v_clients[active], self.compressor,
                                               0.0, round_streams(state.entropy, k, active), geometries[1])
            uplink = self.compressor.bits(message)
        else:
            q_rows, uplink = np.empty((0, model.q)), 0
            if self.privacy.mode == "central":
                # the release still happens (an empty sum plus noise), as the accountant assumes
                central = self.central_noise(dp, inclusion, rng, release)
        zeros, weights = np.zeros(active.size), np.full(n, 1.0 / n)
        # the noise-level floor acts on the noisy target Ŝ_k + H before the step (and the trust
        # region): it reads only released values, the public P_k and τ, so it is post-processing
        tau = self.noise_std(dp, inclusion)
        horvitz_thompson, plain = weighted_sums(q_rows, weights[active], pi)
        if central is not None:
            # central mode: the server's Gaussian noise joins the noisy sum before any step is
            # taken or sent (V = 0: no memories, so H is this sum)
            horvitz_thompson = horvitz_thompson + central
        row = self.server_step(state, weights, active, pi, (horvitz_thompson, plain), np.full(active.size, np.nan),
                               (zeros, zeros), geometries, 0.0, None, project=lambda s: model.dp_denoise(s, release, tau))
        downlink = self.broadcast.catch_up(state.downlink, active, k)
        ledger.record(state.round, uplink, downlink, active.size)
        history.append(round=state.round, uplink_bits=uplink, downlink_bits=downlink, n_active=int(active.size),
                       h_norm2=self.h_norm2(federation, state.s_hat), n_cond_exp=self._n_rows_used(federation, active),
                       epsilon=epsilon_spent(dp["sigma"], dp["plan"], state.round + 1),
                       noise_multiplier=dp["sigma"], **row)
        return state
