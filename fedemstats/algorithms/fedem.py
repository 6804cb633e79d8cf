"""FedEM (paper 003, Algorithm 1), generalised to client weights and inclusion
probabilities (SPEC §3), with compression in the model's geometry (issue 11).

One round: the client half (:func:`.server.client_update`) on the active clients, then
the server half (:meth:`.base.Algorithm.server_step`), which the Flower adapter calls too.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_int
from ..ledger import FLOAT64_BITS
from .base import V_INIT_CHOICES, Algorithm, draw_entropy
from .server import (CHUNK_ENTRIES, DIVERGENCE_GROWTH, DivergenceError, check_iterate, client_update, memory_update,
                     server_update, weighted_sums)
from .streams import round_streams

__all__ = ["FedEM", "client_update", "server_update", "memory_update", "draw_entropy", "V_INIT_CHOICES",
           "DivergenceError", "check_iterate", "DIVERGENCE_GROWTH", "CHUNK_ENTRIES", "weighted_sums"]


class FedEM(Algorithm):
    """Federated EM with compression, partial participation and control variates.

    Parameters
    ----------
    model, compressor, participation, alpha, track_h
        As :class:`~.base.Algorithm` (α defaults to ``1 / (1 + ω)``, Theorem 1).
    step_size : float, "auto", "theory" or callable, default="auto"
        γ_k. ``"auto"`` is 1 for exact EM and adapts to the measured noise otherwise
        (:mod:`.controller`); ``"theory"`` is Theorem 1's rule.
    v_init : {"mean-field", "zero"}, default="mean-field"
        ``"mean-field"`` sets V_{0,i} = s̄_i(T(Ŝ_0)) - Ŝ_0 (a second upload; skipped for
        exact EM, where the memories cancel; with a lossy compressor in the model's
        geometry round 0's transfers are dithered at 1024 levels instead of float64,
        :mod:`.start`); ``"zero"`` with ``alpha=0`` is naive compressed EM.
    batch_size : int, optional
        Rows per client per round; ``None`` uses exact local means.
    precondition : bool, default=True
        Compress in the model's geometry (``model.geometry``); False: raw coordinates.
    safeguard : bool, default=True
        In noisy regimes, the trust region of the model's geometry and the
        log-likelihood watchdog (:mod:`.controller`).
    downlink_compressor : "auto", None, str or Compressor, default="auto"
        The server's broadcast of its steps (:mod:`.broadcast`).
    fine_start : bool, default=True
        Run the first rounds of a compressor coarser than 64 dithering levels at 64 levels,
        up and down (:mod:`.fine_start`: on likelihoods with several optima the first
        steps decide which one a run ends at); False keeps the compressors throughout.

    Notes
    -----
    Round 0, the driver (:meth:`~.base.Algorithm.start`, :meth:`~.base.Algorithm.run`)
    and the stopping rule are :class:`~.base.Algorithm`'s; this class is one round.
    """

    def __init__(self, model, compressor="identity", participation=1.0, step_size="auto",
                 alpha=None, v_init="mean-field", batch_size=None, track_h=False, precondition=True,
                 safeguard=True, downlink_compressor="auto", fine_start=True):
        super().__init__(model, compressor, participation, step_size, alpha, track_h, precondition, safeguard,
                         downlink_compressor, fine_start)
        if v_init not in V_INIT_CHOICES:
            raise ValueError(f"v_init must be one of {V_INIT_CHOICES}; got {v_init!r}.")
        self.v_init = v_init
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size")

    # ------------------------------------------------------------------ one round
    def round(self, state, federation, rng, alpha, ledger, history, tol=None):
        """Run round k -> k+1 in place on ``state`` (SPEC §3 steps 1-3)."""
        model, k = self.model, state.round
        active, pi = self.sample_round(k, federation.n_clients, rng)
        theta = model.t_map(state.s_hat)
        geometries = self.round_geometries(theta, state.s_hat, federation.n_clients)
        sums, loglik, noise, uplink = self.client_half(state, federation, theta, active, pi, geometries[1], alpha, rng)
        row = self.server_step(state, federation.weights, active, pi, sums, loglik, noise, geometries, alpha, tol)
        # the active clients fetched Ŝ_k (missed updates or the full vector) before computing
        downlink = self.broadcast.catch_up(state.downlink, active, k)
        ledger.record(state.round, uplink, downlink, active.size)
        history.append(round=state.round, uplink_bits=uplink, downlink_bits=downlink, n_active=int(active.size),
                       h_norm2=self.h_norm2(federation, state.s_hat),
                       n_cond_exp=self._n_rows_used(federation, active), **row)
        return state

    def client_half(self, state, federation, theta, active, pi, coords, alpha, rng):
        """The active clients' half of round k, simulated in chunks of clients.

        Each chunk computes its statistics, compresses, updates its memories in
        ``state.v_clients`` and adds to the server's :func:`.server.weighted_sums`, so a
        round holds O(chunk × q) temporaries besides the memories however many clients
        take part (issue 15: 100,000 clients). Chunking changes nothing a client computes:
        its quantisation stream is keyed by its id (:func:`.streams.round_streams`) and
        mini-batch draws continue one stream in client order.

        Returns
        -------
        sums : tuple of ndarray of shape (q,)
        loglik : ndarray of shape (m,)
        noise : tuple of ndarray of shape (m,)
            (signal², noise²) of each message.
        uplink : int
            Bits sent up.
        """
        q, k = self.model.q, state.round
        compressor = self.uplink_compressor(k)
        sums = (np.zeros(q), np.zeros(q))
        loglik, signal, noise, uplink = [np.empty(0)], [np.empty(0)], [np.empty(0)], 0
        step = max(1, CHUNK_ENTRIES // q)
        for start in range(0, active.size, step):
            chunk, w = active[start:start + step], federation.weights[active[start:start + step]]
            # a run of consecutive clients (full participation) reads and writes its memories
            # in place instead of gathering and scattering them
            rows = slice(chunk[0], chunk[-1] + 1) if bool(np.all(np.diff(chunk) == 1)) else chunk
            stats, ll = self.model.client_stats(federation, theta, chunk, self.batch_size, rng)
            message, q_rows, state.v_clients[rows], (sig, noi) = client_update(
                stats, state.s_hat, state.v_clients[rows], compressor, alpha,
                round_streams(state.entropy, k, chunk), coords)
            del stats  # the chunk's largest temporaries go before the next chunk's
            part = weighted_sums(q_rows, w, pi[start:start + step])
            sums = (sums[0] + part[0], sums[1] + part[1])
            loglik.append(ll), signal.append(sig), noise.append(noi)
            uplink += compressor.bits(message) + chunk.size * FLOAT64_BITS
        return sums, np.concatenate(loglik), (np.concatenate(signal), np.concatenate(noise)), uplink

    def _n_rows_used(self, federation, active) -> int:
        """Rows whose conditional expectation the round computed (min(b, m_i) per client)."""
        sizes = federation.sizes[active]
        return int(sizes.sum() if self.batch_size is None else np.minimum(sizes, self.batch_size).sum())

