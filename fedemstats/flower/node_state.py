"""What a node keeps between rounds: its copy of the public iterate and its memory V_i.

The iterate travels as compressed *updates* (``fedemstats.algorithms.broadcast``), so each
node keeps its copy Ŝ (and the iterate a revert returns to) in Flower's per-node
``context.state``; its memory V_i lives there too and never leaves the node. The server
keeps a mirror of every V_i from the same decoded q_i, used only to resynchronise a node
that lost its state (a restart).

A reply can be lost after the node computed it. So the node does not add α q_i to V_i at
once: it keeps q_i *pending* and commits it when the next instruction says the server
received that round's reply (``received``), else discards it, and V_i always equals the
server's mirror.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord

from .records import from_array_record, params_from_records, params_to_records, to_array_record

__all__ = ["NodeState", "load_state", "save_state", "save_start_theta", "load_start_theta",
           "STATE_ARRAYS", "STATE_META", "NO_ROUND"]

STATE_ARRAYS = "fedem-state"
STATE_META = "fedem-state-meta"
#: θ_0 of the quantised start, kept from its first transfer for the second (it travels once)
START_PARAMS, START_PARAMS_META, START_ENTROPY = "fedem-start-params", "fedem-start-params-meta", "fedem-start-run"
#: "no round": no pending reply, or no copy of the iterate
NO_ROUND = -1


@dataclass
class NodeState:
    """A node's FedEM state.

    Attributes
    ----------
    entropy : int
        The run's public entropy (a state from another run is not used).
    round : int
        The round whose iterate ``s_hat`` is (NO_ROUND: none).
    s_hat, v : ndarray of shape (q,)
    prev : ndarray of shape (q,) or None
        Where a revert returns (``fedemstats.algorithms.broadcast.replay``).
    pending_round : int
        The round of the reply whose q_i is not committed yet (NO_ROUND: none).
    pending : ndarray of shape (q,) or None
        α q_i of that reply.
    """

    entropy: int
    round: int
    s_hat: np.ndarray
    v: np.ndarray
    prev: np.ndarray | None = None
    pending_round: int = NO_ROUND
    pending: np.ndarray | None = None

    def commit(self, received) -> None:
        """Add the pending α q_i if the server received that reply; drop it otherwise."""
        if self.pending is not None and self.pending_round == received:
            self.v = self.v + self.pending
        self.pending, self.pending_round = None, NO_ROUND


def load_state(context, entropy):
    """The node's state for the run with ``entropy``, or None (none, or another run's)."""
    if STATE_META not in context.state:
        return None
    meta = dict(context.state[STATE_META])
    if int(meta["entropy"]) != int(entropy):
        return None
    arrays = from_array_record(context.state[STATE_ARRAYS])
    return NodeState(int(meta["entropy"]), int(meta["round"]), arrays["s_hat"], arrays["v"], arrays.get("prev"),
                     int(meta["pending_round"]), arrays.get("pending"))


def save_state(context, state: NodeState) -> None:
    """Write ``state`` into ``context.state`` (Flower keeps it on the node between messages)."""
    arrays = {"s_hat": state.s_hat, "v": state.v}
    if state.prev is not None:
        arrays["prev"] = state.prev
    if state.pending is not None:
        arrays["pending"] = state.pending
    context.state[STATE_ARRAYS] = to_array_record(**arrays)
    context.state[STATE_META] = ConfigRecord({"entropy": int(state.entropy), "round": int(state.round),
                                              "pending_round": int(state.pending_round)})


def save_start_theta(context, entropy, theta) -> None:
    """Keep the quantised start's θ_0 (parameters, float64 arrays: they come back bit for bit)
    between its upload and its mean-field transfer, for the run with ``entropy``."""
    context.state[START_PARAMS], context.state[START_PARAMS_META] = params_to_records(theta)
    context.state[START_ENTROPY] = ConfigRecord({"entropy": int(entropy)})


def load_start_theta(context, entropy):
    """θ_0 kept by :func:`save_start_theta` for the run with ``entropy``.

    Raises
    ------
    ValueError
        If the node has none (it restarted between the two transfers, or never made the
        first): round 0 needs every client, so the run stops with the node named.
    """
    if START_ENTROPY not in context.state or int(context.state[START_ENTROPY]["entropy"]) != int(entropy):
        raise ValueError("the quantised start's mean-field transfer reached a node that does not hold θ_0 "
                         "from its upload transfer (restarted in round 0?); start the run again.")
    return params_from_records(context.state[START_PARAMS], context.state[START_PARAMS_META])
