"""FedEM (paper 003, Algorithm 1), generalised to client weights and inclusion
probabilities (SPEC §3).

The round is split into a *client half* (:func:`client_update`: Δ, compression,
memory update) and a *server half* (:func:`server_update`), pure functions that
the in-process engine and the Flower adapter both call.
"""
from __future__ import annotations

import logging

import numpy as np

from .._validation import check_int, check_positive, check_rng, client_round_rng
from ..compression import make_compressor
from ..ledger import FLOAT64_BITS, BitLedger
from ..participation import make_participation
from .base import AlgorithmState, FitResult, drive_rounds, effective_omega, make_step_size
from ._history import History

__all__ = ["FedEM", "client_update", "server_update", "memory_update", "draw_entropy", "V_INIT_CHOICES",
           "DivergenceError"]

logger = logging.getLogger(__name__)

V_INIT_CHOICES = ("mean-field", "zero")
#: entropy of the per-client random streams is drawn below this bound (fits int64)
ENTROPY_BOUND = 2**62


#: |Ŝ| beyond this means the iterates have left any sensible range: statistics are means of
#: data-scale quantities, and float32 quantisation norms overflow near 3.4e38
DIVERGENCE_LIMIT = 1e30


class DivergenceError(ValueError):
    """The statistic iterate blew up: the step size is too large for this noise level."""


def check_iterate(s_hat, round_, gamma):
    """Raise :class:`DivergenceError` naming the fix if Ŝ is not finite or exploded."""
    if not np.all(np.isfinite(s_hat)) or np.max(np.abs(s_hat)) > DIVERGENCE_LIMIT:
        raise DivergenceError(
            f"FedEM diverged at round {round_} (step size {gamma:g}): the statistics left the finite "
            "range. Lower step_size (e.g. halve it), raise the compressor precision, or use "
            "step_size='auto'.")


def draw_entropy(rng) -> int:
    """The run's public entropy for ``client_round_rng``, drawn from the server's Generator."""
    return int(rng.integers(ENTROPY_BOUND))


def memory_update(v, q_rows, alpha):
    """V_{k+1,i} = V_{k,i} + α q_i (the same decoded q_i the server adds)."""
    return v + alpha * q_rows


def client_update(stats, s_hat, v_clients, compressor, alpha, rngs, blocks=None):
    """Client half of a FedEM round (Algorithm 1, lines 8-11).

    Parameters
    ----------
    stats : ndarray of shape (m, q)
        Fresh local statistics S_{k+1,i} of ``m`` clients.
    s_hat : ndarray of shape (q,)
        Broadcast iterate Ŝ_k.
    v_clients : ndarray of shape (m, q)
        The clients' memories V_{k,i}.
    compressor : Compressor
    alpha : float
        Memory step.
    rngs : sequence of numpy.random.Generator, length m
        Each client's own stream (see ``client_round_rng``).
    blocks : ndarray of int, optional
        Statistic block boundaries (for per-block quantisation).

    Returns
    -------
    message : Message
        The compressed Δ_i, one row per client: what goes on the wire.
    q_rows : ndarray of shape (m, q)
        The decoded quantised Δ_i (identical on client and server).
    v_new : ndarray of shape (m, q)
        Updated memories V_{k+1,i} = V_{k,i} + α q_i.
    """
    delta = stats - s_hat[None, :] - v_clients
    message = compressor.compress(delta, rngs, blocks)
    q_rows = compressor.decompress(message)
    return message, q_rows, memory_update(v_clients, q_rows, alpha)


def server_update(s_hat, v, q_rows, weights, inclusion, gamma, alpha):
    """Server half of a FedEM round (Algorithm 1, lines 14-16; SPEC §3 step 3).

    Parameters
    ----------
    s_hat, v : ndarray of shape (q,)
        Ŝ_k and the server memory V_k.
    q_rows : ndarray of shape (m, q)
        Decoded messages of the ``m`` active clients (m may be 0).
    weights, inclusion : ndarray of shape (m,)
        Their weights w_i and inclusion probabilities π_i.
    gamma, alpha : float

    Returns
    -------
    s_hat_new, v_new, h : ndarray of shape (q,)
        Ŝ_{k+1}, V_{k+1} and the direction H_{k+1}.
    """
    h = v + (weights / inclusion) @ q_rows if q_rows.shape[0] else v.copy()
    v_new = v + alpha * (weights @ q_rows) if q_rows.shape[0] else v.copy()
    return s_hat + gamma * h, v_new, h


class FedEM:
    """Federated EM with compression, partial participation and control variates.

    Parameters
    ----------
    model : Model
    compressor : str or Compressor, default="identity"
        See :func:`fedemstats.compression.make_compressor`.
    participation : float, int or Participation, default=1.0
        See :func:`fedemstats.participation.make_participation`.
    step_size : float, "auto" or callable, default=1.0
        gamma_k. With identity compression and full participation, 1 is exact EM.
    alpha : float, optional
        Memory step; default ``1 / (1 + omega)`` (paper 003, Theorem 1).
    v_init : {"mean-field", "zero"}, default="mean-field"
        ``"mean-field"`` sets V_{0,i} = s̄_i(T(Ŝ_0)) - Ŝ_0 (one uncompressed
        upload); ``"zero"`` with ``alpha=0`` is naive compressed EM.
    batch_size : int, optional
        Rows per client per round; ``None`` uses exact local means.
    track_h : bool, default=False
        Record the exact mean-field norm ||h(Ŝ_k)||² each round (a full pass;
        a diagnostic, not counted in the ledger).
    """

    def __init__(self, model, compressor="identity", participation=1.0, step_size=1.0,
                 alpha=None, v_init="mean-field", batch_size=None, track_h=False):
        self.model = model
        self.compressor = make_compressor(compressor)
        self.participation = make_participation(participation)
        self.step_size = step_size
        self.alpha = None if alpha is None else check_positive(alpha, "alpha", strict=False)
        if v_init not in V_INIT_CHOICES:
            raise ValueError(f"v_init must be one of {V_INIT_CHOICES}; got {v_init!r}.")
        self.v_init = v_init
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size")
        self.track_h = bool(track_h)

    # ------------------------------------------------------------------ setup
    def omega(self) -> float:
        return float(self.compressor.omega(self.model.q, self.model.layout.offsets))

    def resolved_alpha(self) -> float:
        return 1.0 / (1.0 + self.omega()) if self.alpha is None else self.alpha

    def schedule(self, federation):
        return make_step_size(self.step_size, omega=self.omega(), n_clients=federation.n_clients,
                              inclusion=self.participation.inclusion(federation.n_clients))

    def init_state(self, federation, theta0, rng, ledger, history):
        """Round 0: Ŝ_0 = Σ w_i s̄_i(θ_0) and the memories V_{0,i} (SPEC §3)."""
        model, n, q = self.model, federation.n_clients, self.model.q
        stats, loglik = model.client_stats(federation, theta0)
        s_hat = federation.weights @ stats
        uplink = n * (q + 1) * FLOAT64_BITS
        downlink = n * model.n_parameters(theta0) * FLOAT64_BITS
        n_cond_exp = federation.n_rows
        extra = {}
        if self.v_init == "mean-field":
            stats1, loglik1 = model.client_stats(federation, model.t_map(s_hat))
            v_clients = stats1 - s_hat[None, :]
            # kept for VR-FedEM, whose workers start from these exact local means (Algorithm 2, line 3)
            extra = {"mean_field_stats": stats1, "mean_field_loglik": float(federation.weights @ loglik1)}
            uplink += n * q * FLOAT64_BITS
            downlink += n * q * FLOAT64_BITS
            n_cond_exp += federation.n_rows
        else:
            v_clients = np.zeros((n, q))
        state = AlgorithmState(s_hat=s_hat, v=federation.weights @ v_clients, v_clients=v_clients,
                               entropy=draw_entropy(rng), extra=extra)
        ledger.record(0, uplink, downlink, n)
        history.append(round=0, loglik=float(federation.weights @ loglik), uplink_bits=uplink,
                       downlink_bits=downlink, n_active=n, step_size=np.nan,
                       h_norm2=self._h_norm2(federation, s_hat) if self.track_h else np.nan,
                       n_cond_exp=n_cond_exp)
        return state

    # ------------------------------------------------------------------ one round
    def round(self, state, federation, rng, gamma, alpha, ledger, history):
        """Run round k -> k+1 in place on ``state`` (SPEC §3 steps 1-3)."""
        model, q = self.model, self.model.q
        k = state.round
        active, pi = self.participation.sample(k, federation.n_clients, rng)
        theta = model.t_map(state.s_hat)
        if active.size:
            stats, loglik = model.client_stats(federation, theta, active, self.batch_size, rng)
            rngs = [client_round_rng(state.entropy, k, i) for i in active]
            message, q_rows, v_new = client_update(stats, state.s_hat, state.v_clients[active],
                                                   self.compressor, alpha, rngs, model.layout.offsets)
            state.v_clients[active] = v_new
            uplink = self.compressor.bits(message) + active.size * FLOAT64_BITS
            ll = float((federation.weights[active] / pi) @ loglik)
        else:
            q_rows, uplink, ll = np.empty((0, q)), 0, np.nan
        state.s_hat, state.v, _ = server_update(state.s_hat, state.v, q_rows, federation.weights[active],
                                                pi, gamma, alpha)
        check_iterate(state.s_hat, k + 1, gamma)
        state.round = k + 1
        downlink = active.size * q * FLOAT64_BITS
        ledger.record(state.round, uplink, downlink, active.size)
        history.append(round=state.round, loglik=ll, uplink_bits=uplink, downlink_bits=downlink,
                       n_active=int(active.size), step_size=gamma,
                       h_norm2=self._h_norm2(federation, state.s_hat) if self.track_h else np.nan,
                       n_cond_exp=self._n_rows_used(federation, active))
        return state

    def _n_rows_used(self, federation, active) -> int:
        """Rows whose conditional expectation the round computed (min(b, m_i) per client)."""
        sizes = federation.sizes[active]
        return int(sizes.sum() if self.batch_size is None else np.minimum(sizes, self.batch_size).sum())

    def _h_norm2(self, federation, s_hat) -> float:
        h = self.model.mean_stats(federation, self.model.t_map(s_hat)) - s_hat
        return float(h @ h)

    # ------------------------------------------------------------------ driver
    def run(self, federation, theta0, n_rounds, random_state=None, tol=None, progress=None):
        """Initialise and run ``n_rounds`` rounds.

        Parameters
        ----------
        federation : Federation
        theta0 : parameters
            Initial θ_0 (e.g. from the model's federated initialisation).
        n_rounds : int
            Rounds after the initialisation (round 0).
        random_state : None, int or Generator
        tol : float, optional
            Stop when the exact mean log-likelihood changes by less than ``tol``
            between rounds; only used when the log-likelihood is exact (full
            participation, full local batches).
        progress : callable, optional
            Called as ``progress(round, history_row)`` after each round.

        Returns
        -------
        FitResult
        """
        rng = check_rng(random_state)
        n_rounds = check_int(n_rounds, "n_rounds", minimum=0)
        ledger, history = BitLedger(), History()
        state = self.init_state(federation, theta0, rng, ledger, history)
        schedule, alpha = self.schedule(federation), self.resolved_alpha()
        exact_ll = self.batch_size is None and effective_omega(
            0.0, self.participation.inclusion(federation.n_clients)) == 0.0
        converged = drive_rounds(self, state, federation, rng, n_rounds, schedule=schedule, alpha=alpha,
                                 ledger=ledger, history=history, tol=tol, exact_ll=exact_ll, progress=progress)
        logger.debug("FedEM finished after %d rounds (converged=%s)", state.round, converged)
        return FitResult(self.model.t_map(state.s_hat), state, history.to_frame(), ledger, converged)
