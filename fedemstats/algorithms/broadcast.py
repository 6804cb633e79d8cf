"""The server → client channel of the iterate: compressed steps, exact copies everywhere (issue 12).

The paper compresses only the uplink; the server then broadcasts Ŝ_k as 64 q bits to every
active client each round, which dwarfs a 4-bit uplink. Here the server broadcasts its
*step* u_k = Ŝ_{k+1} − Ŝ_k quantised in the round's geometry (the clients know θ_k, so they
compute the same map), and every party adds the same decoded u_k: the iterate is public
and every client's copy equals the server's bit for bit (the scheme of Artemis, Philippenko
and Dieuleveut 2020, and of MCM's "preserved central model", 2021, here with the quantised
step itself as the update so that no hidden server iterate drifts from the public one).
The quantiser is unbiased, so the compressed step is an unbiased step, and it vanishes at
the fixed point like the direction it carries.

A client that missed rounds (partial participation) catches up with the missed updates or
with one full Ŝ (64 q bits), whichever is fewer bits. A rejected step (the safeguard's
watchdog) is undone by a one-bit "revert" (every client kept the accepted iterate's
updates). A step that starts by *snapping* an iterate T had to repair to the statistics of
its own model, E_θ[s] with θ = T(Ŝ) (``Algorithm._safe_step``), travels as a one-bit "snap"
flag and the quantised move from there: every party computes the snap from the public Ŝ, so
it costs one bit and carries no quantisation noise. Quantised with the move, the snap's
offset (up to 540 whitened units on the digits, where a component's pixel variance sits at
the floor) drowned the move in noise, every redraw left the region and the fit froze.
The ledger counts exactly these bits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..compression import Identity, make_compressor
from ..ledger import FLOAT64_BITS
from .controller import running_average
from .fine_start import round_compressor
from .streams import round_streams

__all__ = ["Broadcast", "BroadcastState", "replay", "snap_point", "SERVER_STREAM", "REVERT_BITS", "SNAP_BITS",
           "REQUANTISE_TRIES", "UPDATE_KINDS"]

#: How one broadcast update travels: a quantised step ("message"), the float64 step ("float",
#: lossless downlink), no move ("zero"), undoing the last step ("revert"), or the snap of the
#: iterate to E_θ[s] followed by a quantised move or none ("snap", module docstring).
UPDATE_KINDS = ("message", "float", "zero", "revert", "snap")

#: The stream id of the server's own quantisation noise (clients are 0 ... n − 1 < 2**32 − 1).
SERVER_STREAM = 2**32 - 1
#: A rejected step is undone by a flag: the clients hold the accepted iterate's updates.
REVERT_BITS = 1
#: The flag that tells the clients to snap their copy to E_θ[s] before the move.
SNAP_BITS = 1
#: A quantised step that leaves the trust region is redrawn at half the step this many times
#: (then the round does not move).
REQUANTISE_TRIES = 4


@dataclass
class BroadcastState:
    """What the channel remembers.

    Attributes
    ----------
    synced : ndarray of int of shape (n_clients,)
        The round whose iterate each client holds (−1: none, it needs the full Ŝ).
    fresh : ndarray of bool of shape (n_clients,)
        The client got the full Ŝ and no update since: it does not hold the iterate a
        revert returns to, so a revert as its next update costs it the full Ŝ again.
    update_bits : list of int
        ``update_bits[j]`` is the size of the update from Ŝ_{j−1} to Ŝ_j (index 0 unused).
    reverts : list of bool
        ``reverts[j]``: update j undoes the last step (a flag, :data:`REVERT_BITS`).
    noise_ratio : float or None
        Running estimate of ‖u − step‖² / ‖step‖² of the compressed steps (the downlink's ω).
    last : tuple (kind, payload)
        The last update as it travels (:data:`UPDATE_KINDS`): what a framework sends.
    """

    synced: np.ndarray
    fresh: np.ndarray
    update_bits: list = field(default_factory=lambda: [0])
    reverts: list = field(default_factory=lambda: [False])
    noise_ratio: float | None = None
    last: tuple = ("zero", None)


class Broadcast:
    """The downlink of FedEM.

    Parameters
    ----------
    compressor : Compressor
        Lossless (:class:`~fedemstats.compression.Identity`) sends 64 q bits per active client
        per round, as the paper; anything else quantises the step.
    q : int
        Length of the statistic vector.
    fine_rounds : int, default=0
        Rounds 0 ... fine_rounds − 1 send their steps with the fine start's compressor
        (:mod:`.fine_start`).
    """

    def __init__(self, compressor, q, fine_rounds=0):
        self.compressor = make_compressor(compressor)
        self.lossless = isinstance(self.compressor, Identity) and self.compressor.dtype == "float64"
        self.q = int(q)
        self.full_bits = self.q * FLOAT64_BITS
        self.fine_rounds = int(fine_rounds)

    def compressor_at(self, round_):
        """The compressor of the step sent in round ``round_`` (update ``round_ + 1``)."""
        return round_compressor(self.compressor, self.fine_rounds, round_)

    def start(self, n_clients, everyone_has_s0) -> BroadcastState:
        """After round 0: every client holds Ŝ_0 when the mean-field pass broadcast it."""
        return BroadcastState(synced=np.full(n_clients, 0 if everyone_has_s0 else -1, dtype=np.int64),
                              fresh=np.ones(n_clients, dtype=bool))

    def plan(self, bs, active, round_, synced=None, fresh=None):
        """For each ``active`` client, whether it gets the full Ŝ_round (else the missed
        updates) and its bits: shape (m,) bool and (m,) int.

        ``synced`` / ``fresh`` (shape (m,)) override what the channel believes the clients
        hold (a framework plans from what it *knows* they hold, :mod:`fedemstats.flower`)."""
        cumulative = np.concatenate([[0], np.cumsum(bs.update_bits[1:])]).astype(np.int64)
        synced = bs.synced[active] if synced is None else np.asarray(synced)
        fresh = bs.fresh[active] if fresh is None else np.asarray(fresh)
        owed = cumulative[round_] - cumulative[np.maximum(synced, 0)]
        first = np.minimum(np.maximum(synced, 0) + 1, len(bs.reverts) - 1)
        needs_full = (synced < 0) | (owed > self.full_bits) | (fresh & np.asarray(bs.reverts)[first]
                                                               & (synced < round_))
        return needs_full, np.where(needs_full, self.full_bits, owed)

    def catch_up(self, bs, active, round_) -> int:
        """Bits that bring the ``active`` clients to Ŝ_round (:meth:`plan`), and their records."""
        needs_full, bits = self.plan(bs, active, round_)
        behind = bs.synced[active] < round_
        bs.fresh[active] = np.where(behind, needs_full, bs.fresh[active])
        bs.synced[active] = round_
        return int(bits.sum())

    def send(self, bs, step, coords, inside, entropy, round_, snapped=False):
        """The public update for ``step`` (q,): (u, bits, scale), ``u`` ≈ scale · step (scale 1,
        1/2, ... after redraws for which ``inside(u)`` was False, 0 if none was; ``inside``
        None skips the check); ``bs.last`` is what travels.

        ``snapped``: ``step`` is the move from the snap :func:`snap_point` (lossy downlinks
        only; a lossless one sends the whole step in float64), which the update's flag tells the
        clients to make first."""
        bs.reverts.append(False)
        if self.lossless:
            bs.update_bits.append(self.full_bits)
            bs.last = ("float", step)
            return step, self.full_bits, 1.0
        streams = round_streams(entropy, round_, [SERVER_STREAM])
        compressor, scale = self.compressor_at(round_), 1.0
        for _ in range(REQUANTISE_TRIES):
            message = compressor.compress(coords.forward(scale * step[None, :]), streams, coords.blocks)
            u = coords.inverse(compressor.decompress(message))[0]
            if inside is None or inside(u):
                break
            scale *= 0.5
        else:
            u, message, scale = np.zeros_like(step), None, 0.0
        flag = SNAP_BITS if snapped else 0
        bits = flag + (compressor.bits(message) if message is not None else (0 if snapped else REVERT_BITS))
        self._measure(bs, compressor, message)
        bs.update_bits.append(int(bits))
        bs.last = ("snap" if snapped else "message" if message is not None else "zero", message)
        return u, int(bits), scale

    def noise_level(self, bs, coords, round_) -> float:
        """The relative noise ‖u − step‖² / ‖step‖² round ``round_``'s update will carry: the
        measured running ratio, or before any measurement the bound ω in ``coords``' blocks
        of the round's compressor (0.0 for the lossless float64 downlink)."""
        if self.lossless:
            return 0.0
        if bs.noise_ratio is not None:
            return bs.noise_ratio
        return float(self.compressor_at(round_).omega(self.q, coords.blocks))

    def revert(self, bs) -> int:
        """A rejected step: the clients go back to the accepted iterate (a flag)."""
        bs.update_bits.append(REVERT_BITS)
        bs.reverts.append(True)
        bs.last = ("revert", None)
        return REVERT_BITS

    def _measure(self, bs, compressor, message):
        if message is None:
            return
        signal, noise = compressor.noise_estimate(message)
        ratio = float(noise.sum() / signal.sum()) if signal.sum() > 0 else 0.0
        bs.noise_ratio = running_average(bs.noise_ratio, ratio)

    @staticmethod
    def spec(downlink, uplink):
        """The downlink compressor for a ``downlink_compressor`` setting: ``"auto"`` is the
        uplink's (identity stays identity), None is lossless float64."""
        if downlink is None:
            return Identity()
        if isinstance(downlink, str) and downlink == "auto":
            return make_compressor(uplink)
        return make_compressor(downlink)


def snap_point(model, s_hat):
    """E_θ[s] with θ = T(``s_hat``), shape (q,): where a "snap" update moves an iterate T had to
    repair (T maps it back to the same θ). Server and clients compute it from the public Ŝ."""
    return np.asarray(model.expected_stats(model.t_map(s_hat)), dtype=np.float64)


def replay(algorithm, s_hat, prev, updates, first):
    """A client brings its copy of the iterate up to date with the updates it missed.

    Parameters
    ----------
    algorithm : Algorithm
        Gives the compressor and the client geometry (each quantised update is decoded in
        the geometry of the iterate it was computed from, as the server did).
    s_hat : ndarray of shape (q,)
        The client's copy.
    prev : ndarray of shape (q,) or None
        The iterate before its last non-revert update (where a revert returns).
    updates : list of (kind, payload)
        In order; ``kind`` in :data:`UPDATE_KINDS`, ``payload`` a Message or its encoded
        ``bytes`` ("message", "snap"), an array ("float") or None ("snap" without a move).
    first : int
        The number j of the first update (it turns Ŝ_{j−1} into Ŝ_j and was sent in round
        j − 1, whose compressor decodes it: :meth:`Broadcast.compressor_at`).

    Returns
    -------
    s_hat, prev : ndarray of shape (q,)
    """
    for j, (kind, payload) in enumerate(updates, start=first):
        if kind == "revert":
            if prev is None:
                raise ValueError("a revert needs the previous iterate, which this client does not hold.")
            s_hat = prev
            continue
        prev = s_hat
        if kind in ("message", "snap"):
            base = snap_point(algorithm.model, s_hat) if kind == "snap" else s_hat
            if payload is not None or kind == "message":
                coords = algorithm.client_geometry(algorithm.model.t_map(s_hat), s_hat)
                compressor = algorithm.broadcast.compressor_at(j - 1)
                if isinstance(payload, bytes):  # as a framework carries it: Compressor.encode's row
                    payload = compressor.decode([payload], algorithm.model.q, coords.blocks)
                base = base + coords.inverse(compressor.decompress(payload))[0]
            s_hat = base
        elif kind == "float":
            s_hat = s_hat + np.asarray(payload, dtype=np.float64)
        elif kind != "zero":
            raise ValueError(f"unknown update kind {kind!r}; expected one of {UPDATE_KINDS}.")
    return s_hat, prev
