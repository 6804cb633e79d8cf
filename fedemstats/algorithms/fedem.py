"""FedEM (paper 003, Algorithm 1), generalised to client weights and inclusion
probabilities (SPEC §3).

The round is split into a *client half* (:func:`client_update`: Δ, compression,
memory update) and a *server half* (:func:`server_update`), pure functions that
the in-process engine and the Flower adapter both call.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_int, client_round_rng
from ..ledger import FLOAT64_BITS
from .base import V_INIT_CHOICES, Algorithm, draw_entropy

__all__ = ["FedEM", "client_update", "server_update", "memory_update", "draw_entropy", "V_INIT_CHOICES",
           "DivergenceError", "check_iterate"]

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


class FedEM(Algorithm):
    """Federated EM with compression, partial participation and control variates.

    Parameters
    ----------
    model, compressor, participation, alpha, track_h
        As :class:`~.base.Algorithm` (α defaults to ``1 / (1 + ω)``, Theorem 1).
    step_size : float, "auto" or callable, default=1.0
        γ_k. With identity compression and full participation, 1 is exact EM.
    v_init : {"mean-field", "zero"}, default="mean-field"
        ``"mean-field"`` sets V_{0,i} = s̄_i(T(Ŝ_0)) - Ŝ_0 (one uncompressed
        upload); ``"zero"`` with ``alpha=0`` is naive compressed EM.
    batch_size : int, optional
        Rows per client per round; ``None`` uses exact local means.

    Notes
    -----
    Round 0, the driver (:meth:`~.base.Algorithm.start`, :meth:`~.base.Algorithm.run`)
    and the stopping rule are :class:`~.base.Algorithm`'s; this class is one round.
    """

    def __init__(self, model, compressor="identity", participation=1.0, step_size=1.0,
                 alpha=None, v_init="mean-field", batch_size=None, track_h=False):
        super().__init__(model, compressor, participation, step_size, alpha, track_h)
        if v_init not in V_INIT_CHOICES:
            raise ValueError(f"v_init must be one of {V_INIT_CHOICES}; got {v_init!r}.")
        self.v_init = v_init
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size")

    def exact_loglik(self, state, federation) -> bool:
        """Exact local means (no mini-batch) of every client every round."""
        return self.batch_size is None and bool(np.all(self.participation.inclusion(federation.n_clients) == 1.0))

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
                       n_active=int(active.size), step_size=gamma, h_norm2=self.h_norm2(federation, state.s_hat),
                       n_cond_exp=self._n_rows_used(federation, active))
        return state

    def _n_rows_used(self, federation, active) -> int:
        """Rows whose conditional expectation the round computed (min(b, m_i) per client)."""
        sizes = federation.sizes[active]
        return int(sizes.sum() if self.batch_size is None else np.minimum(sizes, self.batch_size).sum())
