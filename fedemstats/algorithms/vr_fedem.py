"""VR-FedEM (paper 003, Algorithm 2; SPEC §4): FedEM with SPIDER-style control variates.

Each worker keeps a local statistic S_{t,k,i} that it moves by mini-batch
*differences* of conditional expectations at two consecutive iterates (line 8),
and refreshes to its exact local mean at the start of every outer loop (line 20),
which cancels the bias of the control variate. The quantised difference to the
server, the memories V_i and the server step are FedEM's own
:func:`~fedemstats.algorithms.server.client_update` and
:meth:`~fedemstats.algorithms.base.Algorithm.server_step` (lines 9-15 are lines 7-16 of
Algorithm 1 with p = 1).

One *round* is one inner iteration (one communication); outer loop t covers
rounds (t-1) k_in + 1 ... t k_in, so ``k_out = ceil(n_rounds / k_in)``. The refresh
is local (S_{t,0,i} never leaves the worker); with mini-batches each worker reports one float64,
how far its statistic had drifted from the exact local mean (:meth:`VRFedEM.start_outer_loop`),
from which "auto" sets the next loop's ceiling on γ (:func:`spider_ceiling`), and the full pass's
exact log-likelihood is where the convergence test runs (:meth:`VRFedEM.refresh_test`).
"""
from __future__ import annotations

import math

import numpy as np

from .._validation import check_int
from ..ledger import FLOAT64_BITS
from ..participation import FullParticipation
from .base import Algorithm
from .controller import AUTO_GROWTH, CAP_MIN
from .convergence import refresh_converged
from .server import client_update, weighted_sums
from .step_size import vr_fedem_batch_size
from .streams import round_streams

__all__ = ["VRFedEM", "default_k_in", "spider_ceiling", "FULL_BATCH", "SPIDER_NOISE_MAX", "SPIDER_START_CEILING"]

#: ``batch_size`` value asking every worker to use all its rows (b = m_i)
FULL_BATCH = "full"
#: outer-loop gains kept for the convergence test (it reads the last REFRESH_PATIENCE)
REFRESH_MEMORY = 8
#: "auto" with mini-batches: the error of the workers' statistics in the direction, measured at
#: each refresh, is steered to at most this fraction of E‖P H‖² (:func:`spider_ceiling`) ...
SPIDER_NOISE_MAX = 0.25
#: ... from this ceiling on γ in the first outer loop, before any error is measured (1.0 took
#: diabetes, full covariances, to another optimum 0.72 nats per row below exact EM's; 0.25 was slower)
SPIDER_START_CEILING = 0.5


def spider_ceiling(ceiling, noise_ratio) -> float:
    """The next outer loop's ceiling on "auto"'s γ (VR-FedEM with mini-batches).

    A worker's statistic S_{t,k,i} drifts from its exact local mean inside an outer loop by the
    sampling errors of its mini-batch differences (line 8); each difference spans one step, so
    the drift grows like γ². The ceiling is scaled by √(SPIDER_NOISE_MAX / ``noise_ratio``), by at
    most AUTO_GROWTH up, within [CAP_MIN, 1]. The rule it replaces, the mini-batch runs'
    k^(-MINIBATCH_DECAY), averages the noise out at a speed that does not depend on it: VR-FedEM
    then ran 100 M-steps up to 0.27 nats per row short of exact EM (``docs/fedem.md``, "Step size").

    Parameters
    ----------
    ceiling : float
        This outer loop's ceiling.
    noise_ratio : float
        Σ_i w_i² ‖P e_i‖² / E‖P H‖² (:meth:`VRFedEM.spider_noise`), e_i = S_{t,k_in,i} − s̄_i the
        drift found at the refresh, in the model's geometry: the expected ‖P Σ_i w_i e_i‖², the
        drift's part of the direction, relative to it. NaN (nothing measured) keeps the ceiling.
    """
    if not np.isfinite(noise_ratio):
        return float(ceiling)
    factor = AUTO_GROWTH if noise_ratio <= 0.0 else min(AUTO_GROWTH, math.sqrt(SPIDER_NOISE_MAX / noise_ratio))
    return float(min(1.0, max(CAP_MIN, ceiling * factor)))


def default_k_in(sizes) -> int:
    """Recommended inner-loop length k_in ≈ √m (SPEC §4; paper 003 §3), m the mean client size."""
    return max(1, math.ceil(math.sqrt(float(np.mean(sizes)))))


class VRFedEM(Algorithm):
    """Variance-reduced federated EM with compression (full participation).

    Parameters
    ----------
    model : Model
    compressor : str or Compressor, default="identity"
    participation : 1.0, "full", None or FullParticipation, default=1.0
        Algorithm 2 needs every worker every round: the control variate
        S_{t,k,i} telescopes over *consecutive* iterates, so a worker that skips
        rounds would need every parameter it missed. Anything else raises.
    step_size : float, "auto" or callable, default="auto"
        Constant γ recommended (Theorem 3, eq. (10)); "auto" as FedEM.
    alpha : float, optional
        Memory step; default ``1 / (1 + ω)`` (Theorem 3).
    batch_size : int, "full" or None, default=None
        Rows b per worker per inner step. ``None``: Theorem 3's
        ``⌈k_in / (1 + ω)²⌉``, capped at the smallest client; ``"full"``: all rows
        (b = m_i, no sampling noise). An int above a client's row count raises.
    k_in : int, optional
        Inner steps per outer loop; default ``⌈√m⌉`` (m the mean client size).
    track_h : bool, default=False
        Record the exact ||h(Ŝ)||² each round (a diagnostic pass, not counted).
    """

    def __init__(self, model, compressor="identity", participation=1.0, step_size="auto",
                 alpha=None, batch_size=None, k_in=None, track_h=False, precondition=True, safeguard=True,
                 downlink_compressor="auto"):
        # the mean-field initialisation is Theorem 3's V_{1,0,i} = h_i(S_init): Algorithm's default v_init
        super().__init__(model, compressor, participation, step_size, alpha, track_h, precondition, safeguard,
                         downlink_compressor)
        if not isinstance(self.participation, FullParticipation):
            raise ValueError(
                "VR-FedEM (paper 003, Algorithm 2) is defined for full participation only: its "
                "control variates need every worker at every inner step. Use participation=1.0, "
                f"or algorithm 'fedem' for partial participation; got participation={participation!r}.")
        self.k_in = None if k_in is None else check_int(k_in, "k_in")
        if batch_size is not None and batch_size != FULL_BATCH:
            batch_size = check_int(batch_size, "batch_size")
        self.batch_size = batch_size

    # ------------------------------------------------------------------ setup
    #: Algorithm 2's workers start from the exact mean-field statistics (``extra``)
    quantise_start = False

    def mean_field_pass(self, n_clients) -> bool:
        """Always: Algorithm 2 starts its workers' local statistics from the pass."""
        return True

    def full_batches(self) -> bool:
        """Only ``batch_size="full"`` evaluates every row (else Theorem 3's mini-batches)."""
        return self.batch_size == FULL_BATCH

    def rows_per_batch(self) -> int:
        """Theorem 3's b, or the given batch size (the smallest client caps it at run time)."""
        return self.batch_size if isinstance(self.batch_size, int) else vr_fedem_batch_size(
            self.k_in or 1, self.omega())

    def resolved_sizes(self, federation):
        """``(k_in, b)`` for this federation; ``b`` is None for full local passes.

        Raises
        ------
        ValueError
            If ``batch_size`` exceeds the smallest client's number of rows.
        """
        k_in = default_k_in(federation.sizes) if self.k_in is None else self.k_in
        m_min = int(federation.sizes.min())
        if self.batch_size == FULL_BATCH:
            return k_in, None
        if self.batch_size is None:
            return k_in, min(vr_fedem_batch_size(k_in, self.omega()), m_min)
        if self.batch_size > m_min:
            small = int(np.argmin(federation.sizes))
            raise ValueError(
                f"batch_size={self.batch_size} exceeds the {m_min} rows of client {small}: VR-FedEM "
                f"draws b rows per worker without replacement. Use batch_size <= {m_min}, "
                f"batch_size='full' for exact local passes, or merge small clients.")
        return k_in, self.batch_size

    def init_state(self, federation, theta0, rng, ledger, history):
        """Algorithm 2, lines 1-3: Ŝ_{1,0} = Ŝ_{1,-1} = S_init, V_{1,0,i} = h_i(S_init),
        S_{1,0,i} = the exact local mean at T(S_init)."""
        state = super().init_state(federation, theta0, rng, ledger, history)
        k_in, batch = self.resolved_sizes(federation)
        state.extra = {"s_local": state.extra.pop("mean_field_stats"), "s_prev": state.s_hat.copy(),
                       "inner": 0, "outer": 1, "k_in": k_in, "batch": batch,
                       "loglik": state.extra.pop("mean_field_loglik_clients"),
                       "refresh_ll": None, "travel": 0.0, "refresh_gains": [], "refresh_drifts": []}
        if not self.full_batches():
            state.control.ceiling = SPIDER_START_CEILING
        return state

    def tests_convergence(self) -> bool:
        """With full batches as FedEM; with mini-batches on the outer loops' full passes
        (:meth:`refresh_test`), where that test was validated: a compressor whose noise estimate
        is unbiased (identity, dithering with r = 2), in the model's geometry when lossy. Elsewhere
        it said ``converged_`` on stalled fits (``randk``, ``blockp``, ``precondition=False`` on raw
        tables: up to 6.45 nats per row short of exact EM, ``docs/fedem.md``), so those runs go to
        their budget."""
        if self.full_batches():
            return True
        lossless = self.omega() == 0.0 and self.broadcast.lossless
        return bool(self.compressor.unbiased_noise and (lossless or self.compresses_in_geometry()))

    def refresh_test(self, state, loglik, drift, tol) -> tuple:
        """The convergence test at a full pass (the first round of an outer loop).

        ``loglik`` is ℓ(θ_{t,0}) on every row (the refresh, line 20, evaluates them all). The
        outer loop that ended here gained ``loglik`` minus the previous full pass's value over
        the steps Σ γ t taken since, with its workers' ``drift`` (:meth:`spider_noise`):
        :func:`.convergence.refresh_converged` tests the last few such gains per unit step,
        from loops whose drift was at most :data:`SPIDER_NOISE_MAX`. Returns
        ``(converged, gain per unit step)``.
        """
        ex = state.extra
        previous, travel = ex["refresh_ll"], ex["travel"]
        ex["refresh_ll"], ex["travel"] = loglik, 0.0
        if previous is None:
            return False, np.nan
        gain = (loglik - previous) / travel if travel > 0.0 else np.nan
        ex["refresh_gains"] = (ex["refresh_gains"] + [gain])[-REFRESH_MEMORY:]
        ex["refresh_drifts"] = (ex["refresh_drifts"] + [drift])[-REFRESH_MEMORY:]
        return tol is not None and refresh_converged(ex["refresh_gains"], tol, ex["refresh_drifts"],
                                                     SPIDER_NOISE_MAX), gain

    # ------------------------------------------------------------------ one round
    def start_outer_loop(self, state, federation, coords) -> tuple:
        """Lines 17-21: Ŝ_{t+1,0} = Ŝ_{t+1,-1} = Ŝ_{t,k_in}, V carried over, each worker
        refreshes S_{t+1,0,i} to its exact local mean.

        Returns
        -------
        n_rows : int
            Rows evaluated.
        drift_sq : ndarray of shape (n_clients,) or None
            ‖P e_i‖², e_i = S_{t,k_in,i} − s̄_i(T(Ŝ)): how far each worker's statistic had drifted
            from its exact local mean, in the geometry ``coords`` (one scalar per worker). None with
            full batches: the tracked statistic is then the exact mean up to rounding.
        """
        ex = state.extra
        stats, loglik = self.model.client_stats(federation, self.model.t_map(state.s_hat))
        drift_sq = None
        if not self.full_batches():
            drift = coords.forward(ex["s_local"] - stats)
            drift_sq = np.einsum("ij,ij->i", drift, drift)
        ex.update(s_local=stats, s_prev=state.s_hat.copy(), inner=0, outer=ex["outer"] + 1, loglik=loglik)
        return federation.n_rows, drift_sq

    @staticmethod
    def spider_noise(state, weights, drift_sq) -> float:
        """The server's side of the refresh: the drift's share of the direction,
        Σ_i w_i² ‖P e_i‖² / E‖P H‖² (workers draw their mini-batches independently, so the
        errors' cross terms vanish in expectation), and the next loop's ceiling on γ."""
        cs = state.control
        if not cs.total_avg:
            return np.nan
        ratio = float(weights ** 2 @ drift_sq) / cs.total_avg
        cs.ceiling = spider_ceiling(cs.ceiling, ratio)
        return ratio

    def control_variate_step(self, state, federation, rng) -> int:
        """Line 8: S_{t,k+1,i} = S_{t,k,i} + mean_{j in B} [s̄_ij(T(Ŝ_{t,k})) - s̄_ij(T(Ŝ_{t,k-1}))]
        on one mini-batch per worker. Returns the rows evaluated (two per selected row)."""
        ex, model = state.extra, self.model
        X, seg = federation.select(None, ex["batch"], rng if ex["batch"] is not None else None)
        new, loglik = model.segment_stats(X, seg, model.t_map(state.s_hat))
        old, _ = model.segment_stats(X, seg, model.t_map(ex["s_prev"]))
        ex["s_local"] = ex["s_local"] + (new - old)
        ex["loglik"] = loglik
        return 2 * X.shape[0]

    def round(self, state, federation, rng, alpha, ledger, history, tol=None):
        """One inner iteration (t, k) -> (t, k+1) in place on ``state``."""
        ex, n = state.extra, federation.n_clients
        geometries = self.round_geometries(self.model.t_map(state.s_hat), state.s_hat, n)
        n_cond_exp, noise_ratio, drift_bits = 0, np.nan, 0
        if ex["inner"] == ex["k_in"]:
            n_cond_exp, drift_sq = self.start_outer_loop(state, federation, geometries[1])
            if drift_sq is not None:  # each worker reports its drift: one float64
                noise_ratio, drift_bits = self.spider_noise(state, federation.weights, drift_sq), n * FLOAT64_BITS
        full_pass = ex["inner"] == 0  # ex["loglik"] is then every row's (round 0's pass, or the refresh)
        # at k = 0, Ŝ_{t,0} = Ŝ_{t,-1}: the difference in line 8 is exactly zero
        if ex["inner"] > 0:
            n_cond_exp += self.control_variate_step(state, federation, rng)
        everyone = np.arange(n)
        message, q_rows, state.v_clients, noise = client_update(
            ex["s_local"], state.s_hat, state.v_clients, self.compressor, alpha,
            round_streams(state.entropy, state.round, everyone), geometries[1])
        ex["s_prev"] = state.s_hat
        row = self.server_step(state, federation.weights, everyone, np.ones(n),
                               weighted_sums(q_rows, federation.weights, np.ones(n)), ex["loglik"],
                               noise, geometries, alpha, tol)
        ex["inner"] += 1
        if not self.full_batches():
            # mini-batch log-likelihoods carry sampling noise: only the full passes are tested
            tested = tol if self.tests_convergence() else None
            row["converged"], row["gain"] = self.refresh_test(state, row["loglik"], noise_ratio, tested) \
                if full_pass else (False, np.nan)
            ex["travel"] += row["step_size"] * row["step_fraction"]
        uplink = self.compressor.bits(message) + n * FLOAT64_BITS + drift_bits
        downlink = self.broadcast.catch_up(state.downlink, everyone, state.round - 1)
        ledger.record(state.round, uplink, downlink, n)
        history.append(round=state.round, uplink_bits=uplink, downlink_bits=downlink, n_active=n,
                       n_cond_exp=n_cond_exp, outer=ex["outer"], spider_noise=noise_ratio,
                       h_norm2=self.h_norm2(federation, state.s_hat),
                       **row)
        return state
