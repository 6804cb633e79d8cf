"""The two halves of a FedEM round as pure functions (paper 003, Algorithm 1; SPEC §3).

The client half (:func:`client_update`: Δ, compression in the model's geometry, memory
update) runs on each client; the server half's arithmetic (:func:`direction`,
:func:`server_update`) and the divergence test run on the server. The in-process engine
and the Flower adapter call the same functions.
"""
from __future__ import annotations

import numpy as np

__all__ = ["client_update", "server_update", "direction", "weighted_sums", "memory_update", "decode_messages",
           "DivergenceError", "check_iterate", "DIVERGENCE_GROWTH", "DIVERGENCE_ADVICE", "CHUNK_ENTRIES"]

#: Statistic entries (clients × q) a simulated client half handles at once: bounds its
#: temporaries to a few arrays of 32 MiB, whatever the number of clients
#: (:meth:`.fedem.FedEM.client_half`, the quantised start of :mod:`.start`).
CHUNK_ENTRIES = 1 << 22

#: Ŝ growing beyond this factor of its initial magnitude means the iterates have left any
#: sensible range (statistics are means of data-scale quantities). Relative, so that the
#: test does not depend on the units of the data (issue 13: results equivariant to scale).
DIVERGENCE_GROWTH = 1e12


class DivergenceError(ValueError):
    """The statistic iterate blew up: the step size is too large for this noise level."""


#: What a diverged run should change (:func:`check_iterate`; private runs name their own).
DIVERGENCE_ADVICE = ("Lower step_size (e.g. halve it), raise the compressor precision, or use "
                     "step_size='auto' with the safeguard on.")


def check_iterate(s_hat, round_, gamma, scale=None, advice=DIVERGENCE_ADVICE):
    """Raise :class:`DivergenceError` naming the fix (``advice``) if Ŝ is not finite or exploded.

    ``scale`` is max |Ŝ_0|; Ŝ beyond :data:`DIVERGENCE_GROWTH` times it has diverged.
    """
    finite = bool(np.all(np.isfinite(s_hat)))
    exploded = finite and scale is not None and np.max(np.abs(s_hat)) > DIVERGENCE_GROWTH * max(scale, 1e-300)
    if not finite or exploded:
        raise DivergenceError(
            f"FedEM diverged at round {round_} (step size {gamma:g}): the statistics left the finite "
            f"range. {advice}")


def memory_update(v, q_rows, alpha):
    """V_{k+1,i} = V_{k,i} + α q_i (the same decoded q_i the server adds)."""
    return v + alpha * q_rows


def client_update(stats, s_hat, v_clients, compressor, alpha, rngs, geometry=None):
    """Client half of a FedEM round (Algorithm 1, lines 8-11) in the model's geometry.

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
    rngs : random streams of the m clients
        See :func:`.streams.round_streams`.
    geometry : Geometry, optional
        The invertible map P of ``model.geometry(T(Ŝ_k), Ŝ_k)``: the client compresses
        P Δ_i with per-block norms on ``geometry.blocks``, and both sides decode
        q_i = P⁻¹ Quant(P Δ_i) (unbiased by linearity). ``None``: raw coordinates, one
        block.

    Returns
    -------
    message : Message
        The compressed P Δ_i, one row per client: what goes on the wire.
    q_rows : ndarray of shape (m, q)
        The decoded quantised Δ_i in raw coordinates (identical on client and server).
    v_new : ndarray of shape (m, q)
        Updated memories V_{k+1,i} = V_{k,i} + α q_i.
    noise : tuple of ndarray of shape (m,)
        (signal², noise²) of each row (:meth:`~fedemstats.compression.Compressor.noise_estimate`).
    """
    delta = stats - s_hat[None, :] - v_clients
    if geometry is None:
        message, q_rows, noise = compressor.compress_decoded(delta, rngs)
    else:
        message, decoded, noise = compressor.compress_decoded(geometry.forward(delta), rngs, geometry.blocks)
        q_rows = geometry.inverse(decoded)
    return message, q_rows, memory_update(v_clients, q_rows, alpha), noise


def server_update(s_hat, v, q_rows, weights, inclusion, gamma, alpha):
    """The plain server half (Algorithm 1, lines 14-16; SPEC §3 step 3), a constant step.

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
    h, v_new = direction(v, weighted_sums(q_rows, weights, inclusion), alpha)
    return s_hat + gamma * h, v_new, h


def weighted_sums(q_rows, weights, inclusion):
    """The two sums the server needs from the decoded messages of a round.

    Parameters
    ----------
    q_rows : ndarray of shape (m, q)
        Decoded messages of ``m`` active clients (m may be 0).
    weights, inclusion : ndarray of shape (m,)
        Their weights w_i and inclusion probabilities π_i.

    Returns
    -------
    sums : tuple of ndarray of shape (q,)
        (Σ (w_i/π_i) q_i, Σ w_i q_i). Sums over disjoint groups of clients add up, so a
        round may decode its clients in chunks (:meth:`FedEM.round` bounds its memory so).
    """
    if not q_rows.shape[0]:
        return np.zeros(q_rows.shape[1]), np.zeros(q_rows.shape[1])
    return (weights / inclusion) @ q_rows, weights @ q_rows


def direction(v, sums, alpha):
    """H_{k+1} = V_k + Σ (w_i/π_i) q_i and V_{k+1} = V_k + α Σ w_i q_i (H = V if no client),
    from the round's :func:`weighted_sums`."""
    horvitz_thompson, plain = sums
    return v + horvitz_thompson, v + alpha * plain


def decode_messages(compressor, messages, geometry, q):
    """The server's decoding of one message per client (a framework's replies).

    Parameters
    ----------
    compressor : Compressor
    messages : list of Message
        One single-row message per active client, in client order.
    geometry : Geometry
        The clients' compression geometry this round (the server derives the same one).
    q : int

    Returns
    -------
    q_rows : ndarray of shape (m, q)
        Decoded Δ_i in raw coordinates.
    noise : tuple of ndarray of shape (m,)
        (signal², noise²) of each message (:meth:`~fedemstats.compression.Compressor.noise_estimate`).
    bits : int
        Their exact encoded size.
    """
    if not messages:
        return np.empty((0, q)), (np.empty(0), np.empty(0)), 0
    parts = [compressor.decompress_and_noise(m) for m in messages]
    decoded = np.vstack([values for values, _ in parts])
    signal, noise = (np.concatenate([est[i] for _, est in parts]) for i in range(2))
    return geometry.inverse(decoded), (signal, noise), int(sum(compressor.bits(m) for m in messages))
