"""Round 0 of the expectation-space algorithms: Ŝ_0 and the memories V_{0,i} (SPEC §3).

* **Exact start** (exact EM, ``v_init="zero"``): every client uploads s̄_i(θ_0); Ŝ_0 is their
  weighted mean and the memories are zero.
* **Mean-field start** (``v_init="mean-field"``, Theorem 1's choice): besides, Ŝ_0 is
  broadcast and every client uploads s̄_i(T(Ŝ_0)) for V_{0,i} = s̄_i(T(Ŝ_0)) − Ŝ_0, so round
  1's field is exact. In float64 this is two exact uploads and a broadcast of q floats:
  40–79 % of all the bits of a compressed fit that exact EM finishes in 4–20 rounds
  (issue 12).
* **Quantised mean-field start** (FedEM with a lossy compressor in the model's geometry):
  the same three transfers, each dithered at :data:`ROUND0_LEVELS` levels in the model's
  geometry, about 12 bits per coordinate instead of 64. The upload at θ_0 is centred on
  a_0 = E_θ0[s], which every client computes from θ_0 (T(a_0) = θ_0); the server
  broadcasts Ŝ_0 = a_0 + Quant(Σ w_i q_{0,i}) in the same geometry (everyone decodes the
  same Ŝ_0); the mean-field upload is centred on Ŝ_0, in the geometry at (T(Ŝ_0), Ŝ_0),
  and its decoded value is V_{0,i}, so round 1 sends only its quantisation residual. Each
  transfer has its own public stream (:data:`ROUND0_STREAMS`). The start moves by about
  1e-3 of a first EM step: on the 128 rows of ``bench_real_data`` the same number of rows
  pass as with the float64 start, and ``bench_bits`` needs about a third fewer bits. A
  compressor as fine as the start's or finer (``dither:s=1024`` and up) starts in float64:
  the start's error is then the largest of the run (with it, FedEM at 2**24 levels stayed
  7.9e-5 nats per row off exact EM's path on the median real-data row; without, 3.7e-9).
* **θ_0 in short floats** (the quantised start only): θ_0 travels as its own statistics a_0 =
  E_θ0[s] rounded to floats of float32's sign and exponent and the fewest mantissa bits k
  (:mod:`fedemstats.compression.short_floats`) whose rounding moves the start by at most
  :data:`START_THETA_TOLERANCE` in the model's geometry at θ_0, q × (9 + k) bits per client instead
  of θ_0's n_parameters × 64 (q is at most 1.5 n_parameters: factor analysis); everyone, server
  included, starts from θ̃_0 = T(a_0 as sent) (T(E_θ[s]) = θ to 1e-16). Rounded in raw coordinates,
  a covariance S2/r − m mᵀ cancels, so the check is in the geometry; when no k up to float32's 23
  passes, θ_0 goes in float64. On the 64 real rows of ``bench_real_data`` k is 12 to 23 (median
  15) on 57 rows (Portal's imputer 12, against 23 in float32: its round 0 was 0.26 of exact EM's
  total bits on a row exact EM finishes in one round, now 0.21); Boston's mixtures, Portal's heterogeneous ones and
  breast cancer's heterogeneous full one keep float64 (their float32 rounding moved the
  log-likelihood at θ̃_0 by 7e-4 to 7.5e-3 nats per row). Exact EM and the float64 starts send θ_0
  itself: scikit-learn parity and the continuity test start from θ_0 exactly.
"""
from __future__ import annotations

import functools

import numpy as np

from ..compression import make_compressor
from ..compression.short_floats import FLOAT32_MANTISSA_BITS, mantissa_bits, round_mantissa, short_float_bits
from ..ledger import FLOAT64_BITS
from ..models.base import Model
from .server import CHUNK_ENTRIES, client_update
from .state import AlgorithmState, draw_entropy
from .streams import round_streams

__all__ = [
    "RoundZero", "V_INIT_CHOICES", "ROUND0_LEVELS", "ROUND0_STREAMS", "START_THETA_DTYPE", "START_THETA_TOLERANCE",
]

V_INIT_CHOICES = ("mean-field", "zero")
#: Dithering levels of the quantised start: a relative error of about 1e-3 per block, the
#: precision at which compressed FedEM follows exact EM's trajectory (the continuity test);
#: runs at least this fine start in float64 (:meth:`RoundZero.quantised_start`).
ROUND0_LEVELS = 1024
#: Stream ids of the quantised start's upload at θ_0, broadcast and mean-field upload: the
#: rounds use 0, 1, 2, ... and a run never reaches the last ids a key holds (``< 2**32``).
ROUND0_STREAMS = {"upload": 2 ** 32 - 1, "broadcast": 2 ** 32 - 2, "mean-field": 2 ** 32 - 3}
#: The container of a quantised start's θ_0 message: its statistics E_θ0[s] as float32 values that
#: hold only their short mantissa (module docstring).
START_THETA_DTYPE = np.float32
#: Largest rounding of θ_0's short-float statistics, in the model's geometry at θ_0 (max over
#: coordinates), at which they replace θ_0: a tenth of the quantised start's own resolution.
START_THETA_TOLERANCE = 0.1 / ROUND0_LEVELS
#: The byte that tells a client how θ_0 comes: the mantissa bits of its short floats, or float64.
START_THETA_FLAG_BITS = 8


@functools.cache
def round0_compressor():
    """The quantised start's compressor: dithering at :data:`ROUND0_LEVELS` levels."""
    return make_compressor(f"dither:s={ROUND0_LEVELS}")


class RoundZero:
    """Round 0 of :class:`~.base.Algorithm` (a mixin: it uses the algorithm's model,
    compressor, geometry, controller and broadcast)."""

    #: see :data:`V_INIT_CHOICES`
    v_init = "mean-field"
    #: whether a lossy run may quantise its mean-field start (VR-FedEM's workers need exact statistics)
    quantise_start = True

    # ------------------------------------------------------------------ which start
    def mean_field_pass(self, n_clients) -> bool:
        """Whether round 0 makes the mean-field pass for V_{0,i}: ``v_init="mean-field"`` and a
        noisy run. Exact EM (lossless both ways, every client, full batches) has
        H = V + Σ w_i (s̄_i − Ŝ − V_i) = Σ w_i s̄_i − Ŝ whatever the memories, and T(Ŝ_0) is
        θ_1, whose statistics round 1 computes anyway: the pass would be a duplicate E-step."""
        return self.v_init == "mean-field" and self.stochastic(n_clients)

    def quantised_start(self, n_clients) -> bool:
        """Whether the mean-field start is quantised: a lossy compressor in the model's geometry
        (a lossless one keeps every transfer exact), coarser than the start's own (one as fine
        or finer starts in float64, so that compressed FedEM tends to exact EM as ω → 0), and a
        model that defines E_θ[s]."""
        layout_blocks = self.model.layout.offsets
        start_omega = float(round0_compressor().omega(self.model.q, layout_blocks))
        return (self.quantise_start and self.mean_field_pass(n_clients) and self.precondition
                and self.omega() > start_omega
                and type(self.model).expected_stats is not Model.expected_stats)

    def mean_field_point(self, stats0, weights):
        """T(Ŝ_0), where clients upload exact statistics again for mean-field memories;
        ``None`` when :meth:`mean_field_pass` is False."""
        return self.model.t_map(weights @ stats0) if self.mean_field_pass(weights.shape[0]) else None

    # ------------------------------------------------------------------ exact and float64 mean-field starts
    def initial_state(self, upload0, upload1, weights, entropy):
        """Round 0 (SPEC §3) from the clients' exact uploads; pure.

        Parameters
        ----------
        upload0 : tuple (stats (n, q), loglik (n,))
            Every client's exact local mean statistic s̄_i(θ_0) and log-likelihood.
        upload1 : tuple (stats (n, q), loglik (n,)) or None
            The same at :meth:`mean_field_point` (``v_init="mean-field"``), else None.
        weights : ndarray of shape (n,)
            Client weights w_i.
        entropy : int
            Public seed of the client streams (:func:`draw_entropy`).

        Returns
        -------
        state : AlgorithmState
            Ŝ_0 = Σ w_i s̄_i(θ_0), V_{0,i} = s̄_i(T(Ŝ_0)) − Ŝ_0 (or 0), V_0 = Σ w_i V_{0,i};
            ``extra`` keeps the mean-field upload (VR-FedEM's workers start from it).
        loglik : float
            Σ w_i loglik_i(θ_0).
        """
        stats0, loglik0 = upload0
        s_hat = weights @ stats0
        if upload1 is None:
            v_clients, extra = np.zeros_like(stats0), {}
        else:
            stats1, loglik1 = upload1
            v_clients = stats1 - s_hat[None, :]
            extra = {"mean_field_stats": stats1, "mean_field_loglik_clients": np.asarray(loglik1, dtype=float)}
        # the rounds' log-likelihood memories start from the clients' last exact report
        last = loglik0 if upload1 is None else upload1[1]
        state = self._state(s_hat, v_clients, weights, entropy, last, everyone_has_s0=upload1 is not None)
        state.extra = extra
        return state, float(weights @ loglik0)

    def round_zero(self, client_stats, theta0, weights, entropy):
        """Round 0 through ``client_stats(theta) -> (stats (n, q), loglik (n,))``, every
        client's exact upload (an in-process pass or the nodes of a framework).

        Returns
        -------
        state, loglik
            As :meth:`initial_state`.
        """
        upload0 = client_stats(theta0)
        point = self.mean_field_point(upload0[0], weights)
        return self.initial_state(upload0, None if point is None else client_stats(point), weights, entropy)

    # ------------------------------------------------------------------ the quantised start, client and server halves
    def theta_message(self, theta0):
        """θ_0 as the quantised start sends it: E_θ0[s] rounded to the fewest mantissa bits (0 to 23)
        that move it by at most :data:`START_THETA_TOLERANCE` in the model's geometry at θ_0, float32
        of shape (q,) (:func:`~fedemstats.compression.short_floats.mantissa_bits` reads its width), or
        ``None`` when float32 itself moves it further (θ_0 then travels in float64)."""
        a0 = np.asarray(self.model.expected_stats(theta0), dtype=np.float64)
        geometry = self.model.geometry(theta0, a0)
        with np.errstate(over="ignore"):
            as_float32 = a0.astype(START_THETA_DTYPE)
        for bits in range(FLOAT32_MANTISSA_BITS + 1):
            message = round_mantissa(as_float32, bits)
            if not np.all(np.isfinite(message)):  # beyond float32's range, or rounded past it
                continue
            moved = geometry.forward((message.astype(np.float64) - a0)[None, :])
            if np.max(np.abs(moved)) <= START_THETA_TOLERANCE:
                return message
        return None

    def received_theta(self, message):
        """θ̃_0 = T(``message``): the start of every client and of the server (the message is
        public, T deterministic)."""
        return self.model.t_map(np.asarray(message, dtype=np.float64))

    def start_theta(self, theta0):
        """(the θ the quantised start starts from, its short-float message or ``None`` when θ_0
        itself is sent): the server's one decision, in process and on a framework."""
        message = self.theta_message(theta0)
        return (theta0, None) if message is None else (self.received_theta(message), message)

    def theta_bits(self, theta0, message) -> int:
        """Downlink bits per client of :meth:`start_theta`'s choice, its flag byte included."""
        sent = (self.model.n_parameters(theta0) * FLOAT64_BITS if message is None
                else short_float_bits(message.size, mantissa_bits(message)))
        return int(sent) + START_THETA_FLAG_BITS

    # ------------------------------------------------------------------ what round 0 sends (in process and on Flower)
    def float_start_bits(self, n, theta0) -> tuple:
        """(uplink, downlink) bits of the exact or float64 start over ``n`` clients: θ_0 in float64
        to each client and its exact upload (q float64s and its log-likelihood); the mean-field pass
        (:meth:`mean_field_pass`) adds Ŝ_0 in float64 to each and a second upload."""
        q, passes = self.model.q, 1 + int(self.mean_field_pass(n))
        uplink = passes * n * (q + 1) * FLOAT64_BITS
        downlink = n * (self.model.n_parameters(theta0) + (passes - 1) * q) * FLOAT64_BITS
        return int(uplink), int(downlink)

    def quantised_start_bits(self, n, theta0, message, upload_bits, broadcast) -> tuple:
        """(uplink, downlink) bits of the quantised start over ``n`` clients: the two uploads'
        ``upload_bits`` (their compressor's count) and a float64 log-likelihood with each; to each
        client, θ_0 once (:meth:`theta_bits` of :meth:`start_theta`'s ``message``) and the
        ``broadcast`` of Ŝ_0."""
        uplink = int(upload_bits) + 2 * n * FLOAT64_BITS
        downlink = n * (int(round0_compressor().bits(broadcast)) + self.theta_bits(theta0, message))
        return uplink, int(downlink)

    def start_point(self, theta0):
        """(a_0, geometry): E_θ0[s] and the model's geometry at (θ_0, a_0), both public."""
        a0 = np.asarray(self.model.expected_stats(theta0), dtype=np.float64)
        return a0, self.model.geometry(theta0, a0)

    @staticmethod
    def start_upload(stats, centre, geometry, entropy, clients, transfer):
        """Client half of a quantised start transfer for ``clients`` (ints, shape (m,)):
        ``stats − centre`` dithered in ``geometry`` from the transfer's stream.

        Returns
        -------
        message : Message
            What goes on the wire.
        q_rows : ndarray of shape (m, q)
            The decoded values, as the server decodes them.
        """
        message, q_rows, _, _ = client_update(stats, centre, np.zeros_like(stats), round0_compressor(), 0.0,
                                           round_streams(entropy, ROUND0_STREAMS[transfer], clients), geometry)
        return message, q_rows

    def start_broadcast(self, a0, geometry, q0, weights, entropy):
        """Server half after the upload at θ_0: the broadcast of Ŝ_0, ``(message, Ŝ_0)``."""
        target = a0 + weights @ q0
        # the upload's own decoding is the one every client makes (:meth:`received_start`)
        message, decoded = self.start_upload(target[None, :], a0, geometry, entropy, [0], "broadcast")
        return message, a0 + decoded[0]

    @staticmethod
    def received_start(a0, geometry, message):
        """Ŝ_0 = a_0 + the decoded broadcast, as every client and the server decode it."""
        return a0 + geometry.inverse(round0_compressor().decompress(message))[0]

    def quantised_state(self, s0, q1, loglik1, weights, entropy):
        """The state after the quantised start: Ŝ_0, V_{0,i} = the decoded mean-field uploads
        ``q1`` (n, q); every client holds Ŝ_0 (it decoded the broadcast)."""
        return self._state(s0, q1, weights, entropy, np.asarray(loglik1, dtype=float), everyone_has_s0=True)

    # ------------------------------------------------------------------ in process
    def init_state(self, federation, theta0, rng, ledger, history):
        """Round 0 in process, with its bits in ``ledger`` and its row in ``history``."""
        model, n = self.model, federation.n_clients
        entropy = draw_entropy(rng)
        if self.quantised_start(n):
            start, message = self.start_theta(theta0)
            state, loglik, upload_bits, broadcast = self._quantised_round_zero(federation, start, entropy)
            passes, (uplink, downlink) = 2, self.quantised_start_bits(n, theta0, message, upload_bits, broadcast)
        else:
            state, loglik = self.round_zero(lambda theta: model.client_stats(federation, theta), theta0,
                                            federation.weights, entropy)
            passes, (uplink, downlink) = 1 + int(self.mean_field_pass(n)), self.float_start_bits(n, theta0)
        ledger.record(0, uplink, downlink, n)
        history.append(round=0, loglik=loglik, uplink_bits=uplink, downlink_bits=downlink, n_active=n,
                       step_size=np.nan, h_norm2=self.h_norm2(federation, state.s_hat),
                       n_cond_exp=passes * federation.n_rows)
        return state

    def _quantised_round_zero(self, federation, theta0, entropy):
        """The quantised start simulated in chunks of clients (as a round's client half).

        Returns ``(state, Σ w_i loglik_i(θ_0), the two uploads' bits, the broadcast's message)``."""
        n, w = federation.n_clients, federation.weights
        a0, geometry0 = self.start_point(theta0)
        q0, loglik0, bits0 = self._chunked_upload(federation, theta0, a0, geometry0, entropy, "upload")
        message, s0 = self.start_broadcast(a0, geometry0, q0, w, entropy)
        del q0
        theta1 = self.model.t_map(s0)
        q1, loglik1, bits1 = self._chunked_upload(federation, theta1, s0, self.model.geometry(theta1, s0), entropy,
                                                  "mean-field")
        state = self.quantised_state(s0, q1, loglik1, w, entropy)
        return state, float(w @ loglik0), bits0 + bits1, message

    def _chunked_upload(self, federation, theta, centre, geometry, entropy, transfer):
        n, q = federation.n_clients, self.model.q
        q_rows, loglik, bits = np.empty((n, q)), np.empty(n), 0
        step = max(1, CHUNK_ENTRIES // q)
        for start in range(0, n, step):
            chunk = np.arange(start, min(n, start + step))
            stats, loglik[chunk] = self.model.client_stats(federation, theta, chunk)
            message, q_rows[chunk] = self.start_upload(stats, centre, geometry, entropy, chunk, transfer)
            bits += int(round0_compressor().bits(message))
        return q_rows, loglik, bits

    def _state(self, s_hat, v_clients, weights, entropy, loglik, everyone_has_s0):
        state = AlgorithmState(s_hat=s_hat, v=weights @ v_clients, v_clients=v_clients, entropy=int(entropy),
                               extra={}, scale=float(np.max(np.abs(s_hat))))
        state.control = self.controller(weights.shape[0]).start(loglik)
        state.downlink = self.broadcast.start(weights.shape[0], everyone_has_s0=everyone_has_s0)
        return state
