"""The random streams of the clients taking part in a round (one place for every caller).

Each client's quantisation noise comes from its own stream, derived from the run's public
entropy, the round and the client id, so a client can reproduce it alone (a Flower node)
and in-process runs equal framework runs.
"""
from __future__ import annotations

from .._validation import client_round_rng

__all__ = ["round_streams"]


def round_streams(entropy, round_, clients):
    """The streams of ``clients`` (int array of shape (m,)) in round ``round_``."""
    return [client_round_rng(entropy, round_, int(i)) for i in clients]
