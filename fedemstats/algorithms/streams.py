"""The random streams of the clients taking part in a round (one place for every caller).

Each client's quantisation noise comes from its own stream, keyed by the run's public
entropy, the round and the client id (:class:`~fedemstats.compression.ClientStreams`,
counter-based Philox), so a client can reproduce it alone (a Flower node) and in-process
runs equal framework runs.
"""
from __future__ import annotations

import numpy as np

from ..compression import ClientStreams

__all__ = ["round_streams"]


def round_streams(entropy, round_, clients) -> ClientStreams:
    """The streams of ``clients`` (ints, shape (m,)) in round ``round_``, drawn in one compiled call."""
    return ClientStreams(int(entropy), int(round_), np.asarray(clients, dtype=np.int64))
